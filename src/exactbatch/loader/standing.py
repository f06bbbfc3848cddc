"""Where a cursor stands, as a state takes it: the epoch's hand-outs (its live groups'
included), the batches claimed and not handed out, whether the epoch is over, and the
:class:`~exactbatch.loader.state.Position` a state records.

:class:`Standing` is the part of :class:`exactbatch.loader.cursor.Cursor` that reads
its fields and changes none; every method runs under the cursor's lock.
"""

from __future__ import annotations

from exactbatch.feeds.base import BatchSpec, Epoch, Feed
from exactbatch.loader.groups import Group, tally_of
from exactbatch.loader.history import History
from exactbatch.loader.lifecycle import ClosedEpoch, Phase, Start
from exactbatch.loader.records import Record
from exactbatch.loader.state import Position
from exactbatch.order.digest import Tally

__all__ = ["Standing"]


class Standing:
    """The cursor's accounting (module docs): what a state and a record take now."""

    # (the cursor's fields, set by Cursor.__init__)
    phase: Phase
    seed: int
    start: Start
    current: Epoch | ClosedEpoch | None
    history: History
    spec: BatchSpec
    feed: Feed
    _handed: Tally
    _live: list[Group]

    def _state_position(self) -> Position:
        """The :class:`Position` of a state taken now (reads in flight landed, strays
        swept: :meth:`Cursor.snapshot`)."""
        epoch, done, pending, ledger = self._position()
        same = epoch == self.start.epoch
        history = tuple(self.history.states_records(self._live_record()))
        parent, loaded_at = self.history.lineage()
        return Position(
            self.seed,
            epoch,
            done,
            pending,
            ledger,
            self.start.first if same else 0,
            self.start.verified or not same,
            history,
            parent,
            loaded_at,
            compacted=tuple(self.history.summaries()),
            run=self.history.run,
        )

    def _live_record(self) -> Record | None:
        """The record of the epoch in progress, as a state takes it now (None when
        nothing of it was claimed yet, or once its record was kept)."""
        if self.phase is Phase.BETWEEN or (self.current is None and self.start.beginning):
            return None
        ledger, claimed, holes = self._handed_now()
        promised = None
        cur = self.current
        if cur is not None and not holes and self._rolled(cur, claimed):
            promised = cur.promise()  # handed out whole: its check comes at the next claim
        return self.history.record(self, self.start.epoch, ledger, promised)

    def _handed_now(self) -> tuple[Tally, int, set[int]]:
        """``(ledger, claimed, holes)``: the rows handed out this epoch (live groups'
        hand-outs included), the batches claimed, and those of them not handed out."""
        cur = self.current
        if cur is None:  # on a start
            s = self.start
            ledger, claimed, holes = s.ledger.copy(), s.skip, set(s.pending)
        else:
            ledger, claimed, holes = self._handed.copy(), cur.claimed, set(cur.given_back())
            for g in self._live:
                handed = list(g.handed)  # a consistent cut: later hand-outs are not in it
                t = tally_of(handed)
                ledger.add(t.rows, t.digest)
                ks = {job.k for job in handed}
                holes.update(k for k in list(g.jobs) if k not in ks)
        while claimed and claimed - 1 in holes:  # batches claimed last and not handed out
            holes.discard(claimed - 1)  # are simply not claimed yet
            claimed -= 1
        return ledger, claimed, holes

    def _handed_here(self) -> tuple[int, int]:
        """The rows and batches of the epoch in progress handed out since its start
        (a restored state's hand-outs are not this loader's)."""
        ledger, claimed, holes = self._handed_now()
        s = self.start
        return ledger.rows - s.ledger.rows, claimed - len(holes) - (s.skip - len(s.pending))

    def _position(self) -> tuple[int, int, tuple[int, ...], Tally]:
        """``(epoch, done, pending, ledger)`` as a state takes them now: batches of live
        groups not handed out (ready, or read in flight) are pending; the epoch rolls
        over once every batch of it has been handed out."""
        epoch = self.start.epoch
        if self.phase is Phase.BETWEEN:
            return epoch + 1, 0, (), Tally()
        ledger, claimed, holes = self._handed_now()
        done = claimed - len(holes)
        cur = self.current
        if cur is not None and not holes and self._rolled(cur, done):
            return epoch + 1, 0, (), Tally()
        return epoch, done, tuple(sorted(holes)), ledger

    def _rolled(self, cur: Epoch | ClosedEpoch, done: int) -> bool:
        """Is the epoch ``cur`` over, for a state taken now (no batch of it left out)?"""
        if any(not g.done() for g in self._live):  # read ahead, or in flight: not over
            return False
        return self.feed.rule.rolled(self.feed, cur, self.start.first, done)
