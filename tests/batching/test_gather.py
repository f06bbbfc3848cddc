"""What both shuffle buffers share (exactbatch.batching.gather): a buffer of whole
rows from the spare list only when it fits, with its row ids as uint64, and
chunks (arrays, or rows read straight into it) filled into it."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch.batching.gather import buffer_arrays, fill_rows, gathered, read_whole, row_ids
from exactbatch.order.digest import rows_digest
from exactbatch.sources import column_chunk
from exactbatch.sources.chunks import ChunkRead
from exactbatch.sources.column_chunk import Columns


def test_a_spare_buffer_is_reused_when_it_fits():
    old = buffer_arrays([], 100, 3, 1)
    spare = [old]
    got = buffer_arrays(spare, 80, 3, 1)
    assert spare == [] and all(a is b for a, b in zip(got, old, strict=True))


@pytest.mark.parametrize(("rows", "d", "l"), [(101, 3, 1), (100, 2, 1), (100, 3, 2)])
def test_a_spare_buffer_too_small_or_of_other_widths_is_not_reused(rows, d, l):  # noqa: E741
    old = buffer_arrays([], 100, 3, 1)
    spare = [old]
    bw, bh = buffer_arrays(spare, rows, d, l)
    assert spare == [] and bw is not old[0]
    assert bw.shape == (rows, d + l) and bh.shape == (rows,) and bw.flags.c_contiguous
    assert bw.dtype == np.float64 and bh.dtype == np.uint64


def test_row_ids_are_uint64_from_the_chunks_first_row():
    ids = row_ids(2**60, 5, 3)
    assert ids.dtype == np.uint64 and ids.tolist() == [2**60 + 5, 2**60 + 6, 2**60 + 7]


class _Rows:
    """A ChunkRead's reader: row r of a chunk holds r in every value; counts its reads."""

    def __init__(self):
        self.reads = 0

    def __call__(self, row, out):
        self.reads += 1
        out[:] = np.arange(row, row + out.shape[0])[:, None]


def test_a_chunk_cut_by_the_buffers_end_is_read_whole_into_one_kept_array():
    """A ChunkRead of which fewer rows are wanted is read once, whole, into the scratch
    array (kept, and used again for the next such chunk of that shape); a chunk taken
    whole, or arrays, pass through unread."""
    reader, scratch = _Rows(), []
    chunk = ChunkRead(reader, 10, 6, 2, 1)
    assert read_whole(chunk, 6, scratch) is chunk and reader.reads == 0 and not scratch
    x, y, id0 = read_whole(chunk, 4, scratch)
    assert reader.reads == 1 and id0 == 10 and len(scratch) == 1
    assert x.tolist() == [[r, r] for r in range(10, 16)] and y[:, 0].tolist() == list(range(10, 16))
    first = scratch[0]
    x2, _, _ = read_whole(ChunkRead(reader, 20, 6, 2, 1), 1, scratch)
    assert scratch[0] is first and x2.base is first and x2[0, 0] == 20
    read_whole(ChunkRead(reader, 30, 9, 2, 1), 1, scratch)  # another shape: a new array
    assert scratch[0] is not first and scratch[0].shape == (9, 3)
    arrays = (np.zeros((3, 2)), np.zeros((3, 1)), 0)
    assert read_whole(arrays, 1, scratch) is arrays


def test_a_held_chunk_cut_by_the_buffers_end_is_read_in_parts_straight_from_it():
    """A ChunkRead ``held`` in memory (decoded by open_chunk) passes through however
    few rows are wanted: its rows are copied in parts, no scratch array, no whole read."""
    reader, scratch = _Rows(), []
    chunk = ChunkRead(reader, 10, 6, 2, 1, held=True)
    assert read_whole(chunk, 4, scratch) is chunk and reader.reads == 0 and not scratch
    bw, bh = np.empty((3, 3)), np.empty(3, dtype=np.uint64)
    fill_rows(chunk, 4, 2, bw[:2], bh[:2])  # rows 14 and 15 of the stream
    assert reader.reads == 1 and bw[:2, 0].tolist() == [14, 15] and bh[:2].tolist() == [14, 15]


@pytest.mark.parametrize("with_rows", [False, True])
def test_a_groups_batches_are_views_of_its_arrays_with_their_digests(with_rows):
    """gathered: each batch b rows of the group's new arrays (not of the buffer), in the
    order given, its digest that of its ids (and its ids, with_rows), whatever ids hold
    past the rows (a buffer's leftovers)."""
    bw = np.arange(40, dtype=np.float64).reshape(20, 2)
    bx, by = bw[:, :1], bw[:, 1:]
    order = np.random.default_rng(0).permutation(20)
    ids = (100 + order).astype(np.uint64)  # 2 more than the rows gathered below
    groups = list(gathered(bx, by, ids, order[:18], 3, np.float64, with_rows))
    batches = [batch for group in groups for batch in group]
    assert len(batches) == 6
    for j, batch in enumerate(batches):
        want = order[3 * j : 3 * j + 3]
        x, y, digest = batch[:3]
        assert x.tolist() == bw[want, :1].tolist() and y.tolist() == bw[want, 1:].tolist()
        assert digest == rows_digest(ids[3 * j : 3 * j + 3])
        assert not np.shares_memory(x, bw)
        if with_rows:
            assert batch[3].dtype == np.int64 and batch[3].tolist() == (100 + want).tolist()
        else:
            assert len(batch) == 3


@pytest.mark.parametrize("held", [np.float64, np.float32])
def test_a_chunk_of_columns_fills_the_buffers_whole_rows_in_one_copy(held, monkeypatch):
    """x and y held as columns (an Arrow-family chunk) are copied into the buffer's rows
    in one pass, x's columns then y's (a pass a side wrote every row's cache lines
    twice), with the bits of each side copied on its own."""
    rng = np.random.default_rng(3)
    cols = [rng.standard_normal(40) for _ in range(5)] + [rng.integers(-9, 9, 40).astype(np.int32)]
    chunk = (Columns(cols[:4], 30, 6), Columns(cols[4:], 30, 6), 100)
    calls = []
    real = column_chunk.columns_into

    def counted(c, start, out):
        calls.append((len(c), start, out.shape))
        real(c, start, out)

    monkeypatch.setattr(column_chunk, "columns_into", counted)
    bw, bh = np.full((12, 6), np.nan, dtype=held), np.zeros(12, dtype=np.uint64)
    fill_rows(chunk, 5, 12, bw, bh)
    assert calls == [(6, 11, (12, 6))]  # every column, from row 6 + 5 of theirs
    want = np.stack([c[11:23] for c in cols], axis=1).astype(held)
    assert bw.tobytes() == want.tobytes()
    assert bh.tolist() == list(range(105, 117))


def test_a_chunk_of_columns_at_other_starts_fills_each_side_on_its_own():
    rng = np.random.default_rng(4)
    cols = [rng.standard_normal(40) for _ in range(3)]
    chunk = (Columns(cols[:2], 20, 0), Columns(cols[2:], 20, 7), 0)
    bw, bh = np.empty((20, 3)), np.empty(20, dtype=np.uint64)
    fill_rows(chunk, 0, 20, bw, bh)
    assert bw[:, :2].tolist() == np.stack([c[:20] for c in cols[:2]], axis=1).tolist()
    assert bw[:, 2].tolist() == cols[2][7:27].tolist()
