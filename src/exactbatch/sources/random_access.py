"""Random-access readers: fetch any rows of an in-memory array pair or an .ndf file.

A reader has ``n``, ``d``, ``l`` and ``read(rows, out_x, out_y)`` where
``rows`` is a ``slice`` of consecutive rows or an int64 array of row
indices, and the outputs are float64 arrays of shapes (r, d) and (r, l).
``read`` may run on several threads at once.
"""

from __future__ import annotations

import numpy as np

from exactbatch.arrays import is_array_like
from exactbatch.dataset import Dataset
from exactbatch.ndf import NdfFile

__all__ = ["MemoryReader", "NdfReader", "random_access_reader"]


class MemoryReader:
    """Rows of a :class:`Dataset`: a slice copy or one ``np.take`` per array."""

    def __init__(self, ds: Dataset):
        self.x, self.y = ds.x, ds.y
        self.n, self.d, self.l = ds.n, ds.d, ds.l

    def read(self, rows, out_x: np.ndarray, out_y: np.ndarray) -> None:
        if isinstance(rows, slice):
            out_x[...] = self.x[rows]
            out_y[...] = self.y[rows]
            return
        # mode="clip" skips the bounds check and the buffered copy of `out`
        # (the order module only hands out valid rows); the method, not np.take,
        # saves a Python-level dispatch per call on this hot path.
        if self.d:
            self.x.take(rows, axis=0, out=out_x, mode="clip")
        if self.l:
            self.y.take(rows, axis=0, out=out_y, mode="clip")

    def close(self) -> None:
        self.x = self.y = None


class NdfReader:
    """Rows of an ``.ndf`` file, through this reader's own share of the open file."""

    def __init__(self, f: NdfFile):
        self.file = f.share()
        self.n, self.d, self.l = f.n, f.d, f.l

    def read(self, rows, out_x: np.ndarray, out_y: np.ndarray) -> None:
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, dtype=np.int64)
        self.file.read_rows_into(rows, out_x, out_y)

    def close(self) -> None:
        self.file.close()


def random_access_reader(source):
    """A reader for a random-access ``source``, or None if it is not one.

    Random-access sources: a Dataset, an NdfFile, an array ``x`` or a 2-tuple
    ``(x, y)``. An array is anything NumPy views as one - an ndarray, a CPU
    torch tensor, a pandas or polars DataFrame - read exactly as
    ``np.asarray`` of it (see :mod:`exactbatch.arrays`). A list is never
    one: a list is a sequence of chunks (a stream).
    """
    if isinstance(source, NdfFile):
        return NdfReader(source)
    if isinstance(source, Dataset):
        return MemoryReader(source)
    if is_array_like(source):
        return MemoryReader(Dataset(source))
    if isinstance(source, tuple):
        if len(source) != 2:
            raise TypeError(
                f"a tuple source must be an (x, y) pair; got a {len(source)}-tuple "
                "(pass a list for a sequence of chunks)"
            )
        return MemoryReader(Dataset(*source))
    return None
