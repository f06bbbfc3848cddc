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
from laws import check_deterministic, check_epoch, drain_threads, run_threads, wrap_reader

from exactbatch import DataLoader

N = 200_000
THREADS = 8


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
    epoch (laws.check_epoch), in exactly the epoch's batches; over 2 epochs with reset()
    between. (The law matrix runs 4 threads on small data; this is the same law at scale.)"""
    x, y = make_data(N, 2, 1)
    loader = DataLoader(make_source(kind, x, y, tmp_path), batch_size, shuffle=shuffle, seed=9)
    for epoch in range(2):
        got = drain_threads(loader, 2, 1, THREADS)
        check_epoch(
            [got], n=N, batch_size=batch_size, drop_last=False, shuffle=shuffle, ordered=False
        )
        want = reference_batches(x, y, batch_size, epoch, shuffle=shuffle, seed=9)
        assert len(got) == len(want) == len(loader)
        # each thread's batch is one of the epoch's batches, as a whole
        check_deterministic(got, want, ordered=False)
        assert loader.epoch == epoch + 1  # the epoch is over: the next one is pending
        loader.reset()


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
        got[i] = ids(bx[:r])

    run_threads(work, 2)
    assert reader.reads == 2
    assert not barrier.broken
    assert len(got[0]) == len(got[1]) == 16
    assert not set(got[0]) & set(got[1])
    want = reference_batches(x, y, 16, 0, shuffle=True, seed=2)
    assert sorted([got[0], got[1]]) == sorted([want[0], want[1]])
