"""Groups of batches claimed together, and who holds one: the unit of the cursor's
claim protocol (:mod:`exactbatch.loader.cursor` says how they are claimed,
handed out and given back).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Protocol

import numpy as np

from exactbatch.feeds.base import Epoch, Job
from exactbatch.order.digest import Tally

__all__ = [
    "Batch",
    "Claim",
    "Claims",
    "Group",
    "Holder",
    "Item",
    "Popped",
    "batch_numbers",
    "tally_of",
]

Batch = tuple[np.ndarray, ...]  # (x, y), (x, y, rows), and a mask last under "pad"
Item = tuple[Job, Batch | None]  # a job and its batch, ready (None: read at hand-out)


class Claims(Protocol):
    """The cursor, as its groups call it back (:class:`exactbatch.loader.cursor.Cursor`,
    whose module imports this one)."""

    def hand(self, group: Group, job: Job) -> None: ...

    def unpop(self, group: Group, item: Item) -> None: ...


class Holder:
    """A claimant's current group (``next_into``'s, shared by every caller): switched
    under the cursor's lock, so that threads sharing it never claim past each other."""

    __slots__ = ("group",)

    def __init__(self) -> None:
        self.group: Group | None = None


class Group:
    """Batches claimed together by one claimant (``owner``) from epoch ``epoch``.

    ``jobs``: the batches (by number) the group answers for until each is handed out
    or given back - changed only under the cursor's lock; ``queue``: those ready to
    hand out, as ``(job, batch)`` (``batch`` None: read at hand-out); ``handed``: the
    jobs handed out, appended without the lock.
    """

    __slots__ = ("cursor", "epoch", "handed", "jobs", "owner", "queue")

    def __init__(self, cursor: Claims, epoch: Epoch | None, owner: object) -> None:
        self.cursor, self.epoch, self.owner = cursor, epoch, owner  # (epoch None: no claim)
        self.jobs: dict[int, Job] = {}
        self.queue: deque[Item] = deque()
        self.handed: list[Job] = []

    def hand(self, job: Job) -> None:
        """``job``'s batch reached its consumer (its read succeeded): it counts now."""
        self.cursor.hand(self, job)

    def unpop(self, item: Item) -> None:
        """The read of ``item``, popped from the queue, raised: it is next again
        (:meth:`Cursor.unpop <exactbatch.loader.cursor.Cursor.unpop>` says where)."""
        self.cursor.unpop(self, item)

    def done(self) -> bool:
        """Is every batch of the group handed out (none ready, none in flight)?"""
        return len(self.handed) >= len(self.jobs)

    def flying(self) -> bool:
        """Is a batch of the group being read (claimed, neither ready nor handed out)?"""
        return len(self.handed) + len(self.queue) < len(self.jobs)


Claim = tuple[Group | None, list[Job]]  # a claim's group, and the jobs claimed fresh in it
Popped = tuple[Group, Item]  # an item popped from a group's queue, and that group

_SIZE: Callable[[Job], int] = attrgetter("size")
_DIGEST: Callable[[Job], int] = attrgetter("digest")
batch_numbers: Callable[[Job], int] = attrgetter("k")  # a job's number: map(batch_numbers, jobs)


def tally_of(jobs: Iterable[Job]) -> Tally:
    """Rows and digest of the batches ``jobs`` (two loops in C: this runs once a group)."""
    return Tally(sum(map(_SIZE, jobs)), sum(map(_DIGEST, jobs)))
