"""Where a loader's time goes: reads, waits, prefetch and steps, counted as they happen.

:class:`Telemetry` is a loader's (its cursor's): the read paths record each read
of the source, the consumer's calls the time they waited for a batch, and
:meth:`Telemetry.step` the consumer's steps; :meth:`Telemetry.report` turns the
counts into :meth:`exactbatch.DataLoader.stats`'s dict. Rows and batches are not
counted here: they are the cursor's ledger's, exact whatever the threads.

Each thread records into a slot of its own (a list of ints, found through a
``threading.local``), so no lock is taken and no count is lost when several
threads call ``next_into`` at once; a report sums the slots. Read latencies go
into a histogram of 8 buckets per power of two (a percentile is the middle of
its bucket: within 6% of the true one). A report while other threads record may
miss their last read or wait (never a row: rows are the ledger's).
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from time import perf_counter_ns
from typing import Any, Protocol, TypeVar

import numpy as np

from exactbatch.feeds.base import Feed
from exactbatch.kernels import core

__all__ = ["Reports", "Telemetry", "check_progress", "percentile_ns", "profiled"]

# A slot: these counters, then the latency histogram (bucket of ns: see _bucket). A wait
# that was a read too (a gather under next_into) is counted once, in _BOTH_NS: the waits
# are _WAIT_NS + _BOTH_NS, the reads' time _READ_NS + _BOTH_NS, and the reads the
# histogram's count (one add a wait instead of four: next_into records every call).
_WAIT_NS, _READ_NS, _BOTH_NS, _ASKED, _READY, _EMPTY, _STEPS, _STEP_NS, _STALL_NS = range(9)
_HIST = 9
_BUCKETS = 64 * 8
_SLOT = _HIST + _BUCKETS
_NEVER = 1 << 62  # no report due: a time perf_counter_ns never reaches

R = TypeVar("R")
Stats = dict[str, Any]  # stats(): plain data (docs/usage/telemetry.md)
Progress = Callable[[Stats], object]


def _bucket(ns: int) -> int:
    """The histogram bucket of ``ns``: its power of two, and the 3 bits below the top."""
    b = ns.bit_length()
    return ns if b <= 4 else ((b - 3) << 3) | ((ns >> (b - 4)) & 7)


# _bucket of every ns below _TABLE, as bytes (each under 256): a read of a batch indexes
# it, where the formula costs a few hundred ns of Python arithmetic
_TABLE = 1 << 16


def _bucket_table() -> bytes:
    """:func:`_bucket` of 0 .. _TABLE - 1, computed a power of two at a time in NumPy."""
    out = np.arange(_TABLE, dtype=np.int64)  # below 16: ns itself
    for b in range(5, _TABLE.bit_length()):  # ns of bit_length b: [2**(b-1), 2**b)
        ns = out[1 << (b - 1) : 1 << b]
        ns[:] = ((b - 3) << 3) | ((ns >> (b - 4)) & 7)
    return out.astype(np.uint8).tobytes()


_BUCKET_OF = _bucket_table()


def _count(slot: list[int], t0: int, at: int, hist: int) -> int:
    """Now (``perf_counter_ns``): ``slot[at]`` grows by the ns since ``t0``, and with
    ``hist`` >= 0 that wait's histogram bucket by one. The pure twin of the compiled
    core's ``waited`` (one call in C a wait)."""
    now = perf_counter_ns()
    ns = now - t0
    slot[at] += ns
    if hist >= 0:
        slot[hist + (_BUCKET_OF[ns] if ns < _TABLE else _bucket(ns))] += 1
    return now


def waited_on(tel: Telemetry, t0: int, at: int, hist: int) -> None:
    """:func:`_count` into the calling thread's slot of ``tel``, then ``tel``'s report
    when one is due: a wait of ``next_into`` (:meth:`Telemetry.waiter` picks the slot's
    ``at`` and ``hist``). The pure twin of the compiled core's ``waited_on`` (one call
    in C a batch)."""
    try:
        s = tel._local.slot
    except AttributeError:
        s = tel._slot()
    now = tel._count(s, t0, at, hist)
    if now >= tel._due:
        tel._report_now(now)


def _low(i: int) -> int:
    """The least ns of bucket ``i`` (:func:`_bucket`'s inverse)."""
    if i < 16:
        return i
    b, f = (i >> 3) + 3, i & 7
    return (8 | f) << (b - 4)


def profiled() -> AbstractContextManager[object] | None:
    """A ``torch.profiler.record_function("exactbatch.wait")`` range to wrap a wait in,
    when torch is imported already and its profiler is on; else None (torch is never
    imported here)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.autograd.profiler._is_profiler_enabled:
            return None
        span: AbstractContextManager[object] = torch.profiler.record_function("exactbatch.wait")
        return span
    except AttributeError:  # a torch without them
        return None


def check_progress(progress: object, every: object) -> float:
    """``progress`` a callable or None, ``every`` seconds > 0: its float."""
    if progress is not None and not callable(progress):
        raise TypeError(
            f"progress must be a callable taking the stats dict, or None; got {progress!r}"
        )
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not every > 0:
        raise ValueError(f"progress_every must be a number of seconds > 0; got {every!r}")
    return float(every)


def percentile_ns(hist: np.ndarray, q: float) -> float | None:
    """The ``q``-th percentile (0..100) of the latencies counted in ``hist`` (middle of
    its bucket, in ns); None when nothing was counted."""
    total = int(hist.sum())
    if not total:
        return None
    rank = max(1, -(-total * q // 100))  # the nearest-rank percentile
    i = int(np.searchsorted(np.cumsum(hist), rank))
    lo, hi = _low(i), _low(i + 1)
    return (lo + hi - 1) / 2 if i >= 16 else float(lo)


class Telemetry:
    """One loader's counters (module docs). ``gathers``: do reads happen where the
    batches are gathered (random access), rather than as a stream's chunk reads?"""

    def __init__(self, gathers: bool = True) -> None:
        self.gathers = gathers
        compiled = core()  # a wait's count: one call in C, or its twin
        self._count = _count if compiled is None else compiled.waited
        self.waited_on = waited_on if compiled is None else compiled.waited_on
        self._local = threading.local()
        self._slots: list[list[int]] = []  # every thread's slot (appended: atomic)
        self._steps = [0] * _SLOT  # step()'s counts, under _lock
        self._lock = threading.Lock()  # step(), and reports
        self._mark: tuple[int, int] | None = None  # last step's (time, waits so far)
        self._base = np.zeros(_SLOT, dtype=np.int64)  # the counts when the epoch began
        self._progress: Progress | None = None  # see report_to
        self._report: weakref.WeakMethod[Callable[[], Stats]] | None = None
        self._every = _NEVER
        self._due = _NEVER  # when progress is called next (0: at the next record)

    # -- recording (any thread) -----------------------------------------------

    def _slot(self) -> list[int]:
        """This thread's slot (made at its first record)."""
        try:
            slot: list[int] = self._local.slot
            return slot
        except AttributeError:
            slot = self._local.slot = [0] * _SLOT
            self._slots.append(slot)
            return slot

    def read(self, t0: int) -> None:
        """A read of the source that began at ``t0`` (``perf_counter_ns``) ended now."""
        ns = perf_counter_ns() - t0
        s = self._slot()
        s[_READ_NS] += ns
        s[_HIST + (_BUCKET_OF[ns] if ns < _TABLE else _bucket(ns))] += 1

    def timed(self, read: Callable[..., R]) -> Callable[..., R]:
        """``read``, each call recorded as a read of the source (a stream's chunks)."""

        def timed_read(*args: Any) -> R:
            t0 = perf_counter_ns()
            out = read(*args)
            self.read(t0)
            return out

        return timed_read

    def waited(self, t0: int, read: bool = False) -> None:
        """The consumer waited from ``t0`` until now for a batch (``read``: reading it
        itself, a read of the source too); calls ``progress`` when a report is due."""
        at, hist = self.waiter(read)
        self.waited_on(self, t0, at, hist)

    def waiter(self, read: bool) -> tuple[int, int]:
        """``(at, hist)`` of a wait (``read``: that was a read too) for ``waited_on(tel,
        t0, at, hist)``: where a caller that records a wait a batch (``next_into``) keeps
        them, so that each record is one call (in C where the core is compiled)."""
        if read and self.gathers:  # a wait and a read (see _BOTH_NS)
            return _BOTH_NS, _HIST
        return _WAIT_NS, -1

    def asked(self, ready: int) -> None:
        """The consumer asked the prefetch thread for a group; ``ready`` were waiting."""
        s = self._slot()
        s[_ASKED] += 1
        s[_READY] += ready
        s[_EMPTY] += not ready

    # -- steps and epochs -----------------------------------------------------

    def step(self) -> None:
        """A training step ended: the time since the last mark is a step, and the waits
        in it its stall."""
        with self._lock:
            now = perf_counter_ns()
            waits = sum(s[_WAIT_NS] + s[_BOTH_NS] for s in list(self._slots))
            if self._mark is not None:
                t, w = self._mark
                steps = self._steps
                steps[_STEPS] += 1
                steps[_STEP_NS] += now - t
                steps[_STALL_NS] += waits - w
            self._mark = (now, waits)

    def began(self) -> None:
        """An epoch began (under the cursor's lock): its counts start from here."""
        self._base = self._totals()

    def ended(self) -> None:
        """An epoch's last batch was handed out: report at the next record."""
        if self._progress is not None:
            self._due = 0

    def _totals(self) -> np.ndarray:
        slots = list(self._slots)
        rows = np.array([*slots, self._steps], dtype=np.int64) if slots else None
        return rows.sum(axis=0) if rows is not None else np.array(self._steps, dtype=np.int64)

    # -- reports ----------------------------------------------------------------

    def report_to(
        self, progress: Progress | None, every: float, report: Callable[[], Stats]
    ) -> None:
        """Call ``progress(report())`` at each epoch's end and every ``every`` seconds
        (checked as the consumer waits: at least once a group of batches)."""
        # the loader's report is held weakly: the loader owns the cursor that owns this,
        # and a read-ahead thread holding the cursor must not keep the loader (and with it
        # the thread) alive once the user drops it
        self._progress, self._every = progress, int(min(every, 1e9) * 1e9)
        self._report = None if progress is None else weakref.WeakMethod(report)
        self._due = perf_counter_ns() + self._every

    def _report_now(self, now: int) -> None:
        if not self._lock.acquire(blocking=False):  # another thread is reporting
            return
        try:
            self._due = now + self._every
        finally:
            self._lock.release()
        report = None if self._report is None else self._report()
        if self._progress is not None and report is not None:
            self._progress(report())

    def report(self, epoch: Stats, run: Stats, row_bytes: int, prefetch: int) -> Stats:
        """:meth:`exactbatch.DataLoader.stats`'s dict: ``epoch`` and ``run`` (the
        ledger's counts of each, ``rows`` and ``batches``) with their bytes (``row_bytes``
        a row) and timings added."""
        with self._lock:
            total = self._totals()
        base = self._base
        for counts in (epoch, run):
            counts["bytes"] = counts["rows"] * row_bytes
        return {
            "epoch": {**epoch, **_timings(total - base)},
            "run": {**run, **_timings(total)},
            "prefetch": prefetch,
        }


def _timings(c: np.ndarray) -> Stats:
    hist = c[_HIST:]
    reads, asked, steps = int(hist.sum()), int(c[_ASKED]), int(c[_STEPS])
    both = int(c[_BOTH_NS])
    lat = {f"p{q}": percentile_ns(hist, q) for q in (50, 90, 99)}
    return {
        "reads": reads,
        "read_s": (int(c[_READ_NS]) + both) / 1e9,
        "read_latency_s": {k: None if v is None else v / 1e9 for k, v in lat.items()},
        "wait_s": (int(c[_WAIT_NS]) + both) / 1e9,
        "prefetch_asked": asked,
        "prefetch_ready_mean": int(c[_READY]) / asked if asked else None,
        "prefetch_empty": int(c[_EMPTY]),
        "steps": steps,
        "step_s": int(c[_STEP_NS]) / 1e9,
        "stall_fraction": int(c[_STALL_NS]) / int(c[_STEP_NS]) if c[_STEP_NS] > 0 else None,
    }


class Counted(Protocol):
    """The cursor, as the telemetry reads it (:class:`exactbatch.loader.cursor.Cursor`,
    whose module imports this one)."""

    @property
    def telemetry(self) -> Telemetry: ...

    def counts(self) -> tuple[Stats, Stats]: ...


class Reports:
    """The loader's telemetry methods (:class:`exactbatch.DataLoader`'s own fields)."""

    _cursor: Counted  # (the loader's Cursor)
    _feed: Feed
    _telemetry: Telemetry
    dtype: np.dtype
    label_dtype: np.dtype
    with_rows: bool
    prefetch: int

    def _watch(self, progress: Progress | None, every: float) -> Telemetry:
        """The cursor's telemetry, timing the feed's reads and calling ``progress``."""
        tel = self._cursor.telemetry
        tel.gathers = not self._feed.time_reads(tel.timed)
        tel.report_to(progress, every, self.stats)
        return tel

    def stats(self) -> Stats:
        """Where the time goes (docs/usage/telemetry.md): rows, bytes and batches handed
        out, the source's reads and their latency, the consumer's waits, prefetch and
        steps; of the epoch in progress or last ended (``"epoch"``) and since the loader
        was built (``"run"``). Rows, batches and bytes are exact (the ledger's, whatever
        the threads); timings are as measured. Not part of a state."""
        d, l = self._feed.d or 0, self._feed.l or 0  # noqa: E741 (a stream's: once read)
        row = d * self.dtype.itemsize + l * self.label_dtype.itemsize
        row += 8 * self.with_rows  # the ids, an int64 a row
        epoch, run = self._cursor.counts()
        return self._telemetry.report(epoch, run, row, self.prefetch)

    def step(self) -> None:
        """Mark the end of a training step (and the start of the next): ``stats()``'s
        ``stall_fraction`` is the share of the time between marks spent waiting for
        batches (docs/usage/telemetry.md)."""
        self._telemetry.step()
