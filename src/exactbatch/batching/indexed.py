"""Batches of a random-access epoch: consecutive slices of the epoch's order.

Batch k of an epoch over a shard of n rows holds positions
[k*b, min((k+1)*b, n)) of the order; with drop_last the partial tail is
never claimed. Claiming a batch is cheap and done under the loader's lock;
reading it (``Job.fill``) runs outside the lock, so threads read in parallel.
"""

from __future__ import annotations

import numpy as np

__all__ = ["IndexedEpoch", "num_batches"]


def num_batches(n: int, batch_size: int, drop_last: bool) -> int:
    """Batches in an epoch of ``n`` rows: ceil(n/b), or floor with drop_last."""
    return n // batch_size if drop_last else -(-n // batch_size)


class _Job:
    __slots__ = ("reader", "rows", "size")

    def __init__(self, reader, rows, size: int):
        self.reader, self.rows, self.size = reader, rows, size

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None:
        self.reader.read(self.rows, out_x, out_y)


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

    def claim(self) -> _Job | None:
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
        return _Job(self.reader, rows, z - a)
