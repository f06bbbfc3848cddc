"""Deterministic splits of row ids: :func:`split_rows` and :func:`kfold_rows`, behind
:func:`exactbatch.split` and :func:`exactbatch.kfold` (:mod:`exactbatch.sources.splitting`
looks a source's size and named columns up, then calls these: the order takes
a row count and arrays only).

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

With ``groups`` (one label per row),
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

With ``key`` (one key per row), a row's part is a keyed hash of its key
(:mod:`exactbatch.order.split_keys`): part p holds the hashes in ``[F_{p-1},
F_p) * 2**64``, F the running sum of the fractions, so a row never changes
part as rows are added, and the counts are exact in expectation only. With
``stratify`` (one class per row), each class is cut on its own: its rows, in
the seeded order (or in key hash order with ``key``), cut at ``floor(m_c *
F_q + 1/2)``; ``kfold`` without ``key`` deals them round the folds, class after
class. :class:`Split` and :class:`Folds` are the tuples returned, with the
realised ``counts`` and the ``expected`` ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from exactbatch.checks import check_int
from exactbatch.hints import ArrayLike
from exactbatch.order.bijection import EpochBijection
from exactbatch.order.split_keys import Labels, key_hashes, label_codes, row_labels

__all__ = ["Folds", "Split", "check_alone", "check_fractions", "check_k", "kfold_rows"]
__all__ += ["split_rows"]

LabelsArg = ArrayLike | Labels | None  # one label per row, or none

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


def _groups(groups: LabelsArg, n: int) -> tuple[np.ndarray, np.ndarray] | None:
    """``(codes, sizes)``: each row's group as 0 .. G-1 (the labels' sorted order) and
    each group's rows; None without groups."""
    if groups is None:
        return None
    codes = label_codes(*row_labels(groups, n, "groups"))
    return codes, np.bincount(codes, minlength=int(codes.max()) + 1 if n else 0)


def check_fractions(fractions: object) -> np.ndarray:
    """``fractions`` checked (numbers > 0 summing to 1) and normalised, as float64."""
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
    normalised: np.ndarray = f / total
    return normalised


def split_counts(n: int, fractions: object) -> list[int]:
    """Rows per part by the largest remainder method (module docs)."""
    f = check_fractions(fractions)
    exact = n * f
    counts = np.floor(exact).astype(np.int64)
    left = n - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")  # largest remainder, earlier first
    counts[order[:left]] += 1
    out: list[int] = counts.tolist()
    return out


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


class Split(tuple[np.ndarray, ...]):
    """What :func:`split` returns: a tuple of sorted int64 id arrays, one per fraction,
    that also reports ``counts`` (the rows each part got) and ``expected`` (``n * f_p``,
    what each part gets on average: exactly, with ``key=``, only in expectation)."""

    expected: tuple[float, ...]

    def __new__(
        cls, parts: Sequence[np.ndarray], expected: Sequence[float] | np.ndarray = ()
    ) -> Split:
        self = super().__new__(cls, parts)
        self.expected = tuple(float(e) for e in expected)
        return self

    @property
    def counts(self) -> tuple[int, ...]:
        """The rows in each part, in the order of the fractions."""
        return tuple(len(p) for p in self)


class Folds(tuple[tuple[np.ndarray, np.ndarray], ...]):
    """What :func:`kfold` returns: a tuple of k ``(train, test)`` pairs that also
    reports ``counts`` (each test fold's rows) and ``expected`` (``n / k`` each)."""

    expected: tuple[float, ...]

    def __new__(
        cls,
        pairs: Sequence[tuple[np.ndarray, np.ndarray]],
        expected: Sequence[float] | np.ndarray = (),
    ) -> Folds:
        self = super().__new__(cls, pairs)
        self.expected = tuple(float(e) for e in expected)
        return self

    @property
    def counts(self) -> tuple[int, ...]:
        """The rows in each test fold."""
        return tuple(len(test) for _, test in self)


def check_alone(groups: LabelsArg, key: LabelsArg, stratify: LabelsArg) -> None:
    """Refuse the label arguments that do not go together (``groups`` with another)."""
    if key is not None and groups is not None:
        raise ValueError(
            "pass groups= or key=, not both: rows of equal key already land on one side, "
            "so a group column passed as key= is a grouped split that survives growth"
        )
    if stratify is not None and groups is not None:
        raise ValueError(
            "stratify= with groups= is not supported: a group can hold several classes; "
            "stratify by a label of the group, or pass key= (the group) with stratify="
        )


def _hash_parts(h: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Each row's part from its key hash: part p holds the hashes in
    ``[F_{p-1}, F_p) * 2**64``, F the running sum of the fractions."""
    edges = [
        min(int(math.ldexp(math.fsum(f[: p + 1].tolist()), 64)), 2**64 - 1)
        for p in range(len(f) - 1)
    ]
    return np.searchsorted(np.array(edges, dtype=np.uint64), h, side="right").astype(np.int64)


def _cut_strata(ordered: np.ndarray, strata: np.ndarray, f: np.ndarray) -> np.ndarray:
    """Each row's part: the rows ``ordered`` stratum by stratum (``strata`` their
    sizes in that order), each stratum of m rows cut at ``floor(m * F_q + 1/2)``,
    F the running sum of the fractions (so each part holds within one row of
    ``m * f_p``, and the cuts only move forward as m grows)."""
    running = np.array([math.fsum(f[: q + 1].tolist()) for q in range(len(f) - 1)])
    part = np.empty(len(ordered), dtype=np.int64)
    start = 0
    for m in strata.tolist():
        cuts = np.floor(m * running + 0.5).astype(np.int64)
        part[ordered[start : start + m]] = np.searchsorted(cuts, np.arange(m), side="right")
        start += m
    return part


def _stratified(
    stratify: LabelsArg, key: LabelsArg, n: int, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """``(ordered, strata)``: the rows stratum by stratum (the labels' sorted order),
    each stratum in key hash order (ties by row id) or else the seeded order, and the
    strata's sizes."""
    codes = label_codes(*row_labels(stratify, n, "stratify"))
    if key is not None:
        h = key_hashes(*row_labels(key, n, "key"), seed)
        ordered = np.lexsort((np.arange(n), h, codes)).astype(np.int64)
    else:
        order = _order(n, seed)
        ordered = order[np.argsort(codes[order], kind="stable")]
    return ordered, np.bincount(codes, minlength=int(codes.max()) + 1 if n else 0)


def split_rows(
    n: int,
    fractions: Sequence[float],
    *,
    seed: int = 0,
    groups: LabelsArg = None,
    key: LabelsArg = None,
    stratify: LabelsArg = None,
) -> Split:
    """The ids ``0 .. n-1`` split into disjoint parts of the given ``fractions`` (module
    docs), each label argument one label per row (an array, or :class:`Labels`).
    What :func:`exactbatch.split` returns, once it has the rows and labels."""
    seed = check_int("seed", seed, 0, maximum=None)
    n = check_int("n", n, 0)
    f = check_fractions(fractions)
    check_alone(groups, key, stratify)
    expected = n * f
    if stratify is not None:
        ordered, strata = _stratified(stratify, key, n, seed)
        return Split(_parts(_cut_strata(ordered, strata, f), len(f)), expected)
    if key is not None:
        h = key_hashes(*row_labels(key, n, "key"), seed)
        return Split(_parts(_hash_parts(h, f), len(f)), expected)
    coded = _groups(groups, n)
    if coded is None:
        counts = split_counts(n, f)
        order, cuts = _order(n, seed), np.cumsum([0, *counts])
        parts = tuple(np.sort(order[a:z]) for a, z in zip(cuts[:-1], cuts[1:], strict=True))
        return Split(parts, expected)
    codes, sizes = coded
    where = _deal(sizes, n * f, seed)
    return Split(_parts(where[codes], len(f)), expected)


def check_k(k: object) -> int:
    """``k`` checked: an int >= 2 (folds)."""
    k = check_int("k", k)
    if k < 2:
        raise ValueError(f"k must be >= 2 (folds); got k={k}")
    return k


def kfold_rows(
    n: int,
    k: int,
    *,
    seed: int = 0,
    groups: LabelsArg = None,
    key: LabelsArg = None,
    stratify: LabelsArg = None,
) -> Folds:
    """The k ``(train, test)`` pairs of k-fold cross-validation of the ids ``0 .. n-1``
    (module docs), each label argument as for :func:`split_rows`. What
    :func:`exactbatch.kfold` returns, once it has the rows and labels."""
    seed = check_int("seed", seed, 0, maximum=None)
    k = check_k(k)
    n = check_int("n", n, 0)
    check_alone(groups, key, stratify)
    coded = _groups(groups, n)
    if coded is None and k > n:
        raise ValueError(f"k={k} folds exceed the n={n} rows: each fold needs a row")
    if stratify is not None:
        ordered, strata = _stratified(stratify, key, n, seed)
        if key is not None:
            fold = _cut_strata(ordered, strata, np.full(k, 1.0 / k))
        else:  # dealt round the folds, class after class: every count within one
            fold = np.empty(n, dtype=np.int64)
            fold[ordered] = np.arange(n) % k
    elif key is not None:
        h = key_hashes(*row_labels(key, n, "key"), seed)
        fold = _hash_parts(h, np.full(k, 1.0 / k))
    elif coded is None:
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
    pairs = tuple((np.flatnonzero(fold != i).astype(np.int64), tests[i]) for i in range(k))
    return Folds(pairs, np.full(k, n / k))
