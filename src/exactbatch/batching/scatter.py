"""The one-piece shuffle buffer filled in the order its rows are handed out: the
fill's rows scattered straight from the chunks' columns to their places, and the
batches then cut from the buffer in order.

:mod:`exactbatch.batching.buffer_whole` copies a chunk's rows into the buffer's
rows in stream order, draws the buffer's permutation once it is full, then
gathers its rows into batches in that order: a random read of every row. The
permutation of a full buffer depends only on the generator and the buffer's size,
so where the stream's size is known (``size_hint``) and says the buffer will
fill, it is drawn first: each row's place in the order handed out (the inverse
permutation) is known as the row is read, and
:func:`exactbatch.kernels.scatter_columns` (the compiled core's or its NumPy twin)
writes it there, straight from the chunk's columns (a Parquet row group's or an
Arrow chunk's buffers, cast to float64 as copied; nulls are NaN in the float64
copy such a column is held as) or rows. The batches are then the buffer's rows in
order (the same gather, of consecutive rows: :func:`~exactbatch.batching.gather.drain`,
with the dtype, the Output and its transform as before). The rows left past the
full batches (fewer than a batch) are copied out and scattered first into the
next fill, as the buffer keeps them. The generator draws the same permutations in
the same order, and every batch, digest and row id is the one
:mod:`exactbatch.batching.buffer_whole` makes, bit for bit; memory is the same
buffer (kept in ``spare`` for the next epoch).

Where the fill will not be full (the stream's end) the buffer is filled as before
(:func:`~exactbatch.batching.buffer_whole.shuffle_whole` takes over with the rows
kept). A stream that ends before its ``size_hint`` said: the fill's rows are read
back from their places, the generator put back as it was before the draw, and the
buffer takes over with them, so the batches are again the ones it makes.
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
    buffer_arrays,
    chunk_size,
    drain,
    read_whole,
    row_ids,
    sides,
)
from exactbatch.kernels import scatter_columns
from exactbatch.order.digest import Tally
from exactbatch.sources.chunks import ChunkRead
from exactbatch.sources.column_chunk import Columns

__all__ = ["fusable", "shuffle_scattered"]


def fusable(size_hint: int | None) -> bool:
    """Does a one-piece buffer scatter its fills (module docs): is the stream's size
    known?"""
    return size_hint is not None


def _side(a: Columns | np.ndarray, pos: int, take: int) -> list[np.ndarray]:
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


def _place(bw: np.ndarray, cols: list[np.ndarray], dest: np.ndarray, d: int) -> None:
    """Row ``i`` of ``cols`` (a chunk's ``d + l`` columns) into buffer row ``dest[i]``."""
    none = bw[:0]  # (no rows past the buffer's)
    scatter_columns(cols[:d], dest, [bw[:, :d]], none[:, :d], len(bw))
    scatter_columns(cols[d:], dest, [bw[:, d:]], none[:, d:], len(bw))


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
    dtype: Shaped = np.float64,
    with_rows: bool = False,
) -> Iterator[Group]:
    """The batches :func:`~exactbatch.batching.buffer_whole.shuffle_whole` makes, its
    full fills scattered (module docs); ``width`` is ``(d, l)``, the rest as for
    :func:`exactbatch.batching.buffer.shuffle_buffer`."""
    d, l = width  # noqa: E741
    full = size // b * b
    kept_rows, kept_ids = np.empty((0, d + l)), np.empty(0, dtype=np.uint64)
    pending: tuple[Chunk, int] | None = None  # a chunk the last fill ended inside
    taken = 0  # the stream's rows taken so far
    scratch: list[np.ndarray] = []  # where read_whole reads a chunk cut by a fill's end
    held: Any = None  # the buffer (as spare keeps it); bw, ids: its first `size` rows,
    bw: Any = None  # in the order handed out, and their ids in the order read
    ids: Any = None
    identity = np.arange(size)  # the order of the buffer's rows handed out
    try:
        while size_hint - taken >= size - len(kept_ids):  # this fill will be full
            if bw is None:
                held = buffer_arrays(spare, size, d, l)
                bw, ids = held[0][:size], held[1][:size]
            state = rng.bit_generator.state
            perm = rng.permutation(size)  # what the buffer draws once full, drawn first
            where = np.empty(size, dtype=np.int64)
            where[perm] = identity  # each row's place in the order handed out
            fill = len(kept_ids)
            _place(bw, [kept_rows[:, j] for j in range(d + l)], where[:fill], d)
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
                _place(bw, chunk_columns(chunk, pos, take, d, l), where[fill : fill + take], d)
                ids[fill : fill + take] = row_ids(id0, pos, take)
                fill, pos, taken = fill + take, pos + take, taken + take
                pending = None if pos == rows else (chunk, pos)
                del chunk
            if fill < size:  # the stream ended before its size_hint said: as if not drawn
                kept_rows, kept_ids = bw[where[:fill]], ids[:fill].copy()
                rng.bit_generator.state = state
                break
            order = ids.take(perm)  # the ids, in the order handed out
            yield from drain(
                *sides(bw, d), order, identity, b, False, drop_last, dropped, dtype, with_rows
            )
            kept_rows, kept_ids = bw[full:].copy(), order[full:].copy()
    finally:  # the buffer, for the rest of the stream, or the next epoch
        if held is not None and spare is not None and not spare:
            spare.append(held)
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
        dtype,
        with_rows,
        (kept_rows, kept_ids, d),
    )
