"""Standardisation and a NaN fill, applied by the loader inside its gather.

:class:`Standardize` turns each feature ``v`` of column ``j`` into
``(v - mean[j]) / sd[j]``, then a NaN into ``nan_fill`` (when given). The
statistics come straight from ``exactbatch info --stats --json`` (the report,
or its ``"stats"`` list), from :func:`exactbatch.dask.column_stats`, or from
plain ``mean``/``sd`` arrays. ``DataLoader(..., transform=Standardize(...))``
applies it as each row is copied into the batch (the compiled core's gather,
or its NumPy twin): no second pass over the batch.

Rules, each stated once:

* Statistics meet the loader's columns BY NAME when they name them (an
  ``info`` report, ``column_stats``, a dict with ``"names"``): each feature
  the loader reads takes the statistics of its own name, whatever the order
  of either (:meth:`Standardize.for_columns`). Only unnamed statistics, or
  a source without names (an array), meet by position, width checked.

* The division is a multiplication by ``1 / sd`` computed once per column
  in float64 (:attr:`Standardize.scale`): a divide per value would cost more
  than the copy. So a value equals ``(v - mean) * (1 / sd)`` exactly, which is
  within one unit in the last place of ``(v - mean) / sd``.
* A column whose ``sd`` is 0 (a constant column) is divided by 1: its values
  become ``v - mean`` (0 for the constant itself), never inf or NaN. A
  column with no value at all (``count`` 0 in the statistics: mean and sd
  None) gets mean 0 and sd 1; its NaN take the fill.
* The fill is in the standardised space: ``nan_fill=0.0`` puts a missing
  value at the column's mean. ``nan_fill=None`` keeps NaN. A mapping
  ``{name: value}`` gives each named feature its own fill (a column it does
  not name keeps its NaN), so a missing category need not land on the
  mean's code: the names meet the statistics' names (checked at
  construction), or, for statistics without names, the loader's features
  (checked when the loader is built; a source without names refuses it).
* Arithmetic is float64, rounded once to the loader's dtype.

Memory: three float64 arrays of one value per feature.
"""

from __future__ import annotations

import numbers
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from exactbatch.kernels import TransformKernel

__all__ = ["Standardize"]


def _named(rows: Sequence[Mapping[str, Any]]) -> list[str] | None:
    """The column names of a list of statistics (``info``'s, ``column_stats``'), when
    every column has one (None: the statistics are by position only)."""
    names = [c.get("name") for c in rows]
    named = [n for n in names if isinstance(n, str)]
    return named if len(named) == len(names) else None


def _columns(stats: object) -> tuple[list[Any], list[Any], int | None, list[str] | None]:
    """``(means, sds, features, names)`` of any accepted form of ``stats``; ``features``:
    the feature count when the statistics say it (an ``info`` report's ``d``), else None;
    ``names``: each column's name, when the statistics name every column, else None."""
    if isinstance(stats, Standardize):
        names = None if stats.names is None else list(stats.names)
        return list(stats.mean), list(stats.sd), None, names
    if isinstance(stats, Mapping) and "stats" in stats:  # an `info --stats --json` report
        d = stats.get("d")
        means, sds, _, names = _columns(stats["stats"])
        return means, sds, d if isinstance(d, int) and 0 <= d <= len(means) else None, names
    if isinstance(stats, Mapping) and "mean" in stats and "sd" in stats:
        names = stats.get("names")
        names = None if names is None else [str(n) for n in names]
        return list(np.ravel(stats["mean"])), list(np.ravel(stats["sd"])), None, names
    if isinstance(stats, Sequence) and not isinstance(stats, (str, bytes)):
        if all(isinstance(c, Mapping) for c in stats):  # column_stats, a report's "stats"
            missing = [i for i, c in enumerate(stats) if "mean" not in c or "sd" not in c]
            if missing:
                raise ValueError(
                    f"stats: column {missing[0]} has no 'mean' and 'sd' (expected what "
                    "`exactbatch info --stats --json` or exactbatch.dask.column_stats give)"
                )
            means, sds = [c["mean"] for c in stats], [c["sd"] for c in stats]
            return means, sds, None, _named(stats)
        if len(stats) == 2:  # (mean, sd)
            return list(np.ravel(stats[0])), list(np.ravel(stats[1])), None, None
    raise TypeError(
        "stats must be an `exactbatch info --stats --json` report (or its 'stats' list), "
        "exactbatch.dask.column_stats(...), a dict with 'mean' and 'sd', or a pair "
        f"(mean, sd) of arrays; got {type(stats).__name__}"
    )


def _fill_key(key: object) -> str:
    if not isinstance(key, str):
        raise TypeError(f"nan_fill's keys must be column names (str); got {key!r}")
    return key


def _fill_value(value: object, key: str | None = None) -> float | None:
    """A fill: a finite number as a float (None, in a mapping: the column keeps NaN)."""
    what = "nan_fill" if key is None else f"nan_fill[{key!r}]"
    if value is None and key is not None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        also = " (or None)" if key is not None else ", a mapping {name: number}, or None"
        raise TypeError(f"{what} must be a number{also}; got {value!r}")
    if not np.isfinite(float(value)):
        raise ValueError(f"{what} must be finite; got {value!r}")
    return float(value)


def _fill_vector(fills: Mapping[str, float | None], names: Iterable[str], what: str) -> np.ndarray:
    """Each of ``names``' fill from the mapping ``fills`` (NaN: none, the NaN kept); a
    name of ``fills`` not among ``names`` is a ``ValueError`` naming ``nan_fill``."""
    unknown = [c for c in fills if c not in set(names)]
    if unknown:
        raise ValueError(
            f"nan_fill names column(s) {_shown(unknown)} not among {what} {_shown(names)}"
        )
    out = np.array([np.nan if fills.get(c) is None else fills[c] for c in names])
    out.setflags(write=False)
    return out


def _shown(names: Iterable[object]) -> str:
    listed = list(names)
    return str(listed if len(listed) <= 20 else [*listed[:20], "..."])


class Standardize:
    """``(x - mean) / sd`` per feature column, then NaN -> ``nan_fill`` (module docs).

    ``stats``: an ``exactbatch info --stats --json`` report or its ``"stats"``
    list, :func:`exactbatch.dask.column_stats`'s list, a dict with ``"mean"``
    and ``"sd"`` (and, optionally, ``"names"``), or a pair ``(mean, sd)`` of
    arrays. A column without values (mean and sd None) gets mean 0 and sd 1;
    a NaN, infinite or negative statistic is a ``ValueError``. ``nan_fill``: a
    finite number (in the standardised space: 0.0 is the mean) or None to
    keep NaN, for every feature; or a mapping ``{column name: number or
    None}``, each named feature's own fill (the others keep NaN). A name the
    statistics lack (or, without names in the statistics, that the loader's
    features lack) is a ``ValueError`` naming ``nan_fill`` and the name; a
    key that is not a str, or a value neither a number nor None, a
    ``TypeError``.

    Statistics that name their columns (``info``'s and ``column_stats``' do:
    :attr:`names`) meet a loader's columns BY NAME: each feature the loader
    reads takes the statistics of the column of its name, whatever the order
    of either (a report lists a Parquet file's columns in file order, a
    loader reads features then labels, Hive keys last). A feature with no
    statistics of its name is a ``ValueError`` naming it, as is a name given
    twice. Statistics without names, or a source without names (an array),
    meet by position: ``width`` must then be d, or d + l (the features' then
    the labels' statistics, as ``info`` lists them when it says ``d``; the
    labels' are not used); any other width is a ``ValueError`` naming
    ``transform`` and the source's columns. Either check runs at
    construction of the loader (at its first batch for a stream whose
    widths are not known before).
    """

    __slots__ = ("_fills", "mean", "names", "nan_fill", "scale", "sd")

    def __init__(
        self,
        stats: Mapping[str, Any] | Sequence[Any] | Standardize,
        nan_fill: float | Mapping[str, float | None] | None = None,
    ) -> None:
        means, sds, features, names = _columns(stats)
        if features is not None and names is None:  # by position: the report's features
            means, sds = means[:features], sds[:features]
        if len(means) != len(sds) or (names is not None and len(names) != len(means)):
            also = "" if names is None else f" and {len(names)} names"
            raise ValueError(f"stats: {len(means)} means but {len(sds)} sds{also}")
        if names is not None:
            twice = sorted({c for c, k in Counter(names).items() if k > 1})
            if twice:
                raise ValueError(f"stats: column(s) {_shown(twice)} have statistics twice")
        self.names: tuple[str, ...] | None = None if names is None else tuple(names)
        mean = np.array([0.0 if m is None else m for m in means], dtype=np.float64)
        sd = np.array([1.0 if s is None else s for s in sds], dtype=np.float64)
        for name, v in (("mean", mean), ("sd", sd)):
            bad = ~np.isfinite(v) | ((v < 0) if name == "sd" else False)
            if bad.any():
                j = int(bad.argmax())
                raise ValueError(
                    f"stats: column {self._column(j)}'s {name} is {v[j]!r}; expected a "
                    "finite number" + (" >= 0" if name == "sd" else "")
                )
        if isinstance(nan_fill, Mapping):
            nan_fill = {_fill_key(k): _fill_value(v, k) for k, v in nan_fill.items()}
        elif nan_fill is not None:
            nan_fill = _fill_value(nan_fill)
        self.mean, self.sd, self.nan_fill = mean, sd, nan_fill
        # each column's fill (NaN: keeps NaN) where nan_fill maps names and the columns
        # have names; None otherwise (one fill, or a mapping waiting for for_columns)
        self._fills: np.ndarray | None = None
        if isinstance(nan_fill, dict) and self.names is not None:
            self._fills = _fill_vector(nan_fill, self.names, "the statistics' columns")
        # 1/sd once per column (a constant column: 1); a subnormal sd whose
        # reciprocal overflows is refused, as (v - mean) * inf would make NaN.
        with np.errstate(divide="ignore", over="ignore"):
            self.scale = np.where(sd == 0, 1.0, 1.0 / np.where(sd == 0, 1.0, sd))
        if not np.isfinite(self.scale).all():
            j = int((~np.isfinite(self.scale)).argmax())
            raise ValueError(
                f"stats: column {self._column(j)}'s sd {sd[j]!r} is too small to divide by"
            )
        for a in (self.mean, self.sd, self.scale):
            a.setflags(write=False)

    @property
    def width(self) -> int:
        """Columns the statistics cover."""
        return len(self.mean)

    def _column(self, j: int) -> str:
        return str(j) if self.names is None else f"{j} ({self.names[j]!r})"

    def __repr__(self) -> str:
        named = "" if self.names is None else ", by name"
        return f"Standardize(width={self.width}{named}, nan_fill={self.nan_fill!r})"

    def for_columns(self, features: Sequence[str], labels: Sequence[str] = ()) -> Standardize:
        """The statistics a loader reading the columns ``features`` (then ``labels``)
        uses, in its order: by name when both sides have names (a feature without
        statistics of its name is a ``ValueError`` naming it), else this one, by
        position (checked by :meth:`features` once the widths are known)."""
        if features is not None and self.names is None and isinstance(self.nan_fill, dict):
            out = self._copy(slice(None), self.names)  # by position, fills by the features'
            out._fills = _fill_vector(self.nan_fill, list(features), "the loader's features")
            return out
        if self.names is None or features is None:
            return self
        at = {c: j for j, c in enumerate(self.names)}
        missing = [c for c in features if c not in at]
        if missing:
            raise ValueError(
                f"transform: Standardize has no statistics of the source's feature(s) "
                f"{_shown(missing)}; its statistics are of {_shown(self.names)} (matched "
                "by name: compute them over the columns the loader reads)"
            )
        return self._copy(np.array([at[c] for c in features], dtype=np.int64), features)

    def _copy(self, pick: slice | np.ndarray, names: Sequence[str] | None) -> Standardize:
        """The statistics (and fills) of the columns ``pick``, named ``names``."""
        out = object.__new__(Standardize)
        out.names = None if names is None else tuple(names)
        out.nan_fill = self.nan_fill
        out.mean, out.sd, out.scale = self.mean[pick], self.sd[pick], self.scale[pick]
        out._fills = None if self._fills is None else self._fills[pick]
        for a in (out.mean, out.sd, out.scale):
            a.setflags(write=False)
        return out

    def features(self, d: int, l: int | None, names: Sequence[str] | None = None) -> int:  # noqa: E741
        """How many leading columns a loader of ``d`` features and ``l`` labels uses: d,
        when the width is d or d + l; else a ``ValueError`` naming ``transform`` (and
        the source's columns, ``names``, when known)."""
        if self.width == d or (l is not None and self.width == d + l):
            self._check_fills()
            return d
        also = "" if l is None else f" or d + l = {d + l} (features then labels)"
        cols = "" if names is None else f" {_shown(names)}"
        raise ValueError(
            f"transform: Standardize has statistics of {self.width} columns by position; "
            f"the source has d = {d} features{cols}, so expected {d}{also} (statistics "
            "with column names are matched by name)"
        )

    def kernel(self, d: int) -> TransformKernel:
        """The gather's kernel for the first ``d`` columns."""
        self._check_fills()
        fill = self._fills[:d] if self._fills is not None else self.nan_fill
        assert not isinstance(fill, dict)  # (a mapping's fills are the vector)
        return TransformKernel(self.mean[:d], self.scale[:d], fill)

    def _check_fills(self) -> None:
        """A ``ValueError`` naming ``transform`` when ``nan_fill`` maps names that no
        columns' names have placed (statistics and source both without names)."""
        if isinstance(self.nan_fill, dict) and self._fills is None:
            raise ValueError(
                f"transform: nan_fill maps column names ({_shown(self.nan_fill)}), but "
                "neither the statistics nor the source name their columns: give "
                "nan_fill as one number, or statistics with names"
            )

    def __call__(self, x: ArrayLike) -> np.ndarray:
        """The transform applied to ``x`` (rows, k), k <= :attr:`width` (the first k
        columns' statistics): a new float64 array, the values a loader gives (for
        float32 batches, this rounded to float32)."""
        values = np.asarray(x, dtype=np.float64)
        two = np.atleast_2d(values)
        if two.ndim != 2 or two.shape[1] > self.width:
            raise ValueError(
                f"expected rows of at most {self.width} columns; got shape {np.shape(values)}"
            )
        out = np.empty(two.shape)
        self.kernel(two.shape[1]).apply(two, out)
        return out.reshape(values.shape)
