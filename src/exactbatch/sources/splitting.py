"""The public :func:`split` and :func:`kfold`: a source's rows and named label columns
looked up (:mod:`exactbatch.sources.columns`), then cut by the pure functions of
:mod:`exactbatch.order.splits`, which take a row count and arrays only (the
order sits below the sources and never reads one).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from exactbatch.checks import check_int
from exactbatch.hints import ArrayLike, Source
from exactbatch.order.split_keys import Labels
from exactbatch.order.splits import (
    Folds,
    LabelsArg,
    Split,
    check_alone,
    check_fractions,
    check_k,
    kfold_rows,
    split_rows,
)
from exactbatch.sources.columns import source_column, source_size

__all__ = ["kfold", "split"]


def _size_of(source_or_n: int | Source) -> int:
    if isinstance(source_or_n, bool):
        raise TypeError("source_or_n must be a row count (an int) or a random-access source")
    if isinstance(source_or_n, (int, np.integer)):
        return check_int("n", source_or_n, 0)
    return source_size(source_or_n)


def _labels(source_or_n: int | Source, spec: ArrayLike | str | None, arg: str) -> LabelsArg:
    """``spec`` as the order takes it: a column name looked up in the source (as
    :class:`~exactbatch.order.split_keys.Labels`, named for errors), else as given."""
    if not isinstance(spec, str):
        return spec
    if isinstance(source_or_n, (int, np.integer)):
        raise TypeError(
            f"{arg}={spec!r} names a column, but the first argument is a row count: "
            f"pass the source itself, or {arg} as an array"
        )
    return Labels(source_column(source_or_n, spec, arg=arg), f"column {spec!r}")


def split(
    source_or_n: int | Source,
    fractions: Sequence[float],
    *,
    seed: int = 0,
    groups: ArrayLike | str | None = None,
    key: ArrayLike | str | None = None,
    stratify: ArrayLike | str | None = None,
) -> Split:
    """Split rows into disjoint parts of the given ``fractions``: a tuple of sorted int64
    id arrays, one per fraction, whose union is every row (a :class:`Split`, which
    also reports ``counts`` and ``expected``).

    ``source_or_n``: a row count n, or a random-access source (anything
    ``DataLoader`` reads by row: an ``.ndf`` file or dataset, arrays, a
    DataFrame). ``fractions``: numbers > 0 summing to 1, e.g. ``(0.8, 0.1,
    0.1)``; rounded to counts by the largest remainder method. ``groups``: one
    label per row (an array), or the name of a column of the source; every
    group then lies wholly in one part, and sizes approximate the fractions
    (:mod:`exactbatch.order.splits`). A pure function of its arguments.

    ``key``: one key per row (ids: integers or strings), or a column name.
    Each row's part is a keyed hash of its key and ``seed`` alone, so a row
    keeps its part when rows are added (or removed); rows of equal key share a
    part (a group column as key is a grouped split that survives growth). Part
    p gets each key with probability ``f_p``: the counts are exact only in
    expectation. ``stratify``: one class label per row, or a column name; each
    class is cut on its own, so part p holds within one row of ``m_c * f_p`` of
    the ``m_c`` rows of class c (and in total within the number of classes of
    ``n * f_p``). With ``key`` too, each class is cut in key hash order:
    appending m rows to a class moves at most m of its old rows per cut.

    Bad input: fractions not summing to 1, or one <= 0, a ``ValueError``;
    groups, keys or labels of the wrong length or holding NaN, a ``ValueError``
    naming them; ``groups`` with ``key`` or ``stratify``, a ``ValueError``; a
    column the source lacks, a ``KeyError`` (also a ``ValueError``) naming it
    and the available names; a column name for a source without names (an
    array) or a row count, a ``TypeError``; a stream, a ``TypeError``.
    """
    check_int("seed", seed, 0, maximum=None)
    n = _size_of(source_or_n)
    check_fractions(fractions)  # (before a column is read)
    check_alone(groups, key, stratify)
    return split_rows(
        n,
        fractions,
        seed=seed,
        groups=_labels(source_or_n, groups, "groups"),
        key=_labels(source_or_n, key, "key"),
        stratify=_labels(source_or_n, stratify, "stratify"),
    )


def kfold(
    source_or_n: int | Source,
    k: int,
    *,
    seed: int = 0,
    groups: ArrayLike | str | None = None,
    key: ArrayLike | str | None = None,
    stratify: ArrayLike | str | None = None,
) -> Folds:
    """The k ``(train, test)`` pairs of k-fold cross-validation: sorted int64 id arrays
    (a :class:`Folds`, which also reports the test folds' ``counts`` and ``expected``).

    The test parts are disjoint and together every row; each train part is
    every other row. ``source_or_n`` and ``groups`` as for :func:`split`;
    with groups, every group lies wholly in one test fold (so never on both
    sides of a pair). Without groups, fold i holds ``n // k`` rows, one more
    for the first ``n % k``. ``key``: as for :func:`split`, each row's fold is
    a keyed hash of its key (fold i gets each key with probability 1/k), so a
    row keeps its fold when rows are added. ``stratify``: each class is dealt
    round the folds, so every fold holds ``m_c // k`` or one more rows of each
    class c, and ``n // k`` or one more rows in all; with ``key`` too, each
    class is cut in key hash order as :func:`split` does. A pure function of
    its arguments.

    ``k`` must be an int >= 2 and at most the rows (with groups: the groups),
    else a ``ValueError``; other bad input as for :func:`split`.
    """
    check_int("seed", seed, 0, maximum=None)
    check_k(k)
    n = _size_of(source_or_n)
    check_alone(groups, key, stratify)
    return kfold_rows(
        n,
        k,
        seed=seed,
        groups=_labels(source_or_n, groups, "groups"),
        key=_labels(source_or_n, key, "key"),
        stratify=_labels(source_or_n, stratify, "stratify"),
    )
