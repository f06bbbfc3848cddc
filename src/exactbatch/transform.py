"""Standardisation and a NaN fill, applied by the loader inside its gather.

:class:`Standardize` turns each feature ``v`` of column ``j`` into
``(v - mean[j]) / sd[j]``, then a NaN into ``nan_fill`` (when given). The
statistics come straight from ``exactbatch info --stats --json`` (the report,
or its ``"stats"`` list), from :func:`exactbatch.dask.column_stats`, or from
plain ``mean``/``sd`` arrays. ``DataLoader(..., transform=Standardize(...))``
applies it as each row is copied into the batch (the compiled core's gather,
or its NumPy twin): no second pass over the batch.

Rules, each stated once:

* The division is a multiplication by ``1 / sd`` computed once per column
  in float64 (:attr:`Standardize.scale`): a divide per value would cost more
  than the copy. So a value equals ``(v - mean) * (1 / sd)`` exactly, which is
  within one unit in the last place of ``(v - mean) / sd``.
* A column whose ``sd`` is 0 (a constant column) is divided by 1: its values
  become ``v - mean`` (0 for the constant itself), never inf or NaN. A
  column with no value at all (``count`` 0 in the statistics: mean and sd
  None) gets mean 0 and sd 1; its NaN take the fill.
* The fill is in the standardised space: ``nan_fill=0.0`` puts a missing
  value at the column's mean. ``nan_fill=None`` keeps NaN.
* Arithmetic is float64, rounded once to the loader's dtype.

Memory: three float64 arrays of one value per feature.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from exactbatch.kernels import TransformKernel

__all__ = ["Standardize"]


def _columns(stats) -> tuple[list, list, int | None]:
    """``(means, sds, features)`` of any accepted form of ``stats``; ``features``: the
    feature count when the statistics say it (an ``info`` report's ``d``), else None."""
    if isinstance(stats, Standardize):
        return list(stats.mean), list(stats.sd), None
    if isinstance(stats, Mapping) and "stats" in stats:  # an `info --stats --json` report
        d = stats.get("d")
        means, sds, _ = _columns(stats["stats"])
        return means, sds, d if isinstance(d, int) and 0 <= d <= len(means) else None
    if isinstance(stats, Mapping) and "mean" in stats and "sd" in stats:
        return list(np.ravel(stats["mean"])), list(np.ravel(stats["sd"])), None
    if isinstance(stats, Sequence) and not isinstance(stats, (str, bytes)):
        if all(isinstance(c, Mapping) for c in stats):  # column_stats, a report's "stats"
            missing = [i for i, c in enumerate(stats) if "mean" not in c or "sd" not in c]
            if missing:
                raise ValueError(
                    f"stats: column {missing[0]} has no 'mean' and 'sd' (expected what "
                    "`exactbatch info --stats --json` or exactbatch.dask.column_stats give)"
                )
            return [c["mean"] for c in stats], [c["sd"] for c in stats], None
        if len(stats) == 2:  # (mean, sd)
            return list(np.ravel(stats[0])), list(np.ravel(stats[1])), None
    raise TypeError(
        "stats must be an `exactbatch info --stats --json` report (or its 'stats' list), "
        "exactbatch.dask.column_stats(...), a dict with 'mean' and 'sd', or a pair "
        f"(mean, sd) of arrays; got {type(stats).__name__}"
    )


class Standardize:
    """``(x - mean) / sd`` per feature column, then NaN -> ``nan_fill`` (module docs).

    ``stats``: an ``exactbatch info --stats --json`` report (its features, the
    first ``d`` columns, when it says ``d``) or its ``"stats"`` list,
    :func:`exactbatch.dask.column_stats`'s list, a dict with ``"mean"`` and
    ``"sd"``, or a pair ``(mean, sd)`` of arrays. A column without values
    (mean and sd None) gets mean 0 and sd 1; a NaN, infinite or negative
    statistic is a ``ValueError``. ``nan_fill``: a finite number (in the
    standardised space: 0.0 is the mean) or None to keep NaN.

    A loader takes the statistics of its d features: ``width`` must be d, or
    d + l (the features' then the labels' statistics, as ``info`` and
    ``column_stats`` list them; the labels' are not used). Any other width is
    a ``ValueError`` naming ``transform``, at construction (at the first
    batch for a stream whose widths are not known before).
    """

    __slots__ = ("mean", "nan_fill", "scale", "sd")

    def __init__(
        self, stats: Mapping[str, Any] | Sequence[Any] | Standardize, nan_fill: float | None = None
    ) -> None:
        means, sds, features = _columns(stats)
        if features is not None:
            means, sds = means[:features], sds[:features]
        if len(means) != len(sds):
            raise ValueError(f"stats: {len(means)} means but {len(sds)} sds")
        mean = np.array([0.0 if m is None else m for m in means], dtype=np.float64)
        sd = np.array([1.0 if s is None else s for s in sds], dtype=np.float64)
        for name, v in (("mean", mean), ("sd", sd)):
            bad = ~np.isfinite(v) | ((v < 0) if name == "sd" else False)
            if bad.any():
                j = int(bad.argmax())
                raise ValueError(
                    f"stats: column {j}'s {name} is {v[j]!r}; expected a finite number"
                    + (" >= 0" if name == "sd" else "")
                )
        if nan_fill is not None:
            if isinstance(nan_fill, bool) or not isinstance(nan_fill, numbers.Real):
                raise TypeError(f"nan_fill must be a number or None; got {nan_fill!r}")
            if not np.isfinite(nan_fill):
                raise ValueError(f"nan_fill must be finite; got {nan_fill!r}")
            nan_fill = float(nan_fill)
        self.mean, self.sd, self.nan_fill = mean, sd, nan_fill
        # 1/sd once per column (a constant column: 1); a subnormal sd whose
        # reciprocal overflows is refused, as (v - mean) * inf would make NaN.
        with np.errstate(divide="ignore", over="ignore"):
            self.scale = np.where(sd == 0, 1.0, 1.0 / np.where(sd == 0, 1.0, sd))
        if not np.isfinite(self.scale).all():
            j = int((~np.isfinite(self.scale)).argmax())
            raise ValueError(f"stats: column {j}'s sd {sd[j]!r} is too small to divide by")
        for a in (self.mean, self.sd, self.scale):
            a.setflags(write=False)

    @property
    def width(self) -> int:
        """Columns the statistics cover."""
        return len(self.mean)

    def __repr__(self) -> str:
        return f"Standardize(width={self.width}, nan_fill={self.nan_fill!r})"

    def features(self, d: int, l: int | None) -> int:  # noqa: E741
        """How many leading columns a loader of ``d`` features and ``l`` labels uses: d,
        when the width is d or d + l; else a ``ValueError`` naming ``transform``."""
        if self.width == d or (l is not None and self.width == d + l):
            return d
        also = "" if l is None else f" or d + l = {d + l} (features then labels)"
        raise ValueError(
            f"transform: Standardize has statistics of {self.width} columns; the source "
            f"has d = {d} features, so expected {d}{also}"
        )

    def kernel(self, d: int) -> TransformKernel:
        """The gather's kernel for the first ``d`` columns."""
        return TransformKernel(self.mean[:d], self.scale[:d], self.nan_fill)

    def __call__(self, x) -> np.ndarray:
        """The transform applied to ``x`` (rows, k), k <= :attr:`width` (the first k
        columns' statistics): a new float64 array, the values a loader gives (for
        float32 batches, this rounded to float32)."""
        x = np.asarray(x, dtype=np.float64)
        two = np.atleast_2d(x)
        if two.ndim != 2 or two.shape[1] > self.width:
            raise ValueError(
                f"expected rows of at most {self.width} columns; got shape {np.shape(x)}"
            )
        out = np.empty(two.shape)
        self.kernel(two.shape[1]).apply(two, out)
        return out.reshape(x.shape)
