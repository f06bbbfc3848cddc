"""Batches of a streamed epoch: one pass of the source, handed out in order.

A pass is an iterator of groups of ``(x, y, digest)`` batches (lists:
re-batched one at a time, or mixed in a shuffle buffer and gathered many at
a time) and the :class:`PassTally` the ledger keeps of it.
:class:`StreamEpoch` hands its batches out one claim at a time. A pass that
fails (the source raised) is started again at the next claim and replayed
up to the batches already claimed, so a caller that retries gets the batch
that failed, and no other. A batch claimed but not handed out (a failed
copy, or prepared ahead and dropped) is given back and claimed again before
any later batch.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable
from itertools import repeat
from operator import itemgetter
from typing import Any, NamedTuple

import numpy as np

from exactbatch.batching.blocked_order import BlockedOrder
from exactbatch.batching.gather import Group
from exactbatch.batching.padding import PadJob
from exactbatch.batching.returned import Returned
from exactbatch.order.digest import Tally

__all__ = ["PassTally", "StreamEpoch", "StreamJob", "StreamRowsJob", "stream_job"]


class _StreamFields(NamedTuple):
    k: int
    size: int
    x: np.ndarray
    y: np.ndarray
    digest: int


class StreamJob(_StreamFields):
    """One batch of a streamed epoch, already read: batch ``k`` of the pass, ``size``
    rows, as the pass made it, ``(x, y, digest)`` (:class:`StreamRowsJob`: with its row
    ids). A tuple, so that a claim of many batches makes them in one C loop
    (:func:`stream_job`, :meth:`StreamEpoch.claim_many`)."""

    __slots__ = ()
    rows: np.ndarray | None = None

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None:
        out_x[...] = self[2]
        out_y[...] = self[3]

    def fill_rows(self, out: np.ndarray) -> None:
        """The batch's row ids (those its digest is of) into ``out``."""
        out[...] = self.rows

    def take(self) -> tuple[np.ndarray, ...]:
        return self[2], self[3]


class _StreamRowsFields(NamedTuple):
    k: int
    size: int
    x: np.ndarray
    y: np.ndarray
    digest: int
    rows: np.ndarray


class StreamRowsJob(_StreamRowsFields):
    """A :class:`StreamJob` whose batch carries its row ids: ``(x, y, rows)``."""

    __slots__ = ()
    fill = StreamJob.fill
    fill_rows = StreamJob.fill_rows

    def take(self) -> tuple[np.ndarray, ...]:
        return self[2], self[3], self[5]


_new = tuple.__new__
_JOBS: dict[int, type] = {3: StreamJob, 4: StreamRowsJob}  # by the length of a pass's batch
_PLAIN = itemgetter(2, 3)  # a StreamJob's take()
_X = itemgetter(0)  # a pass's batch's x


def stream_job(k: int, batch: tuple[Any, ...]) -> StreamJob | StreamRowsJob:
    """Batch ``k`` of a pass, ``(x, y, digest)`` or ``(x, y, digest, rows)``, as its job."""
    job: StreamJob | StreamRowsJob = _new(_JOBS[len(batch)], (k, len(batch[0]), *batch))
    return job


class PassTally:
    """The ledger's view of one pass: rows fed into the batching, rows drop_last
    dropped, rows even_batches left out. What the pass promises is the first
    less the other two."""

    __slots__ = ("dropped", "fed", "left")

    def __init__(self) -> None:
        self.fed, self.dropped, self.left = Tally(), Tally(), Tally()

    def promise(self) -> Tally:
        return self.fed.minus(self.dropped).minus(self.left)


class StreamEpoch:
    """Hands out the batches of one streamed epoch.

    ``open_pass()`` starts the epoch's pass: ``(batches, tally)``. A pass
    that fails (the source raised) is started again at the next claim and
    replayed up to the batches already claimed, so a caller that retries
    gets the batch that failed, and no other. ``skip`` batches were handed
    out before (a resumed epoch), but for those in ``pending``; ``limit``
    (even_batches) caps the batches handed out, and the rest of the pass
    is read (so the audit and the ledger see it) but not handed out.
    ``too_long`` (``even_batches="pad"``): the batch count is exactly
    ``limit``, padding batches (:class:`~exactbatch.batching.padding.PadJob`)
    after the pass's own, and a pass holding more than ``limit`` batches
    raises ``too_long()`` at the claim past the limit (every claim after).
    """

    order: BlockedOrder | None = None  # a pass has no keyed order of positions

    def __init__(
        self,
        open_pass: Callable[[], tuple[Generator[Group, None, None], PassTally]],
        skip: int,
        limit: int | None = None,
        pending: Iterable[int] = (),
        too_long: Callable[[], BaseException] | None = None,
    ) -> None:
        self._open_pass = open_pass
        self._it, self.tally = open_pass()
        self._limit = limit
        self._too_long = too_long
        self._pending: tuple[Any, Any, int] | None = None
        # the group of batches read last, its batches from _at on not claimed yet
        self._ready: list[tuple[Any, ...]] = []
        self._at = 0
        self._failed = False
        self._ended = False
        self.claimed = 0  # batches of the pass claimed (handed out, prefetched, given back)
        keep = set(pending)
        kept: list[StreamJob | StreamRowsJob | PadJob] = []
        for _ in range(skip):  # resume: replay the batches claimed before, keep the pending
            job = self._claim_next()
            if job is None:
                break
            if job.k in keep:
                kept.append(job)
        self.returned = Returned(kept)

    def _next(self) -> tuple[Any, Any, int] | None:
        """The pass's next batch (None at its end): read, not claimed."""
        if self._ended:
            return None
        if self._failed:  # start the pass again and replay what was claimed
            self._it.close()
            self._it, self.tally = self._open_pass()
            self._failed = False
            self._ready, self._at = [], 0
            for _ in range(self.claimed):
                if self._pull() is None:
                    return None
        return self._pull()

    def _pull(self) -> tuple[Any, Any, int] | None:
        at = self._at
        if at < len(self._ready):
            self._at = at + 1
            return self._ready[at]
        self._ready, self._at = [], 0  # (the group's arrays let go of)
        try:
            group = next(self._it, None)
        except BaseException:
            self._failed = True
            raise
        if group is None:
            self._ended = True
            return None
        self._ready, self._at = group, 1
        return group[0]

    def close(self) -> None:
        """Stop the epoch early: the source's iterator is closed now, not at GC."""
        self._ended = True
        self._pending = None
        self._ready, self._at = [], 0
        self._it.close()

    def exhausted(self) -> bool:
        """Has every batch been claimed (and none given back)? Reads one batch
        ahead to know."""
        if self.returned or self._failed:  # a failed pass is read again at the next claim
            return False
        capped = self._limit is not None and self.claimed >= self._limit
        if capped and self._too_long is None:
            return True
        if self._too_long is not None and not capped:  # padding, if not rows, to come
            return False
        try:
            return self.peek() is None
        except Exception:  # the next claim reads it again, and raises there
            return False

    def peek(self) -> tuple[Any, Any, int] | None:
        if self._pending is None:
            self._pending = self._next()
        return self._pending

    def _drain(self) -> None:
        """even_batches: read the rest of the pass, counted as left out (again: nothing)."""
        while (batch := self.peek()) is not None:
            self._pending = None
            self.tally.left.add(batch[0].shape[0], batch[2])

    def claim(self) -> StreamJob | StreamRowsJob | PadJob | None:
        if self.returned:
            job: StreamJob | StreamRowsJob | PadJob = self.returned.pop(0)
            return job
        return self._claim_next()

    def _claim_next(self) -> StreamJob | StreamRowsJob | PadJob | None:
        """The pass's next batch, not one given back (under "pad", a padding batch
        once the pass has ended)."""
        if self._limit is not None and self.claimed >= self._limit:
            if self._too_long is None:
                self._drain()
            elif self.peek() is not None:
                raise self._too_long()
            return None
        batch, self._pending = self._pending, None  # read ahead by exhausted()
        if batch is None:
            batch = self._next()  # as peek() would, without keeping it pending
            if batch is None:
                if self._too_long is None:
                    return None
                self.claimed += 1
                return PadJob(self.claimed - 1)
        self.claimed += 1
        return stream_job(self.claimed - 1, batch)

    def claim_many(self, jobs: list[Any], count: int, ahead: bool = False) -> None:
        """Claim up to ``count`` next batches into ``jobs`` (fewer at the end): those of
        the group read last are taken at once, without a claim each. A claim reads at
        most one group of the pass, and only when it holds no batch yet: a batch claimed
        is a batch made (its arrays held until it is handed out), so a claim never makes
        more than the pass made at once (DESIGN.md's memory promise; issue 42), and a
        caller wanting more claims again. ``ahead``: batches prepared ahead on request
        (a prefetch group): as many as ``count``, whatever they read."""
        while len(jobs) < count:
            if jobs and not ahead and self._at >= len(self._ready) and self._reads_next():
                return  # the next batch is a read: the next claim's
            ready, at = self._ready, self._at
            # What claim() would do, when no batch is given back, read ahead by
            # exhausted() (_pending: it comes first), to be read again or left out.
            plain = self._pending is None and (self._limit is None or self._too_long)
            room = count - len(jobs)
            if self._limit is not None:  # "pad": never past the limit here
                room = min(room, self._limit - self.claimed)
            if at < len(ready) and plain and room > 0 and not (self.returned or self._failed):
                k, take = self.claimed, min(room, len(ready) - at)
                self.claimed, self._at = k + take, at + take
                # the jobs made in one C loop: (k, size) + batch, as the batch's job class
                batches = ready[at : at + take]
                heads = zip(range(k, k + take), map(len, map(_X, batches)), strict=True)
                fields = map(tuple.__add__, heads, batches)
                jobs.extend(map(_new, repeat(_JOBS[len(batches[0])]), fields))
                continue
            if jobs and room <= 0 and self._too_long is not None and not self.returned:
                return  # at the limit: the batches before it go out, the next claim raises
            job = self.claim()
            if job is None:
                return
            jobs.append(job)

    def _reads_next(self) -> bool:
        """Would the next claim, its group read last spent, read the pass (a batch
        neither given back, read ahead by :meth:`exhausted`, nor padding past the end)?"""
        return not (self.returned or self._pending is not None or self._ended)

    @staticmethod
    def take_group(jobs: list[Any]) -> list[Any]:
        """The batches of ``jobs`` claimed together (read already, as the pass made them)."""
        if set(map(type, jobs)) == {StreamJob}:  # (no padding, no ids): in one C loop
            return list(map(_PLAIN, jobs))
        return [job.take() for job in jobs]

    def give_back(self, jobs: Iterable[Any]) -> None:
        """Jobs claimed but not handed out: claimed again first, in batch order."""
        self.returned.add(jobs)

    def given_back(self) -> list[int]:
        return self.returned.batches()

    def promise(self) -> Tally:
        return self.tally.promise()
