"""Rows held in parts, compiled or pure NumPy: a sharded dataset's parts, each an
``.ndf`` file's mapping (:func:`parts_rows`), and an elastic stream's chunks held in
memory (:func:`memory_parts`). A read gathers global rows from whichever parts hold
them in one call, or names the parts it needs that are not set (copying nothing).

The backend is :mod:`exactbatch.kernels`' (:func:`~exactbatch.kernels.core`, read
when an object is made): the compiled core's ``parts_rows``, or :class:`_NumpyParts`,
its NumPy twin, giving the same bits. Each part is a :class:`~exactbatch.kernels.Rows`
made by that module's :func:`~exactbatch.kernels.memory_rows` or
:func:`~exactbatch.kernels.file_rows`.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from exactbatch.kernels import NumpyRows, RowIndex, Rows, TransformKernel, core

__all__ = ["Parts", "memory_parts", "parts_rows"]


class Parts(Protocol):
    """What :func:`memory_parts` and :func:`parts_rows` return: rows in parts, each
    set (its :class:`~exactbatch.kernels.Rows`) before a read that touches it.
    ``read`` returns the list of the parts it needs that are not set (copying
    nothing), else as :meth:`exactbatch.kernels.Rows.read`."""

    def set(self, k: int, rows: Rows) -> None: ...

    def unset(self, k: int) -> bool: ...

    def stamp_into(self, stamps: np.ndarray) -> None: ...

    def read(
        self,
        rows: RowIndex,
        out_x: np.ndarray,
        out_y: np.ndarray,
        tf: TransformKernel | None = None,
        threads: int | None = None,
    ) -> list[int] | int | None: ...


def parts_rows(starts: np.ndarray, d: int, l: int) -> Parts | None:  # noqa: E741
    """The rows of a sharded dataset whose part ``k`` holds global rows ``starts[k] ..
    starts[k + 1] - 1`` (``starts`` int64, from 0, n last): an object whose
    ``read(rows, out_x, out_y)`` gathers global rows straight from the parts'
    mappings, and returns the list of parts it needs that are not set yet (copying
    nothing) until each is given with ``set(k, rows)`` (that part's
    :func:`~exactbatch.kernels.file_rows`); a part that changed is
    :class:`~exactbatch.kernels.FileChanged` with its number as ``part`` (None for a
    fault during the copy). None on the pure path."""
    built = core()
    if built is None:
        return None
    parts: Parts = built.parts_rows(starts, d, l)
    return parts


class _NumpyParts:
    """The pure path of :func:`memory_parts`: each read staged as whole float64 rows,
    part by part, then read as :func:`~exactbatch.kernels.memory_rows` reads (the same bits)."""

    def __init__(self, starts: np.ndarray, d: int, l: int):  # noqa: E741
        self.starts, self.d, self.l = np.asarray(starts, dtype=np.int64), d, l
        self.parts: list[NumpyRows | None] = [None] * (len(self.starts) - 1)
        self._stamps: np.ndarray | None = None  # see stamp_into

    def stamp_into(self, stamps: np.ndarray) -> None:
        if stamps.dtype != np.int64 or stamps.shape != (len(self.parts) + 1,):
            raise TypeError(
                f"stamp_into: stamps must be a writable 1-D int64 array of "
                f"{len(self.parts) + 1} entries (a part's each, then the clock)"
            )
        self._stamps = stamps

    def set(self, k: int, rows: Rows) -> None:
        # A part is read by its arrays (x, y): the compiled core's rows (made before a
        # switch of backend) have none, so they are refused here, as the core refuses
        # rows not its own, rather than at a later read.
        if not isinstance(rows, NumpyRows):
            raise TypeError(
                "set(k, rows): rows must come from memory_rows() on the numpy backend; "
                f"got {type(rows).__name__}"
            )
        if self.parts[k] is not None and self.parts[k] is not rows:
            raise ValueError(f"part {k} is set already")
        self.parts[k] = rows

    def unset(self, k: int) -> bool:
        self.parts[k] = None
        return True

    def read(
        self,
        rows: RowIndex,
        out_x: np.ndarray,
        out_y: np.ndarray,
        tf: TransformKernel | None = None,
        threads: int | None = None,
    ) -> list[int] | int | None:
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        if len(rows) and (rows.min() < 0 or rows.max() >= self.starts[-1]):
            bad = rows[(rows < 0) | (rows >= self.starts[-1])][0]
            raise IndexError(f"row {bad} out of range for n={self.starts[-1]} rows")
        q = np.searchsorted(self.starts, rows, side="right") - 1
        touched: list[int] = np.unique(q).tolist()
        if self._stamps is not None:  # (the compiled read's stamps: module docs there)
            self._stamps[-1] += 1
            self._stamps[touched] = self._stamps[-1]
        parts = [self.parts[k] for k in touched]  # (taken once: an unset meanwhile is seen)
        held = [part for part in parts if part is not None]
        if len(held) < len(parts):
            return [k for k, part in zip(touched, parts, strict=True) if part is None]
        d = self.d
        stage = np.empty((len(rows), d + self.l))
        for k, part in zip(touched, held, strict=True):
            at = np.flatnonzero(q == k) if len(touched) > 1 else slice(None)
            local = rows[at] - self.starts[k]
            stage[at, :d], stage[at, d:] = part.x[local], part.y[local]
        return NumpyRows(stage[:, :d], stage[:, d:]).read(np.arange(len(rows)), out_x, out_y, tf)


def memory_parts(starts: np.ndarray, d: int, l: int) -> Parts:  # noqa: E741
    """Rows of a stream whose chunk ``k`` holds rows ``starts[k] .. starts[k + 1] - 1``
    (``starts`` int64, from 0, n last), held in memory chunk by chunk: ``set(k, rows)``
    gives chunk ``k``'s rows (a :func:`~exactbatch.kernels.memory_rows`: its x and y
    as two arrays, each with its own row stride, or as columns of one array of whole
    rows), ``unset(k)`` lets go of them (False, keeping them, while a read on another
    thread copies from them); ``read(rows, out_x, out_y)`` gathers rows by their
    stream number straight from the chunks, in one call whatever the chunks they lie
    in, or returns the list of those chunks not set (copying nothing);
    ``stamp_into(stamps)`` (an int64 array of a chunk's entry each and a clock last)
    has each read tick the clock and stamp the chunks it touched with it.
    The compiled core's :func:`parts_rows`, or its NumPy twin: the same bits."""
    starts = np.asarray(starts, dtype=np.int64)
    if len(starts) < 2:  # no chunk: one of no rows
        starts = np.zeros(2, dtype=np.int64)
    built = core()
    if built is None:
        return _NumpyParts(starts, d, l)
    compiled: Parts = built.parts_rows(starts, d, l)
    return compiled
