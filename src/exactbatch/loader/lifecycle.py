"""The loader's lifecycle: one phase at a time, and the frozen start of an epoch.

A cursor (:mod:`exactbatch.loader.cursor`) is in one :class:`Phase` and stands
on one :class:`Start`: the position its epoch begins (or resumes) from. Each
call is a transition with one rule:

* ``iter()``: FRESH begins its start; EPOCH, DRAINING and BETWEEN move to the
  next epoch's start and begin it; CLOSED raises.
* a claim (``next()``, ``next_into``): FRESH begins its start; EPOCH claims,
  and goes DRAINING when nothing is left to claim; DRAINING goes BETWEEN once
  every batch is handed out (the ledger checked), back to EPOCH when a batch
  is given back; BETWEEN claims nothing (``next_into`` returns 0 until a move);
  CLOSED raises.
* ``set_epoch(e)``: a FRESH (or closed) cursor whose start is of epoch ``e``
  keeps it (a restored position stays); any other moves to the start of ``e``.
* ``reset()``: to the start of the next epoch, or of the start's epoch when
  it is a FRESH epoch's very beginning. ``reset(seed=s)``: the start of epoch 0
  of ``s``, and a new history.
* ``load_state_dict``: to the state's start (FRESH), its history taken on.
* ``close()``: CLOSED; nothing more is claimed, and no batch ready is handed
  out; a read already in flight that then succeeds is handed out and counted
  (the position of a closed cursor is still its epoch's groups', with the
  epoch frozen by :class:`ClosedEpoch`). Moves still move the position.
* ``state_dict()``: changes nothing; under elastic sharding it waits for reads
  in flight that stand below a batch handed out, so that its position is a
  global batch (every rank's state says the same).

A move leaves the epoch it was in: its groups are dropped, and a batch read on
another thread meanwhile belongs to the epoch left.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

from exactbatch.batching.blocked_order import BlockedOrder
from exactbatch.feeds.base import First, Job, Ordered
from exactbatch.loader.groups import Group
from exactbatch.order.digest import Tally

__all__ = ["DRAINING", "Accounted", "ClosedEpoch", "Phase", "Start"]


class Phase(enum.Enum):
    """Where a cursor is in its lifecycle (module docs)."""

    FRESH = "fresh"  # on its start: nothing claimed since it was set
    EPOCH = "in an epoch"  # claiming from its epoch
    DRAINING = "draining"  # nothing left to claim: the last batches are being handed out
    BETWEEN = "between epochs"  # every batch handed out, the ledger checked
    CLOSED = "closed"  # nothing more claimed or handed out but reads in flight


# Phase.DRAINING, for the check each hand-out makes (Cursor.hand): a member looked up
# on its Enum class costs ~70 ns a time, a module's name a few
DRAINING = Phase.DRAINING


@dataclass(frozen=True)
class Start:
    """The position an epoch begins from: ``epoch``; ``skip`` batches of it claimed
    before (a restored state's), of which ``pending`` were not handed out (claimed
    again first); ``first``, where a dealt epoch resumes (its dealing's state rule
    says what: :mod:`exactbatch.feeds.state_rules`; the global batch under elastic);
    ``ledger``, the rows handed out before it (a restored state's; never changed:
    the cursor copies it); ``verified``, False when that ledger cannot be checked
    (a state without one)."""

    epoch: int
    skip: int = 0
    pending: tuple[int, ...] = ()
    first: First = 0
    ledger: Tally = field(default_factory=Tally)
    verified: bool = True

    @property
    def beginning(self) -> bool:
        """Is it the very beginning of its epoch (nothing of it handed out)?"""
        return not (self.skip or self.first or self.pending)


class Accounted(Ordered, Protocol):
    """An epoch as its accounting reads it: an :class:`~exactbatch.feeds.base.Epoch`, or a
    :class:`ClosedEpoch` (one closed mid-way)."""

    claimed: int

    def given_back(self) -> list[int]: ...

    def exhausted(self) -> bool: ...

    def promise(self) -> Tally: ...

    def close(self) -> None: ...


class ClosedEpoch:
    """An epoch closed mid-way, as its accounting still reads it: the batches claimed
    and given back, and whether every batch was claimed, as they were at close (the
    epoch's own answers would change as its source is let go); its promise and order
    the epoch's. Nothing is claimed from it; a batch given back to it (ready at close,
    or a read in flight then that failed) is on record as not handed out."""

    __slots__ = ("_exhausted", "_given_back", "claimed", "epoch")

    def __init__(self, epoch: Accounted) -> None:
        self.epoch, self.claimed = epoch, epoch.claimed
        self._given_back, self._exhausted = list(epoch.given_back()), epoch.exhausted()
        epoch.close()

    def of(self, group: Group) -> bool:
        """Was ``group`` claimed from this epoch?"""
        return group.epoch is self.epoch

    def give_back(self, jobs: Iterable[Job]) -> None:
        """Batches not handed out after all: on record as such (claimed no more)."""
        self._given_back += [job.k for job in jobs]

    @property
    def order(self) -> BlockedOrder | None:
        order: BlockedOrder | None = getattr(self.epoch, "order", None)
        return order

    def given_back(self) -> list[int]:
        return list(self._given_back)

    def exhausted(self) -> bool:
        """Was every batch claimed at close, and none given back since?"""
        return self._exhausted and not self._given_back

    def promise(self) -> Tally:
        return self.epoch.promise()

    def close(self) -> None:
        """Closed already."""
