"""What ``exactbatch.dask`` reads from a collection: a Dask DataFrame's or Array's
partitions (as Delayed objects), their lengths when Dask knows them, and the
feature and label columns chosen (checked here, named, and taken from each
computed partition as float64). dask is imported on first use.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import numpy as np

from exactbatch.extras import need
from exactbatch.hints import Foreign
from exactbatch.ndf.names import default_names, validate_names
from exactbatch.sources.arrow import fill_float64
from exactbatch.sources.categorical import Vocabulary, check_categorical, learn

__all__ = ["Columns", "Plan", "check_real", "frame_columns", "import_dask", "plan_for"]

_REAL = "biuf"

# A column chosen: a DataFrame's column label (a name), or an array's position (an int)
Column = Hashable
# ((column, (value, ...)), ...): the vocabularies of the columns coded as categories
Categories = tuple[tuple[str, tuple[Any, ...]], ...]


def import_dask() -> ModuleType:
    """dask, or an ImportError saying how to install it."""
    return need("dask", by="exactbatch.dask", package="Dask", extra="dask")


@dataclass(frozen=True)
class Columns:
    """What to take from each partition: a DataFrame's column labels, or an array's
    column positions; picklable, so that it travels to the workers with the task."""

    frame: bool
    features: tuple[Column, ...]
    labels: tuple[Column, ...]
    categories: Categories = ()

    def to_xy(self, part: Foreign) -> tuple[np.ndarray, np.ndarray]:
        """One computed partition (a pandas DataFrame or a NumPy block) as float64 (x, y),
        categorical columns as their codes (:mod:`exactbatch.sources.categorical`)."""
        if self.frame:
            vocab = {c: Vocabulary(c, v) for c, v in self.categories}

            def take(cols: tuple[Column, ...]) -> np.ndarray:
                plain = [c for c in cols if c not in vocab]
                out = np.empty((len(part), len(cols)), dtype=np.float64)
                if plain:
                    at = [list(cols).index(c) for c in plain]
                    out[:, at] = part[plain].to_numpy(dtype=np.float64, na_value=np.nan)
                for j, c in enumerate(cols):
                    if c in vocab:
                        col = _arrow(part[c])
                        fill_float64(
                            vocab[c].encode(col, f"column {c!r} of a partition"), out[:, j]
                        )
                return out

        else:
            block = np.asarray(part)

            def take(cols: tuple[Column, ...]) -> np.ndarray:
                at = np.asarray(cols, dtype=np.intp)  # (an array's columns: positions)
                return np.ascontiguousarray(block[:, at], dtype=np.float64)

        return take(self.features), take(self.labels)


@dataclass(frozen=True)
class Plan:
    """A collection resolved: its partitions (Delayed), their lengths if known, the columns."""

    parts: list[Foreign]  # Delayed, one a partition
    lengths: tuple[int, ...] | None
    columns: Columns
    features: Sequence[str]  # names
    labels: Sequence[str]

    @property
    def d(self) -> int:
        return len(self.features)

    @property
    def l(self) -> int:  # noqa: E743
        return len(self.labels)


def _arrow(series: Foreign) -> Foreign:
    """A pandas Series as an Arrow array (strings, numbers, a pandas categorical)."""
    import pyarrow as pa

    return pa.Array.from_pandas(series)


def _as_list(value: object) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        return [value]
    return list(value)


def plan_for(
    collection: Foreign, features: object, labels: object, caller: str, categorical: object = None
) -> Plan:
    """Check ``collection`` and the columns chosen; its partitions as Delayed objects.
    ``categorical`` (a DataFrame's only): the columns coded as categories, their
    vocabularies learned by a first pass (one ``compute``) unless given."""
    dask = import_dask()
    if not dask.is_dask_collection(collection):
        raise TypeError(
            f"{caller} needs a Dask DataFrame or a 2-D Dask Array; got {type(collection).__name__}"
        )
    import dask.array as da

    cats = check_categorical(categorical, caller)
    if isinstance(collection, da.Array):
        if cats:
            raise TypeError(f"{caller}: categorical codes DataFrame columns; a Dask Array has none")
        return _array_plan(collection, features, labels, caller)
    try:
        import dask.dataframe as dd
    except ImportError:  # pragma: no cover - dask[dataframe] missing: not a DataFrame then
        frame = False
    else:
        if isinstance(collection, dd.Series):
            collection = collection.to_frame()
        frame = isinstance(collection, dd.DataFrame)
    if not frame:
        raise TypeError(
            f"{caller} needs a Dask DataFrame or a 2-D Dask Array; got {type(collection).__name__}"
        )
    return _frame_plan(collection, features, labels, caller, cats)


def _frame_plan(
    ddf: Foreign, features: object, labels: object, caller: str, cats: dict[str, list[Any] | None]
) -> Plan:
    columns, features, labels = frame_columns(
        list(ddf.columns), ddf.dtypes, features, labels, caller, cats=cats
    )
    ddf = ddf[[*columns.features, *columns.labels]]  # read only these (Parquet: their chunks)
    vocab = _vocabularies(ddf, cats, caller)
    return Plan(
        parts=list(ddf.to_delayed()),
        lengths=_frame_lengths(ddf),
        columns=Columns(True, columns.features, columns.labels, vocab),
        features=features,
        labels=labels,
    )


def frame_columns(
    columns: Sequence[Column],
    dtypes: Foreign,
    features: object,
    labels: object,
    caller: str,
    frame: str = "DataFrame",
    cats: Collection[Column] = (),
) -> tuple[Columns, tuple[str, ...], tuple[str, ...]]:
    """The columns of a table of named columns (a Dask DataFrame; a Ray Dataset) to read:
    ``(Columns, feature names, label names)``, each choice checked (a column missing,
    named twice, both a feature and a label, or not of real numbers unless coded as a
    category, one of ``cats``: an error naming it). ``dtypes``: each column's dtype
    (anything with a NumPy ``kind``) by name; ``frame``: what the table is called in
    the messages."""
    lab = _as_list(labels)
    feat = [c for c in columns if c not in lab] if features is None else _as_list(features)
    for what, chosen in (("features", feat), ("labels", lab)):
        missing = [c for c in chosen if c not in columns]
        if missing:
            raise ValueError(
                f"{caller}: {what} names column(s) {missing} that the {frame} does not "
                f"have; its columns are {columns[:20]}"
            )
        twice = list(dict.fromkeys(c for c in chosen if chosen.count(c) > 1))
        if twice:
            raise ValueError(f"{caller}: {what} names column(s) {twice} more than once")
    both = [c for c in lab if c in feat]
    if both:
        raise ValueError(
            f"{caller}: column(s) {both} are both features and labels: a label among the "
            "features hands the model its answer; name each in one only"
        )
    if not feat and not lab:
        raise ValueError(f"{caller}: no columns chosen (features={features!r}, labels={labels!r})")
    outside = [c for c in cats if c not in feat + lab]
    if outside:
        raise ValueError(
            f"{caller}: categorical names column(s) {outside} that are neither features nor "
            f"labels (chosen: {feat + lab}); name them in features= or labels= too"
        )
    fix = (
        "code them as integers with categorical=[...], or choose others with features=/labels="
        if frame == "DataFrame"
        else "choose others with features=/labels=, or encode them first"
    )
    check_real([c for c in feat + lab if c not in cats], dtypes, caller, fix)
    names = [str(c) for c in feat + lab]
    # the names the manifest will keep, checked before any partition is written: two
    # columns 1 and "1" are one name as text, and an empty name cannot be read back
    validate_names(names[: len(feat)], names[len(feat) :], len(feat), len(lab), caller)
    return (
        Columns(True, tuple(feat), tuple(lab)),
        tuple(names[: len(feat)]),
        tuple(names[len(feat) :]),
    )


def check_real(chosen: list[Column], dtypes: Foreign, caller: str, fix: str) -> None:
    """A ``TypeError`` naming each of the columns ``chosen`` whose dtype (in ``dtypes``,
    by name) does not hold real numbers (bool, int, float), and saying ``fix``."""
    bad = [f"{c!r} ({dtypes[c]})" for c in chosen if getattr(dtypes[c], "kind", "O") not in _REAL]
    if bad:
        raise TypeError(
            f"{caller}: non-numeric column(s) {', '.join(bad)}; every column read must hold "
            f"real numbers (bool, int or float): {fix}"
        )


def _vocabularies(ddf: Foreign, cats: dict[str, list[Any] | None], caller: str) -> Categories:
    """``((column, values), ...)``: each categorical column's vocabulary, as given, or
    learned (sorted) from its distinct values, all columns in one ``compute``."""
    if not cats:
        return ()
    dask = import_dask()
    todo = [c for c, v in cats.items() if v is None]
    found = dict(zip(todo, dask.compute(*[ddf[c].drop_duplicates() for c in todo]), strict=True))
    out: list[tuple[str, tuple[Any, ...]]] = []
    for c, given in cats.items():
        try:
            values = given if given is not None else learn([_arrow(found[c])])
        except TypeError as e:
            raise TypeError(f"{caller}: column {c!r}: {e}") from None
        out.append((str(c), tuple(values)))
    return tuple(out)


def _frame_lengths(ddf: Foreign) -> tuple[int, ...] | None:
    """The partitions' lengths when the expression knows them without computing (dask-expr
    answers ``Lengths`` from ``from_pandas``' slices or Parquet footers); else None."""
    try:
        from dask.dataframe.dask_expr._expr import Lengths, Literal

        lengths_of: Foreign = Lengths  # (dask's expressions are not annotated)
        known = lengths_of(ddf.expr).optimize(fuse=False)
    except Exception:  # another dask: lengths unknown, the loader counts instead
        return None
    if not isinstance(known, Literal):
        return None
    lengths = tuple(int(r) for r in known.value)
    return lengths if len(lengths) == ddf.npartitions else None


def _positions(value: object, k: int, what: str, caller: str) -> list[int]:
    out = []
    for v in _as_list(value):
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
            raise TypeError(
                f"{caller}: a Dask Array has no column names: {what} are column positions "
                f"(ints); got {v!r}"
            )
        if not -k <= v < k:
            raise ValueError(f"{caller}: {what} position {v} out of range for {k} columns")
        out.append(int(v) % k)
    if len(set(out)) != len(out):
        raise ValueError(f"{caller}: {what} names a column more than once: {value!r}")
    return out


def _array_plan(arr: Foreign, features: object, labels: object, caller: str) -> Plan:
    if arr.ndim != 2:
        raise ValueError(
            f"{caller}: expected a 2-D Dask Array (rows, columns); got shape {arr.shape}"
        )
    if arr.dtype.kind not in _REAL:
        raise TypeError(
            f"{caller}: the array must hold real numbers (bool, int or float); got dtype "
            f"{arr.dtype}"
        )
    k = arr.shape[1]
    if isinstance(k, float):  # NaN: unknown width
        raise ValueError(f"{caller}: the array's number of columns is unknown; compute it first")
    lab = _positions(labels, k, "labels", caller)
    feat = (
        [j for j in range(k) if j not in lab]
        if features is None
        else _positions(features, k, "features", caller)
    )
    both = sorted(set(feat) & set(lab))
    if both:
        raise ValueError(f"{caller}: column(s) {both} are both features and labels")
    if not feat and not lab:
        raise ValueError(f"{caller}: no columns chosen (features={features!r}, labels={labels!r})")
    if len(arr.chunks[1]) > 1:
        arr = arr.rechunk({1: -1})  # a partition is a block of whole rows
    rows = arr.chunks[0]
    known = not any(np.isnan(r) for r in rows)
    fx, fy = default_names(len(feat), len(lab))
    return Plan(
        parts=list(arr.to_delayed().ravel()),
        lengths=tuple(int(r) for r in rows) if known else None,
        columns=Columns(False, tuple(feat), tuple(lab)),
        features=fx,
        labels=fy,
    )


# -- running tasks ----------------------------------------------------------------------------
