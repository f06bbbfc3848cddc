"""An epoch's keyed order, mapped a block of positions at a time or sliced from the
whole order computed in the background (exactbatch.batching.random_access_epoch.BlockedOrder):
every path hands out the bijection's rows and their digests, and the blocks are what
saves bijection calls."""

from __future__ import annotations

from concurrent.futures import Future

import numpy as np
import pytest

from exactbatch.batching.random_access_epoch import BlockedOrder
from exactbatch.order import EpochBijection
from exactbatch.order.digest import rows_digest

BLOCK = BlockedOrder.BLOCK


class CountedBijection:
    """The bijection, counting the calls that map positions to rows."""

    def __init__(self, n):
        self.inner, self.n, self.calls = EpochBijection(n, seed=3, epoch=1, shard=0), n, 0

    def rows(self, a, z):
        self.calls += 1
        return self.inner.rows(a, z)


def whole_of(bijection, offset, b, fail=False) -> Future:
    whole = Future()
    if fail:
        whole.set_exception(MemoryError("no room for the whole order"))
    else:
        out = np.empty(bijection.n, dtype=np.int64)
        whole.set_result(BlockedOrder(bijection.inner, offset, np.int64, b).mapped_all(out))
    return whole


@pytest.mark.parametrize("n", [10_000, 2 * BLOCK + 5])
@pytest.mark.parametrize("b", [7, 64, BLOCK + 1])  # over a block: mapped at once
@pytest.mark.parametrize("path", ["blocks", "whole", "whole-failed"])
def test_every_path_hands_out_the_orders_rows_and_their_digests(n, b, path):
    bijection = CountedBijection(n)
    offset = 100
    whole = None if path == "blocks" else whole_of(bijection, offset, b, path == "whole-failed")
    order = BlockedOrder(bijection, offset, np.int64, b)
    if whole is not None:
        order.use_whole(whole)
    want = bijection.inner.rows(0, n).astype(np.int64) + offset
    starts = list(range(0, n, b))
    for a in [*starts, *starts[::-3]]:  # in order, then some again (given back, resumed)
        z = min(a + b, n)
        rows, digest = order.take(a, z)
        np.testing.assert_array_equal(rows, want[a:z])
        assert digest == rows_digest(want[a:z])
    if path == "whole":
        assert bijection.calls == 0  # sliced from the whole order only


@pytest.mark.parametrize("b", [64, 1000])
def test_batches_in_order_map_each_block_once(b):
    """In order, one bijection call per block of positions (blocks start at batch
    boundaries), and a batch taken again from the current block costs none."""
    n = 10_000
    bijection = CountedBijection(n)
    order = BlockedOrder(bijection, 0, np.int64, b)
    order.take(0, b)
    order.take(0, b)
    assert bijection.calls == 1
    for a in range(0, n, b):
        order.take(a, min(a + b, n))
    # blocks at 0, 4096, 8192 (b=64: 64 batches fill a block); at 0, 4000, 8000 (b=1000)
    assert bijection.calls == 3


def _epoch_with_whole_order(n, b, drop_last=False, with_rows=False):
    """A shuffled in-memory epoch whose whole order is computed (claims take runs of it)."""
    import time

    from exactbatch import DataLoader

    x = np.arange(n * 3, dtype=np.float64).reshape(n, 3)
    y = np.arange(n, dtype=np.float64).reshape(n, 1)
    loader = DataLoader((x, y), b, seed=5, drop_last=drop_last, with_rows=with_rows)
    epoch = loader._feed.open_epoch(5, 2, 0)
    for _ in range(500):  # (computed on a background thread)
        if epoch.order.whole is not None:
            return loader, epoch
        time.sleep(0.01)
    raise AssertionError("the whole order was not computed")


@pytest.mark.parametrize("n, b, drop_last", [(1000, 64, False), (1000, 64, True), (64, 64, False)])
@pytest.mark.parametrize("with_rows", [False, True])
def test_a_claim_of_many_batches_takes_the_jobs_one_claim_each_would(n, b, drop_last, with_rows):
    """claim_many over the whole order (RunJob, made a run at a time) gives each batch's
    number, rows, size and digest as job(k) does, reads the same bytes (fill and take,
    row ids included), in groups of any size, the short last batch and one-batch
    claims included."""
    loader, epoch = _epoch_with_whole_order(n, b, drop_last, with_rows)
    jobs: list = []
    for count in (1, 5, 1, 100):
        got: list = []
        epoch.claim_many(got, count)
        assert len(got) == min(count, loader._feed.nbatches - len(jobs))
        jobs += got
    assert [j.k for j in jobs] == list(range(len(loader)))
    d, l = loader.d, loader.l  # noqa: E741
    for job in jobs:
        one = epoch.job(job.k)
        assert type(job).__name__.startswith("Run")
        assert (job.size, job.digest) == (one.size, one.digest)
        assert job.digest == rows_digest(one.rows)
        np.testing.assert_array_equal(job.rows, one.rows)
        bx, by = np.empty((job.size, d)), np.empty((job.size, l))
        job.fill(bx, by)
        for got_part, want_part in zip(job.take(), one.take(), strict=True):
            np.testing.assert_array_equal(got_part, want_part)
        np.testing.assert_array_equal(bx, one.take()[0])
        ids = np.empty(job.size, dtype=np.int64)
        job.fill_rows(ids)
        np.testing.assert_array_equal(ids, one.rows)
    assert len(jobs[0].take()) == (3 if with_rows else 2)
    group = jobs[1:4] or jobs  # consecutive: read as one slice of the whole order
    for job, batch in zip(group, epoch.take_group(group), strict=True):
        for got_part, want_part in zip(batch, epoch.job(job.k).take(), strict=True):
            np.testing.assert_array_equal(got_part, want_part)
    loader.close()
