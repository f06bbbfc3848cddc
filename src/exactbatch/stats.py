"""Per-column mean, sd, min and max in one streaming pass, mergeable across workers.

:class:`ColumnStats` takes blocks of rows one at a time (:meth:`~ColumnStats.update`)
and summaries of other blocks (:meth:`~ColumnStats.merge`, so partitions can
be summarised on Dask workers in parallel and merged on the client). Each
block is summarised by two passes over it (its mean, then the sum of squared
deviations from that mean, both taken of values less the block's first row,
so rows summed one after another stay small numbers); summaries are combined with Chan, Golub and
LeVeque's pairwise update, so the variance never suffers the cancellation
of ``E[x^2] - E[x]^2`` whatever the data's offset. NaN values (Parquet
nulls) are counted apart and left out of the other statistics.

``sd`` is the population standard deviation (divisor n, as
``sklearn.preprocessing.StandardScaler`` uses to standardise). Memory: a
few arrays of one value per column, plus the block being summarised.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["ColumnStats"]


class ColumnStats:
    """Running per-column statistics of ``columns`` columns (see the module docstring)."""

    __slots__ = ("count", "m2", "max", "mean", "min", "nan")

    def __init__(self, columns: int):
        k = int(columns)
        self.count = np.zeros(k, dtype=np.int64)  # non-NaN values seen
        self.nan = np.zeros(k, dtype=np.int64)
        self.mean = np.zeros(k)
        self.m2 = np.zeros(k)  # sum of squared deviations from the mean
        self.min = np.full(k, np.inf)
        self.max = np.full(k, -np.inf)

    @classmethod
    def of(cls, block: ArrayLike) -> ColumnStats:
        """The statistics of one block of rows, shape (rows, columns)."""
        rows = np.asarray(block, dtype=np.float64)
        if rows.ndim != 2:
            raise ValueError(f"expected a 2-D block (rows, columns); got shape {rows.shape}")
        out = cls(rows.shape[1])
        if rows.shape[0] == 0:
            return out
        nan = np.isnan(rows)
        # Sums over axis 0 add row after row, so they are taken of the block less its
        # first row: small numbers, whatever the data's offset.
        shift = np.where(nan[0], 0.0, rows[0])
        if not nan.any():
            out.count[:] = rows.shape[0]
            out.mean = shift + (rows - shift).mean(axis=0)
            out.m2 = ((rows - out.mean) ** 2).sum(axis=0)
            out.min, out.max = rows.min(axis=0), rows.max(axis=0)
            return out
        out.nan = nan.sum(axis=0)
        out.count = rows.shape[0] - out.nan
        seen = out.count > 0
        total = np.where(nan, 0.0, rows - shift).sum(axis=0)
        out.mean = shift + np.divide(total, out.count, out=np.zeros_like(total), where=seen)
        out.m2 = np.where(nan, 0.0, (rows - out.mean) ** 2).sum(axis=0)
        out.min = np.where(nan, np.inf, rows).min(axis=0)
        out.max = np.where(nan, -np.inf, rows).max(axis=0)
        return out

    def update(self, block: ArrayLike) -> ColumnStats:
        """Add the rows of ``block`` (rows, columns); returns self."""
        return self.merge(ColumnStats.of(block))

    def merge(self, other: ColumnStats) -> ColumnStats:
        """Add the values ``other`` summarised (Chan et al.'s update); returns self."""
        if other.count.shape != self.count.shape:
            raise ValueError(
                f"cannot merge statistics of {other.count.shape[0]} columns into "
                f"{self.count.shape[0]}"
            )
        na, nb = self.count, other.count
        n = na + nb
        safe = np.maximum(n, 1)
        delta = other.mean - self.mean
        self.mean = np.where(n > 0, self.mean + delta * (nb / safe), 0.0)
        self.m2 = self.m2 + other.m2 + delta**2 * (na * (nb / safe))
        self.count, self.nan = n, self.nan + other.nan
        self.min = np.minimum(self.min, other.min)
        self.max = np.maximum(self.max, other.max)
        return self

    def table(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """One dict per column: ``name``, ``count``, ``nan``, ``mean``, ``sd``, ``min``,
        ``max`` (plain floats; None for a column with no value)."""
        listed = list(names)
        if len(listed) != self.count.shape[0]:
            raise ValueError(f"{len(listed)} names for {self.count.shape[0]} columns")
        out = []
        for j, name in enumerate(listed):
            c = int(self.count[j])
            row: dict[str, Any] = {"name": name, "count": c, "nan": int(self.nan[j])}
            if c:
                row.update(
                    mean=float(self.mean[j]),
                    sd=float(np.sqrt(self.m2[j] / c)),
                    min=float(self.min[j]),
                    max=float(self.max[j]),
                )
            else:
                row.update(mean=None, sd=None, min=None, max=None)
            out.append(row)
        return out
