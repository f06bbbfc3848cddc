"""A chunk held column by column, and the one copy of a chunk's rows into rows.

An Arrow-family stream's chunk (a record batch), or a Parquet row group, is
columns: NumPy views of each column's buffer where it is float64, float32
or an integer of at most 32 bits, without nulls, else one float64 copy of
the column (nulls as NaN); a view's values are cast as they are copied, never
in a copy of their own. :class:`Columns` keeps them so, and its
rows are copied straight into a batch's rows or a shuffle buffer's
(:func:`put`: :func:`exactbatch.kernels.columns_into`, the compiled core's
or its NumPy twin, casting to the batch's dtype as it copies). No row-major
copy of the chunk is ever made: each row is copied once on its way to a
batch (twice through a shuffle buffer), not once more into a chunk of whole
rows first. (Batches of less than a tile, 128 KiB, are cut from a tile of
rows laid out in the cache: one copy from the columns for many batches;
:mod:`exactbatch.batching.rebatch`.)

A :class:`Columns` is what a pass hands on where an array would be: it has
``shape``, ``ndim`` and ``dtype``, is sliced by rows (``chunk[lo:hi]``, a
view), and anything else reads it as an array (``np.asarray``, a copy).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, DTypeLike

from exactbatch.kernels import columns_into

__all__ = ["Columns", "put", "side_by_side"]


class Columns:
    """Rows ``start .. start + rows - 1`` of ``cols`` (1-D C-contiguous arrays, one a
    column, each at least ``start + rows`` long: float64, float32 or integers of at
    most 32 bits) as a (rows, len(cols)) float64 chunk, held column by column (module
    docs)."""

    __slots__ = ("cols", "shape", "start")
    ndim = 2
    dtype = np.dtype(np.float64)

    def __init__(self, cols: Sequence[np.ndarray], rows: int, start: int = 0):
        self.cols, self.start, self.shape = list(cols), start, (rows, len(cols))

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: Any) -> Columns | np.ndarray:
        if not isinstance(key, slice):
            rows: np.ndarray = np.asarray(self)[key]
            return rows
        r = range(self.shape[0])[key]
        if r.step != 1:
            stepped: np.ndarray = np.asarray(self)[key]
            return stepped
        return Columns(self.cols, len(r), self.start + r.start)

    def __array__(self, dtype: DTypeLike | None = None, copy: bool | None = None) -> np.ndarray:
        out = np.empty(self.shape, dtype=np.float64 if dtype is None else dtype)
        self.into(out)
        return out

    def into(self, out: np.ndarray) -> None:
        """Its rows into ``out`` (float64 or float32, of its shape, each row's values
        side by side), cast as they are copied."""
        columns_into(self.cols, self.start, out)

    def __repr__(self) -> str:
        return f"Columns(rows={self.shape[0]}, columns={self.shape[1]}, start={self.start})"


def put(out: np.ndarray, src: Columns | ArrayLike) -> None:
    """``out[...] = src``: an array, or a :class:`Columns`, copied straight from its columns."""
    if isinstance(src, Columns):
        src.into(out)
    else:
        out[...] = src


def side_by_side(x: Columns | ArrayLike, y: Columns | ArrayLike) -> Columns | np.ndarray:
    """``x`` then ``y`` (a chunk's pair, of equal rows) as one chunk of whole rows: a
    :class:`Columns` of both's columns where both are held so, else a float64 array."""
    if isinstance(x, Columns) and isinstance(y, Columns) and x.start == y.start:
        return Columns([*x.cols, *y.cols], x.shape[0], x.start)
    return np.concatenate((np.asarray(x), np.asarray(y)), axis=1)
