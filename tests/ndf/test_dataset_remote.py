"""Sharded .ndf datasets at URLs, against the local S3 server (conftest.py's s3_server).

Written with save_ndf_dataset straight to s3:// (each part one upload, committed
only when whole; the manifest one PUT, last), read back with open_ndf_dataset:
the same rows as one array, parts opened only where rows are read, and the
parts of one request fetched concurrently. The bad-dataset errors name the part
as for a local folder.
"""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest
from helpers import check_rows, make_data, write_ndf_dataset

from exactbatch import DataLoader, NdfError, open_ndf_dataset, save_ndf_dataset
from exactbatch.ndf import dataset as dsmod
from exactbatch.ndf import dataset_protocol

pytest.importorskip("s3fs")
pytest.importorskip("moto.server")

SIZES = [40, 3, 0, 57]
N = sum(SIZES)


@pytest.fixture(scope="module")
def s3(s3_server):
    return s3_server


def url(s3, key: str) -> str:
    return f"s3://{s3.bucket}/{key}"


def listing(s3, key: str) -> list[str]:
    s3.fs.invalidate_cache()
    try:
        return sorted(k.rsplit("/", 1)[-1] for k in s3.fs.ls(f"{s3.bucket}/{key}", detail=False))
    except FileNotFoundError:
        return []


def part_names(s3, key: str) -> list[str]:
    """The part names the manifest at ``key`` lists."""
    s3.fs.invalidate_cache()
    return [
        p["name"] for p in json.loads(s3.fs.cat_file(f"{s3.bucket}/{key}/manifest.json"))["parts"]
    ]


@pytest.fixture(scope="module")
def remote_ds(s3):
    return write_ndf_dataset(url(s3, "dsets/a"), SIZES, d=3, l=2, storage_options=s3.so)


def test_write_then_read_back(s3, remote_ds):
    """Every part and the manifest are there; reads equal the concatenated rows."""
    m = json.loads(s3.fs.cat_file(f"{s3.bucket}/dsets/a/manifest.json"))
    assert [p["n"] for p in m["parts"]] == SIZES
    names = [p["name"] for p in m["parts"]]
    assert listing(s3, "dsets/a") == ["manifest.json", *names]
    assert [name[:11] for name in names] == [f"part-0000{k}-" for k in range(4)]
    x, y = make_data(N, 3, 2)
    rng = np.random.default_rng(0)
    with open_ndf_dataset(remote_ds, storage_options=s3.so) as ds:
        assert (ds.n, ds.d, ds.l) == (N, 3, 2)
        assert ds.open_parts == ()
        for rows in (rng.integers(0, N, 30), np.arange(N), np.array([99, 0, 41, 40, 42])):
            gx, gy = ds.read_rows(rows)
            np.testing.assert_array_equal(gx, x[rows])
            np.testing.assert_array_equal(gy, y[rows])
        out = np.empty((20, 5))
        ds.read_block_into(35, out)
        assert out[:, 0].tolist() == list(range(35, 55))


def test_only_the_parts_of_the_rows_read_are_opened(s3, remote_ds):
    """And no part is closed at a URL (no bound: its parts hold no descriptor), whichever
    part is read last (the empty part never opens)."""
    with open_ndf_dataset(remote_ds, storage_options=s3.so) as ds:
        assert ds.max_open_parts is None
        ds.read_rows([44])
        assert ds.open_parts == (3,)
        ds.read_rows([0])
        ds.read_rows([41])
        assert ds.open_parts == (0, 1, 3)
        ds.read_rows([42, 1, 99])
        assert ds.open_parts == (0, 1, 3)


def test_parts_are_read_concurrently(s3, remote_ds, monkeypatch):
    """A request spanning parts reads them on several threads at once."""
    seen, lock = set(), threading.Lock()
    barrier = threading.Barrier(2, timeout=30)
    real = dsmod.NdfFile.read_raw_into

    def spy(self, rows, out, scattered=False):
        with lock:
            seen.add(threading.current_thread().name)
        barrier.wait()  # both parts' reads must be in flight together to pass
        return real(self, rows, out, scattered)

    with open_ndf_dataset(remote_ds, storage_options=s3.so) as ds:
        monkeypatch.setattr(dsmod.NdfFile, "read_raw_into", spy)
        x, y = ds.read_rows([50, 1, 60, 2])
    check_rows(x, y, 3, 2)
    assert x[:, 0].tolist() == [50, 1, 60, 2]
    assert len(seen) == 2 and all(t.startswith("exactbatch-part") for t in seen)


def test_a_loader_over_a_remote_dataset(s3, remote_ds):
    with open_ndf_dataset(remote_ds, storage_options=s3.so) as ds:
        loader = DataLoader(ds, 16, shuffle=True, seed=3)
        assert loader.prefetch == 2  # a URL: every batch is a round trip
        got = []
        for xb, yb in loader:
            check_rows(xb, yb, 3, 2)
            got += xb[:, 0].astype(int).tolist()
        loader.close()
    assert sorted(got) == list(range(N))


def test_a_missing_remote_part(s3):
    path = write_ndf_dataset(url(s3, "dsets/missing"), [4, 4], storage_options=s3.so)
    name = part_names(s3, "dsets/missing")[1]
    s3.fs.rm_file(f"{s3.bucket}/dsets/missing/{name}")
    ds = open_ndf_dataset(path, storage_options=s3.so)
    with pytest.raises(NdfError, match=f"part 1 \\({name}\\) of the dataset is missing"):
        ds.read_rows([0, 5])


def test_a_truncated_remote_part(s3):
    path = write_ndf_dataset(url(s3, "dsets/short"), [4, 4], storage_options=s3.so)
    name = part_names(s3, "dsets/short")[0]
    key = f"{s3.bucket}/dsets/short/{name}"
    s3.fs.pipe_file(key, s3.fs.cat_file(key)[:-8])
    s3.fs.invalidate_cache()
    ds = open_ndf_dataset(path, storage_options=s3.so)
    with pytest.raises(NdfError, match=f"part 0 \\({name}\\).*file too short"):
        ds.read_rows([0])


def test_a_prefix_without_a_manifest(s3):
    s3.fs.pipe_file(f"{s3.bucket}/dsets/bare/part-00000.ndf", b"x")
    with pytest.raises(NdfError, match="not a dataset: the folder holds no manifest.json"):
        open_ndf_dataset(url(s3, "dsets/bare"), storage_options=s3.so)
    with pytest.raises(NdfError, match="found a file"):
        open_ndf_dataset(url(s3, "dsets/bare/part-00000.ndf"), storage_options=s3.so)
    with pytest.raises(FileNotFoundError):
        open_ndf_dataset(url(s3, "dsets/nowhere"), storage_options=s3.so)


def test_an_empty_remote_manifest_is_an_ndf_error_naming_it(s3):
    # S3 refuses any range of an empty object (416): read as no bytes, as a local file is
    s3.fs.pipe_file(f"{s3.bucket}/dsets/empty/manifest.json", b"")
    with pytest.raises(NdfError, match="manifest.json: not a dataset manifest: not valid JSON"):
        open_ndf_dataset(url(s3, "dsets/empty"), storage_options=s3.so)


def test_a_failed_remote_write_keeps_the_old_dataset(s3):
    """An error midway: the old dataset as it was (its manifest and parts), no part of
    this write, and no upload left open."""
    write_ndf_dataset(url(s3, "dsets/fail"), [3, 3], storage_options=s3.so)
    before = listing(s3, "dsets/fail")

    def parts():
        yield make_data(3)
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        save_ndf_dataset(url(s3, "dsets/fail"), parts(), storage_options=s3.so)
    assert listing(s3, "dsets/fail") == before
    assert open_ndf_dataset(url(s3, "dsets/fail"), storage_options=s3.so).n == 6


def test_a_remote_rewrite_replaces_the_old_parts(s3):
    """Written over an older dataset: the new manifest lists the new parts only, and the
    old parts are removed once it is in place."""
    write_ndf_dataset(url(s3, "dsets/again"), [3, 3], storage_options=s3.so)
    write_ndf_dataset(url(s3, "dsets/again"), [5], storage_options=s3.so)
    assert listing(s3, "dsets/again") == ["manifest.json", *part_names(s3, "dsets/again")]
    assert open_ndf_dataset(url(s3, "dsets/again"), storage_options=s3.so).n == 5


def test_a_remote_finish_that_fails_leaves_nothing_of_its_write(s3):
    """An error in finish_dataset before the manifest is in place (here what its
    before_rename raises) aborts the write at the URL, with the dataset's
    storage_options: its parts and its marker go."""
    where = url(s3, "dsets/unfinished")
    write = dsmod.start_dataset(where, storage_options=s3.so)
    part = dsmod.write_part(where, 0, make_data(4), write_id=write, storage_options=s3.so)
    marker = f".exactbatch-write-{write}"
    assert listing(s3, "dsets/unfinished") == sorted([part.name, marker])

    def refuse():
        raise RuntimeError("not now")

    with pytest.raises(RuntimeError, match="not now"):
        dsmod.finish_dataset(
            where, write, [part], 3, 1, storage_options=s3.so, before_rename=refuse
        )
    assert listing(s3, "dsets/unfinished") == []


def test_a_part_upload_that_fails_is_abandoned(s3, monkeypatch):
    """write_part at a URL: an error while the part is written leaves no object."""
    write = dsmod.start_dataset(url(s3, "dsets/abandon"), storage_options=s3.so)

    def broken(f, data):
        f.write(b"NDF1" + bytes(100))
        raise OSError("disk full")

    monkeypatch.setattr(dataset_protocol, "write_ndf_to", broken)
    with pytest.raises(OSError, match="disk full"):
        dsmod.write_part(
            url(s3, "dsets/abandon"), 0, make_data(2), write_id=write, storage_options=s3.so
        )
    assert listing(s3, "dsets/abandon") == [f".exactbatch-write-{write}"]  # the write's marker
    dsmod.abort_dataset(url(s3, "dsets/abandon"), write, storage_options=s3.so)
    assert listing(s3, "dsets/abandon") == []


def _open_uploads(s3, key: str) -> list[str]:
    got = s3.fs.call_s3("list_multipart_uploads", Bucket=s3.bucket, Prefix=key + "/")
    return sorted(u["Key"].rsplit("/", 1)[-1] for u in got.get("Uploads", []))


def test_the_next_write_aborts_the_uploads_a_killed_writer_left_open(s3):
    """A writer killed mid-upload leaves an S3 multipart upload open (billed, in no
    listing); the next write to the folder aborts it with the writer's other
    leftovers, and leaves open the uploads of writes still running."""
    import subprocess
    import sys

    from exactbatch.ndf.temps import host_tag

    key = "dsets/killed"
    write_ndf_dataset(url(s3, key), [3], storage_options=s3.so)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a process that is gone: the killed writer
    dead = f"{host_tag()}-{child.pid}-0badf00d"
    live = dsmod.start_dataset(url(s3, "dsets/other"), storage_options=s3.so)  # running
    for write in (dead, live):
        s3.fs.pipe_file(f"{s3.bucket}/{key}/.exactbatch-write-{write}", b"")
        s3.fs.call_s3(
            "create_multipart_upload",
            Bucket=s3.bucket,
            Key=f"{key}/{dataset_protocol.part_name(0, write)}",
        )
    assert len(_open_uploads(s3, key)) == 2
    write_ndf_dataset(url(s3, key), [4], storage_options=s3.so)  # the next write
    assert _open_uploads(s3, key) == [dataset_protocol.part_name(0, live)]
    assert open_ndf_dataset(url(s3, key), storage_options=s3.so).n == 4
    dsmod.abort_dataset(url(s3, "dsets/other"), live, storage_options=s3.so)


def test_a_remote_part_described_and_removed_and_the_dataset_pickled(s3):
    """The write protocol's helpers and a pickled dataset reach the store with the
    storage_options given (the tests' server is found through them alone)."""
    import pickle

    path = write_ndf_dataset(url(s3, "dsets/helpers"), [4, 6], d=3, l=2, storage_options=s3.so)
    names = part_names(s3, "dsets/helpers")
    info, d, l = dsmod.describe_part(path, names[1], storage_options=s3.so)  # noqa: E741
    assert (info.name, info.n, info.nbytes, d, l) == (names[1], 6, 28 + 6 * 40, 3, 2)
    with open_ndf_dataset(path, storage_options=s3.so) as ds:
        again = pickle.loads(pickle.dumps(ds))
    assert again.read_rows([9, 0])[0][:, 0].tolist() == [9, 0]
    again.close()
    dsmod.remove_parts(path, [names[0], "part-00009.ndf"], storage_options=s3.so)
    assert listing(s3, "dsets/helpers") == ["manifest.json", names[1]]


def test_abort_uploads_aborts_the_doomed_uploads_directly_under_the_folder(s3, monkeypatch):
    """``abort_uploads``: the uploads open directly under the folder (named with a
    trailing slash or not) whose file name ``doomed`` picks are aborted and counted; one
    deeper down, or under a folder whose name begins alike, is left; a store refusing
    to list uploads aborts nothing and raises nothing."""
    import fsspec

    from exactbatch.ndf import remote

    key = "dsets/uploadsX"  # only slashes are taken off the folder's end
    elsewhere = "z.ndf"  # outside the folder (its key shorter than the folder's)
    under = [f"{key}/{name}" for name in ("a.ndf", "b.ndf", "c.ndf", "sub/a.ndf")]
    for k in (*under, f"{key}x/a.ndf", elsewhere):
        s3.fs.call_s3("create_multipart_upload", Bucket=s3.bucket, Key=k)

    def still_open() -> list[str]:
        got = s3.fs.call_s3("list_multipart_uploads", Bucket=s3.bucket, Prefix=key)
        return sorted(u["Key"] for u in got.get("Uploads", []))

    assert remote.abort_uploads(s3.fs, f"{s3.bucket}/{key}/", lambda n: n != "b.ndf") == 2
    assert still_open() == [f"{key}/b.ndf", f"{key}/sub/a.ndf", f"{key}x/a.ndf"]

    def refused(*args, **kwargs):
        raise PermissionError("no permission to list uploads")

    with monkeypatch.context() as m:
        m.setattr(s3.fs, "call_s3", refused)
        assert remote.abort_uploads(s3.fs, f"{s3.bucket}/{key}", lambda n: True) == 0
    assert remote.abort_uploads(s3.fs, f"{s3.bucket}/{key}", lambda n: True) == 1
    assert still_open() == [f"{key}/sub/a.ndf", f"{key}x/a.ndf"]
    got = s3.fs.call_s3("list_multipart_uploads", Bucket=s3.bucket, Prefix=elsewhere)
    assert [u["Key"] for u in got["Uploads"]] == [elsewhere]
    memory = fsspec.filesystem("memory")  # other stores have no uploads to abort
    assert remote.abort_uploads(memory, "uploads", lambda n: True) == 0
    for k in [*still_open(), elsewhere]:  # leave the server as it was
        up = s3.fs.call_s3("list_multipart_uploads", Bucket=s3.bucket, Prefix=k)["Uploads"][0]
        s3.fs.call_s3("abort_multipart_upload", Bucket=s3.bucket, Key=k, UploadId=up["UploadId"])


class _PagedUploads:
    """A stand-in S3 filesystem whose listing of open uploads comes a page at a time
    (S3 gives at most 1,000 a page; the tests' server, one page whatever)."""

    protocol = ("s3", "s3a")
    _call_s3 = None  # what marks s3fs

    def __init__(self, keys):
        self.open = [(k, f"id-{k}") for k in keys]
        self.asked, self.aborted = [], []

    def call_s3(self, op, **kw):
        if op == "abort_multipart_upload":
            self.aborted.append(kw["Key"])
            return {}
        assert op == "list_multipart_uploads" and len(self.asked) < 10
        self.asked.append(kw)
        after = (kw.get("KeyMarker", ""), kw.get("UploadIdMarker", ""))
        rest = [u for u in self.open if u > after and u[0].startswith(kw["Prefix"])]
        page, more = rest[:1], len(rest) > 1
        out = {"Uploads": [{"Key": k, "UploadId": i} for k, i in page], "IsTruncated": more}
        if more:
            out["NextKeyMarker"], out["NextUploadIdMarker"] = page[-1]
        return out


def test_abort_uploads_reads_every_page_of_the_listing():
    """Each page of open uploads is asked for from where the last one ended."""
    from exactbatch.ndf import remote

    fs = _PagedUploads(["b/f/a.ndf", "b/f/b.ndf", "b/f/c.ndf"])
    assert remote.abort_uploads(fs, "bucket/b/f", lambda n: n != "b.ndf") == 2
    assert fs.aborted == ["b/f/a.ndf", "b/f/c.ndf"]
    assert [(a.get("KeyMarker"), a.get("UploadIdMarker")) for a in fs.asked] == [
        (None, None),
        ("b/f/a.ndf", "id-b/f/a.ndf"),
        ("b/f/b.ndf", "id-b/f/b.ndf"),
    ]
