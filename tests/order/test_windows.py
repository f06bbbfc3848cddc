"""The order of an elastic streamed epoch (exactbatch.order.windows): chunks shuffled,
rows mixed within windows, a pure function of (seed, epoch)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch.order import chunk_order
from exactbatch.order.windows import WindowedOrder, chunk_of_rows


def chunk_stream(chunk_rows, seed, epoch):
    """The stream's rows with its chunks in the epoch's order (empty chunks dropped)."""
    firsts = np.cumsum(chunk_rows) - np.asarray(chunk_rows)
    order = chunk_order(len(chunk_rows), seed=seed, epoch=epoch, shard=0)
    return np.concatenate(
        [np.arange(firsts[c], firsts[c] + chunk_rows[c]) for c in order] + [np.zeros(0, int)]
    )


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
