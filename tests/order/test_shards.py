"""Laws of the shard ranges, chunk pieces, chunk orders and elastic shares
(exactbatch.order.Shard and .keys), checked directly and exhaustively on small sizes."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from exactbatch.order import (
    Shard,
    buffer_rng,
    check_shard,
    chunk_order,
    chunk_pieces,
    derive_rng,
)


def shard_range(n, num_shards=1, shard_index=0):
    return Shard(shard_index, num_shards).range(n)


def elastic_share(n, batch_size, total_batches, num_shards, shard_index, first=0):
    return Shard(shard_index, num_shards).elastic_share(n, batch_size, total_batches, first)


def test_shard_ranges_are_contiguous_disjoint_complete_and_balanced():
    """Shard s of S owns [s*n//S, (s+1)*n//S): together range(n), sizes within one."""
    for n in range(0, 30):
        for shards in range(1, 7):
            ranges = [shard_range(n, shards, s) for s in range(shards)]
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
            sizes = [b - a for a, b in ranges]
            assert max(sizes) - min(sizes) <= 1 and sum(sizes) == n
            assert ranges == [(s * n // shards, (s + 1) * n // shards) for s in range(shards)]
        assert shard_range(n) == (0, n)  # one shard by default


@pytest.mark.parametrize(
    "args, error, match",
    [
        ((10, 0, 0), ValueError, "num_shards must be >= 1"),
        ((10, 2, 2), ValueError, r"shard_index must be in \[0, num_shards\) = \[0, 2\)"),
        ((10, 2, -1), ValueError, "shard_index"),
        ((10, True, 0), TypeError, "num_shards must be an int"),
        ((10, 2, 1.0), TypeError, "shard_index must be an int"),
        ((-1, 1, 0), ValueError, "n must be >= 0; got n=-1"),
    ],
)
def test_bad_shards_are_refused(args, error, match):
    with pytest.raises(error, match=match):
        shard_range(*args)


def test_check_shard_accepts_every_valid_shard():
    for shards in range(1, 5):
        for s in range(shards):
            check_shard(shards, s)
            check_shard(np.int64(shards), np.int32(s))


@pytest.mark.parametrize("sizes", [[5], [3, 0, 4, 1], [0, 0], [2, 7, 0, 3, 3], []])
def test_chunk_pieces_cover_exactly_the_rows_asked_for(sizes):
    """The pieces are rows [start, stop) of the chunks' concatenation, in chunk order,
    each (i, lo, hi) within its chunk and, for a non-empty range, non-empty: empty and
    outside chunks are left out."""
    total = sum(sizes)
    begins = np.concatenate([[0], np.cumsum(sizes)]).tolist()
    for start in range(total + 1):
        for stop in [*range(start, total + 1), None]:
            pieces = chunk_pieces(sizes, start, stop)
            rows = [begins[i] + r for i, lo, hi in pieces for r in range(lo, hi)]
            assert rows == list(range(start, total if stop is None else stop)), (start, stop)
            assert all(0 <= lo <= hi <= sizes[i] for i, lo, hi in pieces)
            if stop != start:  # (an empty range may come back as one empty piece)
                assert all(lo < hi for _, lo, hi in pieces), (start, stop, pieces)
            assert [i for i, _, _ in pieces] == sorted({i for i, _, _ in pieces})


def test_chunk_order_is_a_permutation_keyed_by_seed_epoch_and_shard():
    for k in (0, 1, 2, 10):
        assert sorted(chunk_order(k, seed=1, epoch=2, shard=3).tolist()) == list(range(k))
    default = chunk_order(50, seed=1, epoch=2)  # shard 0
    assert np.array_equal(default, chunk_order(50, seed=1, epoch=2, shard=0))
    base = chunk_order(50, seed=1, epoch=2, shard=3)
    assert np.array_equal(base, chunk_order(50, seed=1, epoch=2, shard=3))
    for other in (
        dict(seed=2, epoch=2, shard=3),
        dict(seed=1, epoch=3, shard=3),
        dict(seed=1, epoch=2, shard=4),
    ):
        assert not np.array_equal(base, chunk_order(50, **other)), other
    assert not np.array_equal(base, np.arange(50))
    with pytest.raises(ValueError, match="k must be >= 0"):
        chunk_order(-1, seed=0, epoch=0)


def test_the_generators_are_keyed_by_tag_seed_epoch_and_shard():
    """buffer_rng and derive_rng: the same key, the same draws; any other part, others."""
    draws = buffer_rng(seed=1, epoch=2, shard=3).integers(0, 2**62, 4)
    assert np.array_equal(draws, buffer_rng(seed=1, epoch=2, shard=3).integers(0, 2**62, 4))
    others = [
        buffer_rng(seed=2, epoch=2, shard=3),
        buffer_rng(seed=1, epoch=3, shard=3),
        buffer_rng(seed=1, epoch=2, shard=4),
        derive_rng(0, 1, 2, 3),
    ]
    for rng in others:
        assert not np.array_equal(draws, rng.integers(0, 2**62, 4))
    assert np.array_equal(
        derive_rng(7, 1, 2, 3).integers(0, 2**62, 4),
        np.random.Generator(np.random.PCG64(np.random.SeedSequence([7, 1, 2, 3]))).integers(
            0, 2**62, 4
        ),
    )
    with pytest.raises(ValueError, match="epoch must be >= 0"):
        derive_rng(0, 0, -1, 0)
    with pytest.raises(ValueError, match="shard must be >= 0"):
        derive_rng(0, 0, 0, -1)
    assert np.array_equal(  # shard defaults to 0
        buffer_rng(seed=1, epoch=2).integers(0, 2**62, 4),
        buffer_rng(seed=1, epoch=2, shard=0).integers(0, 2**62, 4),
    )
    with pytest.raises(TypeError, match="seed must be an int"):
        buffer_rng(seed=1.5, epoch=0)


@pytest.mark.parametrize("drop_last", [False, True])
def test_elastic_shares_deal_the_global_batches_in_turn(drop_last):
    """Shard s takes global batches first + s, first + s + S, ...: the counts and rows of
    all shards add up to the batches and rows left after ``first``."""
    for n in range(0, 23):
        for b in (1, 3, 5):
            total = n // b if drop_last else -(-n // b)
            for shards in range(1, 5):
                for first in range(total + 1):
                    shares = [elastic_share(n, b, total, shards, s, first) for s in range(shards)]
                    batches = list(range(first, total))
                    mine = [batches[s::shards] for s in range(shards)]
                    want_rows = [sum(min(b, n - g * b) for g in m) for m in mine]
                    assert shares == list(zip(map(len, mine), want_rows, strict=True)), (
                        n,
                        b,
                        shards,
                        first,
                    )
