"""What ``iter(loader)`` returns: one epoch of a loader's cursor, handed out batch by
batch, small batches claimed (and from random access, read) a group at a time,
with prefetch on a thread of its own.

How many batches a group holds is :func:`group_sizes`'s rule; the claims, hand-outs
and give-backs are :class:`exactbatch.loader.cursor.Cursor`'s.
"""

from __future__ import annotations

import threading
from collections import deque
from functools import partial
from time import perf_counter_ns
from typing import TYPE_CHECKING, cast

import numpy as np

from exactbatch.batching.padding import masked_group
from exactbatch.batching.random_access_epoch import RunJob
from exactbatch.checks import check_int
from exactbatch.feeds.base import Epoch, Feed, Job
from exactbatch.loader.cursor import Cursor
from exactbatch.loader.groups import Batch, Claims, Group, Item
from exactbatch.loader.iter_step import IterStep, step_base
from exactbatch.loader.lifecycle import DRAINING
from exactbatch.loader.telemetry import profiled
from exactbatch.prefetch import Prefetcher

__all__ = ["EpochIterator", "group_sizes", "into_count"]

# iter() claims small batches up to _GROUP_BATCHES and _GROUP_BYTES at a time (one claim;
# from random access, one gather, one pair of arrays); from a stream, whose claim reads
# its chunks ahead, up to _STREAM_GROUP_BATCHES. A group's claim, arrays and calls cost
# tens of us (at batch 64, about 3 us a batch in groups of 16, 1 us in groups of 64), so
# a group of random access carries up to 64 batches. A prefetch thread reads larger
# groups: each hand-off between threads costs 40-100 us (the waits for the GIL), as much
# as a batch of 1024 rows, so it must carry many batches (bench/bench_groups.py).
_GROUP_BYTES, _GROUP_BATCHES, _STREAM_GROUP_BATCHES = 512 << 10, 64, 16
_AHEAD_GROUP_BYTES, _AHEAD_GROUP_BATCHES = 4 << 20, 64
# Random-access batches read as they are handed out (next_into's; iter()'s too large for
# groups but not for a prefetch group) are claimed _LAZY_BATCHES at a time: a claim's
# fixed cost (tens of us: its lock, its group, the sweep) over many batches, and no
# memory (a claimed batch is a tuple until it is read).
_LAZY_BATCHES = 256


def group_sizes(feed: Feed) -> tuple[int, int] | None:
    """Batches a group of :class:`EpochIterator`, without and with prefetch (None while
    a stream's widths are unknown). Small batches are claimed a group at a time, under
    one lock, and handed out without it; small random-access batches are read a group
    at a time too: the claim, the two arrays and the call per batch cost as much as a
    small batch's gather."""
    d, l = feed.d, feed.l  # noqa: E741
    if d is None or l is None:  # (known together)
        return None
    per = feed.spec.batch_size * 8 * (d + l)
    if not per:
        return 1, 1
    ahead = max(1, min(_AHEAD_GROUP_BATCHES, _AHEAD_GROUP_BYTES // per))
    most = _GROUP_BATCHES
    if feed.kind != "random access":
        most = min(most, _STREAM_GROUP_BATCHES)
    return max(1, min(most, _GROUP_BYTES // per)), ahead


def into_count(sizes: tuple[int, int] | None, kind: str = "random access") -> int:
    """Batches a claim of ``next_into`` takes (its batches are read as handed out): from
    random access (``kind``, the feed's), _LAZY_BATCHES; from a stream, whose claim reads
    its chunks ahead, a group's (``sizes``: :func:`group_sizes`), or a prefetch group's
    where batches are too large for groups: one claim, under the lock, for many."""
    if sizes is None:
        return 1
    if kind == "random access":
        return _LAZY_BATCHES
    return sizes[0] if sizes[0] > 1 else sizes[1]


def _take(cursor: Cursor, epoch: Epoch | None, jobs: list[Job]) -> list[Batch]:
    """The batches of ``jobs`` (claimed together from ``epoch``): read with one gather
    where there are several. Under ``even_batches="pad"`` each is made full, with its
    mask (:func:`~exactbatch.batching.padding.masked`); padding jobs read nothing."""
    spec = cursor.spec
    if not spec.pad:
        return _read(cursor, epoch, jobs)
    b, shape = spec.batch_size, partial(_pad_shape, cursor.feed)
    real = [job for job in jobs if job.size]  # (a PadJob has no rows; every other job has)
    if len(real) == len(jobs):
        return masked_group(_read(cursor, epoch, jobs), b, shape)
    made = iter(_read(cursor, epoch, real) if real else ())
    return masked_group([next(made) if j.size else None for j in jobs], b, shape)


def _read(cursor: Cursor, epoch: Epoch | None, jobs: list[Job]) -> list[Batch]:
    """The batches of ``jobs``, read now: one read of a random-access source (for the
    telemetry; a stream's reads are its chunks'). No padding job is read here, and
    ``epoch`` (None: :meth:`EpochIterator.peek`'s) is read from for several."""
    t0 = perf_counter_ns()
    if len(jobs) > 1:
        assert epoch is not None
        out = epoch.take_group(jobs)
    else:
        one = jobs[0].take()
        assert one is not None
        out = [one]
    if cursor.telemetry.gathers:
        cursor.telemetry.read(t0)
    return out


def _pad_shape(feed: Feed) -> tuple[int, int, np.dtype, np.dtype, bool]:
    """What a padding batch of ``feed`` is made of: d, l, dtype, label dtype, row ids."""
    spec, d, l = feed.spec, feed.d, feed.l  # noqa: E741
    if d is None or l is None:  # a stream that yielded no row: nothing says how wide to pad
        raise ValueError(
            f"even_batches='pad' cannot pad an epoch of a stream that yielded no rows "
            f"(its widths are unknown), though total_size={feed.total_size} promised them"
        )
    ydtype = spec.dtype if spec.output is None else spec.output.ydtype
    return d, l, spec.dtype, ydtype, spec.with_rows


def _read_group(
    cursor: Cursor,
    gen: int,
    count: int,
    owner: object,
    lazy: bool = False,
    ahead: bool = False,
    reuse: Group | None = None,
) -> Group | None:
    """A new :class:`Group` of ``owner``'s with up to ``count`` batches ready to hand
    out: other claimants' ready batches first, then the next batches of the epoch,
    claimed under one lock and read with one gather (``lazy``: each read as it is
    handed out, as ``next_into`` does; ``ahead``: a prefetch's, whose claim of a stream
    reads ``count`` batches, not one group of its pass; ``reuse``: the owner's group, all
    handed out, refilled where it can be: :meth:`Cursor.claim`). None at the end. A read
    that raises gives the fresh batches back (claimed again first)."""
    group, fresh = cursor.claim(owner, count, gen, ahead, reuse)
    if group is None:
        return None
    if lazy:
        cursor.ready(group, [(job, None) for job in fresh])
    elif fresh:
        try:
            batches = _take(cursor, group.epoch, fresh)
        except BaseException:
            cursor.give_back(group, fresh)
            raise
        cursor.ready(group, zip(fresh, batches, strict=True))
    return group


class _Owner:
    """An iterator's identity as a claimant, apart from the iterator: its prefetch
    thread claims for it without holding it (dropping the iterator stops the thread)."""

    __slots__ = ()


# an iterator's group before its first claim: empty, so never handed from
_EMPTY = Group(cast(Claims, None), None, None)


# __next__: the compiled core's where it is in use, else its twin (loader/iter_step.py)
if TYPE_CHECKING:
    _Step = IterStep
else:
    _Step = step_base()


class EpochIterator(_Step):
    """Iterates one epoch of a loader's cursor; an error from the source stays an error.

    (A generator would end silently after raising once; this asks the cursor
    again, which reads the same batch again.) Batches are claimed ``group`` at a
    time (see :func:`group_sizes`; under one lock; from random access, read with
    one gather into one pair of arrays whose views they are) and handed out one
    by one; each counts (in a state, and in the ledger) only when handed out.
    With prefetch, a background thread claims and reads the next groups,
    ``prefetch`` groups ahead (``group`` 0: sized by :func:`group_sizes` once a
    stream's widths are known); it stops when the epoch ends, when the iterator
    is closed or dropped, or after an error. :meth:`peek` reads batches ahead
    without handing them out. Batches read and not handed out go back to the
    cursor when the iterator is closed; an iterator dropped (or left) mid-epoch
    leaves them ready with the cursor, and the next claim (``next_into``'s)
    hands them out first. Threads may share one iterator: each call hands out
    the next batch, and every batch once. ``next()``'s common call is one step,
    its base's (:mod:`exactbatch.loader.iter_step`: in C where the core is
    compiled); the rest is here.
    """

    __slots__ = ("__weakref__", "_ahead", "_group", "_lazy", "_lock", "_owner", "_prefetcher")

    def __init__(self, cursor: Cursor, gen: int, prefetch: int, group: int = 1) -> None:
        # (_current: the group being handed out; _peeked: batches claimed unread, read by peek)
        super().__init__(cursor, gen, _EMPTY, RunJob, DRAINING)
        self._group = group or 1
        # Random-access batches too large to read in groups (a group of one) are claimed
        # _LAZY_BATCHES at a time, each read as it is handed out: one claim for many.
        sizes = None if prefetch or group != 1 else group_sizes(cursor.feed)
        lazy = sizes is not None and sizes[1] > 1 and cursor.feed.kind == "random access"
        self._lazy = _LAZY_BATCHES if lazy else 0
        self._owner = owner = _Owner()
        self._ahead: deque[Group] = deque()  # groups read after it (by peek), in order
        self._lock = threading.Lock()  # taken to change groups, not to hand out
        self._prefetcher: Prefetcher[Group] | None = None
        if prefetch:
            # (produce must not hold the iterator: dropping it stops the thread)
            def produce() -> Group | None:
                if group:
                    return _read_group(cursor, gen, group, owner, ahead=True)
                # A stream not read yet: its groups are sized once its widths are known.
                count = (group_sizes(cursor.feed) or (1, 1))[1]
                return _read_group(cursor, gen, count, owner, ahead=True)

            self._prefetcher = Prefetcher(produce, prefetch)

    def __iter__(self) -> EpochIterator:
        return self

    def _hand(self, group: Group, item: Item) -> Batch:
        """The batch ``item``, popped from ``group``, handed out: read now if it was
        claimed unread (lazily, or by next_into), else as read (with its group, or by
        :meth:`peek`); a stale iterator raises."""
        cursor = self._cursor
        if cursor.gen != self._gen:  # a stale iterator: the cursor moved on, and its
            cursor.check_gen(self._gen)  # batches with it
        job, batch = item
        if batch is None and self._peeked:  # read by peek()
            batch = self._peeked.pop(job.k, None)
        if batch is None:  # claimed unread (lazily, or by next_into): read it now
            t0 = perf_counter_ns()
            plain = not cursor.spec.pad  # (else _take pads it, and counts its read)
            try:
                batch = job.take() if plain else _take(cursor, group.epoch, [job])[0]
            except BaseException:
                cursor.telemetry.waited(t0)
                group.unpop(item)
                raise
            cursor.telemetry.waited(t0, plain)  # (plain: a wait that was a read too)
            assert batch is not None  # (only a padding job takes None, and _take pads it)
        cursor.hand(group, job)
        return batch

    def _waited(self) -> Batch:
        """:meth:`_next_group`, its time the consumer's wait (:mod:`telemetry
        <exactbatch.loader.telemetry>`): the batches of a group are handed out
        without a wait. Under a running torch profiler the wait is a range,
        ``exactbatch.wait``."""
        t0 = perf_counter_ns()
        span = profiled()  # a torch profiler range, when one is recording
        try:
            if span is None:
                return self._next_group()
            with span:
                return self._next_group()
        finally:
            self._cursor.telemetry.waited(t0)

    def _next_group(self) -> Batch:
        """The current group is empty: hand out from the next one (read ahead by
        :meth:`peek`, prefetched, or claimed now); StopIteration at the end."""
        with self._lock:  # threads sharing the iterator change groups one at a time
            while True:
                group = self._current
                try:
                    item = group.queue.popleft()
                except IndexError:
                    pass
                else:
                    return self._hand(group, item)
                if self._ahead:
                    self._current = self._ahead.popleft()
                    continue
                more = self._read_more(self._group, group)
                if more is None:
                    self.close()
                    self._cursor.check_open()  # (read ahead to the end, then closed)
                    raise StopIteration
                self._current = more

    def peek(self, k: int) -> list[tuple[np.ndarray, ...]]:
        """The next ``k`` batches (fewer at the epoch's end; ``k`` an int >= 0), read now
        but not handed out: ``next()`` hands them out in this order, the same arrays,
        and each counts (in ``state_dict()``) only then; closing the iterator first
        gives them back to the loader. A read that raises here raises from ``peek``,
        and the batches it did not read are read by the next call."""
        k = check_int("k", k, 0)
        with self._lock:
            while True:
                items = [it for g in (self._current, *self._ahead) for it in list(g.queue)]
                if len(items) >= k:
                    break
                group = self._read_more(max(self._group, k - len(items)))
                if group is None:
                    break
                self._ahead.append(group)
            out = []
            for job, batch in items[:k]:
                if batch is None:  # claimed unread: read now, and handed out as read
                    batch = self._peeked.get(job.k)
                    if batch is None:
                        batch = self._peeked[job.k] = _take(self._cursor, None, [job])[0]
                out.append(batch)
            return out

    def _read_more(self, count: int, reuse: Group | None = None) -> Group | None:
        """The next group (from the prefetch thread, else ``count`` batches read now, into
        ``reuse``, the group just emptied, where it can be); None at the epoch's end."""
        if self._prefetcher is None:
            if self._lazy > 1:
                count = max(count, self._lazy)
            lazy, owner = self._lazy > 1, self._owner
            return _read_group(self._cursor, self._gen, count, owner, lazy, False, reuse)
        self._cursor.telemetry.asked(self._prefetcher.ready())
        try:
            return self._prefetcher.get()
        except BaseException:
            self.close()  # later calls ask the cursor directly
            raise

    def _groups(self) -> list[Group]:
        groups = [self._current, *self._ahead]
        self._current, self._ahead, self._peeked = _EMPTY, deque(), {}
        return [g for g in groups if g is not _EMPTY]

    def close(self) -> None:
        """Stop preparing batches; batches prepared but not taken go back to the cursor."""
        groups = self._groups()
        if self._prefetcher is not None:
            groups += self._prefetcher.close()
            self._prefetcher = None
        self._cursor.release(groups)

    def __del__(self) -> None:
        # No lock and no join here (the collector may run this on a thread that holds
        # the cursor's lock): stop the prefetch thread, and leave the groups' ready
        # batches with the cursor, where the next claim takes them.
        prefetcher = self._prefetcher
        if prefetcher is not None:
            prefetcher.stop()
