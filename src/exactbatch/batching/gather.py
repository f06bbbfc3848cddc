"""What both shuffle-buffer algorithms share: buffers, chunks copied or read
into them, row ids, and batches gathered out of a permuted buffer.

A buffer holds whole rows, x then y (float64, or float32 where the batches
are float32: :func:`buffer_dtype`), like an ``.ndf`` file: a
source that can read rows straight into memory
(:class:`~exactbatch.sources.chunks.ChunkRead`, from
``ndf_blocks``) fills it with one positional read a block, and no block array
of its own; any other chunk's x and y are copied into the rows' two sides.
Batches are gathered several at a time (up to about 8 MiB, 1/8 of the
rows; one call of :func:`exactbatch.kernels.gather`, which casts to the
loader's dtype as it copies, where the buffer is float64), each batch a view
of its group, so a batch is never a view of the buffer itself, which the next
fill overwrites. Each row's id rides beside it (8 bytes a row) and is summed
into its batch's ledger digest (:mod:`exactbatch.order.digest`).

Filling the buffer stays a NumPy slice assignment (one strided copy a side)
or a positional read straight into its rows, and the digests stay
:func:`~exactbatch.order.digest.batch_digests` (three vectorised passes a
group, a small share of the gather): neither would gain from the compiled
core.
"""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import DTypeLike

from exactbatch.batching.output import Output
from exactbatch.kernels import gather, memory_rows
from exactbatch.order.digest import Tally, batch_digests, rows_digest
from exactbatch.sources.chunks import ChunkRead
from exactbatch.sources.column_chunk import Columns, put

__all__ = [
    "Chunk",
    "Drawn",
    "Group",
    "Shaped",
    "buffer_arrays",
    "buffer_dtype",
    "chunk_size",
    "chunk_width",
    "drain",
    "fill_rows",
    "gathered",
    "read_whole",
    "row_ids",
    "shaped_gather",
    "sides",
]

_GROUP_BYTES = 8 << 20  # batches are gathered from the buffer up to this much at a time
NARROW = True  # float32 batches from a float32 buffer (buffer_dtype); False: tests' reference

# What batches are made as: a dtype, or an Output (labels, transform, NaN rule).
Shaped: TypeAlias = "DTypeLike | Output"
# A stream's chunk: (x, y, id0), x and y arrays or Columns, or rows read straight in.
Chunk: TypeAlias = "tuple[Any, Any, int] | ChunkRead"
# A group of batches gathered together: each (x, y, digest) or (x, y, digest, rows).
Group: TypeAlias = "list[tuple[Any, ...]]"


def gathered(
    bx: np.ndarray,
    by: np.ndarray,
    ids: np.ndarray,
    rows: np.ndarray,
    b: int,
    dtype: Shaped = np.float64,
    with_rows: bool = False,
) -> Iterator[Group]:
    """Batches of ``b`` of buffered ``rows`` (a whole number of batches; ``ids``: their
    row ids, in the same order), as ``dtype`` (or an Output: :func:`shaped_gather`):
    gathered several at a time (up to
    about 8 MiB, 1/8 of the rows), each batch a view; yielded a group at a time,
    as a list of ``(x, y, digest)`` (what a stream's pass yields: one step of
    its generators for many small batches); ``with_rows``: ``(x, y, digest, rows)``,
    ``rows`` a view of a new int64 copy of the group's ids (the buffer's are
    overwritten by the next fill)."""
    group = max(1, min(_GROUP_BYTES // (8 * max(1, bx.shape[1] + by.shape[1])), len(rows) // 8))
    group = max(b, group // b * b)
    for a in range(0, len(rows), group):
        z = min(a + group, len(rows))  # (ids may run past the rows: a buffer's leftovers)
        gx, gy = shaped_gather(bx, by, rows[a:z], dtype, ids[a:z])
        digests = batch_digests(ids[a:z], b).tolist()
        # The batches' views made in C: one reshape of each array, iterated by zip
        # (a loop in Python cost ~2 us a batch, at batch 64 as much as the gather).
        m = len(gx) // b
        views = (gx.reshape((m, b, *gx.shape[1:])), gy.reshape((m, b, *gy.shape[1:])))
        if with_rows:
            gi = ids[a:z].astype(np.int64).reshape(m, b)
            yield list(zip(*views, digests, gi, strict=True))
        else:
            yield list(zip(*views, digests, strict=True))
        del gx, gy, views


def shaped_gather(
    x: np.ndarray, y: np.ndarray, rows: np.ndarray, shaped: Shaped, ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """New arrays holding buffered rows ``rows`` of ``x`` and ``y`` (their ids ``ids``),
    made as ``shaped`` says: a dtype (:func:`exactbatch.kernels.gather`), or an
    :class:`~exactbatch.batching.output.Output`, whose transform is applied in the
    same gather."""
    if not isinstance(shaped, Output):
        return gather(x, y, rows, shaped)
    ox, oy = shaped.pair(len(rows), x.shape[1], y.shape[1])
    shaped.fill(memory_rows(x, y).read, True, rows, ox, oy, ids)
    return ox, oy


def drain(
    vx: np.ndarray,
    vy: np.ndarray,
    ids: np.ndarray,
    perm: np.ndarray,
    b: int,
    final: bool,
    drop_last: bool,
    dropped: Tally | None,
    dtype: Shaped = np.float64,
    with_rows: bool = False,
) -> Generator[Group, None, np.ndarray]:
    """Yield (in groups, as :func:`gathered`) the full batches of the buffered rows
    ``vx``/``vy`` in the order ``perm`` (a permutation of their row numbers; ``ids``:
    the rows' ids in that order), as ``dtype``; if ``final``, the rows left (fewer
    than a batch) are the last batch (none with ``drop_last``: counted in
    ``dropped``), else their row numbers are returned to keep."""
    full = vx.shape[0] // b * b
    yield from gathered(vx, vy, ids, perm[:full], b, dtype, with_rows)
    rest = perm[full:]
    if not final:
        return rest
    if len(rest):
        digest = rows_digest(ids[full:])
        if not drop_last:
            tail = (ids[full:].astype(np.int64),) if with_rows else ()
            yield [(*shaped_gather(vx, vy, rest, dtype, ids[full:]), digest, *tail)]
        elif dropped is not None:
            dropped.add(len(rest), digest)
    return rest[:0]


class Drawn:
    """The permutation of a fill (a half, or the one-piece buffer), drawn on a thread
    of its own while the fill is read (NumPy's shuffle releases the GIL), for
    ``count`` rows: the fill's size, which it has unless the stream ends in it. Then
    :meth:`result` draws again, from the generator's state before, for the rows the
    fill has: the order is the same as drawn after the read."""

    perm: np.ndarray | None

    def __init__(self, rng: np.random.Generator, count: int) -> None:
        self.rng, self.state, self.count, self.perm = rng, rng.bit_generator.state, count, None
        self.thread = threading.Thread(
            target=self._draw, name="exactbatch-permutation", daemon=True
        )
        self.thread.start()

    def _draw(self) -> None:
        self.perm = self.rng.permutation(self.count)

    def result(self, count: int) -> np.ndarray:
        self.thread.join()
        if count == self.count and self.perm is not None:
            return self.perm
        self.rng.bit_generator.state = self.state
        return self.rng.permutation(count)


def chunk_size(chunk: Chunk) -> int:
    """Rows of a chunk: ``(x, y, id0)`` or a :class:`ChunkRead`."""
    rows: int = chunk.rows if isinstance(chunk, ChunkRead) else chunk[0].shape[0]
    return rows


def chunk_width(chunk: Chunk) -> tuple[int, int]:
    """``(d, l)`` of a chunk: ``(x, y, id0)`` or a :class:`ChunkRead`."""
    if isinstance(chunk, ChunkRead):
        return chunk.d, chunk.l
    return chunk[0].shape[1], chunk[1].shape[1]


def read_whole(chunk: Chunk, take: int, scratch: list[np.ndarray]) -> Chunk:
    """``chunk``, unless it is a :class:`ChunkRead` read from the source (not ``held``
    in memory already, as a chunk decoded by ``open_chunk`` is: its parts are copied
    straight from it) of which fewer than all rows are wanted now (the buffer's room
    ends inside it): then its rows read into arrays of its own, ``(x, y, id0)``. So a
    chunk is always one read (one ranged GET for a URL), never cut in two. Those
    arrays are ``scratch``'s (a list: the one array kept) when it fits, else a new
    array kept there: a buffer takes the chunk's rows before it reads the next
    chunk, so one array serves every such chunk, and its pages are not zeroed again
    for each."""
    if not isinstance(chunk, ChunkRead) or chunk.held or take == chunk.rows:
        return chunk
    shape = (chunk.rows, chunk.d + chunk.l)
    if not scratch or scratch[0].shape != shape:
        scratch[:] = [np.empty(shape, dtype=np.float64)]
    w = scratch[0]
    chunk.read_into(chunk.id0, w)
    return (*sides(w, chunk.d), chunk.id0)


def fill_rows(chunk: Chunk, pos: int, take: int, bw: np.ndarray, bh: np.ndarray) -> None:
    """Rows ``pos .. pos + take - 1`` of ``chunk`` into buffer rows ``bw`` (whole
    rows: ``take`` of them, float64, or float32: each value narrowed once, as the
    gather from a float64 buffer would) and their ids into ``bh`` (a
    :class:`ChunkRead`: all its rows; see :func:`read_whole`)."""
    if isinstance(chunk, ChunkRead):
        if bw.dtype == np.float64 or chunk.narrows:
            chunk.read_into(chunk.id0 + pos, bw)
        else:  # (a read of float64 rows only, into a float32 buffer: read, then narrowed)
            w = np.empty(bw.shape, dtype=np.float64)
            chunk.read_into(chunk.id0 + pos, w)
            with np.errstate(over="ignore", invalid="ignore"):  # (as below)
                bw[...] = w
        bh[:] = row_ids(chunk.id0, pos, take)
        return
    x, y, id0 = chunk
    # (a float32 buffer: a float64 past float32's range becomes inf, as the compiled
    # gather's cast from a float64 buffer made it, without a warning)
    with np.errstate(over="ignore", invalid="ignore"):
        if isinstance(x, Columns) and isinstance(y, Columns) and x.start == y.start:
            # Both sides held as columns (an Arrow-family chunk, a Parquet row group):
            # one copy of whole rows, x's columns then y's, a block of rows at a time.
            # Side by side, x then y, each pass wrote every row's cache lines again
            # (the buffer is tens of MB): 1.3x the CPU of the fill in one pass.
            Columns([*x.cols, *y.cols], take, x.start + pos).into(bw)
        else:
            bx, by = sides(bw, x.shape[1])
            put(bx, x[pos : pos + take])  # (from a chunk's columns: straight into the rows)
            put(by, y[pos : pos + take])
    bh[:] = row_ids(id0, pos, take)


def sides(bw: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """A buffer's x and y: views of its whole rows' first ``d`` values and the rest."""
    return bw[:, :d], bw[:, d:]


def buffer_arrays(
    spare: list[tuple[np.ndarray, np.ndarray]] | None,
    rows: int,
    d: int,
    l: int,  # noqa: E741
    dtype: DTypeLike = np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """``(bw, bh)``: ``rows`` whole rows (x then y, ``dtype``: float64 or float32,
    C-contiguous) and their ids (uint64): the pair in ``spare`` (emptied) if it fits."""
    if spare:
        bw, bh = spare.pop()
        if bw.shape[0] >= rows and bw.shape[1] == d + l and bw.dtype == dtype:
            return bw, bh
    return np.empty((rows, d + l), dtype=dtype), np.empty(rows, dtype=np.uint64)


def buffer_dtype(shaped: Shaped, first: Chunk) -> np.dtype:
    """What a shuffle buffer holds its rows as: float32 where the batches are plain
    float32 (a dtype, not an :class:`Output`) and the stream's ``first`` chunk is
    rows in memory (arrays, columns, or a :class:`ChunkRead` that ``narrows``), else
    float64. Every value a chunk holds is exact as float64 (a float64, a float32 or
    an integer of at most 32 bits: :mod:`exactbatch.sources.column_chunk`), so one
    narrowing as it is filled in gives the bits the gather from a float64 buffer
    gave (it narrowed the same float64, once); the random gather then moves half
    the bytes. A source reading float64 rows straight into the buffer
    (``ndf_blocks``) keeps a float64 one: its read needs no copy of its own."""
    if isinstance(shaped, Output) or np.dtype(shaped) != np.float32 or not NARROW:
        return np.dtype(np.float64)
    if isinstance(first, ChunkRead) and not first.narrows:
        return np.dtype(np.float64)
    return np.dtype(np.float32)


def row_ids(id0: int, pos: int, take: int) -> np.ndarray:
    """The ids of rows ``pos .. pos + take - 1`` of a chunk whose first row is ``id0``."""
    return np.arange(id0 + pos, id0 + pos + take, dtype=np.uint64)
