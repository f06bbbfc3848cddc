"""Batches claimed but not handed out after all (a read that raised, or prepared
ahead and dropped): kept in batch order, claimed again before any later batch."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["Returned"]


def _batch(job: Any) -> int:
    k: int = job.k
    return k


class Returned(list[Any]):
    """The given-back jobs of an epoch (each with its batch number ``k``), in batch
    order. A list, so that the claim on every batch tests it at C speed."""

    __slots__ = ()

    def __init__(self, jobs: Iterable[Any] = ()) -> None:
        super().__init__(sorted(jobs, key=_batch))

    def add(self, jobs: Iterable[Any]) -> None:
        self.extend(jobs)
        self.sort(key=_batch)

    def batches(self) -> list[int]:
        return [j.k for j in self]
