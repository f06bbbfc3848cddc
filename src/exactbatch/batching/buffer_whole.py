"""The shuffle buffer in one piece: fill it, permute it, hand its rows out.

Trade-off: rows mix within the whole buffer (a buffer at least as large as
the stream is a full, uniform shuffle), but reading waits for batching:
while the buffer's rows are handed out nothing is read, and the consumer's
thread does the copying (a large fill's permutation is drawn on a thread of
its own while the fill is read, as the halves draw theirs: the same draws).
Memory: the buffer, never past the stream's size (allocated at once when the
size is known, else grown by doubling as rows arrive).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from exactbatch.batching.gather import (
    Chunk,
    Drawn,
    Group,
    Shaped,
    buffer_arrays,
    chunk_size,
    chunk_width,
    drain,
    fill_rows,
    read_whole,
    sides,
)
from exactbatch.order.digest import Tally

__all__ = ["shuffle_whole"]

_FIRST_ROWS = 1 << 14  # initial allocation; the buffer doubles up to its size
# A fill of at least this many rows draws its permutation on a thread of its own while
# it is read (gather.Drawn: a thread started a fill, ~0.1 ms, against ~1-3 ms of draw)
DRAW_AHEAD_ROWS = 1 << 15


def shuffle_whole(
    chunks: Iterable[Chunk],
    b: int,
    size: int,
    rng: np.random.Generator,
    drop_last: bool,
    size_hint: int | None,
    spare: list[tuple[np.ndarray, np.ndarray]] | None,
    dropped: Tally | None,
    dtype: Shaped = np.float64,
    with_rows: bool = False,
    held: np.dtype | type = np.float64,
    expect: int | None = None,
) -> Iterator[Group]:
    """Batches of ``b`` rows from chunks (``(x, y, id0)`` or
    :class:`~exactbatch.sources.chunks.ChunkRead`) mixed in one buffer of
    ``size`` rows held as ``held`` (float64, or float32 for float32 batches: see
    :func:`~exactbatch.batching.gather.buffer_dtype`; the other arguments as for
    :func:`exactbatch.batching.buffer.shuffle_buffer`)."""
    # The rows a fill drawn ahead is drawn for: the stream's size where known, else the
    # size it was declared to have (a guess: a wrong one costs a second draw, never
    # other draws), else the buffer's. A stream whose declared size was left out drew
    # its last fill's permutation for the whole buffer, then again for the rows it had.
    guess = size_hint if size_hint is not None else expect
    bw: Any = None  # the buffer's rows and ids, made at the first chunk
    bh: Any = None
    fill = d = read = 0  # (read: the stream's rows taken so far)
    scratch: list[np.ndarray] = []  # where read_whole reads a chunk cut by the end
    drawn: Drawn | None = None  # the fill's permutation, drawn while it is read

    def permutation(count: int) -> np.ndarray:
        nonlocal drawn
        if drawn is None:
            return rng.permutation(count)
        perm, drawn = drawn.result(count), None
        return perm

    try:
        for chunk in chunks:
            rows, pos = chunk_size(chunk), 0
            if bw is None:
                d, l = chunk_width(chunk)  # noqa: E741
                first = max(_FIRST_ROWS, rows) if size_hint is None else max(size_hint, rows)
                bw, bh = buffer_arrays(spare, min(size, first), d, l, held)
            while pos < rows:
                if drawn is None:  # a fill starts: the rows it will have, as far as known
                    due = size if guess is None else min(size, fill + guess - read)
                    # only for rows the buffer holds room for already: it grows as rows
                    # come, and a permutation drawn for a size no row has shown yet (a
                    # buffer_size past the data's) would be the allocation it avoids
                    if DRAW_AHEAD_ROWS <= due <= len(bw):
                        drawn = Drawn(rng, due)
                if fill == len(bw):  # grow toward `size` only as rows arrive
                    new = min(size, 2 * len(bw))
                    more = np.empty((new - fill, bw.shape[1]), dtype=bw.dtype)
                    bw = np.concatenate((bw[:fill], more))
                    bh = np.concatenate((bh[:fill], np.empty(new - fill, dtype=np.uint64)))
                take = min(min(len(bw), size) - fill, rows - pos)
                chunk = read_whole(chunk, take, scratch)
                fill_rows(chunk, pos, take, bw[fill : fill + take], bh[fill : fill + take])
                fill += take
                pos += take
                read += take
                if fill == size:  # the leftovers stay, first, for the next fill
                    perm = permutation(fill)
                    bh[:fill] = bh[:fill].take(perm)  # the ids, in the order handed out
                    rest = yield from drain(
                        *sides(bw[:fill], d),
                        bh[:fill],
                        perm,
                        b,
                        False,
                        drop_last,
                        dropped,
                        dtype,
                        with_rows,
                    )
                    bw[: len(rest)], bh[: len(rest)] = bw[rest], bh[fill - len(rest) : fill]
                    fill = len(rest)
                    del perm, rest  # (not held while the next fill's is drawn)
            del chunk  # let the chunk go before the source makes the next one
        if fill:
            perm = permutation(fill)
            bh[:fill] = bh[:fill].take(perm)
            yield from drain(
                *sides(bw[:fill], d), bh[:fill], perm, b, True, drop_last, dropped, dtype, with_rows
            )
    finally:  # the next epoch reuses the buffer
        if bw is not None and spare is not None and not spare:
            spare.append((bw, bh))
