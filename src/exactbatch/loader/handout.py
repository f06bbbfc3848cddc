"""``next_into``'s hand-out of a plain batch in one call (:func:`hand_out`), and the
rest of ``next_into`` (:class:`NextInto`).

The common call of :meth:`DataLoader.next_into <exactbatch.DataLoader.next_into>` -
plain buffers (the loader's dtype, no row ids), a group of ``next_into``'s holder of
the epoch in progress, its next batch one of the epoch's whole order
(:class:`~exactbatch.batching.random_access_epoch.RunJob`, ``batch_size`` rows, not
read yet) - is one call: the buffers checked, the batch popped from the group, read
(``read_run``), handed out as :meth:`Cursor.hand
<exactbatch.loader.cursor.Cursor.hand>` counts it, and the wait recorded
(:func:`~exactbatch.loader.telemetry.waited_on`). In C where the core is compiled
(``_core.into``, which leaves a batch of rows read in Python to the loader's path),
else :class:`HandOut`, its twin step for step: the same pops, the same batches, the
same counts, so a state taken at any point is the same. ``hand(bx, by)`` returns the
rows written; None where it popped nothing (the rest runs: other buffers, no group,
another epoch's, an empty one); or ``(group, item, t0)`` where it popped a batch it
does not hand out (read already, a short one, another kind of job): the rest goes
on with that one.
"""

from __future__ import annotations

from collections.abc import Callable
from time import perf_counter_ns
from typing import Any
from weakref import WeakMethod

import numpy as np

from exactbatch.batching.random_access_epoch import RunJob
from exactbatch.feeds.base import Feed
from exactbatch.kernels import core
from exactbatch.loader.cursor import Cursor
from exactbatch.loader.epoch_iterator import into_count
from exactbatch.loader.groups import Group, Holder, Item
from exactbatch.loader.into import IntoChecks
from exactbatch.loader.lifecycle import DRAINING
from exactbatch.loader.telemetry import Telemetry, waited_on

__all__ = ["HandOut", "Handed", "NextInto", "hand_out"]

Handed = int | tuple[Group, Item, int] | None  # what hand(bx, by) returns


class HandOut:
    """The pure twin of ``_core.into``'s object: :meth:`hand`, step for step."""

    __slots__ = ("at", "checks", "cursor", "hist", "holder", "tel")

    def __init__(
        self,
        checks: IntoChecks,
        holder: Holder,
        cursor: Cursor,
        tel: Telemetry,
        waits: tuple[int, int],
    ) -> None:
        self.checks, self.holder, self.cursor, self.tel = checks, holder, cursor, tel
        self.at, self.hist = waits

    def hand(self, bx: np.ndarray, by: np.ndarray | None) -> Handed:
        """The next batch into ``bx`` and ``by`` (see the module's docstring)."""
        t0 = perf_counter_ns()
        plain = self.checks.plain
        if plain is None or not self.checks.fits(bx, by, *plain):
            return None
        group = self.holder.group
        cursor = self.cursor
        if group is None or group.epoch is not cursor.current:
            return None
        try:
            item = group.queue.popleft()
        except IndexError:  # empty: the loader claims
            return None
        job, batch = item
        if batch is not None or type(job) is not RunJob or job.size != plain[0]:
            return group, item, t0
        run = job.run
        try:
            run.via.read_run(run.rows, job.start, job.size, bx, by)
        except BaseException:
            group.unpop(item)
            raise
        cursor.hand(group, job)
        waited_on(self.tel, t0, self.at, self.hist)
        return job.size


def _none(bx: Any, by: Any) -> Handed:
    return None


def hand_out(
    checks: IntoChecks, holder: Holder, cursor: Cursor, tel: Telemetry, waits: tuple[int, int]
) -> Callable[[Any, Any], Handed]:
    """``next_into``'s ``hand(bx, by)``: the compiled core's where it is in use, else
    :class:`HandOut`'s; from a stream (not elastic), none: its batches, made as they are
    claimed (one at a time in order), are never an epoch's whole order's."""
    spec = cursor.spec
    if cursor.feed.kind == "stream" and not spec.elastic:
        return _none
    compiled = core()
    if compiled is None:
        return HandOut(checks, holder, cursor, tel, waits).hand
    into = compiled.into(checks, holder, cursor, tel, waits, RunJob, DRAINING)
    hand: Callable[[Any, Any], Handed] = into.hand
    return hand


class NextInto:
    """A loader's ``next_into``: ``hand(bx, by)``, its common call in one
    (:func:`hand_out`), and the call of this object, the rest of it in Python: every
    other buffer and batch, a claim, the end of an epoch. ``checks`` are its checks
    of the buffers, ``holder`` its group (claimed a group at a time, shared by every
    caller)."""

    __slots__ = ("checks", "count", "cursor", "feed", "hand", "holder", "sizes", "tel", "waits")

    def __init__(
        self,
        feed: Feed,
        cursor: Cursor,
        sizes: Callable[[], tuple[int, int] | None],
    ) -> None:
        # (a weak reference to the loader's group sizes: nothing here holds the loader,
        # which its last reference closes)
        self.feed, self.cursor, self.sizes = feed, cursor, WeakMethod(sizes)
        self.checks = IntoChecks(feed, cursor.peek)
        self.holder = Holder()
        self.count: int | None = None  # batches a claim takes, once known (into_count)
        tel = self.tel = cursor.telemetry
        # the record of a wait (a read too, or not): Telemetry.waiter's, kept
        self.waits = (tel.waiter(False), tel.waiter(True))
        self.hand = hand_out(self.checks, self.holder, cursor, tel, self.waits[True])

    def __call__(
        self,
        bx: np.ndarray,
        by: np.ndarray | None,
        brows: np.ndarray | None,
        got: tuple[Group, Item, int] | None,
    ) -> int:
        """``next_into(bx, by, brows)`` past :attr:`hand`: from the start (``got``
        None), or with the batch it popped (``(group, item, t0)``: the buffers
        checked)."""
        if got is not None:
            assert by is not None  # (checked)
            return self._fill(bx, by, brows, *got)
        t0 = perf_counter_ns()  # the call is the consumer's wait (stats())
        checks = self.checks
        plain = checks.plain
        fits = plain is not None and brows is None and checks.fits(bx, by, *plain)
        if not fits:
            by = checks.full(bx, by, brows)
            if by is None:  # a stream with no chunk at all: the epoch is over
                return 0
        assert by is not None  # (the check passed: an array)
        # Batches are claimed many at a time (into_count) into one group all callers pop
        # from without the lock (Cursor.claim_next); one counts once its read succeeded.
        cursor = self.cursor
        group = self.holder.group
        popped: Item | None = None
        if group is not None and group.epoch is cursor.current and group.queue:
            try:
                popped = group.queue.popleft()
            except IndexError:  # emptied by another thread since
                pass
        if popped is None:
            count = self.count
            if count is None:  # (until a stream's widths are known: its groups' sizes)
                sizes = self.sizes()  # (the loader's: it calls)
                known = None if sizes is None else sizes()
                count = into_count(known, self.feed.kind)
                if known is not None:
                    self.count = count
            claimed = cursor.claim_next(self.holder, count)
            if claimed is None:
                self.tel.waited(t0)
                return 0
            group, popped = claimed
        assert group is not None  # (an item was popped from it)
        return self._fill(bx, by, brows, group, popped, t0)

    def _fill(
        self,
        bx: np.ndarray,
        by: np.ndarray,
        brows: np.ndarray | None,
        group: Group,
        item: Item,
        t0: int,
    ) -> int:
        """The batch ``item``, popped from ``group``, into the buffers, handed out."""
        job, batch = item
        size = job.size
        try:
            if batch is not None:  # read already, by an iterator left mid-epoch
                bx[:size], by[:size] = batch[0], batch[1]
            elif size == self.checks.b:
                job.fill(bx, by)
            else:
                job.fill(bx[:size], by[:size])
            if brows is not None:  # the ids the ledger digests: the job's own
                job.fill_rows(brows[:size])
        except BaseException:
            group.unpop(item)
            raise
        self.cursor.hand(group, job)
        tel = self.tel  # (the fill: a read of random access; one call in C)
        at, hist = self.waits[batch is None]
        tel.waited_on(tel, t0, at, hist)
        return size
