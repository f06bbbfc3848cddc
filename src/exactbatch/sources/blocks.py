"""An .ndf file read as a stream of contiguous blocks: the block-shuffle mode.

For a file larger than the page cache, a fully shuffled epoch reads one row
here, one there: a random small read per row. Reading contiguous blocks of
rows in a shuffled block order, then mixing rows in the loader's shuffle
buffer, turns that into large sequential reads (one positional read per
block) at close to the disk's sequential speed.

The price is the bounded buffer's: rows mix within the buffer, not across
the whole file, so on data sorted on disk batches are only locally mixed
(see :mod:`exactbatch.batching.buffer`). Shuffle a sorted file once on disk
first. A block is ``block_rows`` rows; pick blocks of a few MiB and a buffer
of many blocks.
"""

from __future__ import annotations

import numpy as np

from exactbatch.checks import check_int
from exactbatch.ndf import NdfFile

__all__ = ["NdfBlocks", "ndf_blocks"]

DEFAULT_BLOCK_BYTES = 4 << 20


class NdfBlocks:
    """A chunk-indexed source over an NdfFile: chunk i is rows [i*B, (i+1)*B).

    Has ``n_rows`` (no counting pass), ``chunk_rows``, ``d``, ``l`` and
    ``read_chunk(i)``; holds its own share of the open file.
    """

    def __init__(self, f: NdfFile, block_rows: int):
        self.file = f.share()
        self.n_rows, self.d, self.l = f.n, f.d, f.l
        self.block_rows = block_rows
        full, last = divmod(f.n, block_rows)
        self.chunk_rows = np.full(full + (last > 0), block_rows, dtype=np.int64)
        if last:
            self.chunk_rows[-1] = last

    def __len__(self) -> int:
        return len(self.chunk_rows)

    def __repr__(self) -> str:
        return f"NdfBlocks({self.file.path!r}, {len(self)} blocks of {self.block_rows} rows)"

    def read_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        start = i * self.block_rows
        rows = int(self.chunk_rows[i])
        # One positional read of the whole block; x and y are views of its rows
        # (the buffer copies them out), so nothing is copied twice.
        block = np.empty((rows, self.d + self.l), dtype=np.float64)
        self.file.read_block_into(start, block)
        return block[:, : self.d], block[:, self.d :]

    def will_need(self, i: int) -> None:
        """Block ``i`` is read soon: ask the kernel to start reading it now, so that
        reads in shuffled block order keep the disk as busy as a sequential read."""
        self.file.will_need(i * self.block_rows, int(self.chunk_rows[i]))

    def __iter__(self):
        for i in range(len(self)):
            yield self.read_chunk(i)


def ndf_blocks(f: NdfFile, block_rows: int | None = None) -> NdfBlocks:
    """Read ``f`` in contiguous blocks of ``block_rows`` rows (default: about 4 MiB).

    Pass the result to :class:`DataLoader` with ``shuffle=True`` and a
    ``buffer_size`` of many blocks: the block order is shuffled every epoch
    and rows are mixed in the buffer. ``block_rows`` is a Python or NumPy
    int >= 1 (else ``TypeError``, or ``ValueError`` below 1).
    """
    if not isinstance(f, NdfFile):
        raise TypeError(f"ndf_blocks needs an NdfFile from open_ndf; got {type(f).__name__}")
    if block_rows is None:
        block_rows = max(1, DEFAULT_BLOCK_BYTES // max(8, 8 * (f.d + f.l)))
    return NdfBlocks(f, check_int("block_rows", block_rows, 1))
