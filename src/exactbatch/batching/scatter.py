"""The one-piece shuffle buffer's fill fused with its gather: each row copied once,
from its chunk's columns straight to its place among the batches.

:mod:`exactbatch.batching.buffer_whole` copies a chunk's rows into the buffer's
whole rows, draws the buffer's permutation once it is full, then gathers its
rows into batches: two copies a row. The permutation of a full buffer depends
only on the generator and the buffer's size, so where the stream's size is
known (``size_hint``) and says the buffer will fill, it is drawn first; each
row's place among the fill's batches (the inverse permutation) is then known
as it is read, and :func:`exactbatch.kernels.scatter_columns` (the compiled
core's or its NumPy twin) writes it there, from the chunk's columns (a Parquet
row group's or an Arrow chunk's buffers, cast as copied: nulls are NaN in the
float64 copy such a column is held as) or whole rows. The rows left past the
fill's full batches (fewer than a batch) are scattered into rows of their own,
first into the next fill, as the buffer keeps them. The generator draws the
same permutations in the same order, and every batch, digest and row id is
the one :mod:`exactbatch.batching.buffer_whole` makes, bit for bit.

Where the fill will not be full (the stream's end), or the size is not known,
the buffer is filled as before (:func:`~exactbatch.batching.buffer_whole.shuffle_whole`
takes over with the rows kept). A stream that ends before its ``size_hint``
says: the fill's rows are read back from their places (float64: exact), the
generator put back as it was before the draw, and the buffer takes over with
them, so the batches are again the ones the buffer makes.

Batches of float64 only (a float32 batch's rows could not be read back exactly:
those and an :class:`~exactbatch.batching.output.Output` fill the buffer).
Memory: a fill's batches are made at once (the buffer's rows, as new arrays,
instead of the buffer and about 8 MiB of batches at a time), plus the chunk read.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import chain
from typing import Any

import numpy as np

from exactbatch.batching.buffer_whole import shuffle_whole
from exactbatch.batching.gather import (
    Chunk,
    Group,
    Shaped,
    batches_of,
    chunk_size,
    group_rows,
    read_whole,
    row_ids,
)
from exactbatch.batching.output import Output
from exactbatch.kernels import scatter_columns
from exactbatch.order.digest import Tally
from exactbatch.sources.chunks import ChunkRead
from exactbatch.sources.column_chunk import Columns

__all__ = ["fusable", "shuffle_scattered"]


def fusable(dtype: Shaped, size_hint: int | None) -> bool:
    """Does a one-piece buffer scatter its fills (module docs): float64 batches, the
    stream's size known?"""
    return size_hint is not None and not isinstance(dtype, Output) and np.dtype(dtype) == np.float64


def _side(a, pos: int, take: int) -> list[np.ndarray]:
    """Rows ``pos .. pos + take - 1`` of a chunk's x or y (a Columns or a 2-D array) as
    1-D columns (views)."""
    if isinstance(a, Columns):
        lo = a.start + pos
        return [c[lo : lo + take] for c in a.cols]
    return [a[pos : pos + take, j] for j in range(a.shape[1])]


def chunk_columns(chunk: Chunk, pos: int, take: int, d: int, l: int) -> list[np.ndarray]:  # noqa: E741
    """Rows ``pos .. pos + take - 1`` of ``chunk`` as its ``d + l`` columns (1-D, any
    stride): views of a chunk's columns where it has them, else of its rows read."""
    if not isinstance(chunk, ChunkRead):
        x, y, _ = chunk
        return _side(x, pos, take) + _side(y, pos, take)
    if chunk.views is not None:
        cols, first = chunk.views()
        lo = chunk.id0 + pos - first
        return [c[lo : lo + take] for c in cols]
    rows = np.empty((take, d + l))
    chunk.read_into(chunk.id0 + pos, rows)
    return [rows[:, j] for j in range(d + l)]


def _rest(chunk: Chunk, pos: int) -> Chunk:
    """``chunk`` from its row ``pos`` on."""
    if pos == 0:
        return chunk
    if isinstance(chunk, ChunkRead):  # (held: a chunk read from its source is cut as arrays)
        c = chunk
        return ChunkRead(c.read_into, c.id0 + pos, c.rows - pos, c.d, c.l, c.held, c.views)
    x, y, id0 = chunk
    return x[pos:], y[pos:], id0 + pos


class _Fill:
    """One fill's destinations: the full batches' rows (x and y, groups of ``group``
    rows as the buffer gathers them) and the rows left past them, whole."""

    def __init__(self, size: int, full: int, group: int, d: int, l: int):  # noqa: E741
        starts = range(0, full, group)
        self.d, self.group = d, group
        self.gx: list[Any] = [np.empty((min(group, full - a), d)) for a in starts]
        self.gy: list[Any] = [np.empty((min(group, full - a), l)) for a in starts]
        self.left = np.empty((size - full, d + l))

    def put(self, cols: list[np.ndarray], dest: np.ndarray) -> None:
        d, left = self.d, self.left
        scatter_columns(cols[:d], dest, self.gx, left[:, :d], self.group)
        scatter_columns(cols[d:], dest, self.gy, left[:, d:], self.group)

    def rows_at(self, where: np.ndarray) -> np.ndarray:
        """The whole rows at positions ``where`` (float64: as they were read)."""
        placed = np.hstack((np.concatenate(self.gx), np.concatenate(self.gy)))
        return np.concatenate((placed, self.left))[where]


def shuffle_scattered(
    stream: Iterator[Chunk],
    width: tuple[int, int],
    b: int,
    size: int,
    rng: np.random.Generator,
    drop_last: bool,
    size_hint: int,
    spare: list[tuple[np.ndarray, np.ndarray]] | None,
    dropped: Tally | None,
    with_rows: bool = False,
) -> Iterator[Group]:
    """The batches :func:`~exactbatch.batching.buffer_whole.shuffle_whole` makes
    (float64), its full fills scattered (module docs); ``width`` is ``(d, l)``, the
    rest as for :func:`exactbatch.batching.buffer.shuffle_buffer`."""
    d, l = width  # noqa: E741
    full = size // b * b
    group = group_rows(full, d + l, b)
    kept_rows, kept_ids = np.empty((0, d + l)), np.empty(0, dtype=np.uint64)
    pending: tuple[Chunk, int] | None = None  # a chunk the last fill ended inside
    taken = 0  # the stream's rows taken so far
    ids = np.empty(size, dtype=np.uint64)  # a fill's row ids, by its rows' order read
    scratch: list[np.ndarray] = []  # where read_whole reads a chunk cut by a fill's end
    while size_hint - taken >= size - len(kept_ids):  # this fill will be full
        state = rng.bit_generator.state
        perm = rng.permutation(size)  # what the buffer draws once full, drawn first
        where = np.empty(size, dtype=np.int64)
        where[perm] = np.arange(size)  # each row's place among the fill's batches
        fill = len(kept_ids)
        out = _Fill(size, full, group, d, l)
        out.put([kept_rows[:, j] for j in range(d + l)], where[:fill])
        ids[:fill] = kept_ids
        while fill < size:
            if pending is None:
                nxt = next(stream, None)
                if nxt is None:
                    break
                pending = (nxt, 0)
                del nxt
            chunk, pos = pending
            rows = chunk_size(chunk)
            take = min(size - fill, rows - pos)
            chunk = read_whole(chunk, take, scratch)
            id0 = chunk.id0 if isinstance(chunk, ChunkRead) else chunk[2]
            out.put(chunk_columns(chunk, pos, take, d, l), where[fill : fill + take])
            ids[fill : fill + take] = row_ids(id0, pos, take)
            fill, pos, taken = fill + take, pos + take, taken + take
            pending = None if pos == rows else (chunk, pos)
            del chunk
        if fill < size:  # the stream ended before its size_hint said: as if not drawn
            kept = (out.rows_at(where[:fill]), ids[:fill].copy(), d)
            del out
            rng.bit_generator.state = state
            yield from shuffle_whole(
                iter(()), b, size, rng, drop_last, 0, spare, dropped, np.float64, with_rows, kept
            )
            return
        order = ids.take(perm)  # the ids, in the order handed out
        for k, a in enumerate(range(0, full, group)):
            gx, gy = out.gx[k], out.gy[k]
            out.gx[k] = out.gy[k] = None  # held by its batches only, once handed on
            yield batches_of(gx, gy, order[a : a + len(gx)], b, with_rows)
            del gx, gy
        kept_rows, kept_ids = out.left, order[full:].copy()
        del out
    rest = stream if pending is None else chain((_rest(*pending),), stream)
    pending = None
    yield from shuffle_whole(
        rest,
        b,
        size,
        rng,
        drop_last,
        max(0, size_hint - taken),
        spare,
        dropped,
        np.float64,
        with_rows,
        (kept_rows, kept_ids, d),
    )
