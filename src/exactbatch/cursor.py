"""The loader's cursor: which epoch, which batches are out, and the ledger.

Every method that touches the cursor holds its lock; the lock guards only
the claim of the next batch, and rows are read outside it, so threads that
share a loader read in parallel. (An iterator without prefetch, and
``next_into``, claim a group of batches, counted at once, and hand them out
without the lock; a state taken meanwhile takes out those not handed out
yet: see :meth:`Cursor.claim_held`.) A batch claimed and not handed out (a read
that raised, or prepared ahead and dropped) is given back and claimed again
before any later batch. When an epoch ends, the rows handed out (the
ledger) are checked against those the epoch promised.

:class:`exactbatch.epoch_iterator.EpochIterator` (what ``iter(loader)``
returns) claims through it.
"""

from __future__ import annotations

import threading
import weakref
from collections import deque

from exactbatch.audit import check_ledger
from exactbatch.order.digest import Tally

__all__ = ["Cursor", "Held"]

class Cursor:
    """The position of a loader over ``feed``, and the ledger of its epoch.

    ``epoch`` is the epoch in progress, or the pending one; ``skip`` batches
    of the pending epoch were claimed before (a restored state), of which
    those in ``pending`` were not handed out and come first; ``first`` is
    the global batch an elastic epoch starts at.
    """

    def __init__(self, feed, seed: int):
        self.feed, self.spec = feed, feed.spec
        self.lock = threading.Lock()
        self.seed = seed
        self.epoch = 0
        self.skip, self.pending, self.first = 0, (), 0
        self.begun = False  # has the epoch begun (an iter() or a claimed batch)?
        self.current = None  # the epoch being handed out
        self.gen = 0  # bumped when the cursor is moved; stale iterators stop
        self.last_rows = 0
        self.closed = False
        self.handed = Tally()  # the ledger: rows handed out this epoch (resumes included)
        self.verified = True  # False for an epoch resumed from a state without a ledger
        self.ended = False  # has the end of the epoch been reached (and the ledger checked)?
        self.out = set()  # batches claimed for a prefetch, not handed out yet
        self.holders = weakref.WeakSet()  # iterators' Held: counted, maybe not handed out
        self.orphans = []  # (epoch, jobs or Held) given back by iterators dropped unlocked

    # -- under the lock ---------------------------------------------------------

    def begin(self) -> None:
        if self.closed:
            raise ValueError("read from a closed DataLoader")
        self.current = self.feed.open_epoch(
            self.seed, self.epoch, self.skip, self.first, self.pending
        )
        self.begun, self.ended = True, False

    def move(self, epoch: int) -> None:
        if self.current is not None:
            self.current.close()
        self.epoch, self.begun, self.current = epoch, False, None
        self.skip, self.pending, self.first = 0, (), 0
        self.handed, self.verified, self.ended = Tally(), True, False
        self.out = set()
        self.holders = weakref.WeakSet()
        self.orphans.clear()
        self.gen += 1

    def check_gen(self, gen: int | None) -> None:
        if gen is not None and gen != self.gen:
            raise RuntimeError(
                "this iterator is stale: a later iter(), reset(), set_epoch() or "
                "load_state_dict() moved the loader on"
            )

    def adopt_orphans(self) -> None:
        """Take back the batches of iterators dropped without the lock (see give_back
        and release_held)."""
        while self.orphans:
            owner, jobs = self.orphans.pop()
            if isinstance(jobs, Held):
                self._release_locked(jobs)
            else:
                self.give_back_locked(owner, jobs, counted=False)

    def give_back_locked(self, owner, jobs, counted: bool) -> None:
        if owner is not self.current:  # the cursor moved on: nothing to give back to
            return
        for job in jobs:
            if counted:
                self.handed.add(-job.size, -job.digest)
            else:
                self.out.discard(job.k)
        owner.give_back(jobs)
        self.ended = False

    def end(self) -> None:
        """The epoch has ended: check the ledger (once) against the epoch's promise."""
        if self.ended or self.out:  # batches on their way: the last one's consumer checks
            return
        self.ended = True
        if not self.verified:
            return
        shard = self.spec.shard
        check_ledger(
            self.handed,
            self.current.promise(),
            epoch=self.epoch,
            shard_index=shard.index,
            num_shards=shard.count,
        )

    def position(self):
        """``(epoch, batches_done, pending, ledger)``, with the epoch rolled over
        when it has ended; the ledger a copy, as it stands now (a claim on another
        thread, once the lock is let go, must not add to a state's ledger). Batches
        an iterator holds, counted at their claim and not handed out yet, are taken
        out again (see :meth:`claim_held`)."""
        cur, ledger, unhanded = self.current, self.handed, ()
        if self.begun and cur is not None:
            claimed = cur.claimed
            holes = set(cur.given_back()) | self.out
            unhanded = self._unhanded(cur) if self.holders else ()
            if unhanded:
                holes.update(job.k for job in unhanded)
                out = Tally(sum(job.size for job in unhanded), sum(j.digest for j in unhanded))
                ledger = ledger.minus(out)
        else:
            claimed, holes = self.skip, set(self.pending)
        while claimed and claimed - 1 in holes:  # batches claimed last and not handed out
            holes.discard(claimed - 1)  # are simply not claimed yet
            claimed -= 1
        done = claimed - len(holes)
        # (batches held, not handed out: the epoch is not over, as for self.out)
        if self.begun and cur is not None and not holes and not unhanded:
            if self._rolled(cur, done):
                return self.epoch + 1, 0, [], Tally()
        return self.epoch, done, sorted(holes), ledger.copy()

    def _unhanded(self, cur) -> list:
        """The jobs of epoch ``cur`` that iterators claimed into their groups (counted)
        and have not handed out. An iterator hands out without the lock, popping from
        the left of its ``jobs`` (a deque: each copy and pop is atomic), and claims
        into it under the lock: this is a consistent cut."""
        return [job for h in list(self.holders) if h.owner is cur for job in list(h.jobs)]

    def _rolled(self, cur, done: int) -> bool:
        """Is the epoch over, for a state taken now?"""
        if self.out:  # batches prepared ahead and not handed out: not over yet
            return False
        if not self.spec.elastic:
            return self.ended or cur.exhausted()
        # Under elastic sharding every rank's state must say the same: the epoch is
        # over when all ranks (in lockstep) have handed out every global batch, or
        # when this rank has seen the end (then so have the others).
        if self.ended or (self.spec.even_batches and cur.exhausted()):
            return True
        return self.first + done * self.spec.shard.count >= self.feed.total_batches

    # -- taking the lock ----------------------------------------------------------

    def _claimable(self, gen: int | None):
        """Under the lock: the epoch to claim from (begun if it had not), after the
        generation check and taking back orphaned batches."""
        self.check_gen(gen)
        if self.orphans:
            self.adopt_orphans()
        if not self.begun:
            self.begin()
        return self.current

    def claim(self, gen: int | None):
        """``(job, epoch)``: the next batch's job, counted as handed out (None at the
        end, the ledger checked), and the epoch it belongs to."""
        with self.lock:
            owner = self._claimable(gen)
            job = owner.claim()
            if job is None:
                self.end()
            else:
                self._count(job)
            return job, owner

    def claim_many(self, gen: int, count: int):
        """``(jobs, epoch)``: up to ``count`` next batches (fewer at the end; none when
        it is over) under one lock, none counted yet: each counts when
        :meth:`hand_out` hands it out, as a prefetched batch does."""
        with self.lock:
            owner = self._claimable(gen)
            jobs = self._claim_locked(owner, count)
            self.out.update([job.k for job in jobs])
            return jobs, owner

    def _claim_locked(self, owner, count: int) -> list:
        """Under the lock: up to ``count`` next batches of epoch ``owner``, uncounted."""
        jobs = []
        try:
            owner.claim_many(jobs, count)
        except BaseException:  # a stream's read failed: those claimed go back too
            self.give_back_locked(owner, jobs, counted=False)
            raise
        return jobs

    def claim_held(self, gen: int, count: int, held: Held):
        """``(jobs, epoch)``: up to ``count`` next batches under one lock (none at the
        end), counted as handed out at once and appended to ``held.jobs``, an
        iterator's, which hands them out without the lock, popping each from its
        left; a state taken meanwhile takes out those not handed out yet
        (:meth:`position`). Saves the lock of a hand-out per batch."""
        with self.lock:
            owner = self._claimable(gen)
            return self._hold_locked(owner, count, held), owner

    def _hold_locked(self, owner, count: int, held: Held) -> list:
        jobs = self._claim_locked(owner, count)
        if jobs:
            handed = self.handed
            for job in jobs:
                handed.add(job.size, job.digest)
            held.jobs.extend(jobs)
            if held.owner is not owner:  # (move() made a new set of holders)
                held.owner = owner
                self.holders.add(held)
        return jobs

    def claim_next(self, held: Held, count: int):
        """``next_into``'s claim: the next job of ``held`` (the loader's, shared by every
        caller, each popping from its left without the lock), after claiming up to
        ``count`` into it (:meth:`claim_held`) when it is empty; None at the end of the
        epoch (its ledger checked). Jobs of an epoch the cursor moved on from are
        dropped. A call takes the next batch, whichever thread makes it."""
        with self.lock:
            owner = self._claimable(None)
            jobs = held.jobs
            if held.owner is not owner:
                jobs.clear()
            while True:
                if not jobs and not self._hold_locked(owner, count, held):
                    self.end()
                    return None
                try:
                    return jobs.popleft()
                except IndexError:  # emptied by a pop on another thread meanwhile
                    continue

    def unpop(self, held: Held, job) -> None:
        """The read of ``job``, popped from ``held`` by ``next_into``, failed: it goes
        back to the front, for the next call."""
        with self.lock:
            if held.owner is self.current:
                held.jobs.appendleft(job)

    def unclaim_held(self, held: Held, jobs) -> None:
        """The read of ``jobs``, the last claimed into ``held``, failed: back they go."""
        with self.lock:
            for _ in jobs:
                held.jobs.pop()
            self.give_back_locked(held.owner, jobs, counted=True)

    def release_held(self, held: Held, locked: bool = True) -> None:
        """An iterator is closed: the jobs it holds and has not handed out go back
        (counted: they were). Without ``locked`` (a finalizer), ``held`` is queued for
        the next holder of the lock, and stays in :meth:`position`'s view till then."""
        if not held.jobs:
            return
        if not locked:
            self.orphans.append((held.owner, held))
            return
        with self.lock:
            self._release_locked(held)

    def _release_locked(self, held: Held) -> None:
        jobs = list(held.jobs)
        held.jobs.clear()
        if jobs:
            self.give_back_locked(held.owner, jobs, counted=True)

    def _count(self, job) -> None:
        self.handed.add(job.size, job.digest)
        self.last_rows = job.size

    def hand_out(self, gen: int, job) -> None:
        """A prefetched batch reaches the consumer: now it counts."""
        with self.lock:
            self.check_gen(gen)
            self.out.discard(job.k)
            self._count(job)

    def give_back(self, owner, jobs, counted: bool, locked: bool = True) -> None:
        """Jobs of epoch ``owner`` claimed but not handed out after all (a failed read,
        or prefetched and dropped): claimed again first. ``counted``: they had been
        counted as handed out. Without ``locked`` (a finalizer, which may run while
        this thread holds the lock) they are queued for the next holder of the lock."""
        if not jobs:
            return
        if not locked:
            self.orphans.append((owner, jobs))
            return
        with self.lock:
            self.give_back_locked(owner, jobs, counted)

    def finish(self, gen: int) -> None:
        """A consumer of prefetched batches reached the end of the epoch."""
        with self.lock:
            if gen == self.gen and self.current is not None:
                self.end()

    def next_epoch(self) -> int:
        """``iter(loader)``: begin the next epoch (the pending one if it has not
        begun); its iterators' generation."""
        with self.lock:
            if self.begun:
                self.move(self.epoch + 1)
            else:
                self.gen += 1
            self.begin()
            return self.gen

    def peek(self) -> None:
        """Read ahead of a stream not read yet, to learn its widths."""
        with self.lock:
            if not self.begun:
                self.begin()
            self.current.peek()

    def rewind(self, seed: int | None = None) -> None:
        """To epoch 0 of ``seed``; without one, to the start of the next epoch (of
        the pending one if the current epoch has not begun)."""
        with self.lock:
            if seed is not None:
                self.seed = seed
                self.move(0)
            else:  # an epoch restored mid-way has begun too
                self.move(self.epoch + 1 if self.begun or self.skip else self.epoch)

    def set_epoch(self, epoch: int) -> None:
        with self.lock:
            self.move(epoch)

    def snapshot(self):
        """``(seed, epoch, done, pending, ledger, first, verified)`` of a state taken
        now: ``verified`` is False for an epoch whose ledger cannot be checked."""
        with self.lock:
            if self.orphans:
                self.adopt_orphans()
            epoch, done, pending, ledger = self.position()
            same = epoch == self.epoch
            first = self.first if same else 0
            return self.seed, epoch, done, pending, ledger, first, self.verified or not same

    def restore(self, seed, epoch, claimed, pending, first, ledger, verified) -> None:
        """Resume at a state's position (see :mod:`exactbatch.loader_state`)."""
        with self.lock:
            self.seed = seed
            self.move(epoch)
            self.skip, self.pending, self.first = claimed, tuple(pending), first
            self.handed, self.verified = ledger, verified

    def close(self) -> bool:
        """Stop the epoch in progress; False if already closed."""
        with self.lock:
            if self.closed:
                return False
            if self.current is not None:
                self.current.close()
            self.closed, self.current, self.begun = True, None, False
            return True


class Held:
    """Jobs claimed by :meth:`Cursor.claim_held` or :meth:`Cursor.claim_next` (counted
    as handed out) and not handed out yet, in hand-out order (a deque), of epoch
    ``owner``: an iterator's, or the loader's for ``next_into``."""

    __slots__ = ("__weakref__", "jobs", "owner")

    def __init__(self):
        self.jobs, self.owner = deque(), None
