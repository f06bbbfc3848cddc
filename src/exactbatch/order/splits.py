"""Deterministic splits of a source's rows: :func:`split` and :func:`kfold`.

Both are pure functions: the same arguments give the same id arrays, on any
machine, whatever happened before (the order comes from the keyed bijection
of :mod:`exactbatch.order.bijection`, keyed from ``seed`` by NumPy's
``SeedSequence``, both stable by specification, kept apart from the
loader's own epoch orders). Every id array is int64, sorted ascending, and
the arrays are disjoint with every row in exactly one part (one test fold).
Pass a part to ``DataLoader(source, ..., rows=part)``.

How fractions become counts (``split`` without groups): the rows are put
in a seeded random order and cut; part p gets ``floor(n * f_p)`` rows
(``f`` normalised to sum to 1) and the rows left over - fewer than the
number of parts - go one each to the parts with the largest remainders
``n * f_p - floor(n * f_p)``, the earlier part first on a tie (the largest
remainder method: every count is within one row of ``n * f_p``, and the
counts add up to n). A part can be empty when ``n * f_p`` is below one.
``kfold`` without groups: fold i holds ``n // k`` rows, one more for the
first ``n % k`` folds.

With ``groups`` (one label per row: an array, or a column of the source),
every group lies wholly in one part. The groups (their distinct labels,
sorted) are put in a seeded random order and dealt one by one, each to the
part that is least full relative to its target ``n * f_p`` (smallest
``rows so far / target``; the earlier part on a tie). So the first groups go
one to each part (no part is empty when there are at least as many groups
as parts), and each part's rows stay within about one group's size of its
target: sizes are approximate, the closer the smaller the groups. ``kfold``
deals the same way with equal targets; a fold's test part is its groups.
Cost: a sort of the labels, and a Python step per group (about 1 s per
million groups).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from exactbatch.checks import check_int
from exactbatch.hints import ArrayLike, Source
from exactbatch.order.bijection import EpochBijection
from exactbatch.sources.columns import source_column, source_size

__all__ = ["kfold", "split"]

_TAG_SPLIT = 0x65787370  # keys of split orders, apart from every epoch's


def _key(seed: int) -> int:
    """The bijection's seed for a split of ``seed`` (63 bits, stable across versions)."""
    state = np.random.SeedSequence([_TAG_SPLIT, seed]).generate_state(1, np.uint64)
    return int(state[0]) >> 1


def _order(m: int, seed: int) -> np.ndarray:
    """A seeded random order of ``range(m)`` (int64)."""
    if m == 0:
        return np.zeros(0, dtype=np.int64)
    return EpochBijection(m, seed=_key(seed), epoch=0).rows(0, m).astype(np.int64)


def _size_of(source_or_n) -> int:
    if isinstance(source_or_n, bool):
        raise TypeError("source_or_n must be a row count (an int) or a random-access source")
    if isinstance(source_or_n, (int, np.integer)):
        return check_int("n", source_or_n, 0)
    return source_size(source_or_n)


def _groups(source_or_n, groups, n: int):
    """``(codes, sizes)``: each row's group as 0 .. G-1 (the labels' sorted order) and
    each group's rows; None without groups."""
    if groups is None:
        return None
    if isinstance(groups, str):
        if isinstance(source_or_n, (int, np.integer)):
            raise TypeError(
                f"groups={groups!r} names a column, but the first argument is a row count: "
                "pass the source itself, or groups as an array"
            )
        values, where = source_column(source_or_n, groups), f"column {groups!r}"
    else:
        values, where = np.asarray(groups), "groups"
    if values.ndim != 1 or len(values) != n:
        raise ValueError(
            f"groups must hold one label per row: {n} labels; got shape {values.shape}"
        )
    if values.dtype.kind in "fc":
        bad = np.flatnonzero(np.isnan(values))
    elif values.dtype.kind == "O":
        bad = np.flatnonzero([v is None or v != v for v in values])
    else:
        bad = np.zeros(0, dtype=np.int64)
    if bad.size:
        raise ValueError(
            f"{where} holds NaN (or None) at {bad.size} row(s), the first row {int(bad[0])}: "
            "every row needs a group; fill or drop them first"
        )
    try:
        _, codes = np.unique(values, return_inverse=True)
    except TypeError as e:
        raise TypeError(f"{where} must hold comparable labels (numbers or strings); {e}") from None
    codes = codes.reshape(-1).astype(np.int64)
    return codes, np.bincount(codes, minlength=int(codes.max()) + 1 if n else 0)


def _fractions(fractions) -> np.ndarray:
    if isinstance(fractions, (str, bytes)) or not isinstance(fractions, (Sequence, np.ndarray)):
        raise TypeError(
            f"fractions must be a sequence of numbers, e.g. (0.8, 0.2); got {fractions!r}"
        )
    try:
        f = np.asarray(fractions, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"fractions must be numbers; got {fractions!r}") from None
    if f.ndim != 1 or f.size == 0:
        raise ValueError(f"fractions must be a non-empty 1-D sequence; got {fractions!r}")
    if not np.all(np.isfinite(f)) or np.any(f <= 0):
        raise ValueError(f"fractions must each be > 0 (and finite); got {f.tolist()}")
    total = math.fsum(f.tolist())
    if abs(total - 1.0) > 1e-9:
        raise ValueError(f"fractions must sum to 1; got {f.tolist()}, which sums to {total!r}")
    return f / total


def split_counts(n: int, fractions) -> list[int]:
    """Rows per part by the largest remainder method (module docs)."""
    f = _fractions(fractions)
    exact = n * f
    counts = np.floor(exact).astype(np.int64)
    left = n - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")  # largest remainder, earlier first
    counts[order[:left]] += 1
    return counts.tolist()


def _deal(sizes: np.ndarray, targets: np.ndarray, seed: int) -> np.ndarray:
    """Each group's part: groups in a seeded order, each to the least full part
    relative to its target (module docs)."""
    where = np.empty(len(sizes), dtype=np.int64)
    got, t, size = [0.0] * len(targets), targets.tolist(), sizes.tolist()
    chosen, order = [], _order(len(sizes), seed)
    for g in order.tolist():
        best, low = 0, got[0] / t[0]
        for q in range(1, len(t)):  # the least full part, the earlier on a tie
            v = got[q] / t[q]
            if v < low:
                best, low = q, v
        chosen.append(best)
        got[best] += size[g]
    where[order] = chosen
    return where


def _parts(part_of_row: np.ndarray, count: int) -> tuple[np.ndarray, ...]:
    return tuple(np.flatnonzero(part_of_row == p).astype(np.int64) for p in range(count))


def split(
    source_or_n: int | Source,
    fractions: Sequence[float],
    *,
    seed: int = 0,
    groups: ArrayLike | str | None = None,
) -> tuple[np.ndarray, ...]:
    """Split rows into disjoint parts of the given ``fractions``: a tuple of sorted int64
    id arrays, one per fraction, whose union is every row.

    ``source_or_n``: a row count n, or a random-access source (anything
    ``DataLoader`` reads by row: an ``.ndf`` file or dataset, arrays, a
    DataFrame). ``fractions``: numbers > 0 summing to 1, e.g. ``(0.8, 0.1,
    0.1)``; rounded to counts by the largest remainder method. ``groups``: one
    label per row (an array), or the name of a column of the source; every
    group then lies wholly in one part, and sizes approximate the fractions
    (module docs). A pure function of its arguments.

    Bad input: fractions not summing to 1, or one <= 0, a ``ValueError``;
    groups of the wrong length or holding NaN, a ``ValueError`` naming them;
    a column the source lacks, a ``KeyError`` (also a ``ValueError``) naming
    it and the available names; a column name for a source without names
    (an array) or a row count, a ``TypeError``; a stream, a ``TypeError``.
    """
    seed = check_int("seed", seed, 0, maximum=None)
    n = _size_of(source_or_n)
    f = _fractions(fractions)
    coded = _groups(source_or_n, groups, n)
    if coded is None:
        counts = split_counts(n, f)
        order, cuts = _order(n, seed), np.cumsum([0, *counts])
        return tuple(np.sort(order[a:z]) for a, z in zip(cuts[:-1], cuts[1:], strict=True))
    codes, sizes = coded
    where = _deal(sizes, n * f, seed)
    return _parts(where[codes], len(f))


def kfold(
    source_or_n: int | Source, k: int, *, seed: int = 0, groups: ArrayLike | str | None = None
) -> tuple[tuple[np.ndarray, np.ndarray], ...]:
    """The k ``(train, test)`` pairs of k-fold cross-validation: sorted int64 id arrays.

    The test parts are disjoint and together every row; each train part is
    every other row. ``source_or_n`` and ``groups`` as for :func:`split`;
    with groups, every group lies wholly in one test fold (so never on both
    sides of a pair). Without groups, fold i holds ``n // k`` rows, one more
    for the first ``n % k``. A pure function of its arguments.

    ``k`` must be an int >= 2 and at most the rows (with groups: the groups),
    else a ``ValueError``; other bad input as for :func:`split`.
    """
    seed = check_int("seed", seed, 0, maximum=None)
    k = check_int("k", k)
    if k < 2:
        raise ValueError(f"k must be >= 2 (folds); got k={k}")
    n = _size_of(source_or_n)
    coded = _groups(source_or_n, groups, n)
    if coded is None:
        if k > n:
            raise ValueError(f"k={k} folds exceed the n={n} rows: each fold needs a row")
        fold = np.empty(n, dtype=np.int64)
        sizes = [n // k + (i < n % k) for i in range(k)]
        fold[_order(n, seed)] = np.repeat(np.arange(k), sizes)
    else:
        codes, group_sizes = coded
        if k > len(group_sizes):
            raise ValueError(
                f"k={k} folds exceed the {len(group_sizes)} groups: each fold needs a group"
            )
        fold = _deal(group_sizes, np.full(k, n / k), seed)[codes]
    tests = _parts(fold, k)
    return tuple((np.flatnonzero(fold != i).astype(np.int64), tests[i]) for i in range(k))
