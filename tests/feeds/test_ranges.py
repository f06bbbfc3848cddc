"""The elastic="ranges" dealing (exactbatch.feeds.ranges): a rank's positions, plan and
order, and the promise of every rank's rows."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.order.digest import Tally, rows_digest
from exactbatch.order.windows import WindowedOrder


def _ids(batch):
    return batch[0][:, 0].astype(np.int64)


def _chunks(n, size):
    x = np.arange(float(n)).reshape(n, 1)
    return [x[a : a + size] for a in range(0, n, size)]


def test_a_ranks_positions_and_batches_are_its_share_from_zero():
    """Rank r of 3 over 1000 rows holds positions 0 .. its share (333 or 334), batch k at
    k*b .. (the last one short); positions asked outside them are cut off."""
    for r, size in enumerate([333, 333, 334]):
        loader = DataLoader(np.zeros((1000, 1)), 64, num_shards=3, shard_index=r, elastic="ranges")
        dealing = loader._feed.dealing
        assert dealing.positions(-5, 10**6, ()).tolist() == list(range(size))
        assert dealing.positions(10, 20, ()).dtype == np.int64
        assert dealing.positions(300, 400, ()).tolist() == list(range(300, size))
        plan = dealing.plan(())
        assert plan.locate(0) == (0, 64) and plan.locate(5) == (320, size)
        assert (plan.key, plan.size, plan.span) == (r, size, size)


def test_unshuffled_ranks_hand_out_their_contiguous_shares_in_file_order():
    """No shuffle: rank r's rows are rows [r*n//S, (r+1)*n//S) in order, over a stream's
    chunks and over random access alike."""
    n = 1000
    for source in (_chunks(n, 70), np.arange(float(n)).reshape(n, 1)):
        for r in range(3):
            loader = DataLoader(
                source, 64, num_shards=3, shard_index=r, elastic="ranges", shuffle=False
            )
            got = [i for b in loader for i in _ids(b).tolist()]
            assert got == list(range(r * n // 3, (r + 1) * n // 3))


def test_shuffled_stream_ranks_read_shares_of_the_epochs_chunk_order():
    """Shuffled, one rank over a stream: its rows come window by window of the chunk order
    of WindowedOrder(seed, epoch) (each window's rows those of its positions there)."""
    n, size, window = 1000, 50, 200
    loader = DataLoader(
        _chunks(n, size), 50, elastic="ranges", buffer_size=window, seed=4, num_shards=1
    )
    assert loader.mixing_window == window
    got = np.array([i for b in loader for i in _ids(b).tolist()])
    chunks = WindowedOrder([size] * (n // size), window, seed=4, epoch=0).rows(0, n)
    for w in range(n // window):
        part = slice(w * window, (w + 1) * window)
        assert sorted(got[part].tolist()) == sorted(chunks[part].tolist())
    assert got.tolist() != chunks.tolist()  # (mixed within each window)


def test_a_declared_total_size_of_a_ranges_stream_must_be_its_rows():
    with pytest.raises(ValueError, match="total_size=99"):
        DataLoader(_chunks(100, 10), 8, elastic="ranges", total_size=99)


@pytest.mark.parametrize("drop_last,even", [(False, False), (True, False), (False, True)])
def test_the_global_promise_is_every_ranks_rows(drop_last, even):
    """global_promise: the rows every rank hands out in an epoch (what drop_last leaves of
    each share, and even_batches of the longer ones, left out)."""
    n, b, seed = 1922, 64, 2  # shares of 640, 641 and 641 rows: 10, 11 and 11 batches
    x = np.arange(float(n)).reshape(n, 1)
    kw = {"drop_last": drop_last, "even_batches": even, "seed": seed, "elastic": "ranges"}
    loaders = [DataLoader(x, b, num_shards=3, shard_index=r, **kw) for r in range(3)]
    want = Tally()
    for loader in loaders:
        for batch in loader:
            ids = _ids(batch)
            want.add(len(ids), rows_digest(ids))
    assert want.rows < n if drop_last or even else want.rows == n
    for loader in loaders:
        feed = loader._feed
        got = feed.global_promise(feed.open_epoch(seed, 0, 0), ())
        assert (got.rows, got.digest) == (want.rows, want.digest)
