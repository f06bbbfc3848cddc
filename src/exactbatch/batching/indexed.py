"""Batches of a random-access epoch: consecutive slices of the epoch's order.

Batch k of an epoch over a shard of n rows holds positions
[k*b, min((k+1)*b, n)) of the order; with drop_last the partial tail is
never claimed. Claiming a batch is cheap and done under the loader's lock;
reading it (``Job.fill``) runs outside the lock, so threads read in parallel.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future

import numpy as np

from exactbatch.order import elastic_positions, epoch_permutation, shard_range

__all__ = ["IndexedEpoch", "IndexedFeed", "num_batches"]

_AHEAD_ROWS = 1 << 16  # from this many rows, compute the next epoch's order ahead


def num_batches(n: int, batch_size: int, drop_last: bool) -> int:
    """Batches in an epoch of ``n`` rows: ceil(n/b), or floor with drop_last."""
    return n // batch_size if drop_last else -(-n // batch_size)


class IndexedJob:
    """One claimed batch of a random-access epoch, read when filled."""

    __slots__ = ("reader", "rows", "size")

    def __init__(self, reader, rows, size: int):
        self.reader, self.rows, self.size = reader, rows, size

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None:
        self.reader.read(self.rows, out_x, out_y)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        out_x = np.empty((self.size, self.reader.d), dtype=np.float64)
        out_y = np.empty((self.size, self.reader.l), dtype=np.float64)
        self.fill(out_x, out_y)
        return out_x, out_y


class IndexedEpoch:
    """One epoch of a shard [start, start+n) in ``order`` (None: file order).

    ``order`` holds absolute row numbers. ``claim()`` hands out the next batch
    as a job, or None at the end; ``first`` skips batches already handed out
    (a resumed epoch).
    """

    def __init__(self, reader, start, n, batch_size, nbatches, order, first=0):
        self.reader, self.start, self.n = reader, start, n
        self.batch_size, self.nbatches, self.order = batch_size, nbatches, order
        self.next = first

    def close(self) -> None:
        """Nothing to release: the reader belongs to the feed."""

    def finished(self, handed: int) -> bool:
        """Is the epoch over once ``handed`` batches have been handed out?"""
        return handed >= self.nbatches

    def claim(self) -> IndexedJob | None:
        k = self.next
        if k >= self.nbatches:
            return None
        self.next = k + 1
        a = k * self.batch_size
        z = min(a + self.batch_size, self.n)
        if self.order is None:
            rows = slice(self.start + a, self.start + z)
        else:
            rows = self.order[a:z]
        return IndexedJob(self.reader, rows, z - a)


class IndexedFeed:
    """The random-access path: a reader, one shard of it, and its epoch orders.

    Sharding is contiguous (shard s owns rows [s*n//S, (s+1)*n//S) and
    permutes them), or ``elastic``: one global order per (seed, epoch), cut
    into batches dealt to the shards in turn (see
    :func:`exactbatch.order.elastic_positions`). ``even_batches`` caps every
    shard at the smallest shard's batch count.
    """

    def __init__(
        self,
        reader,
        *,
        batch_size,
        shuffle,
        drop_last,
        num_shards,
        shard_index,
        even_batches=False,
        elastic=False,
    ):
        self.reader = reader
        self.d, self.l = reader.d, reader.l
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.num_shards, self.shard_index = num_shards, shard_index
        self.even_batches, self.elastic = even_batches, elastic
        total = reader.n
        if elastic:
            self.start = 0
            self.total_batches = num_batches(total, batch_size, drop_last)
            self.n = len(self._positions(0))
            full = -(-(self.total_batches - shard_index) // num_shards)
            even = self.total_batches // num_shards
        else:
            self.start, stop = shard_range(total, num_shards, shard_index)
            self.n = stop - self.start
            full = num_batches(self.n, batch_size, drop_last)
            even = num_batches(total // num_shards, batch_size, drop_last)
        self.nbatches = even if even_batches else full
        # (seed, epoch, first global batch) -> Future of that epoch's order: the
        # current epoch's, and the next one's, computed ahead on a short-lived thread
        self._orders: dict[tuple[int, int, int], Future] = {}

    def _positions(self, first: int) -> np.ndarray:
        return elastic_positions(
            self.reader.n,
            self.batch_size,
            self.total_batches,
            self.num_shards,
            self.shard_index,
            first,
        )

    def _compute_order(self, seed: int, epoch: int, first: int):
        if self.elastic:
            rows = self._positions(first)
            if self.shuffle:
                perm = epoch_permutation(self.reader.n, seed=seed, epoch=epoch, shard=0)
                rows = perm[rows]
        elif self.shuffle:
            rows = epoch_permutation(self.n, seed=seed, epoch=epoch, shard=self.shard_index)
            rows += self.start
        else:
            return None  # file order: batches are slices
        # Absolute rows as int32 when they fit: half the memory of int64.
        return rows.astype(np.int32) if self.reader.n < 2**31 else rows

    def _order_future(self, key, background: bool) -> Future:
        fut = self._orders.get(key)
        if fut is None:
            fut = self._orders[key] = Future()

            def work():
                try:
                    fut.set_result(self._compute_order(*key))
                except BaseException as e:  # surfaces in .result()
                    fut.set_exception(e)

            if background:
                threading.Thread(target=work, name="exactbatch-order", daemon=True).start()
            else:
                work()
        return fut

    def _epoch_order(self, seed: int, epoch: int, first: int):
        key, ahead = (seed, epoch, first), (seed, epoch + 1, 0)
        order = self._order_future(key, background=False).result()
        for k in list(self._orders):
            if k not in (key, ahead):
                del self._orders[k]
        if self.shuffle and self.n >= _AHEAD_ROWS:
            # The next epoch's order is ready by the time this one ends;
            # NumPy's shuffle and sort release the GIL, so it runs alongside.
            self._order_future(ahead, background=True)
        return order

    def open_epoch(self, seed: int, epoch: int, skip: int, first: int = 0) -> IndexedEpoch:
        """Epoch ``epoch`` less its first ``skip`` batches; under elastic sharding
        the epoch starts at global batch ``first`` (a resume at another shard count)."""
        order = self._epoch_order(seed, epoch, first)
        if not self.elastic:
            return IndexedEpoch(
                self.reader, self.start, self.n, self.batch_size, self.nbatches, order, skip
            )
        count = num_batches(len(order), self.batch_size, False)
        if self.even_batches:
            count = (self.total_batches - first) // self.num_shards
        return IndexedEpoch(self.reader, 0, len(order), self.batch_size, count, order, skip)

    def close(self) -> None:
        self.reader.close()
