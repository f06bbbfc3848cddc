"""Shard ranges: shard s of S owns the contiguous rows [s*n//S, (s+1)*n//S).

Every row lies in exactly one shard and shard sizes differ by at most one.
"""

from __future__ import annotations

__all__ = ["check_shard", "shard_range"]


def check_shard(num_shards, shard_index) -> None:
    """Raise if ``(num_shards, shard_index)`` is not a valid shard."""
    for name, value in (("num_shards", num_shards), ("shard_index", shard_index)):
        if isinstance(value, bool) or not isinstance(value, int):
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
