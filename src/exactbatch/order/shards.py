"""Shards: which rows, chunks and batches shard s of S owns, as one frozen value.

Three rules, each stated once, in :class:`Shard`:

* range: shard s of S owns the contiguous rows [s*n//S, (s+1)*n//S) of n;
  every row lies in exactly one shard and shard sizes differ by at most one;
* round robin: chunk i of a stream of unknown size belongs to shard s when
  i % S == s;
* elastic dealing: one global order cut into batches, global batch g going
  to shard g % S (counted from the batch a resumed epoch starts at), so
  that a checkpoint resumes at any shard count.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

import numpy as np

from exactbatch.checks import check_int

__all__ = ["Shard", "check_shard", "chunk_pieces"]


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count``: validated once, here.

    ``count`` must be an int >= 1 and ``index`` an int in ``[0, count)``
    (Python or NumPy ints; else ``TypeError`` / ``ValueError`` naming
    ``num_shards`` or ``shard_index``).
    """

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        count = check_int("num_shards", self.count)
        index = check_int("shard_index", self.index)
        if count < 1:
            raise ValueError(f"num_shards must be >= 1; got num_shards={count}")
        if not 0 <= index < count:
            raise ValueError(
                f"shard_index must be in [0, num_shards) = [0, {count}); got shard_index={index}"
            )
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "index", index)

    @property
    def is_last(self) -> bool:
        return self.index == self.count - 1

    def range(self, n: int) -> tuple[int, int]:
        """``(start, stop)``: the rows of ``n`` this shard owns."""
        if n < 0:
            raise ValueError(f"n must be >= 0; got n={n}")
        return self.index * n // self.count, (self.index + 1) * n // self.count

    def owns_chunk(self, i: int) -> bool:
        """Round robin, for a stream of unknown size: is chunk ``i`` this shard's?"""
        return i % self.count == self.index

    @overload
    def dealt(self, k: int, first: int = 0) -> int: ...
    @overload
    def dealt(self, k: np.ndarray, first: int = 0) -> np.ndarray: ...
    def dealt(self, k: int | np.ndarray, first: int = 0) -> int | np.ndarray:
        """Elastic dealing: the global batch that is this shard's batch ``k`` (an int
        or an integer array) of an epoch resumed at global batch ``first``."""
        return first + self.index + k * self.count

    def elastic_share(
        self, n: int, batch_size: int, total_batches: int, first: int = 0
    ) -> tuple[int, int]:
        """``(batches, rows)`` this shard takes of an epoch under elastic dealing.

        The epoch's global order is cut into ``total_batches`` batches of
        ``batch_size`` (the last holds what is left of ``n``, or is dropped
        with drop_last, when ``total_batches`` is ``n // batch_size``); this
        shard takes global batches :meth:`dealt` ``(0, first), (1, first)...``.
        That split is the only place S enters, so a run checkpointed after
        global batch ``first`` can resume at any number of shards with no row
        repeated or skipped.
        """
        g0 = self.dealt(0, first)
        batches = max(0, -(-(total_batches - g0) // self.count))
        rows = batches * batch_size
        if batches and (total_batches - 1 - g0) % self.count == 0:  # it holds the last batch,
            rows -= max(0, total_batches * batch_size - n)  # which may be partial
        return batches, rows

    def even_share(self, total_batches: int, first: int = 0) -> int:
        """Elastic with even_batches: every shard's batches, the smallest shard's."""
        return (total_batches - first) // self.count

    def pad_share(self, total_batches: int, first: int = 0) -> int:
        """Elastic with even_batches="pad": every shard's batches, the largest shard's
        (the first shard's; the others end in a padding batch where they have one less)."""
        return max(0, -(-(total_batches - first) // self.count))


def check_shard(num_shards: int, shard_index: int) -> None:
    """Raise if ``(num_shards, shard_index)`` is not a valid shard (see :class:`Shard`)."""
    Shard(shard_index, num_shards)


def chunk_pieces(
    chunk_rows: Sequence[int] | np.ndarray, start: int, stop: int | None
) -> list[tuple[int, int, int]]:
    """The parts of chunks that hold rows [start, stop) of their concatenation.

    ``chunk_rows[i]`` is the row count of chunk i; ``stop=None`` means to the
    end. Returns ``(i, lo, hi)``: rows lo..hi of chunk i, in chunk order;
    chunks outside the range are not listed (a shard never reads them).
    """
    rows = np.asarray(chunk_rows, dtype=np.int64)
    ends = np.cumsum(rows)
    begins = ends - rows
    stop_ = int(ends[-1]) if stop is None and len(rows) else (stop or 0)
    keep = np.flatnonzero((ends > start) & (begins < stop_) & (rows > 0))
    lo = np.maximum(start - begins[keep], 0)
    hi = np.minimum(stop_ - begins[keep], rows[keep])
    return list(zip(keep.tolist(), lo.tolist(), hi.tolist(), strict=True))
