"""Randomness keyed by (seed, epoch, shard), and nothing else.

Every random choice of an epoch - a random-access order (the keyed
bijection in :mod:`exactbatch.order.bijection`), a stream's chunk order, its
shuffle buffer - draws from a generator derived here from the epoch's key
and a tag that keeps the purposes apart. Nothing holds state: epoch e of
shard s is rebuilt from its key alone, whatever happened before.
"""

from __future__ import annotations

import numpy as np

from exactbatch.checks import check_int

__all__ = ["buffer_rng", "check_key", "checked_positions", "chunk_order", "derive_rng"]

# Streams of randomness for different purposes are kept apart by a tag.
_TAG_CHUNKS = 0x65786368  # chunk orders of streamed epochs
_TAG_BUFFER = 0x65786266  # the shuffle buffer of streamed epochs


def check_key(**key: int) -> None:
    """Each keyword must be an int >= 0, of any size (TypeError / ValueError naming it)."""
    for name, value in key.items():
        check_int(name, value, 0, maximum=None)  # a key of any size (SeedSequence)


def derive_rng(tag: int, seed: int, epoch: int, shard: int) -> np.random.Generator:
    """A generator keyed by ``(tag, seed, epoch, shard)`` and nothing else."""
    check_key(seed=seed, epoch=epoch, shard=shard)
    ss = np.random.SeedSequence([tag, int(seed), int(epoch), int(shard)])
    return np.random.Generator(np.random.PCG64(ss))


def chunk_order(k: int, *, seed: int, epoch: int, shard: int = 0) -> np.ndarray:
    """The order in which a streamed epoch reads its ``k`` chunks (a permutation)."""
    check_key(k=k)
    return derive_rng(_TAG_CHUNKS, seed, epoch, shard).permutation(k)


def buffer_rng(*, seed: int, epoch: int, shard: int = 0) -> np.random.Generator:
    """The generator a streamed epoch's shuffle buffer draws from."""
    return derive_rng(_TAG_BUFFER, seed, epoch, shard)


def checked_positions(positions: np.ndarray | int | list[int], n: int) -> np.ndarray:
    """``positions`` as int64 (their shape kept), each in ``[0, n)``: an ``IndexError``
    naming the first outside it otherwise."""
    pos = np.asarray(positions, dtype=np.int64)
    flat = pos.reshape(-1)
    if flat.size and (flat.min() < 0 or flat.max() >= n):
        bad = flat[(flat < 0) | (flat >= n)][0]
        raise IndexError(f"position {bad} is out of range [0, n) = [0, {n})")
    return pos
