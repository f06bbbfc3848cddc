"""Batches claimed but not handed out after all (a read that raised, or prepared
ahead and dropped): kept in batch order, claimed again before any later batch."""

from __future__ import annotations

__all__ = ["Returned"]


def _batch(job) -> int:
    return job.k


class Returned(list):
    """The given-back jobs of an epoch (each with its batch number ``k``), in batch
    order. A list, so that the claim on every batch tests it at C speed."""

    __slots__ = ()

    def __init__(self, jobs=()):
        super().__init__(sorted(jobs, key=_batch))

    def add(self, jobs) -> None:
        self.extend(jobs)
        self.sort(key=_batch)

    def batches(self) -> list[int]:
        return [j.k for j in self]
