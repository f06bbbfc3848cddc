"""Shard ranges: shard s of S owns the contiguous rows [s*n//S, (s+1)*n//S).

Every row lies in exactly one shard and shard sizes differ by at most one.
"""

from __future__ import annotations

import numpy as np

__all__ = ["check_shard", "chunk_pieces", "elastic_positions", "shard_range"]


def check_shard(num_shards, shard_index) -> None:
    """Raise if ``(num_shards, shard_index)`` is not a valid shard."""
    for name, value in (("num_shards", num_shards), ("shard_index", shard_index)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int; got {value!r}")
    if num_shards < 1:
        raise ValueError(f"num_shards must be >= 1; got num_shards={num_shards}")
    if not 0 <= shard_index < num_shards:
        raise ValueError(
            f"shard_index must be in [0, num_shards) = [0, {num_shards}); "
            f"got shard_index={shard_index}"
        )


def shard_range(n: int, num_shards: int = 1, shard_index: int = 0) -> tuple[int, int]:
    """Return ``(start, stop)``, the rows of ``n`` that shard ``shard_index`` owns."""
    check_shard(num_shards, shard_index)
    if n < 0:
        raise ValueError(f"n must be >= 0; got n={n}")
    return shard_index * n // num_shards, (shard_index + 1) * n // num_shards


def chunk_pieces(chunk_rows, start: int, stop: int | None) -> list[tuple[int, int, int]]:
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


def elastic_positions(
    n: int, batch_size: int, total_batches: int, num_shards: int, shard_index: int, first: int = 0
) -> np.ndarray:
    """Positions of an epoch's global order that a shard takes under elastic sharding.

    The global order is cut into ``total_batches`` batches of ``batch_size``
    (the last may be partial); shard s of S takes global batches
    ``first + s, first + s + S, ...``. The positions depend on S only through
    this split, so a run checkpointed after global batch ``first`` can
    resume at any number of shards with no position repeated or skipped.
    """
    check_shard(num_shards, shard_index)
    batches = np.arange(first + shard_index, total_batches, num_shards, dtype=np.int64)
    pos = (batches[:, None] * batch_size + np.arange(batch_size, dtype=np.int64)).ravel()
    return pos[pos < n]
