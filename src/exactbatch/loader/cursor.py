"""The loader's cursor: which epoch, which batches are out, and the ledger.

One claim protocol. Every claim - ``iter()``'s, its prefetch thread's,
``next_into``'s - takes a :class:`Group` of batches under the cursor's
lock, and every batch of a group ends in exactly one of three ways:

* handed out (:meth:`Group.hand`, after its read succeeded): only then does
  it count, in a state and in the ledger;
* given back (:meth:`Cursor.give_back`: a read that raised, an iterator
  closed): claimed again before any later batch;
* dropped, with its epoch, when the cursor moves on (``reset``,
  ``set_epoch``, ``load_state_dict``, a new ``iter()``); once it is closed,
  on record as not handed out (but a read in flight at close that succeeds).

The cursor is in one phase on one frozen start (:mod:`exactbatch.loader.lifecycle`
says each transition's rule); what a state takes of it is
:mod:`exactbatch.loader.standing`'s.

A group's batches are handed out without the lock: a consumer pops the next
one from the group's ``queue`` (a deque: each pop is atomic, so no batch is
popped twice) and, once it has been read, appends it to ``handed``. A state
taken meanwhile (:meth:`Cursor.position`, under the lock) counts the
batches in ``handed`` and takes every other batch of a live group as not
handed out yet, so it never counts a read in flight, and the ledger never
holds a batch that was not handed out. A claim first takes the batches
that other claimants' groups hold ready and have not handed out (an
iterator left mid-epoch, alive or dropped, or ``next_into``'s group), so
that none of them ends the epoch early; the epoch ends, and its ledger is
checked against the rows it promised, when nothing is left to claim and
every group is handed out. Nothing here blocks in a finalizer: a dropped
iterator's groups stay with the cursor until another claim takes them.

:class:`exactbatch.loader.epoch_iterator.EpochIterator` (what ``iter(loader)``
returns) and :meth:`exactbatch.loader.DataLoader.next_into` claim through it.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence

from exactbatch.audit import check_ledger
from exactbatch.feeds.base import Epoch, Feed, Job
from exactbatch.loader.groups import Claim, Group, Holder, Item, Popped, batch_numbers, tally_of
from exactbatch.loader.history import History
from exactbatch.loader.lifecycle import DRAINING, ClosedEpoch, Phase, Start
from exactbatch.loader.standing import Standing
from exactbatch.loader.state import Position
from exactbatch.loader.telemetry import Telemetry
from exactbatch.order.digest import Tally

__all__ = ["Cursor"]

_WAIT = 0.01  # seconds between looks at reads in flight (a claim at the epoch's end, a state)
_CLOSED = "read from a closed DataLoader"


class Cursor(Standing):
    """The position of a loader over ``feed``, and the ledger of its epoch.

    ``phase`` (:class:`~exactbatch.loader.lifecycle.Phase`) and ``start`` (the
    frozen :class:`~exactbatch.loader.lifecycle.Start` its epoch begins from)
    say where it stands; ``current`` is the epoch being handed out (None while
    FRESH, or closed on a start). Its fields are its own: other modules read
    them and change them only through its methods, each a transition of
    :mod:`exactbatch.loader.lifecycle`.
    """

    def __init__(self, feed: Feed, seed: int) -> None:
        self.feed, self.spec = feed, feed.spec
        self.lock = threading.Lock()
        self._changed = threading.Condition(self.lock)  # a group's batches became ready
        self._waiting = 0  # claims (or states) waiting on it
        self.seed = seed
        self.phase = Phase.FRESH
        self.start = Start(0)
        self.current: Epoch | ClosedEpoch | None = None  # (a ClosedEpoch once closed mid-way)
        self.gen = 0  # bumped when the cursor is moved or closed; stale iterators stop
        self._last_rows = 0
        self._handed = Tally()  # the ledger: rows of retired groups (the start's included)
        self._live: list[Group] = []  # groups of this epoch not all handed out yet
        self.history = History()  # the records of the epochs begun, for certify
        self.telemetry = Telemetry()  # reads, waits and steps, for stats()
        self._past = [0, 0, 0]  # rows, batches and epochs this loader handed out before

    @property
    def last_rows(self) -> int:
        return self._last_rows

    @property
    def epoch(self) -> int:
        """The epoch of the start (the one in progress, or pending)."""
        return self.start.epoch

    # -- under the lock ---------------------------------------------------------

    def _begin(self) -> None:
        """FRESH -> EPOCH: open the start's epoch."""
        if self.phase is Phase.CLOSED:
            raise ValueError(_CLOSED)
        s = self.start
        self.current = self.feed.open_epoch(self.seed, s.epoch, s.skip, s.first, s.pending)
        self._handed = s.ledger.copy()
        self.phase = Phase.EPOCH
        self.telemetry.began()

    def _move(self, start: Start, keep: bool = True) -> None:
        """To ``start``, leaving the epoch in progress (on record, cut short, when
        ``keep``: as a state would take it); a closed cursor stays closed."""
        if keep and self.phase is not Phase.BETWEEN:  # (an ended epoch is on record)
            live = self._live_record()
            if live is not None:
                self.history.keep(live)
        self.history.moved()
        if self.current is not None:
            rows, batches = self._handed_here()
            self._past = [self._past[0] + rows, self._past[1] + batches, self._past[2] + 1]
            self.current.close()
        self.start, self.current, self._live, self._handed = start, None, [], Tally()
        if self.phase is not Phase.CLOSED:
            self.phase = Phase.FRESH
        self.gen += 1

    def check_open(self) -> None:
        """``ValueError`` once closed: nothing more is handed out."""
        if self.phase is Phase.CLOSED:
            raise ValueError(_CLOSED)

    def check_gen(self, gen: int | None) -> None:
        self.check_open()
        if gen is not None and gen != self.gen:
            raise RuntimeError(
                "this iterator is stale: a later iter(), reset(), set_epoch() or "
                "load_state_dict() moved the loader on"
            )

    def _claimable(self, gen: int | None) -> Epoch:
        """The epoch to claim from (begun if FRESH), after the generation check."""
        self.check_gen(gen)
        if self.phase is Phase.FRESH:
            self._begin()
        return self._open()

    def _sweep(self) -> None:
        """Retire the groups whose batches are all handed out: into the ledger."""
        kept = []
        for g in self._live:
            if len(g.handed) >= len(g.jobs):  # (g.done(), without the call)
                t = tally_of(g.handed)
                self._handed.add(t.rows, t.digest)
            else:
                kept.append(g)
        self._live = kept

    def _strays(self, group: Group, count: int) -> None:
        """Move into ``group`` up to ``count`` batches that other claimants' groups hold
        ready and have not handed out, oldest first."""
        for g in self._live:
            queue = g.queue
            if not queue or g.owner is group.owner:
                continue
            while queue and len(group.queue) < count:
                try:
                    item = queue.popleft()
                except IndexError:  # its consumer took the last one meanwhile
                    break
                job = item[0]
                del g.jobs[job.k]
                group.jobs[job.k] = job
                group.queue.append(item)
            if len(group.queue) >= count:
                return

    def _claim_locked(self, owner: object, count: int, gen: int | None, ahead: bool) -> Claim:
        """``(group, fresh)``: a new group of up to ``count`` batches - first the strays
        of other claimants, then ``fresh`` jobs claimed now and still to read (the
        group's ``queue`` holds the strays). ``(None, [])`` at the end of the epoch:
        when nothing is left to claim and no batch is being read (one being read may
        yet be given back, or become a stray: the claim waits for it). ``ahead``: a
        prefetch's (a stream's reads ``count``: ``Epoch.claim_many``)."""
        while True:
            epoch = self._claimable(gen)
            if self.phase is Phase.BETWEEN:
                return None, []
            self._sweep()
            group = Group(self, epoch, owner)
            self._strays(group, count)
            fresh: list[Job] = []
            if len(group.queue) < count:
                try:
                    epoch.claim_many(fresh, count - len(group.queue), ahead)
                except BaseException:  # a stream's read failed: those claimed go back too
                    if fresh:
                        epoch.give_back(fresh)
                    self._requeue(group)
                    raise
            if fresh or group.queue:
                group.jobs.update(zip(map(batch_numbers, fresh), fresh, strict=True))
                self._live.append(group)
                return group, fresh
            if not any(g.flying() for g in self._live):
                break
            self._wait()  # a read in flight: it ends in a hand-out or a stray
        self.phase = Phase.DRAINING
        if not self._live:
            self._end()
        return None, []

    def _wait(self) -> None:
        self._waiting += 1
        try:
            self._changed.wait(_WAIT)
        finally:
            self._waiting -= 1

    def _open(self) -> Epoch:
        """``current``, where the caller knows an epoch is open (begun, not closed: a
        claim's, after the generation check)."""
        cur = self.current
        assert cur is not None and not isinstance(cur, ClosedEpoch)
        return cur

    def _held(self) -> Epoch | ClosedEpoch:
        """``current``, where the caller knows an epoch is held (begun, maybe closed)."""
        cur = self.current
        assert cur is not None
        return cur

    def _requeue(self, group: Group) -> None:
        """Strays taken into ``group`` go back to the epoch (claimed again first)."""
        jobs = [item[0] for item in group.queue]
        group.queue.clear()
        if jobs:
            self._held().give_back(jobs)

    def _give_back(self, group: Group, jobs: Sequence[Job]) -> None:
        cur = self.current
        if cur is None or (
            group.epoch is not cur and not (isinstance(cur, ClosedEpoch) and cur.of(group))
        ):
            return  # the cursor moved on: nothing to give to
        for job in jobs:
            group.jobs.pop(job.k, None)
        cur.give_back(jobs)  # (a closed epoch's: on record as not handed out)
        if self.phase in (Phase.DRAINING, Phase.BETWEEN):  # there is a batch to claim
            self.phase = Phase.EPOCH
        self._changed.notify_all()

    def _end(self) -> None:
        """DRAINING -> BETWEEN: check the ledger (once) against the epoch's promise."""
        if self.phase is Phase.BETWEEN:
            return
        self.phase = Phase.BETWEEN
        self.telemetry.ended()
        epoch = self.start.epoch
        if not self.start.verified:  # on record, but not as ended: it cannot be certified
            self.history.keep(self.history.record(self, epoch, self._handed, None))
            return
        shard, promised = self.spec.shard, self._held().promise()
        check_ledger(
            self._handed, promised, epoch=epoch, shard_index=shard.index, num_shards=shard.count
        )
        self.history.keep(self.history.record(self, epoch, self._handed, promised))

    def _land_flights(self) -> None:
        """Dealt: wait while a read in flight stands below a batch handed out (it ends
        handed out, or given back), so that a state's position is a global batch."""
        while self.feed.rule.lands_flights and self.current is not None:
            self._sweep()
            if not self._position()[2] or not any(g.flying() for g in self._live):
                return
            self._wait()

    # -- taking the lock ----------------------------------------------------------

    def claim(
        self,
        owner: object,
        count: int,
        gen: int | None = None,
        ahead: bool = False,
        reuse: Group | None = None,
    ) -> Claim:
        """``(group, fresh)``: up to ``count`` next batches as a new group of ``owner``'s
        (or ``reuse``, its group emptied, refilled where :meth:`_refill` applies);
        ``fresh`` are the jobs claimed now, for the caller to read and then
        :meth:`ready` (or :meth:`give_back`); ``(None, [])`` at the end of the epoch,
        whose ledger is checked once no group has a batch left to hand out; ``ahead``:
        a prefetch's (see :meth:`_claim_locked`)."""
        with self.lock:
            if reuse is not None and reuse.epoch is self.current:
                self.check_gen(gen)
                fresh = self._refill(reuse, count)
                if fresh:
                    return reuse, fresh
            return self._claim_locked(owner, count, gen, ahead)

    def claim_next(self, holder: Holder, count: int) -> Popped | None:
        """``next_into``'s claim: ``(group, item)``, the next ``(job, batch)`` of
        ``holder``'s group (shared by every caller, each popping from its left without
        the lock), after claiming a new group of up to ``count`` when it is empty;
        None at the end of the epoch. A call takes the next batch, whichever thread
        makes it."""
        with self.lock:
            while True:
                group = holder.group
                if group is not None and group.epoch is self.current:
                    if group.queue:
                        try:
                            return group, group.queue.popleft()
                        except IndexError:  # popped on another thread meanwhile
                            continue
                    fresh = self._refill(group, count)
                    if fresh:
                        group.queue.extend([(job, None) for job in fresh])
                        continue
                group, fresh = self._claim_locked(holder, count, None, False)
                if group is None:
                    return None
                group.queue.extend([(job, None) for job in fresh])
                holder.group = group

    def _refill(self, group: Group, count: int) -> list[Job]:
        """A claim where the claimant's group, all handed out, is the only live one (no
        stray, nothing in flight): retired into the ledger (as :meth:`_sweep`), its
        ``fresh`` jobs claimed into it in place (as :meth:`_claim_locked`; cheaper: a
        stream in order claims a batch at a time). None claimed where it does not apply."""
        fresh: list[Job] = []
        live, handed = self._live, group.handed
        if self.phase is not Phase.EPOCH or live != [group] or len(handed) < len(group.jobs):
            return fresh
        epoch = self._open()
        try:
            epoch.claim_many(fresh, count)
        except BaseException:  # a stream's read failed: the group stays as it was
            if fresh:
                epoch.give_back(fresh)
            raise
        if fresh:
            t = tally_of(handed)
            self._handed.add(t.rows, t.digest)
            handed.clear()  # (in place: the compiled hand-outs may hold the lists)
            group.jobs = dict(zip(map(batch_numbers, fresh), fresh, strict=True))
        return fresh

    def ready(self, group: Group, items: Iterable[Item]) -> None:
        """The batches ``items`` (``(job, batch)``) of ``group`` are read: ready to hand out."""
        group.queue.extend(items)
        if self._waiting:  # a claim waits for reads in flight at the epoch's end
            with self.lock:
                self._changed.notify_all()

    def give_back(self, group: Group, jobs: Sequence[Job]) -> None:
        """``jobs`` of ``group`` were claimed and will not be handed out by it (a read that
        raised, an iterator closed): claimed again before any later batch."""
        if jobs:
            with self.lock:
                self._give_back(group, jobs)

    def unpop(self, group: Group, item: Item) -> None:
        """A read of ``item``, popped from ``group``, raised: it is next again - at the
        front of the group its claimant hands out from now (``next_into``'s may have
        moved on) while that group is live, else given back to the epoch (claimed
        again first; a retired group would hand it out uncounted)."""
        with self.lock:
            to = getattr(group.owner, "group", group)  # (an iterator's: its own group)
            if group.epoch is not self.current or not (to is group or to in self._live):
                self._give_back(group, [item[0]])  # (moved on: nothing; closed: on record)
                return
            if to is not group:
                job = item[0]
                to.jobs[job.k] = group.jobs.pop(job.k)
            to.queue.appendleft(item)

    def release(self, groups: Iterable[Group]) -> None:
        """An iterator is closed: the batches its ``groups`` hold ready go back."""
        for group in groups:
            self.give_back(group, _popped(group.queue))

    def hand(self, group: Group, job: Job) -> None:
        """``job`` of ``group`` reached its consumer (:meth:`Group.hand`): it counts now."""
        group.handed.append(job)
        self._last_rows = job.size
        if self.phase is DRAINING and group.done():
            self.settle()  # the epoch's last batches: check the ledger now

    def settle(self) -> None:
        """A group's last batch was handed out after a claim found the epoch drained:
        once every group is, check the ledger."""
        with self.lock:
            self._sweep()
            if self.phase is Phase.DRAINING and not self._live:
                self._end()

    def next_epoch(self) -> int:
        """``iter(loader)``: begin the next epoch (the start's, if FRESH); its
        iterators' generation."""
        with self.lock:
            if self.phase is Phase.CLOSED:
                raise ValueError(_CLOSED)
            if self.phase is Phase.FRESH:
                self.gen += 1
            else:
                self._move(Start(self.start.epoch + 1))
            self._begin()
            return self.gen

    def peek(self) -> None:
        """Read ahead of a stream not read yet, to learn its widths."""
        with self.lock:
            if self.phase in (Phase.FRESH, Phase.CLOSED):
                self._begin()
            cur = self._held()
            assert not isinstance(cur, ClosedEpoch)  # (just begun, or in an epoch)
            cur.peek()

    def rewind(self, seed: int | None = None) -> None:
        """To epoch 0 of ``seed`` (a new history); without one, to the start of the next
        epoch (of the start's own, if FRESH at its very beginning)."""
        with self.lock:
            if seed is not None:
                self.seed = seed
                self._move(Start(0))
                self.history.forget()  # another seed, another run
            else:
                stays = self.current is None and self.start.beginning
                self._move(Start(self.start.epoch + (0 if stays else 1)))

    def set_epoch(self, epoch: int) -> None:
        """To the start of ``epoch``; FRESH on a start of ``epoch`` already (a restored
        state's, say: torch's set_epoch after load_state_dict), it stays there."""
        with self.lock:
            if not (self.current is None and self.start.epoch == epoch):
                self._move(Start(epoch))

    def epoch_now(self) -> int:
        """The epoch in progress, or the one the next ``iter()`` begins when every
        batch of the current one has been handed out."""
        with self.lock:
            self._sweep()
            return self._position()[0]

    def counts(self) -> tuple[dict[str, int], dict[str, int]]:
        """The rows and batches this loader handed out: of the epoch in progress (or the
        last one ended), and of every epoch since it was built."""
        with self.lock:
            self._sweep()
            rows, batches = self._handed_here() if self.current is not None else (0, 0)
            past_rows, past_batches, epochs = self._past
            epoch = {"epoch": self.start.epoch, "rows": rows, "batches": batches}
            run = {"epochs": epochs + (self.current is not None)}
        return epoch, {**run, "rows": past_rows + rows, "batches": past_batches + batches}

    def snapshot(self) -> Position:
        """The :class:`Position` of a state taken now."""
        with self.lock:
            self._land_flights()
            self._sweep()
            return self._state_position()

    def restore(self, pos: Position, claimed: int) -> None:
        """Resume at ``pos`` (see :mod:`exactbatch.loader.state`): ``claimed`` batches of
        the epoch were claimed before (``pos.pending`` of them not handed out)."""
        with self.lock:
            self.seed = pos.seed
            start = Start(
                pos.epoch, claimed, tuple(pos.pending), pos.first, pos.ledger.copy(), pos.verified
            )
            self._move(start, keep=False)  # what came before is the state's: not on record
            self.history.restore(list(pos.history), self.feed, pos)

    def close(self) -> bool:
        """CLOSED: nothing more is claimed, and no batch ready is handed out; the position
        stays (a state taken after it resumes at the same batch, counting a read in
        flight at close that then succeeds); False if already closed."""
        with self.lock:
            if self.phase is Phase.CLOSED:
                return False
            self._sweep()
            cur = self.current
            if self.phase is Phase.BETWEEN:  # on the next epoch's start
                self._move(Start(self.start.epoch + 1), keep=False)
            elif cur is not None:  # its accounting goes on; its batches ready go back
                self.current = ClosedEpoch(cur)
                for g in self._live:
                    self._give_back(g, _popped(g.queue))
            self.phase = Phase.CLOSED
            self.gen += 1
            return True


def _popped(queue: deque[Item]) -> list[Job]:
    """The jobs of every ``(job, batch)`` popped from ``queue`` now (others may pop too)."""
    jobs: list[Job] = []
    while True:
        try:
            jobs.append(queue.popleft()[0])
        except IndexError:
            return jobs
