"""Test doubles of the source protocols (exactbatch.sources.protocols): a new kind of
source each, plugged in through its protocol alone - no edit to exactbatch.

* :class:`RowsDouble`, a ``RowSource``: ``open_reader()`` gives a
  :class:`RowsDoubleReader`, which reads rows with NumPy indexing of its own
  (not exactbatch's kernels), so the loader's laws are seen to hold for a
  reader exactbatch knows only by the protocol.
* :class:`ChunksDouble`, a ``ChunkSource`` with none of the optional hooks:
  ``chunk_rows`` (a list) and ``read_chunk`` only, not even ``__iter__`` - so
  the feed counts its rows, learns its widths from the first chunk read and
  reads chunks into arrays for the shuffle buffer. It hands out the least the
  protocol allows: one buffer, filled anew at every ``read_chunk`` (no
  ``fresh_chunks``), so a chunk the loader held without a copy would change.

Both hold rows as :mod:`helpers` builds them (traceable: ``x[i, 0] == i``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["ChunksDouble", "RowsDouble", "RowsDoubleReader"]


class RowsDoubleReader:
    """A ``RowReader`` over arrays ``x`` and ``y``; counts its opens and closes in
    ``owner``."""

    def __init__(self, x: np.ndarray, y: np.ndarray, owner: RowsDouble):
        self.x, self.y, self.owner = x, y, owner
        self.n, self.d, self.l = x.shape[0], x.shape[1], y.shape[1]

    def read(self, rows, out_x: np.ndarray, out_y: np.ndarray) -> None:
        if self.x is None:
            raise ValueError("read from a closed RowsDoubleReader")
        out_x[...] = self.x[rows]  # a slice or an integer array; cast to out's dtype
        out_y[...] = self.y[rows]

    def prefetch_default(self, batch_bytes: int) -> int:
        return 0

    def close(self) -> None:
        if self.x is not None:
            self.owner.closed += 1
        self.x = self.y = None


class RowsDouble:
    """A ``RowSource``: every ``open_reader()`` a new reader of the same rows."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x, self.y = x, y
        self.opened = self.closed = 0

    def open_reader(self) -> RowsDoubleReader:
        self.opened += 1
        return RowsDoubleReader(self.x, self.y, self)


class ChunksDouble:
    """A bare ``ChunkSource``: chunk ``i`` is rows ``starts[i] .. starts[i] + sizes[i] - 1``,
    as ``(x, y)``, views of one buffer of the source's that every read fills anew.
    ``reads`` lists the chunks read, in order."""

    def __init__(self, x: np.ndarray, y: np.ndarray, sizes):
        self.x, self.y = x, y
        self.chunk_rows = [int(s) for s in sizes]
        self.starts = np.concatenate(([0], np.cumsum(self.chunk_rows)))
        self.reads: list[int] = []
        self._bx = self._by = np.empty(0)

    def read_chunk(self, i: int):
        self.reads.append(i)
        a, z = self.starts[i], self.starts[i + 1]
        most = max(self.chunk_rows, default=0)
        if self._bx.shape[1:] != self.x.shape[1:] or self._by.shape[1:] != self.y.shape[1:]:
            self._bx = np.empty((most, *self.x.shape[1:]), dtype=self.x.dtype)  # (x replaced)
            self._by = np.empty((most, *self.y.shape[1:]), dtype=self.y.dtype)
        bx, by = self._bx[: z - a], self._by[: z - a]
        bx[...], by[...] = self.x[a:z], self.y[a:z]
        return bx, by
