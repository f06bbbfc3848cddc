"""Batches of a random-access epoch: consecutive slices of the epoch's order.

Batch k of an epoch over a shard of n rows holds positions
[k*b, min((k+1)*b, n)) of the order; with drop_last the partial tail is
never claimed. Claiming a batch is cheap and done under the loader's lock;
reading it (``IndexedJob.fill``) runs outside the lock, so threads read in parallel.

Each job carries its batch number and the ledger digest of its rows
(:mod:`exactbatch.audit`), looked up, not computed, on the hot path: from
the digests of a whole order's batches (computed with the order, on its
background thread), of a block of positions, or in closed form for file
order. A batch whose read failed, or that was prepared but never handed
out, is given back and claimed again before any later batch.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future
from functools import partial

import numpy as np

from exactbatch.order import EpochBijection, elastic_share, shard_range
from exactbatch.order.digest import RangeDigests, Tally, batch_digests, rows_digest

__all__ = ["BlockedOrder", "IndexedEpoch", "IndexedFeed", "num_batches"]

# Up to this many rows an epoch's whole order (4 bytes a row) is computed
# ahead on a background thread, so batches slice it instead of mapping
# positions; beyond it, memory stays O(1).
_WHOLE_ROWS = 1 << 24


def num_batches(n: int, batch_size: int, drop_last: bool) -> int:
    """Batches in an epoch of ``n`` rows: ceil(n/b), or floor with drop_last."""
    return n // batch_size if drop_last else -(-n // batch_size)


class IndexedJob:
    """One claimed batch of a random-access epoch, read when filled."""

    __slots__ = ("digest", "k", "reader", "rows", "size")

    def __init__(self, reader, rows, size: int, k: int, digest: int):
        self.reader, self.rows, self.size = reader, rows, size
        self.k, self.digest = k, digest

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None:
        self.reader.read(self.rows, out_x, out_y)

    def take(self) -> tuple[np.ndarray, np.ndarray]:
        out_x = np.empty((self.size, self.reader.d), dtype=np.float64)
        out_y = np.empty((self.size, self.reader.l), dtype=np.float64)
        self.fill(out_x, out_y)
        return out_x, out_y


class BlockedOrder:
    """Rows of an epoch's keyed order, computed a block of positions at a time.

    A bijection call has a fixed cost, so positions are mapped ``BLOCK`` at a
    time and batches sliced out of the block; memory is one block, whatever n.
    When ``whole`` (a Future of the entire order and its batches' digests,
    computed on a background thread for moderate n) is ready, batches are
    sliced from it instead: the same rows, without the per-batch cost. Blocks
    start at batch boundaries, so a block's batch digests are computed with
    it. Not thread-safe: used under the loader's lock.
    """

    BLOCK = 4096

    def __init__(self, bijection, offset: int, dtype, batch_size: int, whole: Future | None = None):
        self.bijection, self.offset, self.dtype = bijection, offset, dtype
        self.batch_size = batch_size
        self.whole = whole
        self._lo = self._hi = 0
        self._rows = self._digests = None

    def take(self, a: int, z: int) -> tuple[np.ndarray, int]:
        """The rows at positions ``a .. z-1`` (``a`` a batch boundary) and their digest."""
        whole = self.whole
        if whole is not None and whole.done() and whole.exception() is None:
            rows, digests = whole.result()  # (had it failed, the blocks below still work)
            return rows[a:z], digests[a // self.batch_size]
        if z - a >= self.BLOCK:
            rows = self.mapped(a, z)
            return rows, rows_digest(rows)
        if not (self._lo <= a and z <= self._hi):
            self._lo, self._hi = a, min(a + self.BLOCK, self.bijection.n)
            self._rows = self.mapped(self._lo, self._hi)
            self._digests = memoryview(batch_digests(self._rows, self.batch_size))
        lo = self._lo
        return self._rows[a - lo : z - lo], self._digests[(a - lo) // self.batch_size]

    def mapped_all(self, out: np.ndarray):
        """The whole order, mapped block by block into ``out``, and its batches'
        digests: the temporaries stay one block small (a background thread's large
        temporaries would stay in its malloc arena after it ends)."""
        b = self.batch_size
        step = max(1, 2 * self.BLOCK // b) * b  # whole batches per step
        digests = np.empty(-(-len(out) // b), dtype=np.uint64)
        for a in range(0, len(out), step):
            z = min(a + step, len(out))
            out[a:z] = self.mapped(a, z)
            digests[a // b : -(-z // b)] = batch_digests(out[a:z], b)
        return out, memoryview(digests)

    def mapped(self, a: int, z: int) -> np.ndarray:
        rows = self.bijection.rows(a, z).astype(self.dtype, copy=False)
        if self.offset:
            rows += self.offset
        return rows


def _in_background(compute) -> Future:
    fut: Future = Future()

    def work():
        try:
            fut.set_result(compute())
        except BaseException as e:  # surfaces only if someone asks for .result()
            fut.set_exception(e)

    threading.Thread(target=work, name="exactbatch-order", daemon=True).start()
    return fut


class IndexedEpoch:
    """One epoch of a random-access shard: batch k is positions ``locate(k)``.

    ``order`` maps positions to absolute rows (a :class:`BlockedOrder`), or
    is None for file order, where position p is row ``offset + p`` and
    batches are slices. ``claim()`` hands out the next batch as a job, or
    None at the end: first the batches given back (:meth:`give_back`), then
    batch ``claimed``, ``claimed + 1``... ``skip`` batches are already handed
    out (a resumed epoch) but for those in ``pending``, which come first.
    ``promised`` is the ledger's promise: the rows this shard's epoch hands
    out, less the batches before ``skip`` of an elastic resume.
    """

    def __init__(self, reader, nbatches, locate, order, offset, b, promised, skip=0, pending=()):
        self.reader, self.nbatches, self.locate, self.order = reader, nbatches, locate, order
        self.offset = offset
        self._digest = RangeDigests(b)
        self._promised = promised
        self.claimed = skip
        self.returned = deque(self.job(k) for k in sorted(pending))

    def close(self) -> None:
        """Nothing to release: the reader belongs to the feed."""

    def exhausted(self) -> bool:
        """Has every batch been claimed (and none given back)?"""
        return self.claimed >= self.nbatches and not self.returned

    def promise(self) -> Tally:
        return self._promised()

    def job(self, k: int) -> IndexedJob:
        a, z = self.locate(k)
        if self.order is None:
            start = self.offset + a
            return IndexedJob(self.reader, slice(start, self.offset + z), z - a, k,
                              self._digest(start, self.offset + z))
        rows, digest = self.order.take(a, z)
        return IndexedJob(self.reader, rows, z - a, k, digest)

    def claim(self) -> IndexedJob | None:
        if self.returned:
            return self.returned.popleft()
        k = self.claimed
        if k >= self.nbatches:
            return None
        self.claimed = k + 1
        return self.job(k)

    def give_back(self, jobs) -> None:
        """Jobs claimed but not handed out: claimed again first, in batch order."""
        self.returned.extend(jobs)
        self.returned = deque(sorted(self.returned, key=lambda j: j.k))

    def given_back(self) -> list[int]:
        return [j.k for j in self.returned]


class IndexedFeed:
    """The random-access path: a reader, one shard of it, and its epoch orders.

    Sharding is contiguous (shard s owns rows [s*n//S, (s+1)*n//S) and
    permutes them), or ``elastic``: one global order per (seed, epoch), cut
    into batches dealt to the shards in turn (see
    :func:`exactbatch.order.elastic_share`). ``even_batches`` caps every
    shard at the smallest shard's batch count. Orders are keyed bijections
    (:class:`exactbatch.order.EpochBijection`): nothing of size n is stored.
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
        # Row numbers as int32 when they fit: half the bytes to move per batch.
        self._dtype = np.int32 if total < 2**31 else np.int64
        if elastic:
            self.start = 0
            self.total_batches = num_batches(total, batch_size, drop_last)
            full, self.n = elastic_share(
                total, batch_size, self.total_batches, num_shards, shard_index
            )
            even = self.total_batches // num_shards
        else:
            self.start, stop = shard_range(total, num_shards, shard_index)
            self.n = stop - self.start
            full = num_batches(self.n, batch_size, drop_last)
            even = num_batches(total // num_shards, batch_size, drop_last)
        self.nbatches = even if even_batches else full
        self._wholes: dict[tuple[int, int, int], Future] = {}  # see _whole_order

    def open_epoch(
        self, seed: int, epoch: int, skip: int, first: int = 0, pending=()
    ) -> IndexedEpoch:
        """Epoch ``epoch`` less its first ``skip`` batches (but those in ``pending``);
        under elastic sharding the epoch starts at global batch ``first`` (a resume
        at another shard count)."""
        b, total, s, shards = self.batch_size, self.reader.n, self.shard_index, self.num_shards
        if self.elastic:  # one global order, its batches dealt to the shards in turn
            key_shard, size, offset = 0, total, 0
            count, _ = elastic_share(total, b, self.total_batches, shards, s, first)
            if self.even_batches:
                count = (self.total_batches - first) // shards

            def locate(k):
                a = (first + s + k * shards) * b
                return a, min(a + b, total)

        else:  # the shard's own order of its rows start .. start + n
            key_shard, size, offset, count = s, self.n, self.start, self.nbatches

            def locate(k, n=self.n):
                return k * b, min(k * b + b, n)

        order = None
        if self.shuffle:
            order = BlockedOrder(
                self._bijection(seed, epoch, key_shard, size), offset, self._dtype, b
            )
            if size <= _WHOLE_ROWS:
                order.whole = self._whole_order(seed, epoch, key_shard, size, offset)
        epoch_ = IndexedEpoch(self.reader, count, locate, order, offset, b, None, skip, pending)
        epoch_._promised = partial(self._promise, epoch_, count, first)
        return epoch_

    def _promise(self, epoch: IndexedEpoch, count: int, first: int) -> Tally:
        """The rows an epoch of ``count`` batches promises: the shard's rows less
        the tail that drop_last or even_batches leave out (contiguous sharding), or
        the global batches dealt to this shard from batch ``first`` on (elastic)."""
        promised = Tally()
        b = self.batch_size
        if self.elastic:
            total, shards = self.reader.n, self.num_shards
            step = max(1, (1 << 20) // b)  # batches per group: temporaries stay small
            for k0 in range(0, count, step):
                g = first + self.shard_index + np.arange(k0, min(count, k0 + step)) * shards
                pos = (g[:, None] * b + np.arange(b)).ravel()
                pos = pos[pos < total]
                rows = pos if epoch.order is None else epoch.order.bijection(pos)
                promised.add(len(rows), rows_digest(rows))
            return promised
        promised.add_range(self.start, self.start + self.n)
        kept = min(self.n, count * b)
        if kept < self.n:
            left = Tally()
            if epoch.order is None:
                left.add_range(self.start + kept, self.start + self.n)
            else:
                rows = epoch.order.mapped(kept, self.n)
                left.add(len(rows), rows_digest(rows))
            promised = promised.minus(left)
        return promised

    @staticmethod
    def _bijection(seed, epoch, key_shard, size):
        return EpochBijection(size, seed=seed, epoch=epoch, shard=key_shard)

    def _whole_order(self, seed, epoch, key_shard, size, offset) -> Future:
        """This epoch's whole order, and the next epoch's, computed in the background
        (the keyed bijection releases the GIL); batches use blocks until it is ready."""
        wanted = {}
        for e in (epoch, epoch + 1):
            key = (seed, e, key_shard)
            fut = self._wholes.get(key)
            if fut is None:
                bijection = self._bijection(seed, e, key_shard, size)
                blocked = BlockedOrder(bijection, offset, self._dtype, self.batch_size)
                out = np.empty(size, dtype=self._dtype)  # allocated here, not in the thread
                fut = _in_background(partial(blocked.mapped_all, out))
            wanted[key] = fut
        self._wholes = wanted
        return wanted[(seed, epoch, key_shard)]

    def close(self) -> None:
        self.reader.close()
