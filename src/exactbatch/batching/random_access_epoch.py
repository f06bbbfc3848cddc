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

from collections.abc import Callable, Iterable, Sequence
from itertools import repeat
from typing import Any, NamedTuple, cast

import numpy as np
from numpy.typing import DTypeLike

from exactbatch.arrays import batch_pair
from exactbatch.batching.blocked_order import BlockedOrder, Positions, Whole
from exactbatch.batching.padding import PadJob
from exactbatch.batching.returned import Returned
from exactbatch.kernels import RunReads, core
from exactbatch.order.digest import RangeDigests, Tally, rows_digest
from exactbatch.sources.protocols import RowReader

__all__ = [
    "BlockedOrder",
    "OrderRun",
    "Positions",
    "RandomAccessEpoch",
    "RandomAccessJob",
    "RowsJob",
    "RunJob",
    "num_batches",
    "row_ids",
    "take_group",
    "Whole",
]


def num_batches(n: int, batch_size: int, drop_last: bool) -> int:
    """Batches in an epoch of ``n`` rows: ceil(n/b), or floor with drop_last."""
    return n // batch_size if drop_last else -(-n // batch_size)


class RandomAccessJob:
    """One claimed batch of a random-access epoch, read when filled."""

    __slots__ = ("digest", "dtype", "k", "reader", "rows", "size")
    with_rows = False  # take() gives (x, y); RowsJob's gives (x, y, rows)

    def __init__(
        self,
        reader: RowReader,
        rows: np.ndarray | slice,
        size: int,
        k: int,
        digest: int,
        dtype: DTypeLike = np.float64,
    ) -> None:
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
    def reader(self) -> RowReader:
        return self.run.reader

    @property
    def dtype(self) -> DTypeLike:
        return self.run.dtype

    @property
    def rows(self) -> np.ndarray:
        return self.run.rows[self.start : self.start + self.size]

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None:
        """The batch into the first ``size`` rows of ``out_x`` and ``out_y`` (one call in
        C where the reader is compiled: no view of the order, no buffer export)."""
        run = self.run
        run.via.read_run(run.rows, self.start, self.size, out_x, out_y)

    def fill_rows(self, out: np.ndarray) -> None:
        out[...] = self.rows

    def take(self) -> tuple[np.ndarray, ...]:
        run = self.run
        batch: tuple[np.ndarray, ...] = run.via.take_run(
            run.rows, self.start, self.size, *run.dtypes
        )
        if self.with_rows:
            return (*batch, row_ids(self.rows))
        return batch


class RunRowsJob(RunJob):
    """A :class:`RunJob` whose batch carries its row ids: ``(x, y, rows)``."""

    __slots__ = ()
    with_rows = True


_new = tuple.__new__


class OrderRun:
    """The whole order of an epoch whose batch k is positions ``k*b .. min(k*b + b, n)``
    (``rows``, and ``digests`` one a batch): its batches claimed as :class:`RunJob` s."""

    __slots__ = (
        "b",
        "digests",
        "dtype",
        "dtypes",
        "job",
        "make",
        "n",
        "reader",
        "rows",
        "via",
        "ydtype",
    )

    def __init__(
        self,
        reader: RowReader,
        rows: np.ndarray,
        digests: memoryview,
        b: int,
        n: int,
        dtype: DTypeLike,
        with_rows: bool,
    ) -> None:
        self.reader, self.rows, self.digests, self.b, self.n = reader, rows, digests, b, n
        self.dtype, self.ydtype = dtype, getattr(reader, "ydtype", None)
        self.job: type[RunJob] = RunRowsJob if with_rows else RunJob
        # A hand-out's read of batch k, into the caller's buffers or a new pair: the
        # reader's read_run and take_run (a memory reader's: in C where it is compiled),
        # or their twins over its read (kernels.RunReads).
        self.via: Any = reader if hasattr(reader, "read_run") else RunReads(reader)
        self.dtypes = (np.dtype(dtype), None if self.ydtype is None else np.dtype(self.ydtype))
        compiled = core()  # a claim's jobs made in one loop in C, where it is in use
        self.make = None if compiled is None else compiled.run_jobs

    def jobs(self, k0: int, k1: int) -> list[RunJob]:
        """The jobs of batches ``k0 .. k1-1`` (``k0 < k1``), made in one C loop (the
        compiled core's ``run_jobs``; this its twin: the same tuples)."""
        b, n = self.b, self.n
        if self.make is not None:
            out: list[RunJob] = self.make(self.job, self, k0, k1, b, n, self.digests)
            return out
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


def row_ids(rows: np.ndarray | slice) -> np.ndarray:
    """``rows`` (a slice, or an array of the order, which may be int32 and shared) as
    a new int64 array of global row ids: the caller's to keep."""
    if isinstance(rows, slice):
        return np.arange(rows.start, rows.stop, dtype=np.int64)
    return np.array(rows, dtype=np.int64)


def take_group(
    jobs: Sequence[RandomAccessJob | RunJob], rows: np.ndarray | slice | None = None
) -> list[tuple[np.ndarray, ...]]:
    """The batches of ``jobs`` (claimed together, of one reader and dtype), read with
    one gather into one pair of new arrays: each batch is a view of them (rows
    ``[a, a + size)``), so a group costs one allocation and one call instead of one
    per batch. ``rows``: the jobs' rows as one array or slice, when the caller has it
    (else they are joined). Jobs ``with_rows`` give ``(x, y, rows)``: the ids are
    the rows just read (and digested), as one new int64 array the batches view."""
    first = jobs[0]
    reader, dtype = first.reader, first.dtype
    if rows is None:
        parts: list[Any] = [job.rows for job in jobs]  # slices, or arrays
        if isinstance(parts[0], slice):  # file order: consecutive batches are one run
            runs = all(b.start == a.stop for a, b in zip(parts, parts[1:], strict=False))
            rows = (
                slice(parts[0].start, parts[-1].stop)
                if runs
                else np.concatenate([np.arange(r.start, r.stop, dtype=np.int64) for r in parts])
            )
        else:
            rows = np.concatenate(parts)
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
    out: list[tuple[np.ndarray, ...]] = []
    a = 0
    for k in sizes:
        out.append(tuple(w[a : a + k] for w in arrays))
        a += k
    return out


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
    ``whole``: file order's whole order with a ``span`` (rows ``offset ..``, and
    its batches' digests, :data:`Whole`), made once by the feed: its batches are
    claimed as a shuffled order's, in one loop (a group of them still read as one
    slice).
    """

    def __init__(
        self,
        reader: RowReader,
        nbatches: int,
        locate: Callable[[int], tuple[int, int]],
        order: BlockedOrder | None,
        offset: int,
        b: int,
        promised: Callable[[RandomAccessEpoch], Tally],
        skip: int = 0,
        pending: Iterable[int] = (),
        dtype: DTypeLike | None = None,
        span: int | None = None,
        ids: np.ndarray | None = None,
        with_rows: bool = False,
        real: int | None = None,
        whole: Whole | None = None,
    ) -> None:
        self.real = nbatches if real is None else min(real, nbatches)
        self._file = whole if order is None else None  # file order's whole order
        self.reader, self.nbatches, self.locate, self.order = reader, nbatches, locate, order
        self.offset, self.b, self.span, self.ids = offset, b, span, ids
        self.dtype = np.dtype(np.float64) if dtype is None else dtype
        self._job: type[RandomAccessJob] = RowsJob if with_rows else RandomAccessJob
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
            job: RandomAccessJob | PadJob = self.returned.pop(0)
            return job
        k = self.claimed
        if k >= self.nbatches:
            return None
        self.claimed = k + 1
        return self.job(k)

    def _whole(self) -> Whole | None:
        """The whole order's ``(rows, digests)`` when batches are runs of it (``span``),
        else None (elastic, file order without ``whole``, or not computed yet)."""
        if self.span is None:
            return None
        if self.order is None:
            return self._file
        return self.order.whole

    def _run(self) -> OrderRun | None:
        """The :class:`OrderRun` of the whole order, once computed (see :meth:`_whole`)."""
        run = self._order_run
        if run is None:
            whole = self._whole()
            if whole is None:
                return None
            rows, digests = whole
            span = cast(int, self.span)  # (a whole order is used only with a span)
            run = self._order_run = OrderRun(
                self.reader, rows, digests, self.b, span, self.dtype, self._job is RowsJob
            )
        return run

    def claim_many(self, jobs: list[Any], count: int, ahead: bool = False) -> None:
        """Claim up to ``count`` next batches into ``jobs`` (fewer at the end; ``ahead``
        changes nothing here: a claim reads nothing)."""
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
            self.locate(k1 - 1)  # (what locating a batch sets off: an elastic read-ahead)
        while len(jobs) < count and (job := self.claim()) is not None:  # padding ("pad")
            jobs.append(job)

    def take_group(self, jobs: list[Any]) -> list[tuple[np.ndarray, ...]]:
        """The batches of ``jobs`` claimed together (see :func:`take_group`); consecutive
        batches of the whole order are read as one slice of it, not joined."""
        whole, k0, m = self._whole(), jobs[0].k, len(jobs)
        if whole is None or [job.k for job in jobs] != list(range(k0, k0 + m)):
            return take_group(jobs)
        b, span = self.b, self.span
        a, z = k0 * b, min(k0 * b + m * b, span)
        if self.order is None:  # file order: one slice of the rows, copied as a run
            return take_group(jobs, slice(self.offset + a, self.offset + z))
        return take_group(jobs, whole[0][a:z])

    def give_back(self, jobs: Iterable[Any]) -> None:
        """Jobs claimed but not handed out: claimed again first, in batch order."""
        self.returned.add(jobs)

    def given_back(self) -> list[int]:
        return self.returned.batches()
