"""exactbatch.sources.identity on its own: the sample's positions and hash, a file's and a
Parquet source's facts, a list of chunks' sample. (Through a loader's state:
tests/loader/test_fingerprint.py.)"""

from __future__ import annotations

import os

import numpy as np
import pytest

from exactbatch.order.subset import subset_digest
from exactbatch.sources import identity
from exactbatch.sources.chunks import ChunkError
from exactbatch.sources.identity import SAMPLE_ROWS, sample_positions


def test_the_sample_positions_span_the_rows_first_to_last():
    for n in (0, -3):
        empty = sample_positions(n)
        assert empty.tolist() == [] and empty.dtype.kind == "i"
    assert sample_positions(1).tolist() == [0]
    assert sample_positions(2).tolist() == [0, 1]
    assert sample_positions(SAMPLE_ROWS).tolist() == list(range(SAMPLE_ROWS))
    big = sample_positions(1000)
    assert len(big) == SAMPLE_ROWS and big[0] == 0 and big[-1] == 999
    assert (np.diff(big) > 0).all() and big.dtype.kind == "i"


def test_the_rows_hash_holds_positions_features_and_labels_as_float64():
    pos, x, y = np.array([0, 5]), np.array([[1.0, 2.0], [3.0, np.nan]]), np.array([[0.0], [1.0]])
    h = identity._rows_hash(pos, x, y)
    assert identity._rows_hash(pos.astype(np.int32), x.astype(np.float32), y) == h
    assert identity._rows_hash(pos, x, y.astype(np.float32)) == h
    other_nan = x.copy()
    other_nan.view(np.uint64)[1, 1] |= 1  # another NaN payload: the same missing value
    assert np.isnan(other_nan[1, 1]) and identity._rows_hash(pos, other_nan, y) == h
    assert identity._rows_hash(np.array([0, 6]), x, y) != h
    assert identity._rows_hash(pos, x + 1, y) != h
    assert identity._rows_hash(pos, x, y + 1) != h


def test_the_rows_hash_never_changes_between_versions():
    """A state saved by an earlier version carries this hash: the positions as int64 and
    the values as float64, little-endian, hashed by BLAKE2b-128 (a change refuses every
    state saved before it as other data)."""
    x, y = np.array([[1.5, -2.0], [np.nan, 4.0]]), np.array([[1.0], [0.0]])
    assert identity._rows_hash(np.array([0, 3]), x, y) == "2fa24ddffd465ef8826a0d5e57d355a6"


def test_a_list_of_chunks_is_sampled_as_an_array_of_its_rows():
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10.0).reshape(10, 1)
    whole = identity._chunks_sample([(x, y)])
    assert identity._chunks_sample([(x[:3], y[:3]), (x[3:], y[3:])]) == whole
    assert identity._rows_hash(np.arange(10), x, y) == whole
    with pytest.raises(ChunkError, match="^chunk 1: "):
        identity._chunks_sample([(x, y), (x[:2], y[:3])])


def test_a_files_facts_are_its_path_size_and_mtime(tmp_path):
    f = tmp_path / "a.bin"
    f.write_bytes(b"12345")
    st = os.stat(f)
    want = {"path": os.fspath(f), "size": 5, "mtime": st.st_mtime_ns}
    assert identity.file_facts(f) == identity.file_facts(os.fspath(f)) == want
    for nothing in (tmp_path / "gone", "s3://bucket/a.bin", None, 3, b"a.bin"):
        assert identity.file_facts(nothing) == {}


pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _footer(tmp_path, name, values, **kw):
    path = tmp_path / name
    pq.write_table(pa.table({"a": pa.array(values, pa.float64())}), path, **kw)
    return path, pq.ParquetFile(path).metadata


def test_a_parquet_sources_identity_names_its_files_and_their_footers(tmp_path):
    p1, m1 = _footer(tmp_path, "one.parquet", [1.0, 2.0, 3.0])
    p2, _ = _footer(tmp_path, "two.parquet", [1.0, 2.0, 3.0])
    got = identity.parquet_identity([p1, p2], [m1], ["a"], [])
    assert got["kind"] == "parquet" and got["path"] == str(p1) and got["parts"] == 2
    assert got["names"] == {"features": ["a"], "labels": []}
    assert identity.parquet_identity([p2, p1], [m1], ["a"], [])["path"] == str(p2)
    # the same footers under other names, or the same names over other footers: other files
    assert (
        identity.parquet_identity([p2], [m1], ["a"], [])["files"]
        != (identity.parquet_identity([p1], [m1], ["a"], [])["files"])
    )
    none = identity.parquet_identity([], [], ["a"], [])
    assert none["path"] is None and none["parts"] == 0


@pytest.mark.parametrize(
    "other",
    [[0.0, 2.0, 3.0], [1.0, 2.0, 4.0], [1.0, None, 3.0], [1.0, 2.0, 3.0, 3.0]],
    ids=["min", "max", "nulls", "rows"],
)
def test_each_fact_of_a_footer_tells_two_files_apart(tmp_path, other):
    """Footers that differ in a column's min, its max, its nulls or the rows (the same
    file name and size in the listing): other files."""
    p, m = _footer(tmp_path, "one.parquet", [1.0, 2.0, 3.0])
    _, m2 = _footer(tmp_path, "two.parquet", other)
    assert (
        identity.parquet_identity([p], [m2], ["a"], [])["files"]
        != (identity.parquet_identity([p], [m], ["a"], [])["files"])
    )


def test_a_footer_without_statistics_is_known_by_its_rows(tmp_path):
    p, bare = _footer(tmp_path, "bare.parquet", [1.0, 2.0, 3.0], write_statistics=False)
    _, bare_other = _footer(tmp_path, "b2.parquet", [7.0, 8.0, 9.0], write_statistics=False)
    _, more = _footer(tmp_path, "b3.parquet", [1.0, 2.0, 3.0, 4.0], write_statistics=False)
    one = identity.parquet_identity([p], [bare], ["a"], [])["files"]
    assert identity.parquet_identity([p], [bare_other], ["a"], [])["files"] == one
    assert identity.parquet_identity([p], [more], ["a"], [])["files"] != one


class _Reader:
    """A random-access reader that is no array: its kind is its type's name."""

    n, d, l = 5, 2, 1  # noqa: E741

    def read(self, rows, out_x, out_y):
        out_x[:] = np.asarray(rows)[:, None] * [1.0, 2.0]
        out_y[:] = 0.5


def test_a_readers_fingerprint_names_its_kind_sample_and_subset():
    r = _Reader()
    fp = identity.reader_fingerprint(r, ids=np.array([4, 0, 2]), read=r.read, about={"k": 1})
    assert fp["kind"] == "_Reader" and (fp["n"], fp["d"], fp["l"]) == (5, 2, 1)
    assert fp["k"] == 1 and fp["names"] is None
    x = np.arange(5.0)[:, None] * [1.0, 2.0]
    assert fp["sample"] == identity._rows_hash(np.arange(5), x, np.full((5, 1), 0.5))
    assert fp["rows"] == {"count": 3, "digest": subset_digest(np.array([4, 0, 2]))}
    closed = identity.reader_fingerprint(r)  # closed: the sizes alone
    assert closed == {"kind": None, "n": 5, "d": 2, "l": 1, "names": None, "rows": None}


class _Source:
    def __init__(self, said):
        self.said = said

    def open_reader(self):
        return _Reader()

    def identity(self):
        return self.said


def test_a_row_sources_facts_are_its_type_and_what_its_identity_says():
    assert identity.source_facts(_Source({"names": ["a"]})) == {"kind": "_Source", "names": ["a"]}
    assert identity.source_facts(_Source({"kind": "mine"})) == {"kind": "mine"}
    assert identity.source_facts(None) == identity.source_facts(np.zeros(3)) == {}
    with pytest.raises(TypeError) as e:
        identity.source_facts(_Source(["a"]))
    assert str(e.value) == (
        "_Source.identity() must return a dict (its kind, column names, ...); got list"
    )
