"""The storage seam (exactbatch.ndf.storage): a local folder and an S3 prefix answer
every question alike, so the manifest, the write protocol and the identities never
branch on which they hold."""

from __future__ import annotations

import itertools
import os

import pytest

from exactbatch.ndf.jsondoc import MAX_DOC_BYTES
from exactbatch.ndf.storage import (
    LocalLocation,
    UrlLocation,
    dataset_path,
    join_path,
    local_stat,
    location,
)

_KEYS = itertools.count()


@pytest.fixture(params=["local", "s3"])
def folder(request, tmp_path):
    """An empty folder's location, and its path as a user names it."""
    if request.param == "local":
        path = str(tmp_path / "ds")
        return location(path), path
    s3 = request.getfixturevalue("s3_server")
    path = f"s3://{s3.bucket}/storage-{next(_KEYS)}"
    return location(path, s3.so), path


def test_place_picks_the_kind_by_the_path(tmp_path):
    assert isinstance(location(str(tmp_path)), LocalLocation)
    assert isinstance(location(tmp_path), LocalLocation)  # os.PathLike
    assert location(f"file://{tmp_path}").path == str(tmp_path)  # file:// is local
    url = location("s3://bucket/key", {"anon": True})
    assert isinstance(url, UrlLocation) and url.url and url.path == "s3://bucket/key"
    assert not location(str(tmp_path)).url


def test_bad_paths_are_named(tmp_path):
    with pytest.raises(ValueError, match="storage_options applies only to URLs.*local path"):
        location(str(tmp_path), {"anon": True})
    with pytest.raises(TypeError, match="path must be a str or os.PathLike; got int"):
        location(3)
    with pytest.raises(ValueError, match="storage_options applies only to URLs.*local path"):
        dataset_path(tmp_path, {"anon": True})  # checked as location checks it


def test_children_join_like_the_kind(tmp_path):
    assert location(str(tmp_path)).child("m.json").path == os.path.join(str(tmp_path), "m.json")
    assert location("s3://b/k/").child("m.json").path == "s3://b/k/m.json"
    assert location("s3://b/XX").child("m.json").path == "s3://b/XX/m.json"
    assert join_path("s3://b/k/", "x") == "s3://b/k/x"
    assert join_path("s3://b/k//", "x") == "s3://b/k/x"  # a URL's slashes: one separator
    assert join_path("s3://b/XX/", "x") == "s3://b/XX/x"  # only slashes are taken off
    assert join_path(str(tmp_path), "x") == os.path.join(str(tmp_path), "x")
    assert dataset_path(f"file://{tmp_path}", None) == str(tmp_path)


def test_a_folder_is_made_listed_and_emptied(folder):
    where, path = folder
    assert where.names() == [] and not where.is_file()  # missing: no names
    made = where.make_folder()
    assert made == (not where.url)  # object stores have no folders to make
    assert where.make_folder() is False  # there already
    where.create("a")
    where.create("b")
    assert sorted(where.names()) == ["a", "b"]
    assert where.exists() and not where.is_file() and where.child("a").is_file()
    assert where.child("a").read_doc("a made file") == b""  # empty at both kinds
    where.remove("a")
    where.remove("gone")  # best effort: no error
    assert where.names() == ["b"]


def test_a_removal_the_store_refuses_is_no_error():
    """Best effort at a URL too: a store that fails the removal (its error is not the
    caller's: the file left is listed by no manifest) raises nothing."""

    class Refusing:
        def rm_file(self, key):
            raise PermissionError(f"{key}: access denied")

    UrlLocation("s3://b/k", fs=Refusing(), key="b/k").remove("part.ndf")


def test_documents_round_trip_and_a_missing_one_is_file_not_found(folder):
    where, _ = folder
    where.make_folder()
    doc = where.child("doc.json")
    with pytest.raises(FileNotFoundError):
        doc.read_doc("a test document")
    doc.write_doc(b'{"a": 1}')
    assert doc.read_doc("a test document") == b'{"a": 1}'
    doc.write_doc(b"{}")  # replaced whole
    assert doc.read_doc("a test document") == b"{}"


def test_a_document_is_read_at_most_one_byte_past_the_limit(folder):
    where, _ = folder
    where.make_folder()
    doc = where.child("big.json")
    doc.write_file(lambda f: f.write(b" " * (MAX_DOC_BYTES + 10)))
    if where.url:  # one ranged GET: the parser refuses what is too large
        assert len(doc.read_doc("a big document")) == MAX_DOC_BYTES + 1
    else:  # a local file is refused by its size before it is read
        with pytest.raises(Exception, match="too large for a big document"):
            doc.read_doc("a big document")


def test_a_failed_write_leaves_what_was_there(folder):
    where, _ = folder
    where.make_folder()
    part = where.child("part.ndf")
    part.write_file(lambda f: f.write(b"old"))

    def fails(f):
        f.write(b"new bytes")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        part.write_file(fails)
    assert part.read_doc("a part") == b"old"
    assert sorted(where.names()) == ["part.ndf"]  # no temporary file, no half upload
    with pytest.raises(RuntimeError, match="disk full"):
        where.child("new.ndf").write_file(fails)
    assert sorted(where.names()) == ["part.ndf"]


def test_local_stat_is_for_local_files_only(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"abc")
    assert local_stat(str(f)).st_size == 3
    assert local_stat(f).st_size == 3
    assert local_stat(str(tmp_path / "gone")) is None
    assert local_stat("s3://bucket/key") is None
    assert local_stat(None) is None


def test_a_url_is_never_stat_as_a_local_path(tmp_path, monkeypatch):
    # "s3://bucket/key" read as a local path is the relative path s3:/bucket/key: a file
    # there must not be taken for the object
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s3:" / "bucket").mkdir(parents=True)
    (tmp_path / "s3:" / "bucket" / "key").write_bytes(b"abc")
    assert os.stat("s3://bucket/key").st_size == 3
    assert local_stat("s3://bucket/key") is None


class _FailingUpload:
    """An upload whose every clean-up call fails too."""

    forced = False

    def write(self, data):
        return len(data)

    def discard(self):
        raise OSError("discard failed")

    def close(self):
        raise OSError("close failed")


class _FailingStore:
    def open(self, key, mode, autocommit=True):
        assert mode == "wb" and autocommit is False
        self.f = _FailingUpload()
        return self.f


def test_a_failed_upload_raises_its_own_error_whatever_its_clean_up_does():
    store = _FailingStore()
    where = UrlLocation("s3://bucket/part.ndf", fs=store, key="bucket/part.ndf")

    def fails(f):
        f.write(b"new bytes")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        where.write_file(fails)
    assert store.f.forced is True  # close uploads nothing more


def test_a_failed_upload_leaves_no_multipart_upload_open(s3_server):
    s3 = s3_server
    key = f"storage-{next(_KEYS)}"
    where = location(f"s3://{s3.bucket}/{key}", s3.so)

    def fails_after(n):
        def fill(f):
            f.write(b"x" * n)
            raise RuntimeError("disk full")

        return fill

    # a small write (nothing uploaded yet) and one past a part's size (a multipart
    # upload begun): neither leaves an upload open, billed and in no listing
    for n in (10, 6 << 20):
        with pytest.raises(RuntimeError, match="disk full"):
            where.child(f"p{n}.ndf").write_file(fails_after(n))
    got = s3.fs.call_s3("list_multipart_uploads", Bucket=s3.bucket, Prefix=key + "/")
    assert got.get("Uploads", []) == []
    assert where.names() == []
