"""Shard ranges: shard s of S owns the contiguous rows [s*n//S, (s+1)*n//S).

Every row lies in exactly one shard and shard sizes differ by at most one.
"""

from __future__ import annotations

import numpy as np

from exactbatch.checks import check_int

__all__ = ["check_shard", "chunk_pieces", "elastic_share", "shard_range"]


def check_shard(num_shards, shard_index) -> None:
    """Raise if ``(num_shards, shard_index)`` is not a valid shard."""
    check_int("num_shards", num_shards)
    check_int("shard_index", shard_index)
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


def elastic_share(
    n: int, batch_size: int, total_batches: int, num_shards: int, shard_index: int, first: int = 0
) -> tuple[int, int]:
    """``(batches, rows)`` a shard takes of an epoch under elastic sharding.

    The epoch's global order is cut into ``total_batches`` batches of
    ``batch_size`` (the last holds what is left of ``n``, or is dropped with
    drop_last, when ``total_batches`` is ``n // batch_size``); shard s of S
    takes global batches ``first + s, first + s + S, ...``. That split is the
    only place S enters, so a run checkpointed after global batch ``first``
    can resume at any number of shards with no row repeated or skipped.
    """
    check_shard(num_shards, shard_index)
    g0 = first + shard_index
    batches = max(0, -(-(total_batches - g0) // num_shards))
    rows = batches * batch_size
    if batches and (total_batches - 1 - g0) % num_shards == 0:  # it holds the last batch,
        rows -= max(0, total_batches * batch_size - n)  # which may be partial
    return batches, rows
