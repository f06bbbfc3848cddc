"""Parquet over a URL (exactbatch.sources.parquet_urls): which objects a URL, a folder
URL or a list of URLs names, each object's identity, and a file read by ranged reads.

Laws: a URL is opened with its ``storage_options``, its listing fresh (never a cached
one); a missing object or an empty folder is ``FileNotFoundError`` naming the URL; a
list must be non-empty, all URLs, on one filesystem; an object's identity is its size,
ETag (or modification time) and version; a file is read with no read-ahead cache, its
size given where known. A stand-in filesystem (memory://'s, recording what it is asked)
stands for S3; the real S3 server: tests/ndf/test_remote.py.
"""

from __future__ import annotations

import errno
import io

import pytest

fsspec = pytest.importorskip("fsspec")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from fsspec.implementations.memory import MemoryFileSystem  # noqa: E402

from exactbatch.sources.parquet_urls import (  # noqa: E402
    list_url_files,
    url_identity,
    url_parquet_file,
)


class Recording(MemoryFileSystem):
    """memory://, under its own protocol and store, recording its invalidations and opens,
    and reporting a version id and an ETag as S3 does."""

    protocol = "ebrec"
    store: dict = {}
    pseudo_dirs = [""]
    asked: list = []

    @classmethod
    def _strip_protocol(cls, path):
        if isinstance(path, str) and path.startswith("ebrec://"):
            path = "memory://" + path[len("ebrec://") :]
        return super()._strip_protocol(path)

    def invalidate_cache(self, path=None):
        self.asked.append(("invalidate", path))
        super().invalidate_cache(path)

    def info(self, path, **kwargs):
        out = dict(super().info(path, **kwargs))
        if out.get("type") == "file":
            out.update(ETag=f"etag-{out['size']}", VersionId="v7")
        return out

    def _open(self, path, mode="rb", **kwargs):
        self.asked.append(("open", path, dict(kwargs)))
        return super()._open(path, mode, **kwargs)


@pytest.fixture
def rec():
    fsspec.register_implementation("ebrec", Recording, clobber=True)
    Recording.store.clear()
    Recording.pseudo_dirs[:] = [""]
    Recording.asked.clear()
    fs = fsspec.filesystem("ebrec")
    buf = io.BytesIO()
    pq.write_table(pa.table({"x0": [1.0, 2.0, 3.0]}), buf)
    for key in ("data/a.parquet", "data/sub/b.parquet", "other/c.parquet"):
        fs.pipe(key, buf.getvalue())
    fs.pipe("empty/notes.txt", b"no parquet here")
    yield fs
    Recording.store.clear()
    fsspec.register_implementation("ebrec", Recording, clobber=True)


def test_a_url_is_opened_with_its_options_and_listed_fresh(rec):
    fs, files = list_url_files("ebrec://data/a.parquet", storage_options={"tag": "a"})
    assert files == ["ebrec://data/a.parquet"]
    assert isinstance(fs, Recording) and fs.storage_options == {"tag": "a"}
    assert ("invalidate", "/data/a.parquet") in Recording.asked
    fs, files = list_url_files("ebrec://data")
    assert files == ["ebrec:///data/a.parquet", "ebrec:///data/sub/b.parquet"]  # (its keys)
    _, top = list_url_files("ebrec://data", "*.parquet")
    assert top == ["ebrec:///data/a.parquet"]


def test_a_missing_object_or_an_empty_folder_is_file_not_found_naming_it(rec):
    with pytest.raises(FileNotFoundError) as e:
        list_url_files("ebrec://data/none.parquet")
    assert str(e.value) == "no such Parquet file or folder: ebrec://data/none.parquet"
    with pytest.raises(FileNotFoundError) as e:
        list_url_files("ebrec://empty")
    assert str(e.value) == "no files matching '**/*.parquet' in folder ebrec://empty"


def test_a_list_is_all_urls_on_one_filesystem(rec):
    urls = ["ebrec://other/c.parquet", "ebrec://data/a.parquet"]
    opts = {"tag": "a"}
    fs, files = list_url_files(urls, storage_options=opts)
    assert files == urls and fs.storage_options == opts
    assert list_url_files(tuple(urls))[1] == urls  # any sequence, in its order
    with pytest.raises(ValueError) as e:
        list_url_files([])
    assert str(e.value) == "parquet_source got an empty list of files"
    with pytest.raises(ValueError) as e:
        list_url_files([urls[0], "a.parquet", "b.parquet"])
    assert str(e.value) == (
        "parquet_source got a list mixing URLs and local paths (e.g. 'a.parquet'); "
        "pass all files on one filesystem"
    )
    with pytest.raises(ValueError) as e:
        list_url_files([urls[0], "memory://x.parquet"])
    assert str(e.value) == (
        f"parquet_source got URLs on different filesystems ({urls[0]!r} and "
        "'memory://x.parquet'); pass files of one protocol with one set of storage_options"
    )


def test_an_objects_identity_is_its_size_etag_and_version(rec):
    size = rec.info("data/a.parquet")["size"]
    assert url_identity(rec, "ebrec://data/a.parquet") == (size, f"etag-{size}", "v7")
    assert ("invalidate", "/data/a.parquet") in Recording.asked
    with pytest.raises(FileNotFoundError) as e:
        url_identity(rec, "ebrec://data/none.parquet")
    assert e.value.errno == errno.ENOENT and e.value.filename == "ebrec://data/none.parquet"


def test_a_file_is_read_without_a_cache_its_size_given_where_known(rec):
    size = rec.info("data/a.parquet")["size"]
    pf = url_parquet_file(rec, "ebrec://data/a.parquet", size=size)
    assert pf.metadata.num_rows == 3 and pf.read().column(0).to_pylist() == [1.0, 2.0, 3.0]
    opens = [a for a in Recording.asked if a[0] == "open"]
    assert opens[-1][1] == "/data/a.parquet"
    assert opens[-1][2].get("cache_type") == "none" and opens[-1][2].get("size") == size
    url_parquet_file(rec, "ebrec://data/a.parquet")
    opens = [a for a in Recording.asked if a[0] == "open"]
    assert opens[-1][2].get("cache_type") == "none" and "size" not in opens[-1][2]
    with pytest.raises(FileNotFoundError) as e:
        url_parquet_file(rec, "ebrec://data/none.parquet")
    assert e.value.errno == errno.ENOENT and e.value.filename == "ebrec://data/none.parquet"
    assert e.value.strerror == "no such file or object"


def _two_columns(rec) -> None:
    """A parquet object of one row group, columns x0 and x1, at ebrec://two/t.parquet."""
    buf = io.BytesIO()
    pq.write_table(pa.table({"x0": [1.0, 2.0, 3.0], "x1": [4.0, 5.0, 6.0]}), buf)
    rec.pipe("two/t.parquet", buf.getvalue())


def _group_range(footer) -> tuple[int, int]:
    """Row group 0's column chunks as one coalesced range: (start, length)."""
    chunks = [footer.row_group(0).column(j) for j in range(2)]
    start = min(c.dictionary_page_offset or c.data_page_offset for c in chunks)
    return start, sum(c.total_compressed_size for c in chunks)


def _record_reads(monkeypatch) -> tuple[set, list]:
    """From now on, each range read from a Recording's objects, (start, length), and the
    options of each open."""
    ranges: set = set()
    opens: list = []
    opened = Recording._open

    def recording_reads(self, path, mode="rb", **kwargs):
        opens.append(dict(kwargs))
        f = opened(self, path, mode, **kwargs)
        read = f.read

        def read_and_record(*args):
            out = read(*args)
            ranges.add((f.tell() - len(out), len(out)))
            return out

        f.read = read_and_record
        return f

    monkeypatch.setattr(Recording, "_open", recording_reads)
    return ranges, opens


def test_a_file_given_its_footer_reads_no_footer_and_a_row_group_in_one_range(rec, monkeypatch):
    """The footer passed in is not read again; a row group's column chunks are asked for
    in one coalesced range (pre_buffer), not one read a column."""
    _two_columns(rec)
    footer = url_parquet_file(rec, "ebrec://two/t.parquet").metadata
    ranges, _ = _record_reads(monkeypatch)
    pf = url_parquet_file(rec, "ebrec://two/t.parquet", metadata=footer)
    assert ranges == set()
    assert pf.read_row_group(0).column("x1").to_pylist() == [4.0, 5.0, 6.0]
    assert ranges == {_group_range(footer)}


def test_a_source_reads_its_row_groups_by_the_footers_and_sizes_it_holds(rec, monkeypatch):
    """parquet_source over a URL: a chunk's read opens the object with the size it
    recorded and reads no footer again, only the row group's coalesced range; so does a
    stream of its batches (what `exactbatch convert` reads)."""
    from exactbatch import parquet_source

    _two_columns(rec)
    size = rec.info("two/t.parquet")["size"]
    src = parquet_source("ebrec://two/t.parquet")
    group = _group_range(src.footers[0])
    ranges, opens = _record_reads(monkeypatch)
    assert src.read_chunk(0)[0].tolist() == [[1.0, 4.0], [2.0, 5.0], [3.0, 6.0]]
    assert ranges == {group}
    assert [o.get("size") for o in opens] == [size]
    ranges.clear()
    opens.clear()
    assert [c[0].to_pylist() for c in src.iter_batches(5)] == [[1.0, 2.0, 3.0]]
    assert ranges == {group}
    assert [o.get("size") for o in opens] == [size]


def test_a_source_reaches_its_objects_with_its_storage_options(rec, monkeypatch):
    from exactbatch import parquet_source

    seen = []
    info = Recording.info

    def recording_info(self, path, **kwargs):
        seen.append(dict(self.storage_options))
        return info(self, path, **kwargs)

    monkeypatch.setattr(Recording, "info", recording_info)
    src = parquet_source("ebrec://data/a.parquet", storage_options={"tag": "b"})
    assert src.read_chunk(0)[0].tolist() == [[1.0], [2.0], [3.0]]
    assert seen and all(s == {"tag": "b"} for s in seen)
