"""urls: which paths are URLs, and what a folder's pattern finds, locally and over a URL alike.

A ``::`` chains fsspec filesystems only after a registered protocol and down
to a URL; any other name with ``::`` is a local file. ``find_files`` gives a
pattern one meaning (``**`` any depth, hidden names skipped, the folder's
own name never a pattern) on a local folder and on an fsspec filesystem.
"""

from __future__ import annotations

import os
import uuid

import numpy as np
import pytest

from exactbatch import (
    NdfError,
    open_ndf,
    open_ndf_dataset,
    parquet_source,
    save_ndf,
    save_ndf_dataset,
    urls,
)

fsspec = pytest.importorskip("fsspec")


@pytest.mark.parametrize(
    "name", ["data::v2.ndf", "s3::old.ndf", "simplecache::a.ndf", "nope::s3:x.ndf"]
)
def test_a_local_name_with_double_colons_is_a_local_file(tmp_path, monkeypatch, name):
    """A local file named with ``::`` is written, opened and refused as the local file it is."""
    x = np.arange(6.0).reshape(3, 2)
    monkeypatch.chdir(tmp_path)  # a relative name: as a user types it
    save_ndf(name, x)
    with open_ndf(name) as f:
        assert np.array_equal(f.read_rows(np.arange(3))[0], x)
    with open(name, "r+b") as f:
        f.truncate(30)
    with pytest.raises(NdfError, match=f"^{name}: "):
        open_ndf(name)
    with pytest.raises(FileNotFoundError) as e:
        open_ndf("missing::" + name)
    assert e.value.filename == "missing::" + name


def test_a_local_folder_or_parquet_file_with_double_colons_is_local(tmp_path, monkeypatch):
    """Sharded datasets and Parquet named with ``::`` are local too, written and read."""
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    monkeypatch.chdir(tmp_path)
    x = np.arange(8.0).reshape(4, 2)
    save_ndf_dataset("data::v2", [x[:3], x[3:]])
    with open_ndf_dataset("data::v2") as ds:
        assert ds.n == 4 and np.array_equal(ds.read_rows(np.arange(4))[0], x)
    for name in ("data::v2.parquet", "pq::v2/p.parquet"):
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "wb") as f:  # pyarrow's writer would take the name for a URI
            pq.write_table(pa.table({"a": [1.0, 2.0]}), f)
    assert parquet_source("data::v2.parquet").n_rows == 2
    assert parquet_source("pq::v2").files == [os.path.join("pq::v2", "p.parquet")]


# the tree both listings are made from: local folder, and the same under memory://
TREE = [
    "a.parquet",
    "b.csv",
    ".hidden.parquet",
    ".tmp/c.parquet",
    "year=2024/month=1/p.parquet",
    "year=2024/month=10/p.parquet",
    "year=2024/month=2/p.parquet",
    "year=2024/month=2/notes.txt",
    "deep/er/still/d.parquet",
    "[x]/e.parquet",
]


@pytest.mark.parametrize(
    ("pattern", "want"),
    [
        ("*.parquet", ["a.parquet"]),
        (
            "**/*.parquet",
            [
                "[x]/e.parquet",
                "a.parquet",
                "deep/er/still/d.parquet",
                "year=2024/month=1/p.parquet",
                "year=2024/month=10/p.parquet",
                "year=2024/month=2/p.parquet",
            ],
        ),
        ("**/**/p.parquet", [f"year=2024/month={m}/p.parquet" for m in ("1", "10", "2")]),
        (
            "year=*/month=?/*",
            [
                "year=2024/month=1/p.parquet",
                "year=2024/month=2/notes.txt",
                "year=2024/month=2/p.parquet",
            ],
        ),
        ("deep/**", ["deep/er/still/d.parquet"]),
        ("[[]x]/*", ["[x]/e.parquet"]),
        ("[!a]*", ["b.csv"]),
        (".*.parquet", [".hidden.parquet"]),
        (".tmp/*", [".tmp/c.parquet"]),
        ("*.PARQUET", []),
    ],
)
def test_a_pattern_finds_the_same_files_locally_and_over_a_url(tmp_path, pattern, want):
    """One meaning for a pattern: ``**`` is any depth, wildcards skip hidden names, the
    order is the paths' inside the folder, and glob characters in the folder's own name
    are plain characters; identical on a local folder and on memory://."""
    local = tmp_path / "run[1]*"
    fs = fsspec.filesystem("memory")
    remote = f"/{uuid.uuid4().hex}/run[1]*"
    for rel in TREE:
        (local / rel).parent.mkdir(parents=True, exist_ok=True)
        (local / rel).write_bytes(b"x")
        fs.pipe(f"{remote}/{rel}", b"x")
    try:
        got_local = urls.find_files(str(local), pattern)
        got_url = urls.find_files(remote, pattern, fs)
    finally:
        fs.rm(remote.rsplit("/", 1)[0], recursive=True)
    assert got_local == [os.path.join(local, *r.split("/")) for r in want]
    assert got_url == [f"{remote}/{r}" for r in want]


@pytest.mark.parametrize("pattern", ["", "/abs/*.parquet", "../*.parquet", "a//b", "a/../b"])
def test_a_pattern_outside_the_folder_is_refused(tmp_path, pattern):
    with pytest.raises(ValueError, match="pattern must be a path inside the folder"):
        urls.find_files(str(tmp_path), pattern)


def test_links_to_folders_are_followed_but_not_round_a_loop(tmp_path):
    """A linked folder is followed, a loop once; a file reached through two links is
    listed once, at its first path (issue 39: never its rows twice)."""
    (tmp_path / "v2").mkdir()
    (tmp_path / "v2" / "a.parquet").write_bytes(b"x")
    os.symlink(tmp_path / "v2", tmp_path / "latest")
    os.symlink(tmp_path, tmp_path / "v2" / "loop")
    assert urls.find_files(str(tmp_path) + "/", "**/*.parquet") == [
        os.path.join(str(tmp_path) + "/", "latest", "a.parquet"),
    ]


def test_a_folder_that_cannot_be_listed_is_an_error_not_an_empty_folder(tmp_path, monkeypatch):
    (tmp_path / "locked").mkdir()
    (tmp_path / "a.parquet").write_bytes(b"x")
    real = os.scandir

    def scandir(path="."):
        if os.fspath(path).endswith("locked"):
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(PermissionError, match="locked"):
        urls.find_files(str(tmp_path), "**/*.parquet")
    assert urls.find_files(str(tmp_path), "*.parquet") == [str(tmp_path / "a.parquet")]


# -- each helper on its own ---------------------------------------------------------------


class _Options(dict):
    pass


def test_which_names_are_urls():
    for path in ("s3://b/k", "S3://b/k", "memory://x", "gs://b", "simplecache::s3://b/k"):
        assert urls.is_url(path) is True, path
    for path in ("file:///tmp/x", "FILE:///tmp/x", "/tmp/x", "x.ndf", "C://x", None, 3):
        assert urls.is_url(path) is False, path
    assert urls.is_url(PurePosixLike("s3://b/k")) is True  # os.PathLike
    assert urls.is_url(PurePosixLike("/tmp/x")) is False


class PurePosixLike:
    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return self.path


def test_a_chain_is_registered_protocols_down_to_a_url():
    assert urls.is_url("SimpleCache::s3://b/k")  # protocols in any case
    assert urls.is_url("blockcache::simplecache::gs://b/k")
    assert urls.is_url("simplecache::file:///tmp/x")  # fsspec reads file:// as a chain's end
    assert not urls.is_url("simplecache::data.ndf")  # ends in a local path
    assert not urls.is_url("nosuchprotocol::s3://b/k")  # not registered
    assert not urls.is_url("simplecache::nosuchprotocol::s3://b/k")
    name = f"exactbatch{uuid.uuid4().hex[:8]}"  # registered, never a known implementation
    fsspec.register_implementation(name, type(fsspec.filesystem("memory")))
    from fsspec.registry import known_implementations

    assert name not in known_implementations
    assert urls.is_url(f"{name}::s3://b/k")


def test_without_fsspec_a_chain_that_ends_in_a_url_is_a_url(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "fsspec.registry", None)  # cannot be imported
    assert urls.is_url("nosuchprotocol::s3://b/k")  # opening it says what to install
    assert not urls.is_url("nosuchprotocol::data.ndf")


def test_local_path_takes_file_urls_off_and_leaves_the_rest():
    assert urls.local_path("file:///a/b") == "/a/b"
    assert urls.local_path("FILE:///a/b") == "/a/b"
    assert urls.local_path("file:/a/b") == "file:/a/b"
    assert urls.local_path("s3://b/k") == "s3://b/k"
    assert urls.local_path(3) == 3


def test_for_arrow_makes_a_local_path_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert urls.for_arrow("data::v2.parquet") == os.path.join(str(tmp_path), "data::v2.parquet")
    assert urls.for_arrow("/abs/x.parquet") == "/abs/x.parquet"


def test_without_fsspec_a_url_says_what_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(ImportError) as e:
        urls.import_fsspec()
    assert str(e.value) == (
        "reading URLs needs fsspec (and s3fs for s3://): pip install 'exactbatch[remote]'"
    )


def test_url_to_fs_passes_its_options_and_refuses_other_kinds(tmp_path):
    fs, path = urls.url_to_fs(f"file://{tmp_path}", {"auto_mkdir": True})
    assert fs.auto_mkdir is True and path == str(tmp_path)
    fs, path = urls.url_to_fs(f"file://{tmp_path}", _Options(auto_mkdir=True))  # a dict
    assert fs.auto_mkdir is True
    fs, path = urls.url_to_fs(f"file://{tmp_path}")
    assert fs.auto_mkdir is False and path == str(tmp_path)
    with pytest.raises(TypeError) as e:
        urls.url_to_fs("memory://x", [("anon", True)])
    assert str(e.value) == "storage_options must be a dict or None; got [('anon', True)]"


def test_protocols_are_a_tuple_of_names():
    class Fs:
        protocol = "memory"

    assert urls.protocols(Fs) == ("memory",)
    Fs.protocol = ["s3", "s3a"]
    assert urls.protocols(Fs) == ("s3", "s3a")


def test_a_fork_safe_filesystem_is_made_anew_once_in_another_process():
    fs = _Options(name="fs")
    safe = urls.ForkSafeFs(fs)
    assert safe.get() is fs and safe.pid == os.getpid()
    safe.pid = -1  # as in a forked child
    again = safe.get()
    assert again == fs and again is not fs and safe.pid == os.getpid()
    assert safe.get() is again


def test_object_info_is_fresh_and_a_missing_object_names_its_url():
    class Fs:
        invalidated: list = []

        def invalidate_cache(self, key):
            self.invalidated.append(key)

        def info(self, key):
            if key == "b/gone":
                raise FileNotFoundError(key)
            return {"name": key}

    fs = Fs()
    assert urls.object_info(fs, "b/k", "s3://b/k") == {"name": "b/k"}
    with pytest.raises(FileNotFoundError) as e:
        urls.object_info(fs, "b/gone", "s3://b/gone")
    assert (e.value.errno, e.value.strerror, e.value.filename) == (
        2,
        "no such file or object",
        "s3://b/gone",
    )
    assert fs.invalidated == ["b/k", "b/gone"]


def test_a_version_tag_is_the_first_tag_present():
    assert urls.version_tag({"mtime": 5, "ETag": '"abc"'}) == '"abc"'
    assert urls.version_tag({"ETag": None, "etag": None, "mtime": 5.5}) == "5.5"
    assert urls.version_tag({"size": 3}) is None


def test_a_search_over_a_url_asks_only_as_deep_as_the_pattern_and_skips_folders():
    class Fs:
        def find(self, root, maxdepth, withdirs, detail):
            self.asked = (root, maxdepth, withdirs, detail)
            return {
                "b/dataX/d.parquet": {"type": "directory"},  # a folder, whatever its name
                "b/dataXY/y.parquet": {"type": "file"},  # beside the folder, not in it
                "b/dataX/a.parquet": {"type": "file"},
                "b/dataX/d.parquet/c.parquet": {"type": "file"},
            }

    fs = Fs()
    assert urls.find_files("b/dataX/", "*.parquet", fs) == ["b/dataX/a.parquet"]
    assert fs.asked == ("b/dataX", 1, False, True)
    assert urls.find_files("b/dataX", "*/*.parquet", fs) == ["b/dataX/d.parquet/c.parquet"]
    assert fs.asked[1] == 2
    got = urls.find_files("b/dataX", "**/*.parquet", fs)
    assert got == ["b/dataX/a.parquet", "b/dataX/d.parquet/c.parquet"] and fs.asked[1] is None


def test_a_local_search_stops_past_its_bound_naming_the_folder(tmp_path, monkeypatch):
    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(b"x")
    monkeypatch.setattr(urls, "MAX_WALK", 4)
    (tmp_path / "d").mkdir()  # 4 entries: at the bound, not past it
    assert len(urls.find_files(str(tmp_path), "**/*")) == 3
    (tmp_path / "d" / "e").write_bytes(b"x")  # 5
    with pytest.raises(ValueError) as e:
        urls.find_files(str(tmp_path), "**/*")
    assert str(e.value) == (
        f"{tmp_path}: more than 4 files and folders under it, looking for '**/*': name the "
        "folder that holds the data, not one above it"
    )


def test_names_with_spaces_are_found_whole(tmp_path):
    (tmp_path / "my data").mkdir()
    (tmp_path / "my data" / "a b.parquet").write_bytes(b"x")
    want = [os.path.join(tmp_path, "my data", "a b.parquet")]
    assert urls.find_files(str(tmp_path), "**/*.parquet") == want


def test_a_hidden_folder_named_by_the_pattern_is_searched(tmp_path):
    (tmp_path / ".a").mkdir()
    (tmp_path / ".a" / "x.parquet").write_bytes(b"x")
    want = [os.path.join(tmp_path, ".a", "x.parquet")]
    assert urls.find_files(str(tmp_path), "**/.a/*.parquet") == want
    assert urls.find_files(str(tmp_path), "**/*.parquet") == []


def test_a_pattern_that_is_not_a_str_is_a_type_error():
    with pytest.raises(TypeError) as e:
        urls.find_files(".", 3)
    assert str(e.value) == "pattern must be a str such as '*.parquet'; got 3"
