"""What ``iter(loader)`` returns: one epoch of a loader's cursor, handed out batch by
batch, small batches claimed (and from random access, read) a group at a time,
with prefetch on a thread of its own.

How many batches a group holds is :func:`group_sizes`'s rule; the claims, hand-outs
and give-backs are :class:`exactbatch.cursor.Cursor`'s.
"""

from __future__ import annotations

from collections import deque
from itertools import islice

import numpy as np

from exactbatch.checks import check_int
from exactbatch.cursor import Cursor, Held
from exactbatch.prefetch import Prefetcher

__all__ = ["EpochIterator", "group_sizes"]

# iter() claims small batches up to _GROUP_BATCHES and _GROUP_BYTES at a time (one claim;
# from random access, one gather, one pair of arrays). A prefetch thread reads larger
# groups: each hand-off between threads costs 40-100 us (the waits for the GIL), as much
# as a batch of 1024 rows, so it must carry many batches (bench/bench_groups.py).
_GROUP_BYTES, _GROUP_BATCHES = 512 << 10, 16
_AHEAD_GROUP_BYTES, _AHEAD_GROUP_BATCHES = 4 << 20, 64


def group_sizes(feed) -> tuple[int, int] | None:
    """Batches a group of :class:`EpochIterator`, without and with prefetch (None while
    a stream's widths are unknown). Small batches are claimed a group at a time, under
    one lock, and handed out without it; small random-access batches are read a group
    at a time too: the claim, the two arrays and the call per batch cost as much as a
    small batch's gather."""
    if feed.d is None:
        return None
    per = feed.spec.batch_size * 8 * (feed.d + feed.l)
    if not per:
        return 1, 1
    ahead = max(1, min(_AHEAD_GROUP_BATCHES, _AHEAD_GROUP_BYTES // per))
    return max(1, min(_GROUP_BATCHES, _GROUP_BYTES // per)), ahead


def _read_group(cursor: Cursor, gen: int, count: int, held: Held | None = None):
    """Up to ``count`` next batches claimed under one lock and read with one gather,
    as ``[(job, batch, epoch)]``; None at the end. None counted yet, or with ``held``
    (an iterator's, without prefetch) counted at the claim (:meth:`Cursor.claim_held`).
    A read that raises gives the jobs back."""
    if held is None:
        jobs, owner = cursor.claim_many(gen, count)
    else:
        jobs, owner = cursor.claim_held(gen, count, held)
    if not jobs:
        return None
    try:
        batches = owner.take_group(jobs) if len(jobs) > 1 else [jobs[0].take()]
    except BaseException:
        if held is None:
            cursor.give_back(owner, jobs, counted=False)
        else:
            cursor.unclaim_held(held, jobs)
        raise
    return [(job, batch, owner) for job, batch in zip(jobs, batches, strict=True)]


class EpochIterator:
    """Iterates one epoch of a loader's cursor; an error from the source stays an error.

    (A generator would end silently after raising once; this asks the cursor
    again, which reads the same batch again.) With ``group`` > 1 (see
    :func:`group_sizes`), batches are claimed ``group`` at a time (under one
    lock; from random access, read with one gather into one pair of arrays
    whose views they are) and handed out one by one; each counts (in a state)
    only when handed out. (Without prefetch a group is counted at its claim,
    so that a hand-out takes no lock, and a state subtracts the batches the
    iterator holds.) With prefetch, a background thread claims and reads the next
    batches (in such groups, ``prefetch`` groups ahead; ``group`` 0: sized by
    :func:`group_sizes` once a stream's widths are known); it stops when the
    epoch ends, when the iterator is closed or dropped, or after an error.
    :meth:`peek` reads batches ahead without handing them out. Batches read
    and not handed out, by any of these ways, go back to the cursor, so that
    a later ``next_into`` or iterator hands them out.
    """

    __slots__ = ("__weakref__", "_cursor", "_gen", "_group", "_held", "_prefetcher", "_ready")

    def __init__(self, cursor: Cursor, gen: int, prefetch: int, group: int = 1):
        self._cursor, self._gen, self._group = cursor, gen, group or 1
        self._prefetcher = None
        self._held = None  # without prefetch: the jobs in _ready, counted at their claim
        self._ready = deque()  # (job, batch, epoch) read in a group, not yet handed out
        if prefetch:

            def produce():  # must not hold the iterator: dropping it stops the thread
                if group:
                    return _read_group(cursor, gen, group)
                # A stream not read yet: its groups are sized once its widths are known.
                return _read_group(cursor, gen, (group_sizes(cursor.feed) or (1, 1))[1])

            self._prefetcher = Prefetcher(produce, prefetch)

    def __iter__(self) -> EpochIterator:
        return self

    def __next__(self) -> tuple[np.ndarray, np.ndarray]:
        ready = self._ready
        if not ready:
            if self._prefetcher is None and self._group == 1:  # one claim, counted at once
                job, owner = self._cursor.claim(self._gen)
                if job is None:
                    raise StopIteration
                try:
                    return job.take()
                except BaseException:
                    self._cursor.give_back(owner, [job], counted=True)
                    raise
            if not self._read_more(self._group):
                self.close()
                self._cursor.finish(self._gen)
                raise StopIteration
        job, batch, _ = ready.popleft()
        cursor = self._cursor
        if self._prefetcher is None:  # counted at its claim: handed out without the lock
            if cursor.gen != self._gen:  # a stale iterator: the cursor moved on, and its
                ready.clear()  # jobs with it
                cursor.check_gen(self._gen)
            self._held.jobs.popleft()  # handed out: no longer the iterator's
            cursor.last_rows = job.size
            return batch
        try:
            cursor.hand_out(self._gen, job)
        except BaseException:  # a stale iterator: the cursor moved on, and its jobs
            ready.clear()  # with it
            raise
        return batch

    def peek(self, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The next ``k`` batches (fewer at the epoch's end; ``k`` an int >= 0), read now
        but not handed out: ``next()`` hands them out in this order, the same arrays,
        and each counts (in ``state_dict()``) only then; closing the iterator first
        gives them back to the loader. A read that raises here raises from ``peek``,
        and the batches it did not read are read by the next call."""
        k = check_int("k", k, 0)
        ready = self._ready
        while len(ready) < k and self._read_more(max(self._group, k - len(ready))):
            pass
        return [batch for _, batch, _ in islice(ready, k)]

    def _read_more(self, count: int) -> bool:
        """Read the next group (from the prefetch thread, else ``count`` batches now)
        into ``_ready``; False at the epoch's end."""
        if self._prefetcher is None:
            if self._held is None:
                self._held = Held()
            group = _read_group(self._cursor, self._gen, count, self._held)
        else:
            try:
                group = self._prefetcher.get()
            except BaseException:
                self.close()  # later calls ask the cursor directly
                raise
        if group is None:
            return False
        self._ready.extend(group)
        return True

    def close(self, locked: bool = True) -> None:
        """Stop preparing batches; batches prepared but not taken go back to the cursor."""
        if self._held is not None:  # read without prefetch: counted, maybe not handed out
            self._ready = deque()
            self._cursor.release_held(self._held, locked)
        elif self._ready:  # read in a group, not handed out: claimed again first
            left, self._ready = list(self._ready), deque()
            self._cursor.give_back(left[0][2], [job for job, _, _ in left], counted=False,
                                   locked=locked)
        if self._prefetcher is not None:
            left = [item for group in self._prefetcher.close() for item in group]
            self._prefetcher = None
            if left:  # one generation, one epoch: every item has the same owner
                jobs = [job for job, _, _ in left]
                self._cursor.give_back(left[0][2], jobs, counted=False, locked=locked)

    def __del__(self):
        self.close(locked=False)
