"""Batches of a random-access epoch: consecutive slices of the epoch's order.

Batch k of an epoch over a shard of n rows holds positions
[k*b, min((k+1)*b, n)) of the order; with drop_last the partial tail is
never claimed. Claiming a batch is cheap and done under the loader's lock;
reading it (``RandomAccessJob.fill``) runs outside the lock, so threads read in parallel.

Each job carries its batch number and the ledger digest of its rows
(:mod:`exactbatch.order.digest`), looked up, not computed, on the hot path: from
the digests of a whole order's batches (computed with the order, on its
background thread), of a block of positions, or in closed form for file
order. A batch whose read failed, or that was prepared but never handed
out, is given back and claimed again before any later batch.
"""

from __future__ import annotations

from concurrent.futures import Future
from itertools import repeat
from typing import Any, NamedTuple

import numpy as np

from exactbatch.arrays import batch_pair
from exactbatch.batching.padding import PadJob
from exactbatch.batching.returned import Returned
from exactbatch.order.digest import RangeDigests, Tally, batch_digests, rows_digest

__all__ = [
    "BlockedOrder",
    "OrderRun",
    "RandomAccessEpoch",
    "RandomAccessJob",
    "RowsJob",
    "RunJob",
    "num_batches",
    "row_ids",
    "take_group",
]


def num_batches(n: int, batch_size: int, drop_last: bool) -> int:
    """Batches in an epoch of ``n`` rows: ceil(n/b), or floor with drop_last."""
    return n // batch_size if drop_last else -(-n // batch_size)


class RandomAccessJob:
    """One claimed batch of a random-access epoch, read when filled."""

    __slots__ = ("digest", "dtype", "k", "reader", "rows", "size")
    with_rows = False  # take() gives (x, y); RowsJob's gives (x, y, rows)

    def __init__(self, reader, rows, size: int, k: int, digest: int, dtype=np.float64):
        self.reader, self.rows, self.size = reader, rows, size
        self.k, self.digest, self.dtype = k, digest, dtype

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None:
        self.reader.read(self.rows, out_x, out_y)

    def fill_rows(self, out: np.ndarray) -> None:
        """The batch's row ids (those its digest is of) into ``out`` (``size`` of them)."""
        out[...] = row_ids(self.rows)

    def take(self) -> tuple[np.ndarray, ...]:
        reader = self.reader
        ydtype = getattr(reader, "ydtype", None)  # (an OutputReader's labels)
        out_x, out_y = batch_pair(self.size, reader.d, reader.l, self.dtype, ydtype)
        reader.read(self.rows, out_x, out_y)
        return out_x, out_y


class RowsJob(RandomAccessJob):
    """A :class:`RandomAccessJob` whose batch carries its row ids: ``(x, y, rows)``."""

    __slots__ = ()
    with_rows = True

    def take(self) -> tuple[np.ndarray, ...]:
        return (*super().take(), row_ids(self.rows))


class _RunFields(NamedTuple):
    run: OrderRun
    k: int
    size: int
    digest: int
    start: int  # k*b: the batch's first position in the order


class RunJob(_RunFields):
    """Batch ``k`` of an epoch's whole order (an :class:`OrderRun`, ``run``): what a
    :class:`RandomAccessJob` is, made for a claim of many batches at C speed (a tuple,
    made without a call per batch) and holding no view of its rows until one is read
    alone (``rows``: positions ``start .. start + size`` of the order, ``start = k*b``)."""

    __slots__ = ()
    with_rows = False

    @property
    def reader(self):
        return self.run.reader

    @property
    def dtype(self):
        return self.run.dtype

    @property
    def rows(self) -> np.ndarray:
        return self.run.rows[self.start : self.start + self.size]

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None:
        run, a = self.run, self.start  # (rows, written out: this runs a batch)
        run.reader.read(run.rows[a : a + self.size], out_x, out_y)

    def fill_rows(self, out: np.ndarray) -> None:
        out[...] = self.rows

    def take(self) -> tuple[np.ndarray, ...]:
        run = self.run
        reader = run.reader
        out_x, out_y = batch_pair(self.size, reader.d, reader.l, run.dtype, run.ydtype)
        reader.read(self.rows, out_x, out_y)
        if self.with_rows:
            return out_x, out_y, row_ids(self.rows)
        return out_x, out_y


class RunRowsJob(RunJob):
    """A :class:`RunJob` whose batch carries its row ids: ``(x, y, rows)``."""

    __slots__ = ()
    with_rows = True


_new = tuple.__new__


class OrderRun:
    """The whole order of an epoch whose batch k is positions ``k*b .. min(k*b + b, n)``
    (``rows``, and ``digests`` one a batch): its batches claimed as :class:`RunJob` s."""

    __slots__ = ("b", "digests", "dtype", "job", "n", "reader", "rows", "ydtype")

    def __init__(self, reader, rows, digests, b: int, n: int, dtype, with_rows: bool):
        self.reader, self.rows, self.digests, self.b, self.n = reader, rows, digests, b, n
        self.dtype, self.ydtype = dtype, getattr(reader, "ydtype", None)
        self.job = RunRowsJob if with_rows else RunJob

    def jobs(self, k0: int, k1: int) -> list:
        """The jobs of batches ``k0 .. k1-1`` (``k0 < k1``), made in one C loop."""
        b, n = self.b, self.n
        full = min(k1, n // b)  # batches k0 .. full-1 hold b rows
        out = list(
            map(
                _new,
                repeat(self.job),
                zip(
                    repeat(self),
                    range(k0, full),
                    repeat(b),
                    self.digests[k0:full].tolist(),
                    range(k0 * b, full * b, b),
                ),
            )
        )
        for k in range(max(k0, full), k1):  # the short last batch
            out.append(_new(self.job, (self, k, n - k * b, self.digests[k], k * b)))
        return out


def row_ids(rows) -> np.ndarray:
    """``rows`` (a slice, or an array of the order, which may be int32 and shared) as
    a new int64 array of global row ids: the caller's to keep."""
    if isinstance(rows, slice):
        return np.arange(rows.start, rows.stop, dtype=np.int64)
    return np.array(rows, dtype=np.int64)


def take_group(jobs: list[RandomAccessJob], rows=None) -> list[tuple[np.ndarray, ...]]:
    """The batches of ``jobs`` (claimed together, of one reader and dtype), read with
    one gather into one pair of new arrays: each batch is a view of them (rows
    ``[a, a + size)``), so a group costs one allocation and one call instead of one
    per batch. ``rows``: the jobs' rows as one array or slice, when the caller has it
    (else they are joined). Jobs ``with_rows`` give ``(x, y, rows)``: the ids are
    the rows just read (and digested), as one new int64 array the batches view."""
    first = jobs[0]
    reader, dtype = first.reader, first.dtype
    if rows is None:
        rows = [job.rows for job in jobs]
        if isinstance(rows[0], slice):  # file order: consecutive batches are one run
            runs = all(b.start == a.stop for a, b in zip(rows, rows[1:], strict=False))
            rows = (
                slice(rows[0].start, rows[-1].stop)
                if runs
                else np.concatenate([np.arange(r.start, r.stop, dtype=np.int64) for r in rows])
            )
        else:
            rows = np.concatenate(rows)
    sizes = [job.size for job in jobs]
    m, size, total = len(sizes), sizes[0], sum(sizes)
    gx, gy = batch_pair(total, reader.d, reader.l, dtype, getattr(reader, "ydtype", None))
    reader.read(rows, gx, gy)
    if first.with_rows:
        return _split(sizes, gx, gy, row_ids(rows))
    if sizes.count(size) == m:  # batches of one size: the views in one reshape each
        gx, gy = gx.reshape(m, size, reader.d), gy.reshape(m, size, reader.l)
        return list(zip(gx, gy, strict=True))
    return _split(sizes, gx, gy)


def _split(sizes: list[int], *arrays: np.ndarray) -> list[tuple[np.ndarray, ...]]:
    """Views of ``arrays``' rows, ``sizes[0]`` rows, then ``sizes[1]``, ...: one
    tuple of views a batch."""
    out, a = [], 0
    for k in sizes:
        out.append(tuple(w[a : a + k] for w in arrays))
        a += k
    return out


class BlockedOrder:
    """Rows of an epoch's keyed order, computed a block of positions at a time.

    A bijection call has a fixed cost, so positions are mapped ``BLOCK`` at a
    time and batches sliced out of the block; memory is one block, whatever n.
    Once the Future given to :meth:`use_whole` (the entire order and its
    batches' digests, computed on a background thread for moderate n) is
    done, batches are sliced from it instead: the same rows, without the
    per-batch cost. Blocks start at batch boundaries, so a block's batch
    digests are computed with it. ``ids`` (a subset of the source,
    ``DataLoader(rows=)``): positions map to subset positions, and those to
    the source's row ids through it, so rows and digests are the source's.
    Not thread-safe: used under the loader's lock (but for the reference
    :meth:`use_whole`'s callback sets).
    """

    BLOCK = 4096

    def __init__(self, bijection, offset: int, dtype, batch_size: int, ids=None):
        self.bijection, self.offset, self.dtype = bijection, offset, dtype
        self.batch_size, self.ids = batch_size, ids
        self._whole = None  # the whole order's (rows, digests), set by use_whole's callback
        self._lo = self._hi = 0
        self._rows: Any = None
        self._digests: Any = None

    def take(self, a: int, z: int) -> tuple[np.ndarray, int]:
        """The rows at positions ``a .. z-1`` (``a`` a batch boundary) and their digest."""
        done = self._whole
        if done is not None:
            rows, digests = done
            return rows[a:z], digests[a // self.batch_size]
        if z - a >= self.BLOCK:
            rows = self.mapped(a, z)
            return rows, rows_digest(rows)
        if not (self._lo <= a and z <= self._hi):
            self._lo, self._hi = a, min(a + self.BLOCK, self.bijection.n)
            self._rows = self.mapped(self._lo, self._hi)
            self._digests = batch_digests(self._rows, self.batch_size).data
        lo = self._lo
        return self._rows[a - lo : z - lo], self._digests[(a - lo) // self.batch_size]

    @property
    def whole(self):
        """The whole order's ``(rows, digests)`` (one digest a batch) once computed, else
        None."""
        return self._whole

    def use_whole(self, whole: Future) -> None:
        """Slice batches from ``whole``'s result once it is done (had it failed, the
        blocks still work). The future's thread sets it: no Future call per batch, and
        a reference is set atomically, so the loader's lock need not be held."""

        def done(fut: Future) -> None:
            if fut.exception() is None:
                self._whole = fut.result()

        whole.add_done_callback(done)

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
        return out, digests.data

    def mapped(self, a: int, z: int) -> np.ndarray:
        rows = self.bijection.rows(a, z).astype(self.dtype, copy=False)
        if self.offset:
            rows += self.offset
        if self.ids is not None:  # subset positions to the source's row ids
            return self.ids.take(rows)
        return rows


class RandomAccessEpoch:
    """One epoch of a random-access shard: batch k is positions ``locate(k)``.

    ``order`` maps positions to absolute rows (a :class:`BlockedOrder`), or
    is None for file order, where position p is row ``offset + p`` and
    batches are slices. ``claim()`` hands out the next batch as a job, or
    None at the end: first the batches given back (:meth:`give_back`), then
    batch ``claimed``, ``claimed + 1``... ``skip`` batches are already handed
    out (a resumed epoch) but for those in ``pending``, which come first.
    ``promised(epoch)`` is the ledger's promise: the rows this shard's epoch
    hands out, less the batches before ``skip`` of an elastic resume. Batches
    taken whole (``iter()``) are new arrays of ``dtype`` (float64 unless told).
    ``span``: the shard's rows when batch k is positions ``k*b .. min(k*b + b,
    span)`` (contiguous sharding; None under elastic): consecutive batches are
    then one run of the order, and once the whole order is computed a group of
    them is claimed in one loop and read as one slice of it. ``ids``: a
    subset's row ids (``DataLoader(rows=)``); file order's batches are then
    slices of it (views), their rows the source's. ``real``: the batches that hold
    rows (None: all ``nbatches``); batches ``real ..`` are padding
    (:class:`~exactbatch.batching.padding.PadJob`, ``even_batches="pad"``).
    """

    def __init__(
        self,
        reader,
        nbatches,
        locate,
        order,
        offset,
        b,
        promised,
        skip=0,
        pending=(),
        dtype=None,
        span=None,
        ids=None,
        with_rows=False,
        real=None,
    ):
        self.real = nbatches if real is None else min(real, nbatches)
        self.reader, self.nbatches, self.locate, self.order = reader, nbatches, locate, order
        self.offset, self.b, self.span, self.ids = offset, b, span, ids
        self.dtype = np.dtype(np.float64) if dtype is None else dtype
        self._job = RowsJob if with_rows else RandomAccessJob
        self._digest = RangeDigests(b)
        self._promised = promised
        self._order_run: OrderRun | None = None  # see _run
        self.claimed = skip
        self.returned = Returned(self.job(k) for k in pending)

    def close(self) -> None:
        """Nothing to release: the reader belongs to the feed."""

    def peek(self) -> None:
        """Nothing to read ahead: a random-access epoch knows its widths."""

    def exhausted(self) -> bool:
        """Has every batch been claimed (and none given back)?"""
        return self.claimed >= self.nbatches and not self.returned

    def promise(self) -> Tally:
        return self._promised(self)

    def job(self, k: int) -> RandomAccessJob | PadJob:
        if k >= self.real:
            return PadJob(k)
        a, z = self.locate(k)
        if self.order is None and self.ids is not None:  # a subset in its own order
            rows = self.ids[self.offset + a : self.offset + z]
            return self._job(self.reader, rows, z - a, k, rows_digest(rows), self.dtype)
        if self.order is None:
            start = self.offset + a
            return self._job(
                self.reader,
                slice(start, self.offset + z),
                z - a,
                k,
                self._digest(start, self.offset + z),
                self.dtype,
            )
        rows, digest = self.order.take(a, z)
        return self._job(self.reader, rows, z - a, k, digest, self.dtype)

    def claim(self) -> RandomAccessJob | PadJob | None:
        if self.returned:
            return self.returned.pop(0)
        k = self.claimed
        if k >= self.nbatches:
            return None
        self.claimed = k + 1
        return self.job(k)

    def _whole(self):
        """The whole order's ``(rows, digests)`` when batches are runs of it (``span``),
        else None (elastic, file order, or not computed yet)."""
        if self.span is None or self.order is None:
            return None
        return self.order.whole

    def _run(self) -> OrderRun | None:
        """The :class:`OrderRun` of the whole order, once computed (see :meth:`_whole`)."""
        run = self._order_run
        if run is None:
            whole = self._whole()
            if whole is None:
                return None
            rows, digests = whole
            run = self._order_run = OrderRun(
                self.reader, rows, digests, self.b, self.span, self.dtype, self._job is RowsJob
            )
        return run

    def claim_many(self, jobs: list, count: int) -> None:
        """Claim up to ``count`` next batches into ``jobs`` (fewer at the end)."""
        run = None if self.returned else self._run()
        if run is None:
            while len(jobs) < count and (job := self.claim()) is not None:
                jobs.append(job)
            return
        # What claim() does for each batch, a run at a time: for small batches its
        # calls, and a view of each batch's rows, cost as much as the gather.
        k0 = self.claimed
        k1 = self.claimed = max(k0, min(self.real, k0 + count - len(jobs)))
        if k1 > k0:
            jobs += run.jobs(k0, k1)
        while len(jobs) < count and (job := self.claim()) is not None:  # padding ("pad")
            jobs.append(job)

    def take_group(self, jobs) -> list[tuple[np.ndarray, ...]]:
        """The batches of ``jobs`` claimed together (see :func:`take_group`); consecutive
        batches of the whole order are read as one slice of it, not joined."""
        whole, k0, m = self._whole(), jobs[0].k, len(jobs)
        if whole is None or [job.k for job in jobs] != list(range(k0, k0 + m)):
            return take_group(jobs)
        b = self.b
        return take_group(jobs, whole[0][k0 * b : min(k0 * b + m * b, self.span)])

    def give_back(self, jobs) -> None:
        """Jobs claimed but not handed out: claimed again first, in batch order."""
        self.returned.add(jobs)

    def given_back(self) -> list[int]:
        return self.returned.batches()
