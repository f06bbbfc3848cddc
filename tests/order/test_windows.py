"""The order of an elastic streamed epoch (exactbatch.order.windows): chunks shuffled,
rows mixed within windows, a pure function of (seed, epoch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch.order.windows import WindowedOrder, chunk_of_rows


def chunk_stream(chunk_rows, seed, epoch):
    """The stream's rows with its chunks in the epoch's order, found without the order's
    own chunk_order: windows of one row mix nothing, so that order is the chunks' (each
    checked to be whole, its rows ascending, every chunk with rows once)."""
    n = sum(chunk_rows)
    stream = WindowedOrder(chunk_rows, 1, seed=seed, epoch=epoch).rows(0, n)
    assert np.array_equal(np.sort(stream), np.arange(n))
    at = np.argsort(stream)  # each row's position
    firsts = np.cumsum(chunk_rows) - np.asarray(chunk_rows)
    for f, k in zip(firsts, chunk_rows, strict=True):  # a chunk's rows: one run, in order
        assert (np.diff(at[f : f + k]) == 1).all()
    return stream


@settings(max_examples=60, deadline=None)
@given(
    chunk_rows=st.lists(st.integers(0, 20), min_size=1, max_size=12),
    window=st.integers(1, 50),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 5),
)
def test_every_row_once_and_each_window_mixes_only_its_own_rows(chunk_rows, window, seed, epoch):
    """A bijection of the stream's rows; positions [w*W, (w+1)*W) are exactly the rows of
    that window of the chunk-ordered stream (a row mixes within its window, no further)."""
    order = WindowedOrder(chunk_rows, window, seed=seed, epoch=epoch)
    n = sum(chunk_rows)
    assert order.n == n
    rows = order.rows(0, n)
    assert np.array_equal(np.sort(rows), np.arange(n))
    stream = chunk_stream(chunk_rows, seed, epoch)
    for w in range(order.windows):
        a, z = w * window, min((w + 1) * window, n)
        assert set(rows[a:z].tolist()) == set(stream[a:z].tolist())
        firsts = np.cumsum(chunk_rows) - np.asarray(chunk_rows)
        held = set(chunk_of_rows(firsts, rows[a:z]).tolist())
        assert held == set(order.window_chunks(w).tolist())


def test_the_order_is_a_pure_function_of_the_key_and_epochs_differ():
    rows = [7, 0, 13, 5, 9, 11]
    a = WindowedOrder(rows, 10, seed=3, epoch=1)
    b = WindowedOrder(rows, 10, seed=3, epoch=1)
    pos = np.array([44, 3, 0, 17, 29])
    assert np.array_equal(a(pos), b.rows(0, 45)[pos])
    assert not np.array_equal(a.rows(0, 45), WindowedOrder(rows, 10, seed=3, epoch=2).rows(0, 45))
    assert not np.array_equal(a.rows(0, 45), WindowedOrder(rows, 10, seed=4, epoch=1).rows(0, 45))


def test_a_window_as_large_as_the_stream_is_one_full_shuffle_of_it():
    rows = [30, 30, 30]
    order = WindowedOrder(rows, 90, seed=1, epoch=0).rows(0, 90)
    # rows of every chunk spread over the whole epoch, not in runs of a chunk
    assert len({int(r) // 30 for r in order[:10]}) > 1


def test_positions_out_of_range_are_an_index_error():
    order = WindowedOrder([4, 4], 3, seed=0, epoch=0)
    with pytest.raises(IndexError, match="position 8 is out of range"):
        order(np.array([1, 8]))
    with pytest.raises(IndexError, match="position -1"):
        order(np.array([-1]))


def test_golden_orders_never_change_between_versions():
    """An epoch's order is part of the contract (a state resumes by it, a seed names an
    experiment): these literals (the orders of 2026-12) change only on purpose."""
    from exactbatch.order import chunk_order

    assert chunk_order(6, seed=7, epoch=1).tolist() == [4, 1, 0, 5, 3, 2]
    assert chunk_order(6, seed=7, epoch=2).tolist() == [0, 1, 4, 5, 3, 2]
    order = WindowedOrder([3, 0, 4, 2, 5, 1], 4, seed=7, epoch=1)
    assert order.rows(0, 15).tolist() == [9, 12, 11, 10, 2, 0, 13, 1, 8, 14, 3, 7, 5, 6, 4]
    one = WindowedOrder([3, 0, 4, 2, 5, 1], 1, seed=7, epoch=1)
    assert one.rows(0, 15).tolist() == [9, 10, 11, 12, 13, 0, 1, 2, 14, 7, 8, 3, 4, 5, 6]


def test_each_window_is_mixed_by_a_key_of_its_own():
    """Windows of the same size are permuted differently (each keyed by its number): one
    key for all would move the same places in every window."""
    order = WindowedOrder([8] * 20, 8, seed=1, epoch=0)  # window w: chunk c's rows
    rows = order.rows(0, 160).reshape(20, 8)
    local = rows - rows.min(axis=1, keepdims=True)  # each window's permutation of 0..7
    assert all(sorted(p) == list(range(8)) for p in local.tolist())
    assert len({tuple(p) for p in local.tolist()}) == 20


@pytest.mark.parametrize("window", [1, 7, 40, 1000])
def test_rows_of_a_run_are_the_rows_of_its_positions_mapped_one_by_one(window):
    """rows(start, stop) maps a window's run at once: the rows __call__ gives for
    arange(start, stop), for runs within a window, across windows, empty and whole;
    a run past n is the IndexError __call__ raises."""
    chunk_rows = [13, 0, 40, 7, 25, 1, 30]
    n = sum(chunk_rows)
    order = WindowedOrder(chunk_rows, window, seed=5, epoch=2)
    rng = np.random.default_rng(0)
    runs = [(0, n), (0, 0), (n, n), (3, 4), (n - 1, n), (9, 2)]
    runs += [tuple(sorted(rng.integers(0, n + 1, 2).tolist())) for _ in range(20)]
    for a, z in runs:
        want = order(np.arange(a, max(a, z), dtype=np.int64))
        got = order.rows(a, z)
        assert got.dtype == np.int64 and got.tolist() == want.tolist()
    for a, z in [(0, n + 1), (n, n + 3), (n + 2, n + 5)]:
        with pytest.raises(IndexError, match=f"position {max(a, n)} is out of range"):
            order.rows(a, z)


@settings(max_examples=60, deadline=None)
@given(
    chunk_rows=st.lists(st.integers(0, 20), min_size=1, max_size=10),
    seed=st.integers(0, 2**32),
    cut=st.tuples(st.integers(0, 220), st.integers(0, 220)),
)
def test_unmixed_ranges_are_the_unmixed_rows_one_run_a_chunk(chunk_rows, seed, cut):
    """unmixed_ranges(a, z) is unmixed(arange(a, z)) as runs of consecutive rows, one run
    for each chunk the positions cross, in the epoch's chunk order (none for an empty or
    backward span); those rows, found without the order's code, are the chunk-ordered
    stream's (windows of one row mix nothing)."""
    order = WindowedOrder(chunk_rows, 3, seed=seed, epoch=1)
    n = order.n
    stream = chunk_stream(chunk_rows, seed, 1)
    a, z = sorted(min(c, n) for c in cut)
    runs = order.unmixed_ranges(a, z)
    assert all(type(v) is int for run in runs for v in run)
    got = [r for lo, hi in runs for r in range(lo, hi)]
    assert got == order.unmixed(np.arange(a, z, dtype=np.int64)).tolist()
    assert got == stream[a:z].tolist()
    firsts = np.cumsum(chunk_rows) - np.asarray(chunk_rows)
    held = chunk_of_rows(firsts, np.array(got, dtype=np.int64)).tolist()
    assert [chunk_of_rows(firsts, np.array([lo]))[0] for lo, _ in runs] == list(
        dict.fromkeys(held)
    )  # one run a chunk, in the order the positions meet them
    assert all(hi > lo for lo, hi in runs)
    assert order.unmixed_ranges(z, a) == []  # backward, or empty


def test_unmixed_ranges_of_a_span_inside_one_chunk_and_across_chunks():
    """Golden runs: the chunk order [4, 1, 0, 5, 3, 2] of seed 7, epoch 1 (the golden test
    above) over chunks of 3, 0, 4, 2, 5, 1 rows: chunk 4 (rows 9..13) at positions 0..4,
    chunk 1 (empty), 0 (rows 0..2) at 5..7, 5 (row 14) at 8, 3 (rows 7..8) at 9..10 and
    2 (rows 3..6) at 11..14."""
    order = WindowedOrder([3, 0, 4, 2, 5, 1], 4, seed=7, epoch=1)
    assert order.unmixed_ranges(0, 15) == [(9, 14), (0, 3), (14, 15), (7, 9), (3, 7)]
    assert order.unmixed_ranges(1, 3) == [(10, 12)]
    assert order.unmixed_ranges(4, 9) == [(13, 14), (0, 3), (14, 15)]
    assert order.unmixed_ranges(9, 11) == [(7, 9)]
    assert order.unmixed_ranges(12, 13) == [(4, 5)]
    assert order.unmixed_ranges(13, 15) == [(5, 7)]
    assert order.unmixed_ranges(5, 5) == [] and order.unmixed_ranges(9, 2) == []
