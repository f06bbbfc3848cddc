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
