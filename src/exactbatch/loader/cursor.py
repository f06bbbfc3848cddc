"""The loader's cursor: which epoch, which batches are out, and the ledger.

One claim protocol. Every claim - ``iter()``'s, its prefetch thread's,
``next_into``'s - takes a :class:`Group` of batches under the cursor's
lock, and every batch of a group ends in exactly one of three ways:

* handed out (:meth:`Group.hand`, after its read succeeded): only then does
  it count, in a state and in the ledger;
* given back (:meth:`Cursor.give_back`: a read that raised, an iterator
  closed): claimed again before any later batch;
* dropped, with its epoch, when the cursor moves on (``reset``,
  ``set_epoch``, ``load_state_dict``, a new ``iter()``).

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
from typing import Any

from exactbatch.audit import check_ledger
from exactbatch.loader.groups import Group, Holder, tally_of
from exactbatch.loader.history import History
from exactbatch.loader.state import Position
from exactbatch.order.digest import Tally

__all__ = ["Cursor"]

_WAIT = 0.01  # seconds between looks at reads in flight, when a claim finds the epoch over


class Cursor:
    """The position of a loader over ``feed``, and the ledger of its epoch.

    ``epoch`` is the epoch in progress, or the pending one; ``skip`` batches
    of the pending epoch were claimed before (a restored state), of which
    those in ``pending`` were not handed out and come first; ``first`` is
    the global batch an elastic epoch starts at. Its fields are its own:
    other modules read them and change them only through its methods.
    """

    def __init__(self, feed, seed: int):
        self.feed, self.spec = feed, feed.spec
        self.lock = threading.Lock()
        self._changed = threading.Condition(self.lock)  # a group's batches became ready
        self._waiting = 0  # claims waiting on it
        self.seed = seed
        self.epoch = 0
        self._skip, self._first = 0, 0
        self._pending: tuple[int, ...] = ()
        self._begun = False  # has the epoch begun (an iter() or a claimed batch)?
        self.current: Any = None  # the epoch being handed out (an Epoch once begun)
        self.gen = 0  # bumped when the cursor is moved; stale iterators stop
        self._last_rows = 0
        self._closed = False
        self._handed = Tally()  # the ledger: rows of retired groups (resumes included)
        self._verified = True  # False for an epoch resumed from a state without a ledger
        self._live: list[Group] = []  # groups of this epoch not all handed out yet
        self._drained = False  # a claim found nothing left (groups may still hand out)
        self._ended = False  # the epoch's ledger has been checked
        self.history = History()  # the records of the epochs begun, for certify

    @property
    def last_rows(self) -> int:
        return self._last_rows

    # -- under the lock ---------------------------------------------------------

    def _begin(self) -> None:
        if self._closed:
            raise ValueError("read from a closed DataLoader")
        self.current = self.feed.open_epoch(
            self.seed, self.epoch, self._skip, self._first, self._pending
        )
        self._begun = True  # (its flags are as __init__ or _move left them: not ended)

    def _move(self, epoch: int) -> None:
        if not self._ended:  # an epoch left before its end is on record, cut short
            live = self._live_record()
            if live is not None:
                self.history.keep(live)
        self.history.moved()
        if self.current is not None:
            self.current.close()
        self.epoch, self._begun, self.current = epoch, False, None
        self._skip, self._pending, self._first = 0, (), 0
        self._handed, self._verified, self._ended, self._drained = Tally(), True, False, False
        self._live = []
        self.gen += 1

    def check_gen(self, gen: int | None) -> None:
        if gen is not None and gen != self.gen:
            raise RuntimeError(
                "this iterator is stale: a later iter(), reset(), set_epoch() or "
                "load_state_dict() moved the loader on"
            )

    def _claimable(self, gen: int | None):
        """The epoch to claim from (begun if it had not), after the generation check."""
        self.check_gen(gen)
        if not self._begun:
            self._begin()
        return self.current

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

    def _claim_locked(self, owner, count: int, gen: int | None):
        """``(group, fresh)``: a new group of up to ``count`` batches - first the strays
        of other claimants, then ``fresh`` jobs claimed now and still to read (the
        group's ``queue`` holds the strays). ``(None, [])`` at the end of the epoch:
        when nothing is left to claim and no batch is being read (one being read may
        yet be given back, or become a stray: the claim waits for it)."""
        while True:
            epoch = self._claimable(gen)
            self._sweep()
            group = Group(self, epoch, owner)
            self._strays(group, count)
            fresh: list = []
            if len(group.queue) < count:
                try:
                    epoch.claim_many(fresh, count - len(group.queue))
                except BaseException:  # a stream's read failed: those claimed go back too
                    if fresh:
                        epoch.give_back(fresh)
                    self._requeue(group)
                    raise
            if fresh or group.queue:
                group.jobs.update({job.k: job for job in fresh})
                self._live.append(group)
                return group, fresh
            if not any(g.flying() for g in self._live):
                break
            self._waiting += 1  # a read in flight: it ends in a hand-out or a stray
            try:
                self._changed.wait(_WAIT)
            finally:
                self._waiting -= 1
        self._drained = True
        if not self._live:
            self._end()
        return None, []

    def _requeue(self, group: Group) -> None:
        """Strays taken into ``group`` go back to the epoch (claimed again first)."""
        jobs = [item[0] for item in group.queue]
        group.queue.clear()
        if jobs:
            self.current.give_back(jobs)

    def _end(self) -> None:
        """The epoch has ended: check the ledger (once) against the epoch's promise."""
        if self._ended:
            return
        self._ended = True
        if not self._verified:  # on record, but not as ended: it cannot be certified
            self.history.keep(self.history.record(self, self.epoch, self._handed, None))
            return
        shard, promised = self.spec.shard, self.current.promise()
        check_ledger(
            self._handed,
            promised,
            epoch=self.epoch,
            shard_index=shard.index,
            num_shards=shard.count,
        )
        self.history.keep(self.history.record(self, self.epoch, self._handed, promised))

    def _live_record(self) -> dict | None:
        """The record of the epoch in progress, as a state takes it now (None when
        nothing of it was claimed yet, or once its record was kept)."""
        if self._ended or self._closed:
            return None
        cur = self.current
        if not (self._begun and cur is not None) and not (self._skip or self._first):
            return None
        ledger, claimed, holes = self._handed_now()
        promised = None
        if self._begun and cur is not None and not holes and self._rolled(cur, claimed):
            promised = cur.promise()  # handed out whole: its check comes at the next claim
        return self.history.record(self, self.epoch, ledger, promised)

    def _handed_now(self):
        """``(ledger, claimed, holes)``: the rows handed out this epoch (live groups'
        hand-outs included), the batches claimed, and those of them not handed out."""
        cur, ledger = self.current, self._handed.copy()
        if self._begun and cur is not None:
            claimed, holes = cur.claimed, set(cur.given_back())
            for g in self._live:
                handed = list(g.handed)  # a consistent cut: later hand-outs are not in it
                t = tally_of(handed)
                ledger.add(t.rows, t.digest)
                ks = {job.k for job in handed}
                holes.update(k for k in list(g.jobs) if k not in ks)
        else:
            claimed, holes = self._skip, set(self._pending)
        while claimed and claimed - 1 in holes:  # batches claimed last and not handed out
            holes.discard(claimed - 1)  # are simply not claimed yet
            claimed -= 1
        return ledger, claimed, holes

    def _position(self):
        """``(epoch, done, pending, ledger)`` as a state takes them now: batches of live
        groups not handed out (ready, or read in flight) are pending; the epoch rolls
        over once every batch of it has been handed out."""
        cur = self.current
        ledger, claimed, holes = self._handed_now()
        done = claimed - len(holes)
        if self._begun and cur is not None and not holes and self._rolled(cur, done):
            return self.epoch + 1, 0, (), Tally()
        return self.epoch, done, tuple(sorted(holes)), ledger

    def _rolled(self, cur, done: int) -> bool:
        """Is the epoch over, for a state taken now (no batch of it left out)?"""
        if any(not g.done() for g in self._live):  # read ahead, or in flight: not over
            return False
        if not self.spec.elastic:
            return self._ended or cur.exhausted()
        # Under elastic sharding every rank's state must say the same: the epoch is
        # over when all ranks (in lockstep) have handed out every global batch, or
        # when this rank has seen the end (then so have the others).
        if self._ended or (self.spec.even_batches and cur.exhausted()):
            return True
        return self._first + done * self.spec.shard.count >= self.feed.total_batches

    # -- taking the lock ----------------------------------------------------------

    def claim(self, owner, count: int, gen: int | None = None):
        """``(group, fresh)``: up to ``count`` next batches as a new group of ``owner``'s;
        ``fresh`` are the jobs claimed now, for the caller to read and then
        :meth:`ready` (or :meth:`give_back`); ``(None, [])`` at the end of the epoch,
        whose ledger is checked once no group has a batch left to hand out."""
        with self.lock:
            return self._claim_locked(owner, count, gen)

    def claim_next(self, holder: Holder, count: int):
        """``next_into``'s claim: ``(group, item)``, the next ``(job, batch)`` of
        ``holder``'s group (shared by every caller, each popping from its left without
        the lock), after claiming a new group of up to ``count`` when it is empty;
        ``(None, None)`` at the end of the epoch. A call takes the next batch,
        whichever thread makes it."""
        with self.lock:
            while True:
                group = holder.group
                if group is not None and group.epoch is self.current and group.queue:
                    try:
                        return group, group.queue.popleft()
                    except IndexError:  # popped on another thread meanwhile
                        continue
                group, fresh = self._claim_locked(holder, count, None)
                if group is None:
                    return None, None
                group.queue.extend([(job, None) for job in fresh])
                holder.group = group

    def ready(self, group: Group, items) -> None:
        """The batches ``items`` (``(job, batch)``) of ``group`` are read: ready to hand out."""
        group.queue.extend(items)
        if self._waiting:  # a claim waits for reads in flight at the epoch's end
            with self.lock:
                self._changed.notify_all()

    def give_back(self, group: Group, jobs) -> None:
        """``jobs`` of ``group`` were claimed and will not be handed out by it (a read that
        raised, an iterator closed): claimed again before any later batch."""
        if not jobs:
            return
        with self.lock:
            if group.epoch is not self.current:  # the cursor moved on: nothing to give to
                return
            for job in jobs:
                group.jobs.pop(job.k, None)
            self.current.give_back(jobs)
            self._drained = self._ended = False
            self._changed.notify_all()

    def release(self, groups) -> None:
        """An iterator is closed: the batches its ``groups`` hold ready go back."""
        for group in groups:
            jobs = []
            while True:
                try:
                    jobs.append(group.queue.popleft()[0])
                except IndexError:
                    break
            self.give_back(group, jobs)

    def handed_out(self, group: Group, job) -> None:
        """``job`` of ``group`` reached its consumer (:meth:`Group.hand`)."""
        self._last_rows = job.size
        if self._drained and group.done():
            self.settle()  # the epoch's last batches: check the ledger now

    def settle(self) -> None:
        """A group's last batch was handed out after a claim found the epoch drained:
        once every group is, check the ledger."""
        with self.lock:
            self._sweep()
            if self._drained and not self._live and self.current is not None:
                self._end()

    def next_epoch(self) -> int:
        """``iter(loader)``: begin the next epoch (the pending one if it has not
        begun); its iterators' generation."""
        with self.lock:
            if self._begun:
                self._move(self.epoch + 1)
            else:
                self.gen += 1
            self._begin()
            return self.gen

    def peek(self) -> None:
        """Read ahead of a stream not read yet, to learn its widths."""
        with self.lock:
            if not self._begun:
                self._begin()
            self.current.peek()

    def rewind(self, seed: int | None = None) -> None:
        """To epoch 0 of ``seed``; without one, to the start of the next epoch (of
        the pending one if the current epoch has not begun)."""
        with self.lock:
            if seed is not None:
                self.seed = seed
                self._move(0)
                self.history.forget()  # another seed, another run
            else:  # an epoch restored mid-way (elastic: from a global batch) has begun too
                begun = self._begun or self._skip or self._first
                self._move(self.epoch + 1 if begun else self.epoch)

    def set_epoch(self, epoch: int) -> None:
        with self.lock:
            self._move(epoch)

    def epoch_now(self) -> int:
        """The epoch in progress, or the one the next ``iter()`` begins when every
        batch of the current one has been handed out."""
        with self.lock:
            self._sweep()
            return self._position()[0]

    def snapshot(self) -> Position:
        """The :class:`Position` of a state taken now."""
        with self.lock:
            self._sweep()
            epoch, done, pending, ledger = self._position()
            same = epoch == self.epoch
            first = self._first if same else 0
            history = tuple(self.history.states_records(self._live_record()))
            return Position(
                self.seed,
                epoch,
                done,
                pending,
                ledger,
                first,
                self._verified or not same,
                history,
                *self.history.lineage(history),
            )

    def restore(self, pos: Position, claimed: int) -> None:
        """Resume at ``pos`` (see :mod:`exactbatch.loader.state`): ``claimed`` batches of
        the epoch were claimed before (``pos.pending`` of them not handed out)."""
        with self.lock:
            self.seed = pos.seed
            self._ended = True  # what came before is the state's: nothing of it on record
            self._move(pos.epoch)
            self._skip, self._pending, self._first = claimed, tuple(pos.pending), pos.first
            self._handed, self._verified = pos.ledger.copy(), pos.verified
            self.history.restore(list(pos.history), self.spec.elastic, pos)

    def close(self) -> bool:
        """Stop the epoch in progress, keeping its position (a state taken after it resumes
        at the same batch); False if already closed."""
        with self.lock:
            if self._closed:
                return False
            self._sweep()
            epoch, done, pending, ledger = self._position()
            live = None if self._ended else self._live_record()
            if live is not None:  # on record, as a state takes it (see _move)
                self.history.keep(live)
            if self.current is not None:
                self.current.close()
            if epoch != self.epoch:  # every batch was handed out: at the next epoch's start
                self.epoch, self._first, self._verified = epoch, 0, True
            # kept as a restored state keeps them (see restore)
            self._skip, self._pending, self._handed = done + len(pending), pending, ledger
            self._closed, self.current, self._begun = True, None, False
            self._live = []
            return True
