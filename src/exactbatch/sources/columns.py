"""The rows and named columns of a random-access source, for splitting it.

:func:`source_size` is a source's row count; :func:`source_column` one of its
columns by name, for ``groups="customer"`` in :func:`exactbatch.split`. Column
names are those of an ``.ndf`` file's names sidecar, a sharded dataset's
manifest (``features`` then ``labels``: :mod:`exactbatch.ndf.names`), any
source with ``features``/``labels`` attributes, or a pandas or polars
DataFrame's or a pyarrow Table's columns (of any dtype: a column of strings
groups as well). An
array or an ``(x, y)`` pair has no names. Reading a column of a file reads
the file once, in blocks of up to 64 Ki rows (memory: one block).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from exactbatch.hints import Source
from exactbatch.ndf.names import DefaultNames
from exactbatch.sources.arrow_table import is_arrow_table
from exactbatch.sources.chunks import Stream
from exactbatch.sources.kinds import open_source
from exactbatch.sources.polars_frames import is_lazy_frame
from exactbatch.sources.protocols import RowReader

__all__ = ["MissingColumnError", "column_names", "source_categories", "source_column"]
__all__ += ["source_size"]

_BLOCK_ROWS = 1 << 16  # rows read at a time for a column


class MissingColumnError(KeyError, ValueError):
    """A column name the source lacks: a ``KeyError`` (a lookup by name) and a
    ``ValueError`` (a wrong argument value) both, with a plain message."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def is_frame(source: object) -> bool:
    """A pandas or polars DataFrame, or an Arrow table: columns by name, read whole as an
    array-like. A polars LazyFrame is not one (it is a query, read as a stream), and is
    told apart first: asking a LazyFrame for ``columns`` resolves its schema (a polars
    PerformanceWarning)."""
    if is_lazy_frame(source):
        return False
    return all(hasattr(source, a) for a in ("columns", "shape", "__getitem__"))


def _frame_names(source: Any) -> list[str]:
    # A pyarrow Table passes for a frame (columns, [name], shape), but its .columns are
    # its arrays: its names are .column_names.
    names = source.column_names if is_arrow_table(source) else source.columns
    return [str(c) for c in names]


def source_size(source: Source) -> int:
    """The rows of a random-access source (what ``DataLoader`` accepts as one); a
    stream is a ``TypeError``: its rows have no ids to split."""
    n = getattr(source, "n", None)
    if isinstance(n, int) and hasattr(source, "d"):  # NdfFile, NdfDataset, Dataset
        return n
    if is_frame(source) or isinstance(source, np.ndarray):
        shape = tuple(source.shape)  # (a polars DataFrame has a shape, but no ndim)
        return int(shape[0]) if shape else 0
    if isinstance(source, tuple) and len(source) == 2 and hasattr(source[0], "shape"):
        return int(source[0].shape[0])
    reader = _reader(source)
    try:
        return int(reader.n)
    finally:
        reader.close()


def _reader(source: Source) -> RowReader:
    opened = open_source(source)
    if isinstance(opened, Stream):
        raise TypeError(
            f"a {type(source).__name__} is a stream, read front to back: its rows have no "
            "ids to split or select. Split a random-access source (an .ndf file or dataset, "
            "arrays), or pass the row count n"
        )
    return opened


def _names(source: Source) -> list[str] | None:
    """The source's column names, or None when it has none."""
    if is_frame(source):
        return _frame_names(source)
    features, labels = getattr(source, "features", None), getattr(source, "labels", None)
    if features is None and labels is None:
        return None
    return list(features or ()) + list(labels or ())


def column_names(source: Source, opened: object = None) -> tuple[list[str], list[str]] | None:
    """``(features, labels)``: the names of the columns a loader reads from ``source``
    (``opened``: what :func:`~exactbatch.sources.kinds.open_source` made of it), in the
    loader's order, or None when they have none: an array, a pair of arrays, a stream
    of plain chunks, an ``.ndf`` written without names (``x0..``, ``y0..``: positions,
    not names), a bare pyarrow ``Table`` (read as ``arrow_source(table)``, whose
    names these are). Found on the source, else on what opened it (an Arrow or
    polars object's source, an ``ndf_blocks`` file)."""
    if isinstance(source, tuple) and len(source) == 2 and all(map(is_frame, source)):
        return _frame_names(source[0]), _frame_names(source[1])
    if is_frame(source) and not is_arrow_table(source):
        # (a pyarrow Table is read as arrow_source(table): its numeric columns alone)
        return _frame_names(source), []
    for o in _described(source, opened):
        features, labels = getattr(o, "features", None), getattr(o, "labels", None)
        if features is None and labels is None:
            continue
        if isinstance(features, DefaultNames) and isinstance(labels, DefaultNames):
            return None
        return [str(c) for c in features or ()], [str(c) for c in labels or ()]
    return None


def source_categories(source: Source, opened: object = None) -> dict[str, list[Any]]:
    """The vocabularies of the columns ``source`` reads as integer codes (a Parquet
    source's ``categorical=``, an ``.ndf`` file's or dataset's stored ones): ``{}``
    for none. Found where :func:`column_names` finds the names."""
    for o in _described(source, opened):
        cats = getattr(o, "categories", None)
        if isinstance(cats, dict):
            return cats
    return {}


def _described(source: Source, opened: object) -> Iterator[Any]:
    """What may describe ``source``'s columns: itself, what opened it, the object a
    stream reads (``.source``), and the file of either (``.file``)."""
    for obj in (source, opened, getattr(opened, "source", None)):
        if obj is not None:
            yield obj
            f = getattr(obj, "file", None)
            if f is not None:
                yield f


def source_column(source: Source, name: str, arg: str = "groups") -> np.ndarray:
    """The values of the column ``name`` of ``source``, one per row.

    A source without column names (an array, a pair, a Dataset) is a
    ``TypeError``; a name it lacks a ``KeyError`` naming it and the available
    names. Errors name the argument ``arg`` the column was given as.
    """
    names = _names(source)
    if names is None:
        raise TypeError(
            f"{arg}={name!r} names a column, but a {type(source).__name__} source has no "
            f"column names: pass {arg} as an array of one label per row"
        )
    if name not in names:
        shown = names if len(names) <= 40 else names[:40] + ["..."]
        raise MissingColumnError(f"{arg}={name!r}: no such column; the source has {shown}")
    if is_frame(source):
        return np.asarray(source[name])
    at = names.index(name)
    reader = _reader(source)
    try:
        n, d, l = reader.n, reader.d, reader.l  # noqa: E741
        out = np.empty(n, dtype=np.float64)
        for a in range(0, n, _BLOCK_ROWS):
            z = min(n, a + _BLOCK_ROWS)
            x, y = np.empty((z - a, d)), np.empty((z - a, l))
            reader.read(slice(a, z), x, y)
            out[a:z] = x[:, at] if at < d else y[:, at - d]
    finally:
        reader.close()
    return out
