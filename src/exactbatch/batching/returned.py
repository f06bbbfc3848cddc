"""Batches claimed but not handed out after all (a read that raised, or prepared
ahead and dropped): kept in batch order, claimed again before any later batch."""

from __future__ import annotations

__all__ = ["Returned"]


class Returned:
    """The given-back jobs of an epoch (each with its batch number ``k``), in batch order."""

    __slots__ = ("_jobs",)

    def __init__(self, jobs=()):
        self._jobs = sorted(jobs, key=lambda j: j.k)

    def __bool__(self) -> bool:
        return bool(self._jobs)

    def add(self, jobs) -> None:
        self._jobs = sorted((*self._jobs, *jobs), key=lambda j: j.k)

    def pop(self):
        """The earliest batch given back."""
        return self._jobs.pop(0)

    def batches(self) -> list[int]:
        return [j.k for j in self._jobs]
