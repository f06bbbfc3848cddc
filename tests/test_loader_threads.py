"""One DataLoader shared by several threads through next_into.

Laws: concurrent next_into calls each take the next batch - no row is handed
out twice or lost, and the batches are exactly the epoch's batches - and only
the claim of a batch is locked, so reads run in parallel.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import check_rows, ids, make_data, make_source

from exactbatch import DataLoader

N = 200_000
THREADS = 8
TIMEOUT = 60  # seconds: a hang fails the test instead of blocking the run


def run_threads(target, n_threads):
    """Run ``target(i)`` on n threads; re-raise the first exception; fail on a hang."""
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported to the main thread
            errors.append(e)

    threads = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(n_threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(TIMEOUT)
    assert not any(t.is_alive() for t in threads), "threads hung"
    if errors:
        raise errors[0]


def drain_concurrently(loader, n_threads, check_every=0):
    """Every thread calls next_into until it returns 0; returns the batches' row ids."""
    per_thread = [[] for _ in range(n_threads)]
    b, d, l = loader.batch_size, loader.d, loader.l  # noqa: E741

    def work(i):
        bx, by = np.empty((b, d)), np.empty((b, l))
        out = per_thread[i]
        k = 0
        while (r := loader.next_into(bx, by)) > 0:
            if check_every and k % check_every == 0:
                check_rows(bx[:r], by[:r], d, l)
            out.append(ids(bx[:r]))
            k += 1
        # once a thread has seen 0, the epoch is over for everyone
        assert loader.next_into(bx, by) == 0

    run_threads(work, n_threads)
    return [batch for batches in per_thread for batch in batches]


def reference_batches(x, y, b, epoch, **kw):
    loader = DataLoader((x, y), b, **kw)
    loader.set_epoch(epoch)
    return [ids(xb) for xb, _ in loader]


@pytest.mark.parametrize("kind", ["pair", "ndf"])
@pytest.mark.parametrize("batch_size", [1000, 999])  # 999: a partial last batch of 200 rows
@pytest.mark.parametrize("shuffle", [True, False])
def test_eight_threads_share_one_loader_every_row_once_per_epoch(
    tmp_path, kind, batch_size, shuffle
):
    """Eight threads draining one loader with next_into hand out every row exactly once per
    epoch, in exactly the epoch's batches; over 2 epochs with reset() between."""
    x, y = make_data(N, 2, 1)
    loader = DataLoader(make_source(kind, x, y, tmp_path), batch_size, shuffle=shuffle, seed=9)
    for epoch in range(2):
        got = drain_concurrently(loader, THREADS, check_every=7)
        rows = np.concatenate(got)
        assert rows.shape == (N,)
        np.testing.assert_array_equal(np.sort(rows), np.arange(N))
        want = reference_batches(x, y, batch_size, epoch, shuffle=shuffle, seed=9)
        assert len(got) == len(want) == len(loader)
        # each thread's batch is one of the epoch's batches, as a whole, in its order
        assert sorted(map(tuple, got)) == sorted(map(tuple, want))
        assert loader.epoch == epoch
        loader.reset()


@pytest.mark.parametrize("drop_last", [False, True])
def test_threads_over_shards_hand_out_each_shards_rows_once(drop_last):
    """Each of 3 shards drained by 4 threads: across shards every row once (less the tails
    dropped with drop_last, each a partial batch of its own shard)."""
    n, b, S = 30_001, 512, 3  # noqa: N806
    x, y = make_data(n, 2, 0)
    seen = []
    for s in range(S):
        loader = DataLoader(x, b, num_shards=S, shard_index=s, drop_last=drop_last, seed=1)
        got = drain_concurrently(loader, 4)
        assert all(len(r) == b for r in got) or not drop_last
        rows = np.concatenate(got) if got else np.empty(0, dtype=np.int64)
        lo, hi = s * n // S, (s + 1) * n // S
        assert len(np.unique(rows)) == len(rows)
        assert rows.min() >= lo and rows.max() < hi
        want = (hi - lo) // b * b if drop_last else hi - lo
        assert len(rows) == want
        seen.append(rows)
    if not drop_last:
        np.testing.assert_array_equal(np.sort(np.concatenate(seen)), np.arange(n))


class BarrierReader:
    """Wraps a loader's reader: every read waits until ``parties`` reads are under way."""

    def __init__(self, inner, barrier):
        self.inner, self.barrier = inner, barrier
        self.n, self.d, self.l = inner.n, inner.d, inner.l
        self.reads = 0

    def read(self, rows, out_x, out_y):
        self.barrier.wait()  # BrokenBarrierError after the timeout: reads are serialized
        self.reads += 1
        self.inner.read(rows, out_x, out_y)

    def close(self):
        self.inner.close()


def wrap_reader(loader, wrap):
    """Replace the loader's random-access reader by ``wrap(reader)`` before any epoch begins.

    The loader keeps its reader in ``loader._reader``; where a feed object
    between the loader and the reader holds it too, that reference is swapped
    as well, so every batch read goes through the wrapper.
    """
    inner = loader._reader
    assert inner is not None and hasattr(inner, "read")
    wrapped = wrap(inner)
    loader._reader = wrapped
    feed = getattr(loader, "_feed", None)
    if feed is not None and getattr(feed, "reader", None) is inner:
        feed.reader = wrapped
    return wrapped


@pytest.mark.parametrize("kind", ["pair", "ndf"])
def test_only_the_claim_is_locked_reads_run_in_parallel(tmp_path, kind):
    """Two threads in next_into at once are both reading at the same time: a read that waits
    for a second read to start completes (it would deadlock if the read held the lock)."""
    x, y = make_data(64, 2, 1)
    loader = DataLoader(make_source(kind, x, y, tmp_path), 16, shuffle=True, seed=2)
    barrier = threading.Barrier(2, timeout=10)
    reader = wrap_reader(loader, lambda inner: BarrierReader(inner, barrier))
    got = [None, None]

    def work(i):
        bx, by = np.empty((16, 2)), np.empty((16, 1))
        r = loader.next_into(bx, by)
        check_rows(bx[:r], by[:r], 2, 1)
        got[i] = ids(bx[:r]).tolist()

    run_threads(work, 2)
    assert reader.reads == 2
    assert not barrier.broken
    assert len(got[0]) == len(got[1]) == 16
    assert not set(got[0]) & set(got[1])
    want = reference_batches(x, y, 16, 0, shuffle=True, seed=2)
    assert sorted([got[0], got[1]]) == sorted([want[0].tolist(), want[1].tolist()])
