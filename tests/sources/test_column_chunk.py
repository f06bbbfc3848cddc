"""Chunks held column by column (exactbatch.sources.column_chunk): copied straight
into rows by exactbatch.kernels.columns_into, bit for bit the same on both backends;
an Arrow stream's batches through them are its rows (nulls NaN, any numeric type,
cast to the loader's dtype) in the same order, on both backends."""

from __future__ import annotations

import numpy as np
import pytest
from backends import built, on_backend
from hypothesis import given, settings
from hypothesis import strategies as st

import exactbatch
from exactbatch import DataLoader, kernels
from exactbatch.sources.column_chunk import Columns, put, side_by_side

needs_core = pytest.mark.skipif(not built(), reason="the compiled core is not built")

# Column types copied (and cast) straight from their buffers, besides float64.
_NARROW = ["float64", "float32", "int8", "uint8", "int16", "uint16", "int32", "uint32"]


@needs_core
@settings(max_examples=100)
@given(data=st.data())
def test_the_backends_copy_columns_into_rows_bit_for_bit(data):
    n, w = data.draw(st.integers(1, 300)), data.draw(st.integers(0, 6))
    start = data.draw(st.integers(0, n - 1))
    k = data.draw(st.integers(0, n - start))
    dtype = data.draw(st.sampled_from([np.float64, np.float32]))
    gap = data.draw(st.sampled_from([0, 3]))  # out: a whole array, or columns of wider rows
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    cols = [rng.standard_normal(n) * 10.0 ** rng.integers(-50, 50, n) for _ in range(w)]
    if w:
        cols[0][start] = np.nan
    # any column may be one that is cast as it is copied (float32, or a narrow integer)
    for j in range(1, w):
        t = np.dtype(data.draw(st.sampled_from(_NARROW)))
        if t.kind == "f":
            with np.errstate(over="ignore"):
                cols[j] = cols[j].astype(t)
        else:
            info = np.iinfo(t)
            cols[j] = rng.integers(info.min, info.max, n, endpoint=True, dtype=t)
    got = []
    for name in ("compiled", "numpy"):
        with on_backend(name), np.errstate(over="ignore"):
            wide = np.zeros((k, w + gap), dtype=dtype)
            kernels.columns_into(cols, start, wide[:, :w])
            got.append(wide)
    with np.errstate(over="ignore"):
        want = np.stack(cols, axis=1)[start : start + k].astype(dtype) if w else got[0][:, :0]
    np.testing.assert_array_equal(got[0][:, :w], want)
    assert got[0].tobytes() == got[1].tobytes()


@needs_core
@settings(max_examples=60)
@given(data=st.data())
def test_float_columns_copied_four_at_a_time_are_the_column_loops_bits(data):
    """The compiled copy's 4 x 4 tiles (4 float64 or 4 float32 columns side by side,
    rows a block of 256 at a time): the NumPy twin's bits, for any width, start and
    row count (rows left over past a tile or a block, columns past a quad, quads
    broken by another type), special values included (a signalling NaN with a
    payload, -0.0, subnormals, infinities, float32 overflow)."""
    n = data.draw(st.integers(1, 700))
    w = data.draw(st.integers(1, 19))
    start = data.draw(st.integers(0, n - 1))
    k = data.draw(st.integers(0, n - start))
    dtype = data.draw(st.sampled_from([np.float64, np.float32]))
    gap = data.draw(st.sampled_from([0, 1, 3]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    special = np.array(
        [np.nan, -0.0, 5e-324, -np.inf, np.inf, 1e300, -1e-310, 3.4e38 * 1.5],
        dtype=np.float64,
    )
    snan = np.array([0x7FF0000000000BAD], dtype=np.uint64).view(np.float64)
    kinds = st.sampled_from(["float64", "float32", "int16"])
    types = data.draw(st.lists(kinds, min_size=w, max_size=w))
    cols = []
    for t in types:
        v = rng.standard_normal(n) * 10.0 ** rng.integers(-40, 40, n)
        at = rng.integers(0, n, 4)
        v[at] = rng.choice(np.concatenate([special, snan]), 4)
        with np.errstate(over="ignore", invalid="ignore"):
            cols.append(v.astype(t) if t != "int16" else rng.integers(-9, 9, n, dtype=np.int16))
    got = []
    for name in ("compiled", "numpy"):
        with on_backend(name), np.errstate(over="ignore", invalid="ignore"):
            wide = np.zeros((k, w + gap), dtype=dtype)
            kernels.columns_into(cols, start, wide[:, :w])
            got.append(wide)
    assert got[0].tobytes() == got[1].tobytes()


@needs_core
def test_the_compiled_copy_refuses_short_columns_and_wrong_outputs():
    cols = [np.arange(5.0), np.arange(5.0)]
    with on_backend("compiled"):
        with pytest.raises(ValueError, match="column 0 has 5 values"):
            kernels.columns_into(cols, 2, np.empty((4, 2)))
        with pytest.raises(ValueError, match=r"\(rows, 2\)"):
            kernels.columns_into(cols, 0, np.empty((4, 3)))
        with pytest.raises(TypeError, match="float64 or float32"):
            kernels.columns_into(cols, 0, np.empty((4, 2), dtype=np.int64))
        with pytest.raises(TypeError, match="column 1 must be 1-D float64, float32, or an"):
            kernels.columns_into([cols[0], cols[1].astype(np.int64)], 0, np.empty((4, 2)))
        with pytest.raises(TypeError, match="column 0 must be 1-D"):
            kernels.columns_into([np.zeros(5, dtype=np.float16)], 0, np.empty((4, 1)))


def test_a_column_chunk_slices_by_rows_and_reads_as_its_array():
    cols = [np.arange(10.0), np.arange(10.0) * 2]
    c = Columns(cols, 8, start=1)
    want = np.stack(cols, axis=1)[1:9]
    assert c.shape == (8, 2) and c.ndim == 2 and len(c) == 8
    np.testing.assert_array_equal(np.asarray(c), want)
    np.testing.assert_array_equal(np.asarray(c[2:5]), want[2:5])
    np.testing.assert_array_equal(np.asarray(c[-3:]), want[-3:])
    np.testing.assert_array_equal(c[::2], want[::2])
    out = np.empty((3, 2), dtype=np.float32)
    put(out, c[5:])
    np.testing.assert_array_equal(out, want[5:].astype(np.float32))


def test_narrow_columns_are_held_as_their_buffers_and_wide_or_null_ones_as_float64():
    """Cast fusion: a chunk's int32, float32 (any type float64 holds exactly) columns
    without nulls are views of their Arrow buffers, cast only as their rows are copied;
    int64 (Arrow's checked cast), bool (bits) and columns with nulls are float64 copies
    (nulls NaN); the rows are the same either way."""
    import pyarrow as pa

    from exactbatch.sources.arrow import column_chunk

    rng = np.random.default_rng(11)
    n = 300
    i32, f32 = rng.integers(-(2**31), 2**31, n).astype(np.int32), rng.random(n, np.float32)
    cols = [
        pa.array(i32),
        pa.array(f32),
        pa.array(rng.integers(0, 2**16, n).astype(np.uint16)),
        pa.array(rng.integers(-(2**40), 2**40, n)),
        pa.array(rng.random(n) < 0.5),
        pa.array(i32, mask=rng.random(n) < 0.3),
        pa.array(f32).slice(5, n - 10),  # an offset into its buffer
    ]
    cols[-1] = pa.concat_arrays([cols[-1], pa.array(f32[:10])])  # n values again
    c = column_chunk(cols, n)
    assert [v.dtype for v in c.cols] == [
        np.int32,
        np.float32,
        np.uint16,
        np.float64,
        np.float64,
        np.float64,
        np.float32,
    ]
    assert np.shares_memory(c.cols[0], np.frombuffer(cols[0].buffers()[1], np.int32))
    want = np.stack([a.to_numpy(zero_copy_only=False).astype(np.float64) for a in cols], 1)
    want[:, 5][~cols[5].is_valid().to_numpy(zero_copy_only=False)] = np.nan
    for name in ("compiled", "numpy") if built() else ("numpy",):
        with on_backend(name):
            for dtype in (np.float64, np.float32):
                np.testing.assert_array_equal(
                    np.asarray(c[3:], dtype=dtype), want[3:].astype(dtype)
                )


def _table(n: int):
    import pyarrow as pa

    rng = np.random.default_rng(5)
    f = rng.standard_normal(n) * 1e-3
    nulls = rng.random(n) < 0.2
    t = pa.table(
        {
            "a": pa.array(f),  # float64, no nulls: read in place
            "b": pa.array(rng.integers(-(2**40), 2**40, n)),  # int64: float32 rounds it
            "c": pa.array(rng.standard_normal(n).astype(np.float32)),
            "d": pa.array(np.where(nulls, 0.0, f), mask=nulls),  # nulls: NaN
            "y": pa.array(rng.integers(0, 3, n).astype(np.int8)),
        }
    )
    return t, t.to_batches(max_chunksize=37)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_an_arrow_stream_gives_its_rows_alike_on_both_backends(shuffle, dtype):
    import pyarrow as pa

    table, batches = _table(500)

    def reader():
        return pa.RecordBatchReader.from_batches(table.schema, batches)

    want = np.stack([table.column(c).to_numpy(zero_copy_only=False) for c in "abcd"], axis=1)
    want = np.where(np.isnan(want.astype(np.float64)), np.nan, want).astype(np.float64)
    names = ("compiled", "numpy") if built() else ("numpy",)
    got = {}
    for name in names:
        with on_backend(name):
            src = exactbatch.arrow_source(reader, features=list("abcd"), labels="y")
            loader = DataLoader(
                src, 64, shuffle=shuffle, seed=3, dtype=dtype, with_rows=True, total_size=500
            )
            parts = list(loader)
            loader.close()
        rows = np.concatenate([r for _, _, r in parts])
        x = np.concatenate([bx for bx, _, _ in parts])
        assert sorted(rows.tolist()) == list(range(500))  # each row once
        np.testing.assert_array_equal(x, want[rows].astype(dtype))
        got[name] = (x.tobytes(), rows.tobytes())
    assert len(set(got.values())) == 1


def test_iterating_an_arrow_stream_still_gives_float64_arrays():
    import pyarrow as pa

    table, batches = _table(100)
    src = exactbatch.arrow_source(
        lambda: pa.RecordBatchReader.from_batches(table.schema, batches),
        features=list("abcd"),
        labels="y",
    )
    chunks = list(src)
    assert all(type(x) is np.ndarray and x.dtype == np.float64 for x, _ in chunks)
    assert sum(len(x) for x, _ in chunks) == 100


@pytest.mark.parametrize(
    "shuffle,elastic", [(False, False), (False, True), (True, True)], ids=["plain", "el", "el-sh"]
)
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_parquet_row_groups_reach_the_batches_column_by_column(
    tmp_path, monkeypatch, shuffle, elastic, dtype
):
    """A Parquet source's row groups are held column by column (read_columns) wherever a
    loader reads one whole, an unshuffled pass and the elastic cache alike: never laid
    out as rows first (read_chunk, open_chunk), and the same batches on both backends."""
    import pyarrow.parquet as pq

    from exactbatch.sources.parquet import ParquetSource

    table, _ = _table(300)
    path = str(tmp_path / "t.parquet")
    pq.write_table(table, path, row_group_size=37)
    x0, y0 = exactbatch.parquet_source(path, features=list("abcd"), labels="y").read_columns(1)
    assert isinstance(x0, Columns) and isinstance(y0, Columns) and x0.shape == (37, 4)

    def laid_out(self, i):
        raise AssertionError("a row group laid out as rows before its batches")

    monkeypatch.setattr(ParquetSource, "read_chunk", laid_out)
    monkeypatch.setattr(ParquetSource, "open_chunk", laid_out)
    want = np.stack([table.column(c).to_numpy(zero_copy_only=False) for c in "abcd"], axis=1)
    wy = table.column("y").to_numpy().astype(np.float64)
    got = {}
    for name in ("compiled", "numpy") if built() else ("numpy",):
        with on_backend(name):
            src = exactbatch.parquet_source(path, features=list("abcd"), labels="y")
            options = {"elastic": elastic, "buffer_size": 50}
            loader = DataLoader(
                src, 16, shuffle=shuffle, seed=3, dtype=dtype, with_rows=True, **options
            )
            parts = list(loader)
            loader.close()
        rows = np.concatenate([r for _, _, r in parts])
        x = np.concatenate([bx for bx, _, _ in parts])
        y = np.concatenate([by for _, by, _ in parts])
        assert sorted(rows.tolist()) == list(range(300))  # each row once
        np.testing.assert_array_equal(x, want[rows].astype(np.float64).astype(dtype))
        np.testing.assert_array_equal(y[:, 0], wy[rows])
        got[name] = (x.tobytes(), y.tobytes(), rows.tobytes())
    assert len(set(got.values())) == 1


@pytest.mark.parametrize("nulls", [False, True], ids=["plain", "a-chunk-with-nulls"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_an_arrow_table_read_in_order_copies_plain_chunks_straight_into_rows(
    monkeypatch, nulls, dtype
):
    """An Arrow table (a polars DataFrame's) read in order: each chunk whose columns are
    all plain (float64, float32, integers of at most 32 bits, no nulls) is copied with
    one columns_into a side, never column by column; a chunk with nulls, a bool or an
    int64 column is read column by column; the rows are the data's either way, on both
    backends."""
    import pyarrow as pa

    from exactbatch.sources import arrow_columns

    rng = np.random.default_rng(8)
    sizes = [50, 0, 73, 61]
    chunks = []
    for k, n in enumerate(sizes):
        mask = (rng.random(n) < 0.3) if nulls and k == 2 else None
        chunks.append(
            pa.record_batch(
                {
                    "a": pa.array(rng.standard_normal(n)),
                    "b": pa.array(rng.integers(-(2**31), 2**31, n).astype(np.int32), mask=mask),
                    "c": pa.array(rng.random(n, np.float32)),
                    "y": pa.array(rng.integers(0, 255, n).astype(np.uint8)),
                }
            )
        )
    table = pa.Table.from_batches(chunks)
    cols = [table.column(c).to_numpy(zero_copy_only=False).astype(np.float64) for c in "abcy"]
    want = np.stack(cols, axis=1)
    if nulls:
        want[:, 1][~table.column("b").is_valid().to_numpy(zero_copy_only=False)] = np.nan
    column_wise = []
    take = arrow_columns._Part.take

    def counted(part, src):
        column_wise.append(part)
        return take(part, src)

    monkeypatch.setattr(arrow_columns._Part, "take", counted)
    got = {}
    for name in ("compiled", "numpy") if built() else ("numpy",):
        with on_backend(name):
            src = exactbatch.arrow_source(table, features=list("abc"), labels="y")
            loader = DataLoader(src, 16, shuffle=False, dtype=dtype)
            x = np.concatenate([bx for bx, _ in loader])
            y = np.concatenate([by for _, by in loader])
            loader.close()
        np.testing.assert_array_equal(x, want[:, :3].astype(dtype))
        np.testing.assert_array_equal(y[:, 0], want[:, 3].astype(dtype))
        got[name] = x.tobytes() + y.tobytes()
    assert len(set(got.values())) == 1
    # only the chunk with nulls (its 73 rows, 4 columns, each a batch a column) by columns
    assert bool(column_wise) == nulls


def test_an_arrow_table_read_in_order_with_integer_labels():
    """label_dtype=int64: the in-order copy still gives each row's integer label."""
    import pyarrow as pa

    y = np.arange(100, dtype=np.int32) % 7
    table = pa.table({"a": pa.array(np.arange(100.0)), "y": pa.array(y)})
    src = exactbatch.arrow_source(table, features="a", labels="y")
    loader = DataLoader(src, 16, shuffle=False, label_dtype="int64")
    got = np.concatenate([by for _, by in loader])
    loader.close()
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got[:, 0], y)


def test_a_column_of_one_chunk_and_empty_ones_is_held_as_its_buffer():
    """A polars LazyFrame's batches hold columns of one chunk and an empty one
    ([65536, 0]): such a column is a view of its one chunk's buffer (no copy), with an
    offset into it too; two chunks with values are a float64 copy; the rows the same."""
    import pyarrow as pa

    from exactbatch.sources.arrow import column_chunk

    v = np.arange(20.0)
    empty = pa.array(np.zeros(0))
    one = pa.chunked_array([empty, pa.array(v), empty])
    sliced = pa.chunked_array([pa.array(v).slice(3, 10), empty])
    two = pa.chunked_array([pa.array(v[:8]), pa.array(v[8:]), empty])
    c = column_chunk([one, two], 20)
    assert np.shares_memory(c.cols[0], np.frombuffer(one.chunk(1).buffers()[1]))
    assert not np.shares_memory(c.cols[1], np.frombuffer(two.chunk(0).buffers()[1]))
    np.testing.assert_array_equal(np.asarray(c), np.stack([v, v], 1))
    s = column_chunk([sliced], 10)
    assert np.shares_memory(s.cols[0], np.frombuffer(sliced.chunk(0).buffers()[1]))
    np.testing.assert_array_equal(np.asarray(s)[:, 0], v[3:13])


def test_side_by_side_keeps_two_column_chunks_of_the_same_rows_as_columns():
    """A chunk's x and y held as columns of the same rows are one chunk of columns (no
    copy); other starts, or an array on either side, one float64 array of both."""
    cols = [np.arange(10.0), np.arange(10.0) * 2, np.arange(10, dtype=np.int32) * 3]
    whole = np.stack(cols, axis=1).astype(np.float64)
    x, y = Columns(cols[:2], 6, start=2), Columns(cols[2:], 6, start=2)
    both = side_by_side(x, y)
    assert isinstance(both, Columns) and (both.start, both.shape) == (2, (6, 3))
    np.testing.assert_array_equal(np.asarray(both), whole[2:8])
    for a, b in [
        (x, Columns(cols[2:], 6, start=0)),
        (x, np.asarray(y)),
        (np.asarray(x), y),
        (np.asarray(x), np.asarray(y)),
    ]:
        got = side_by_side(a, b)
        assert type(got) is np.ndarray and got.dtype == np.float64 and got.shape == (6, 3)
        np.testing.assert_array_equal(got, np.hstack([np.asarray(a), np.asarray(b)]))


def test_a_column_chunk_shows_its_rows_columns_and_start():
    assert repr(Columns([np.arange(9.0)] * 2, 4, start=3)) == "Columns(rows=4, columns=2, start=3)"


@pytest.mark.parametrize("tile_bytes", [1, 40, 48, 100, 512 << 10])
def test_the_pure_copy_writes_every_row_whatever_its_tile(monkeypatch, tile_bytes):
    """The pure path copies a tile of rows at a time (``_TILE_BYTES`` of the output's
    rows, at least one row): tiles of one row, of a row and a half, of rows that do not
    divide the batch, of the whole batch; every row written once, from ``start`` on."""
    monkeypatch.setattr(kernels, "_TILE_BYTES", tile_bytes)
    cols = [np.arange(30.0), np.arange(30, dtype=np.int32) * -2, np.arange(30.0) / 4]
    want = np.stack(cols, axis=1)[7:18]
    with on_backend("numpy"):
        wide = np.full((11, 5), -1.0)  # columns of wider rows: a stride of 40 bytes
        kernels.columns_into(cols, 7, wide[:, :3])
        np.testing.assert_array_equal(wide[:, :3], want)
        assert (wide[:, 3:] == -1).all()
        narrow = np.full((11, 3), -1.0, dtype=np.float32)
        kernels.columns_into(cols, 7, narrow)
        np.testing.assert_array_equal(narrow, want.astype(np.float32))
