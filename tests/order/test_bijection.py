"""Laws of the keyed epoch bijection (exactbatch.order.bijection).

* Every epoch is an exact permutation of range(n), for every n (exhaustive
  for n <= 300, selected sizes up to 10**6 checked in full, hypothesis up to
  20000), however its positions are asked for.
* The order is a pure function of (n, seed, epoch, shard), pinned by a golden
  order; changing any part of the key changes the order.
* n up to 2**63 - 1 costs nothing to set up: a batch of positions is mapped
  in well under 50 MB.
* Quality: each position's row is uniform (chi-square), pairs of positions
  are uniform over pairs of rows, odd and even permutations are equally
  likely, epochs and shards are uncorrelated, and neighbouring positions land
  on unrelated rows (gaps spread and collide as for a uniform permutation).

Every statistic here is computed from fixed keys, so each test is
deterministic; the thresholds are set at p ~ 0.001 or several standard
deviations, so a correct uniform permutation would almost never fail them.
"""

from __future__ import annotations

import itertools
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exactbatch.order import EpochBijection, epoch_rows

KEYS = [(0, 0, 0), (1, 2, 3), (2**63 - 1, 10**6, 7)]
SELECTED = [
    1000,
    4095,
    4096,
    4097,
    65535,
    65536,
    65537,
    104729,  # prime
    2**20 - 1,
    2**20 + 1,
    999_983,  # prime
    10**6,
    3**12,  # odd x odd rectangle
]
Z_999 = 3.090232306167813  # the standard normal's 0.999 quantile


def chi2_critical_999(dof: int) -> float:
    """Chi-square's 0.999 quantile, Wilson-Hilferty (within 0.5% for dof >= 50)."""
    h = 2 / (9 * dof)
    return dof * (1 - h + Z_999 * math.sqrt(h)) ** 3


def is_permutation(rows: np.ndarray, n: int) -> bool:
    return rows.dtype == np.int64 and np.array_equal(np.sort(rows), np.arange(n))


def parity(perm: np.ndarray) -> int:
    """0 for an even permutation, 1 for an odd one: (n - cycles) mod 2."""
    seen = np.zeros(len(perm), dtype=bool)
    cycles = 0
    for i in range(len(perm)):
        if not seen[i]:
            cycles += 1
            j = i
            while not seen[j]:
                seen[j] = True
                j = perm[j]
    return (len(perm) - cycles) % 2


# -- exact bijection ------------------------------------------------------------


@pytest.mark.parametrize("key", KEYS, ids=lambda k: "seed{}-epoch{}-shard{}".format(*k))
def test_every_small_n_is_a_permutation(key):
    """For every n in 0..300, rows(0, n) is a permutation of range(n)."""
    seed, epoch, shard = key
    for n in range(301):
        rows = EpochBijection(n, seed=seed, epoch=epoch, shard=shard).rows(0, n)
        assert is_permutation(rows, n), n


@pytest.mark.parametrize("n", SELECTED, ids=lambda n: f"n{n}")
def test_selected_sizes_are_permutations(n):
    """Sizes near powers of two, primes and odd x odd rectangles: exact permutations."""
    for seed, epoch, shard in KEYS[:2]:
        assert is_permutation(epoch_rows(n, seed=seed, epoch=epoch, shard=shard), n)


@given(
    n=st.integers(0, 20_000),
    seed=st.integers(0, 2**63 - 1),
    epoch=st.integers(0, 2**32),
    shard=st.integers(0, 4096),
)
def test_any_key_gives_a_permutation(n, seed, epoch, shard):
    """For any n <= 20000 and any key, the epoch is a permutation of range(n)."""
    assert is_permutation(epoch_rows(n, seed=seed, epoch=epoch, shard=shard), n)


def test_rows_do_not_depend_on_how_positions_are_asked_for():
    """rows(0, n) == any split into rows(a, b) == bij(positions) in any order and shape."""
    for n in (0, 1, 2, 3, 10, 997, 5000):
        bij = EpochBijection(n, seed=11, epoch=3, shard=1)
        full = bij.rows(0, n)
        cuts = np.sort(np.random.default_rng(n).integers(0, n + 1, size=7))
        bounds = [0, *cuts.tolist(), n]
        pieces = [bij.rows(a, b) for a, b in itertools.pairwise(bounds)]
        assert np.array_equal(np.concatenate(pieces), full)
        pos = np.random.default_rng(n + 1).permutation(n)
        assert np.array_equal(bij(pos), full[pos])
        if n % 2 == 0:
            grid = pos.reshape(2, -1)
            assert np.array_equal(bij(grid), full[grid])
        assert np.array_equal(bij(pos.astype(np.uint32)), full[pos])
        for i in (0, 1, n - 1):
            if 0 <= i < n:
                assert bij(np.array([i]))[0] == full[i] == bij.rows(i, i + 1)[0]


def test_split_law_holds_for_every_key_with_and_without_the_swap_of_0_and_1():
    """rows(a, b) == rows(0, n)[a:b] for every a <= b near the start (where the key's
    swap of positions 0 and 1 acts) and at random cuts, over many keys: some swap, some
    do not, so both branches are held to the law."""
    swaps = set()
    for n in (2, 3, 5, 10, 97, 4097):
        for seed in range(12):
            bij = EpochBijection(n, seed=seed, epoch=seed % 3, shard=seed % 2)
            swaps.add(bij._swap01)
            full = bij.rows(0, n)
            assert is_permutation(full, n)
            assert np.array_equal(bij(np.arange(n)), full)
            for a in range(min(n, 4) + 1):
                for b in range(a, min(n, 5) + 1):
                    assert np.array_equal(bij.rows(a, b), full[a:b]), (n, seed, a, b)
                assert np.array_equal(bij.rows(a, n), full[a:]), (n, seed, a)
            cuts = np.sort(np.random.default_rng(seed).integers(0, n + 1, size=5))
            bounds = [0, *cuts.tolist(), n]
            pieces = [bij.rows(a, b) for a, b in itertools.pairwise(bounds)]
            assert np.array_equal(np.concatenate(pieces), full), (n, seed, bounds)
    assert swaps == {True, False}  # both branches ran


def test_caller_positions_are_left_untouched():
    """Mapping positions never writes into the caller's array."""
    bij = EpochBijection(1000, seed=0, epoch=0)
    pos = np.arange(1000)[::-1].copy()
    before = pos.copy()
    bij(pos)
    assert np.array_equal(pos, before)


# -- a pure function of the key -----------------------------------------------------


def test_same_key_same_order():
    """Two bijections built from the same (n, seed, epoch, shard) agree everywhere."""
    for n in (10, 1000, 65537):
        a = EpochBijection(n, seed=42, epoch=7, shard=3).rows(0, n)
        b = EpochBijection(n, seed=42, epoch=7, shard=3).rows(0, n)
        c = epoch_rows(n, seed=42, epoch=7, shard=3)
        assert np.array_equal(a, b) and np.array_equal(a, c)


def test_every_part_of_the_key_changes_the_order():
    """Different epochs, seeds or shards give pairwise different orders."""
    n = 1000
    keys = [(s, e, h) for s in range(3) for e in range(4) for h in range(3)]
    orders = {k: epoch_rows(n, seed=k[0], epoch=k[1], shard=k[2]) for k in keys}
    for ka, kb in itertools.combinations(keys, 2):
        # Two independent uniform orders of 1000 rows agree in ~1 place.
        assert np.count_nonzero(orders[ka] == orders[kb]) < 20, (ka, kb)


def test_golden_order():
    """The order is pinned: an accidental change of algorithm or keys is caught."""
    assert epoch_rows(10, seed=0, epoch=0).tolist() == [9, 5, 0, 3, 1, 2, 8, 7, 4, 6]
    assert epoch_rows(37, seed=5, epoch=1, shard=2).tolist()[:8] == [30, 21, 28, 19, 3, 10, 31, 20]
    big = EpochBijection(10**10, seed=1, epoch=2, shard=3)
    assert big.rows(0, 4).tolist() == [4440391049, 3613145030, 8473639736, 3240219364]
    huge = EpochBijection(2**62 - 1, seed=1, epoch=2, shard=3)
    assert huge.rows(2**61, 2**61 + 2).tolist() == [310545727670930864, 3476756644440702644]


# Small epochs, where the swap of positions 0 and 1, rounds on a half of one value and
# the smallest rectangles act: seeds 0..3 of epoch 0.
GOLDEN_SMALL = {
    2: [[1, 0], [0, 1], [0, 1], [0, 1]],
    3: [[1, 2, 0], [2, 0, 1], [2, 0, 1], [1, 0, 2]],
    4: [[1, 2, 0, 3], [2, 0, 3, 1], [2, 3, 1, 0], [1, 0, 3, 2]],
    5: [[2, 3, 4, 0, 1], [3, 2, 0, 1, 4], [3, 4, 1, 2, 0], [1, 2, 3, 0, 4]],
    7: [[4, 0, 6, 2, 1, 3, 5], [6, 1, 5, 2, 0, 3, 4], [5, 3, 2, 4, 0, 6, 1], [4, 0, 6, 5, 3, 1, 2]],
}
# (p, q, rounds) of the domain: the rectangle chosen and the rounds it gets, at the edges
# of each choice (a half of 1, 2 x 2 for n = 3, 4 and 256 values a half, the window of q).
GOLDEN_DOMAINS = {
    1: (1, 1, 16),
    2: (2, 1, 16),
    3: (2, 2, 16),
    4: (2, 2, 16),
    5: (3, 2, 16),
    10: (5, 2, 16),
    16: (4, 4, 8),
    20: (5, 4, 8),
    37: (13, 3, 16),
    1000: (40, 25, 8),
    65536: (256, 256, 4),
    65537: (331, 198, 8),
    65792: (257, 256, 4),
    10**6: (1000, 1000, 4),
    2**40 + 1: (1049600, 1047553, 4),
    2**44 + 7: (4195328, 4193281, 4),
}


def test_golden_small_orders_and_domains():
    """Pinned too: the orders of tiny epochs and the domain each size gets."""
    for n, orders in GOLDEN_SMALL.items():
        assert [epoch_rows(n, seed=s, epoch=0).tolist() for s in range(4)] == orders, n
    for n, want in GOLDEN_DOMAINS.items():
        bij = EpochBijection(n, seed=0, epoch=0)
        assert (bij.p, bij.q, bij.rounds) == want, n


def test_shard_0_is_the_default_and_epoch_rows_slices():
    """shard defaults to 0; epoch_rows(start=, stop=) is that slice of the whole order."""
    full = epoch_rows(100, seed=3, epoch=1, shard=0)
    assert np.array_equal(epoch_rows(100, seed=3, epoch=1), full)
    assert np.array_equal(EpochBijection(100, seed=3, epoch=1).rows(0, 100), full)
    for a, b in ((0, 100), (1, 7), (50, 50), (99, 100)):
        assert np.array_equal(epoch_rows(100, seed=3, epoch=1, start=a, stop=b), full[a:b])
    assert np.array_equal(epoch_rows(100, seed=3, epoch=1, start=60), full[60:])


# -- huge n -------------------------------------------------------------------------


@pytest.mark.parametrize("n", [10**10, 2**62 - 1, 2**62, 2**63 - 1], ids=lambda n: f"n{n}")
def test_huge_n_is_cheap(n):
    """Building the order of n rows and mapping a batch of 4096 positions uses < 50 MB."""
    tracemalloc.start()
    try:
        bij = EpochBijection(n, seed=3, epoch=9, shard=1)
        batches = [bij.rows(a, a + 4096) for a in (0, n // 2, n - 4096)]
        picked = np.random.default_rng(0).integers(0, n, size=4096, dtype=np.int64)
        batches.append(bij(picked))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 50 * 2**20
    for rows in batches:
        assert rows.dtype == np.int64 and rows.shape == (4096,)
        assert rows.min() >= 0 and rows.max() < n
        assert len(np.unique(rows)) == 4096
    assert np.array_equal(bij(np.arange(n - 4096, n)), batches[2])


# -- quality ----------------------------------------------------------------------------


@pytest.mark.parametrize("n", [10, 37], ids=lambda n: f"n{n}")
def test_each_position_is_equally_likely_to_hold_each_row(n):
    """Over 3000 keys, the n x n table of (position, row) counts passes chi-square at p=0.001.

    Each key adds a permutation matrix, whose rows and columns sum to one, so
    Pearson's statistic is (n/(n-1)) chi2((n-1)**2) for uniform orders: it is
    scaled back before the comparison.
    """
    keys = 3000
    counts = np.zeros((n, n))
    for seed in range(keys):
        counts[np.arange(n), epoch_rows(n, seed=seed, epoch=1)] += 1
    expected = keys / n
    stat = ((counts - expected) ** 2 / expected).sum() * (n - 1) / n
    assert stat < chi2_critical_999((n - 1) ** 2)


@pytest.mark.parametrize(
    ("n", "a", "b"), [(11, 0, 10), (12, 5, 9), (37, 3, 4)], ids=["n11-walks", "n12", "n37"]
)
def test_pairs_of_positions_are_uniform_over_pairs_of_rows(n, a, b):
    """(row at a, row at b) is uniform over the n(n-1) ordered pairs: chi-square at p=0.001."""
    cells = n * (n - 1) if n < 20 else 12 * 12
    keys = 50 * cells
    counts = np.zeros((n, n))
    for seed in range(keys):
        rows = EpochBijection(n, seed=seed, epoch=4).rows(0, max(a, b) + 1)
        counts[rows[a], rows[b]] += 1
    if n < 20:
        observed = counts[~np.eye(n, dtype=bool)]
        expected = np.full(cells, keys / cells)
    else:  # rows binned by r % 12; the expectation counts the off-diagonal pairs per bin pair
        size = np.bincount(np.arange(n) % 12).astype(float)
        pairs = np.outer(size, size) - np.diag(size)
        binned = np.zeros((12, 12))
        np.add.at(binned, (np.arange(n)[:, None] % 12, np.arange(n)[None, :] % 12), counts)
        observed, expected = binned.ravel(), (pairs / pairs.sum() * keys).ravel()
    stat = ((observed - expected) ** 2 / expected).sum()
    assert stat < chi2_critical_999(cells - 1)


@pytest.mark.parametrize("n", [3, 4], ids=lambda n: f"n{n}")
def test_all_orders_of_a_tiny_n_are_equally_likely(n):
    """Over 50 keys per order, each of the n! orders comes up as often: chi-square at p=0.001."""
    orders = {p: i for i, p in enumerate(itertools.permutations(range(n)))}
    keys = 50 * len(orders)
    counts = np.zeros(len(orders))
    for seed in range(keys):
        counts[orders[tuple(epoch_rows(n, seed=seed, epoch=0).tolist())]] += 1
    expected = keys / len(orders)
    stat = ((counts - expected) ** 2 / expected).sum()
    dof = len(orders) - 1
    # Wilson-Hilferty is loose for few degrees of freedom; exact 0.999 quantiles:
    critical = {5: 20.515, 23: 49.728}[dof]
    assert stat < critical


@pytest.mark.parametrize("n", [9, 15, 25, 3**6], ids=lambda n: f"n{n}")
def test_odd_and_even_orders_are_equally_likely(n):
    """About half the orders are odd, also on odd x odd rectangles (Feistel rounds: even)."""
    keys = 400
    odd = sum(parity(epoch_rows(n, seed=s, epoch=2)) for s in range(keys))
    assert abs(odd / keys - 0.5) < 0.1  # 4 standard deviations


def corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.corrcoef(a.astype(float), b.astype(float))[0, 1])


N_CORR = 10_000  # |r| of independent orders has standard deviation 1/sqrt(n) = 0.01


@pytest.mark.parametrize("epoch", [0, 1, 2, 99, 2**40])
def test_consecutive_epochs_are_uncorrelated(epoch):
    """The rows of epoch e and e+1 at the same positions have |Pearson = Spearman r| < 0.05."""
    a = epoch_rows(N_CORR, seed=5, epoch=epoch)
    b = epoch_rows(N_CORR, seed=5, epoch=epoch + 1)
    assert abs(corr(a, b)) < 0.05


@pytest.mark.parametrize("shard", [0, 1, 2, 7])
def test_neighbouring_shards_are_uncorrelated(shard):
    """Shard s and s+1 of the same epoch: |r| < 0.05 between their position -> row maps."""
    a = epoch_rows(N_CORR, seed=5, epoch=3, shard=shard)
    b = epoch_rows(N_CORR, seed=5, epoch=3, shard=shard + 1)
    assert abs(corr(a, b)) < 0.05


@pytest.mark.parametrize("seed", [0, 1, 2, 12345])
def test_neighbouring_seeds_are_uncorrelated(seed):
    """Seed s and s+1 of the same epoch: |r| < 0.05."""
    a = epoch_rows(N_CORR, seed=seed, epoch=0)
    b = epoch_rows(N_CORR, seed=seed + 1, epoch=0)
    assert abs(corr(a, b)) < 0.05


@pytest.mark.parametrize("n", [N_CORR, 1 << 14, 3**9, 10**10], ids=lambda n: f"n{n}")
def test_an_epoch_forgets_the_file_order(n):
    """Rows are uncorrelated with positions, and neighbouring positions' rows lie ~n/3 apart.

    For a uniform order E|row[p+1] - row[p]| = (n+1)/3, with a standard error
    of about 0.0025 n over 10000 gaps; the bounds are 8 of those.
    """
    for seed in range(3):
        start = 0 if n <= 10**6 else n // 3
        pos = np.arange(start, start + min(n, N_CORR))
        rows = EpochBijection(n, seed=seed, epoch=6).rows(int(pos[0]), int(pos[-1]) + 1)
        assert abs(corr(pos, rows)) < 0.05
        gap = np.abs(np.diff(rows.astype(float))).mean() / n
        assert abs(gap - 1 / 3) < 0.02


def repeats(values: np.ndarray) -> int:
    values = np.sort(values)
    return int(np.count_nonzero(values[1:] == values[:-1]))


@pytest.mark.parametrize("lag", [1, 2, 1000, 1001])
def test_gaps_between_neighbouring_rows_repeat_as_for_a_uniform_order(lag):
    """Gaps (row[p+lag] - row[p]) mod n repeat as often as for a uniform order: no lattice.

    A Feistel network with a linear round hash leaves a lattice behind: the
    same few gaps over and over (tens of thousands of repeats here). For a
    uniform order of n = 10**6 rows, 65536 gaps repeat about 2100 times (the
    birthday count); the bounds are about 7 standard deviations.
    """
    n, m = 10**6, 65536
    rows = EpochBijection(n, seed=8, epoch=1).rows(300_000, 300_000 + m + lag)
    gaps = (rows[lag:] - rows[:-lag]) % n
    expected = m - n * (1 - math.exp(-m / n))
    assert abs(repeats(gaps) - expected) < 0.15 * expected
    # n = 10**10: a repeat among 65536 uniform gaps has probability ~ 0.2.
    big = EpochBijection(10**10, seed=8, epoch=1).rows(5 * 10**9, 5 * 10**9 + m + lag)
    assert repeats((big[lag:] - big[:-lag]) % 10**10) <= 4


# -- errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"n": -1}, ValueError, "n must be >= 0"),
        ({"n": 2**63}, ValueError, "n must be < 2\\*\\*63"),
        ({"n": 10.0}, TypeError, "n must be an int"),
        ({"seed": -2}, ValueError, "seed=-2"),
        ({"seed": True}, TypeError, "seed must be an int"),
        ({"epoch": 1.5}, TypeError, "epoch must be an int"),
        ({"shard": -1}, ValueError, "shard=-1"),
    ],
    ids=[
        "n-negative",
        "n-too-big",
        "n-float",
        "seed-negative",
        "seed-bool",
        "epoch-float",
        "shard-negative",
    ],
)
def test_bad_keys_are_refused(kwargs, error, match):
    """A bad n, seed, epoch or shard is a TypeError or ValueError naming it and the value."""
    args = {"n": 10, "seed": 0, "epoch": 0, "shard": 0, **kwargs}
    n = args.pop("n")
    with pytest.raises(error, match=match):
        EpochBijection(n, **args)
    with pytest.raises(error, match=match):
        epoch_rows(n, **args)


def test_bad_positions_are_refused():
    """Positions outside [0, n) are an IndexError; non-integer positions a TypeError."""
    bij = EpochBijection(10, seed=0, epoch=0)
    for bad in ([10], [-1], [3, 12], np.array([2**63 - 1])):
        with pytest.raises(IndexError, match=r"out of range \[0, n\) = \[0, 10\)"):
            bij(bad)
    for bad, first in (([0, 1, -1, 12], -1), ([0, 12, -1], 12), ([[0, 1], [10, 2]], 10)):
        with pytest.raises(IndexError, match=rf"^position {first} is out of range"):
            bij(np.array(bad))
    with pytest.raises(TypeError, match="positions must be integers"):
        bij(np.array([1.0, 2.0]))
    with pytest.raises(TypeError, match="positions must be integers"):
        bij(np.array([True]))
    with pytest.raises(IndexError, match="stop=11"):
        bij.rows(0, 11)
    with pytest.raises(ValueError, match="start must be <= stop"):
        bij.rows(5, 4)
    with pytest.raises(ValueError, match="start must be >= 0"):
        bij.rows(-1, 4)
    with pytest.raises(TypeError, match="stop must be an int"):
        bij.rows(0, 4.0)


def test_empty_epochs():
    """n = 0: no positions; mapping no positions gives no rows, as int64."""
    bij = EpochBijection(0, seed=0, epoch=0)
    assert bij.rows(0, 0).shape == (0,) and bij.rows(0, 0).dtype == np.int64
    assert bij(np.array([], dtype=np.int64)).shape == (0,)
    assert epoch_rows(0, seed=1, epoch=2).shape == (0,)
    with pytest.raises(IndexError):
        bij(np.array([0]))
    assert EpochBijection(5, seed=0, epoch=0)(np.zeros((0, 3), dtype=np.int64)).shape == (0, 3)


# -- the compiled core gives the same rows -------------------------------------------------


def _both_backends(n: int, **key) -> tuple[EpochBijection, EpochBijection]:
    """The bijection made on the compiled backend and on the pure NumPy one."""
    from exactbatch import kernels

    before = kernels.backend()
    try:
        kernels.use_backend("compiled")
        compiled = EpochBijection(n, **key)
        kernels.use_backend("numpy")
        pure = EpochBijection(n, **key)
    finally:
        kernels.use_backend(before)
    return compiled, pure


needs_core = pytest.mark.skipif(
    __import__("exactbatch").kernels._BUILT is None, reason="the compiled core is not built"
)


@needs_core
@given(
    n=st.one_of(st.integers(1, 300), st.integers(1, 2**63 - 1)),
    seed=st.integers(0, 2**32),
    epoch=st.integers(0, 50),
    shard=st.integers(0, 7),
    start=st.integers(0, 2**63 - 1),
    positions=st.lists(st.integers(0, 2**63 - 1), max_size=40),
)
def test_the_compiled_bijection_gives_the_numpy_paths_rows(n, seed, epoch, shard, start, positions):
    """Bit for bit, for any key and n (rounds of every kind, cycle walking, the swap of
    0 and 1): a run of positions (one over 8 lanes and a tail) and any positions."""
    compiled, pure = _both_backends(n, seed=seed, epoch=epoch, shard=shard)
    assert compiled._c is not None and pure._c is None
    a = start % n
    b = min(n, a + 37)
    np.testing.assert_array_equal(compiled.rows(a, b), pure.rows(a, b))
    np.testing.assert_array_equal(compiled.rows(0, min(n, 19)), pure.rows(0, min(n, 19)))
    pos = np.array([p % n for p in positions], dtype=np.int64)
    np.testing.assert_array_equal(compiled(pos), pure(pos))


@needs_core
@pytest.mark.parametrize("n", [2, 3, 17, 1000, 65_537, 1_000_003])
def test_the_compiled_bijection_is_the_same_permutation(n):
    compiled, pure = _both_backends(n, seed=3, epoch=1, shard=2)
    got = compiled.rows(0, n)
    np.testing.assert_array_equal(got, pure.rows(0, n))
    assert np.array_equal(np.sort(got), np.arange(n))


@needs_core
def test_the_compiled_bijection_checks_what_it_is_given():
    """The kernel itself (``exactbatch._core.bijection``, which EpochBijection feeds only
    plans it built): arguments it cannot use are a clear error, never a crash or rows
    from garbage; a plan of 16 rounds, its most, is taken."""
    from exactbatch import _core

    # the 7 x 7 rectangle: rounds into x // 7, mod 7 (into_high, key, mult, mod, divisor)
    step = (True, 3, 5, 7, -(-(1 << 64) // 7))
    bij = _core.bijection(49, 7, False, [step] * 16)
    out = np.empty(49, dtype=np.int64)
    bij.rows(0, out)
    assert sorted(out.tolist()) == list(range(49))  # a permutation of range(49)
    for n, q, plan, error, words in [
        (0, 7, [step], ValueError, "n and q must be >= 1"),
        (49, 0, [step], ValueError, "n and q must be >= 1"),
        (49, 7, [step] * 17, ValueError, "at most 16 rounds"),
        (49, 7, 3, TypeError, "plan must be a sequence"),
        (49, 7, [step[:4]], TypeError, "bijection plan"),
        (49, 7, [(True, 3, 5, 1, 1)], ValueError, "a round's mod must be >= 2"),
        (49, 7, [(True, 3, 5, 7, 0)], ValueError, "a round's mod must be >= 2"),
    ]:
        with pytest.raises(error, match=words):
            _core.bijection(n, q, False, plan)
    for bad in (
        np.zeros(4, dtype=np.int32),
        np.zeros(4, dtype=np.float64),
        np.zeros((2, 2), dtype=np.int64),
    ):
        with pytest.raises(TypeError, match="must be a 1-D int64 or uint64 array"):
            bij.map(bad)
        with pytest.raises(TypeError, match="must be a 1-D int64 or uint64 array"):
            bij.rows(0, bad)
    frozen = np.arange(4, dtype=np.int64)
    frozen.flags.writeable = False
    with pytest.raises((TypeError, ValueError, BufferError)):
        bij.map(frozen)
    assert frozen.tolist() == [0, 1, 2, 3]


@needs_core
@given(
    n=st.integers(1, 20_000),
    b=st.integers(1, 5000),
    offset=st.integers(0, 1000),
    wide=st.booleans(),
    cut=st.integers(0, 20_000),
    seed=st.integers(0, 2**32),
)
def test_the_one_pass_whole_order_is_the_blocked_paths_rows_and_digests(
    n, b, offset, wide, cut, seed
):
    """``whole_into`` (rows and batch digests in one pass in C, what a random-access
    epoch's whole order is made with) gives the values and digests of the pure path's
    blocks (rows, plus the offset, in the order's dtype; ``batch_digests`` of them), for
    a prefix of the order too; the pure backend's bijection makes none (None)."""
    from exactbatch.batching.blocked_order import BlockedOrder
    from exactbatch.order.digest import batch_digests

    compiled, pure = _both_backends(n, seed=seed, epoch=1, shard=0)
    dtype = np.int64 if wide else np.int32
    r = 1 + cut % n
    out = np.full(r, -5, dtype=dtype)
    digests = compiled.whole_into(out, b, offset)
    assert digests is not None and digests.dtype == np.uint64
    want = (pure.rows(0, r).astype(dtype) + offset).astype(dtype)
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(digests, batch_digests(want, b))
    assert pure.whole_into(np.empty(r, dtype=dtype), b, offset) is None
    # and BlockedOrder.mapped_all, on each backend: the same (rows, digests)
    got = [
        BlockedOrder(bij, offset, dtype, b).mapped_all(np.empty(r, dtype=dtype))
        for bij in (compiled, pure)
    ]
    np.testing.assert_array_equal(got[0][0], got[1][0])
    assert bytes(got[0][1]) == bytes(got[1][1])


@needs_core
def test_the_one_pass_whole_order_refuses_bad_buffers_naming_them():
    compiled, _ = _both_backends(100, seed=0, epoch=0)
    c = compiled._c
    digests = np.empty(10, dtype=np.uint64)
    with pytest.raises(TypeError, match="out must be a 1-D"):
        c.whole(np.empty(100), digests, 10, 0, 1, 2, 3)
    with pytest.raises(TypeError, match="digests must be a 1-D"):
        c.whole(np.empty(100, np.int64), np.empty(10, np.int64), 10, 0, 1, 2, 3)
    with pytest.raises(ValueError, match="need that many digests"):
        c.whole(np.empty(100, np.int64), np.empty(9, np.uint64), 10, 0, 1, 2, 3)
    with pytest.raises(ValueError, match="need that many digests"):
        c.whole(np.empty(101, np.int64), np.empty(11, np.uint64), 10, 0, 1, 2, 3)
    with pytest.raises(ValueError, match="need that many digests"):
        c.whole(np.empty(100, np.int64), digests, 0, 0, 1, 2, 3)


@given(
    start=st.integers(0, 2**40),
    n=st.integers(0, 3000),
    b=st.integers(1, 300),
)
def test_file_orders_batch_digests_in_closed_form_are_those_of_its_rows(start, n, b):
    """File order's whole order (feeds/random_access.py's ``_file_order``): its batches'
    digests in closed form (``range_batch_digests``) are ``batch_digests`` of its rows,
    and each ``range_digest`` of its batch."""
    from exactbatch.order.digest import batch_digests, range_batch_digests, range_digest

    got = range_batch_digests(start, n, b)
    rows = np.arange(start, start + n, dtype=np.int64)
    np.testing.assert_array_equal(got, batch_digests(rows, b))
    assert got.tolist() == [range_digest(a, min(a + b, start + n)) for a in rows[::b].tolist()]
