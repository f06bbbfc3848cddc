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

Over a sharded dataset (:class:`~exactbatch.ndf.dataset.NdfDataset`) blocks
never cross a part boundary: each part is cut into blocks of ``block_rows``
from its first row, and a part's last block holds what is left (fewer rows).
So every block is still one positional read (one ranged GET for a URL) of
one file, and a loader shard opens only the parts of the blocks it owns.
The cost: up to one short block per part (chunks are uneven, as Parquet
row groups are).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from exactbatch.arrays import check_out_array
from exactbatch.checks import check_int
from exactbatch.ndf import NdfDataset, NdfFile, direct
from exactbatch.sources.chunks import WholeRows
from exactbatch.sources.identity import ndf_identity

__all__ = ["NdfBlocks", "ndf_blocks"]

DEFAULT_BLOCK_BYTES = 4 << 20


class NdfBlocks:
    """A chunk-indexed source over an NdfFile or an NdfDataset: chunk i is the
    ``chunk_rows[i]`` rows from ``chunk_starts[i]`` on (``block_rows`` each, but the
    last of the file, or of each part of a dataset).

    Has ``n_rows`` (no counting pass), ``chunk_rows``, ``d``, ``l``,
    ``read_chunk(i)`` and ``read_rows_into(row, out)`` (what a shuffle buffer
    reads blocks with: straight into its own rows); holds its own share of the
    open file or dataset.
    """

    def __init__(self, f: NdfFile | NdfDataset, block_rows: int):
        self.file = f.share()
        self.n_rows, self.d, self.l = f.n, f.d, f.l
        self.block_rows = block_rows
        bounds = f.starts if isinstance(f, NdfDataset) else np.array([0, f.n], dtype=np.int64)
        # each part (a file: one part) cut into blocks from its own first row on
        starts, rows = [np.zeros(0, dtype=np.int64)], [np.zeros(0, dtype=np.int64)]
        for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            first = np.arange(a, b, block_rows, dtype=np.int64)
            starts.append(first)
            rows.append(np.minimum(block_rows, b - first))
        self.chunk_starts, self.chunk_rows = np.concatenate(starts), np.concatenate(rows)

    def identity(self) -> dict[str, Any]:
        """Its file's or dataset's identity (:func:`exactbatch.sources.identity.ndf_identity`:
        the sample is 64 rows read)."""
        return ndf_identity(self.file)

    def __len__(self) -> int:
        return len(self.chunk_rows)

    def __repr__(self) -> str:
        return f"NdfBlocks({self.file.path!r}, {len(self)} blocks of {self.block_rows} rows)"

    fresh_chunks = True  # each read_chunk reads its block into an array of its own

    def read_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        start = int(self.chunk_starts[i])
        rows = int(self.chunk_rows[i])
        # One positional read of the whole block; x and y are views of its rows.
        block = np.empty((rows, self.d + self.l), dtype=np.float64)
        self.file.read_block_into(start, block)
        return block[:, : self.d], block[:, self.d :]

    @property
    def open_chunk(self) -> Callable[[int], WholeRows]:
        """With direct reads on (:mod:`exactbatch.ndf.direct`), :meth:`read_block`: what
        a loader reading several blocks at once then reads them with. Else absent (an
        ``AttributeError``): blocks are read straight into the shuffle buffer, one at a
        time, the kernel reading ahead the blocks announced by :meth:`will_need`."""
        if not direct.ENABLED:
            raise AttributeError("open_chunk: blocks are read with read_rows_into")
        return self.read_block

    def read_block(self, i: int) -> WholeRows:
        """Block ``i`` read (one positional read: past the page cache where it is cold,
        see :mod:`exactbatch.ndf.direct`) into whole rows of its own, for a shuffle
        buffer to copy."""
        start, rows = int(self.chunk_starts[i]), int(self.chunk_rows[i])
        block = np.empty((rows, self.d + self.l), dtype=np.float64)
        self.file.read_block_into(start, block)
        return WholeRows(block, start)

    def read_rows_into(self, row: int, out: np.ndarray) -> None:
        """Rows ``row .. row + len(out) - 1`` (of ``[0, n_rows)``) into ``out``, a
        writeable C-contiguous float64 array of shape (k, d + l), x then y a row:
        one positional read (one a part of a dataset), no copy of its own (a
        shuffle buffer reads blocks this way, straight into its rows). Another
        ``out`` is a ``TypeError`` or ``ValueError`` naming it; rows past the end
        an ``IndexError``."""
        k = out.shape[0] if isinstance(out, np.ndarray) and out.ndim == 2 else 0
        check_out_array(out, (k, self.d + self.l), "out")
        row = check_int("row", row, 0)
        if row + k > self.n_rows:
            raise IndexError(
                f"rows {row}..{row + k - 1} are past the last row of {self.file.path} "
                f"({self.n_rows} rows)"
            )
        self.file.read_block_into(row, out)

    def will_need(self, i: int) -> None:
        """Block ``i`` is read soon: ask the kernel to start reading it now, so that
        reads in shuffled block order keep the disk as busy as a sequential read."""
        self.file.will_need(int(self.chunk_starts[i]), int(self.chunk_rows[i]))

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for i in range(len(self)):
            yield self.read_chunk(i)


def ndf_blocks(f: NdfFile | NdfDataset, block_rows: int | None = None) -> NdfBlocks:
    """Read ``f`` in contiguous blocks of ``block_rows`` rows (default: about 4 MiB).

    ``f`` is an open ``.ndf`` file, or a sharded dataset (whose blocks never
    cross a part boundary: see the module's docs).

    Pass the result to :class:`DataLoader` with ``shuffle=True`` and a
    ``buffer_size`` of many blocks: the block order is shuffled every epoch
    and rows are mixed in the buffer. ``block_rows`` is a Python or NumPy
    int >= 1 (else ``TypeError``, or ``ValueError`` below 1).
    """
    if not isinstance(f, (NdfFile, NdfDataset)):
        raise TypeError(
            "ndf_blocks needs an NdfFile from open_ndf or an NdfDataset from open_ndf_dataset; "
            f"got {type(f).__name__}"
        )
    if block_rows is None:
        block_rows = max(1, DEFAULT_BLOCK_BYTES // max(8, 8 * (f.d + f.l)))
    return NdfBlocks(f, check_int("block_rows", block_rows, 1))
