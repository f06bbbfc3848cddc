"""Re-batching: chunks of any sizes in, exact batches out, in source order.

Full batches are cut as soon as enough rows have arrived; the remainder of
a chunk is copied into a carry and completed by the next chunk, so no row
is lost mid-stream. Every batch handed out is a fresh array (never a view
of a source chunk, which a source may reuse). Holds: the current chunk and
the carry (under one batch, grown as rows arrive).

For the epoch ledger, a chunk is ``(x, y, id0)``: its rows are the stream's
rows ``id0, id0 + 1, ...``, and each batch comes out as ``(x, y, digest)``,
the digest of its row ids (:mod:`exactbatch.order.digest`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

from exactbatch.arrays import batch_pair
from exactbatch.batching.gather import Group, Shaped
from exactbatch.batching.output import Output
from exactbatch.order.digest import RangeDigests, Tally
from exactbatch.sources.column_chunk import Columns, put

__all__ = ["rebatch"]

_MASK = (1 << 64) - 1
_TILE_BYTES = 128 << 10  # a tile of a chunk held column by column (_tiles)


def rebatch(
    chunks: Iterable[tuple[Any, Any, int]],
    batch_size: int,
    drop_last: bool,
    dropped: Tally | None = None,
    dtype: Shaped = np.float64,
    with_rows: bool = False,
) -> Iterator[Group]:
    """Yield ``(x, y, digest)`` batches of exactly ``batch_size`` rows of ``dtype``
    (float64 or float32: cast as they are copied) from ``(x, y, id0)`` chunks, each
    as a group of one (a list: what a stream's pass yields, as the shuffle buffer's
    groups; one batch at a time, so that no more than it is held). ``with_rows``:
    ``(x, y, digest, rows)``, ``rows`` the int64 ids the digest is of. ``dtype`` may
    be an :class:`~exactbatch.batching.output.Output` (labels, transform, NaN
    rule): batches are then cut as float64 and made by its rules (a second pass
    over each batch, which a copy out of the chunks needs anyway).

    The last batch holds the remaining rows (fewer than ``batch_size``)
    unless ``drop_last``, when they are dropped (and counted in ``dropped``).
    """
    if not isinstance(dtype, Output):
        yield from _rebatch(chunks, batch_size, drop_last, dropped, dtype, with_rows)
        return
    for group in _rebatch(chunks, batch_size, drop_last, dropped, np.float64, True):
        x, y, digest, ids = group[0]  # the Output names rows by their ids
        yield [(*dtype.finish(x, y, ids), digest, *((ids,) if with_rows else ()))]


def _tiles(chunks: Iterable[tuple[Any, Any, int]], b: int) -> Iterator[tuple[Any, Any, int]]:
    """``chunks``, each chunk held column by column that small batches would be cut from
    laid out a tile of rows at a time (views of one scratch tile, copied out of before
    the next: every batch and carry is a copy). A small batch's copy straight from the
    columns costs a call and a buffer a column, more than the rows themselves; a tile
    of about ``_TILE_BYTES`` is one such copy for many batches, and stays in the cache
    while they are copied out of it."""
    scratch: list[np.ndarray] = []
    seen = 0  # rows passed on: the tiles are cut on the batches' bounds (one carry a chunk)
    for x, y, id0 in chunks:
        rows, width = x.shape[0], x.shape[1] + y.shape[1]
        if not isinstance(x, Columns) or b * 8 * width >= _TILE_BYTES:
            seen += rows
            yield x, y, id0
            continue
        t = max(1, _TILE_BYTES // (8 * max(1, width) * b)) * b  # whole batches a tile
        if not scratch or len(scratch[0]) < t or scratch[0].shape[1] != x.shape[1]:
            scratch[:] = [np.empty((t, x.shape[1])), np.empty((t, y.shape[1]))]
        tx, ty = scratch
        a = 0
        while a < rows:
            z = min(rows, a + ((-(seen + a)) % b or t))  # a carry's rest, else a tile
            put(tx[: z - a], x[a:z])
            put(ty[: z - a], y[a:z])
            yield tx[: z - a], ty[: z - a], id0 + a
            a = z
        seen += rows
        del x, y


def _rebatch(
    chunks: Iterable[tuple[Any, Any, int]],
    batch_size: int,
    drop_last: bool,
    dropped: Tally | None,
    dtype: DTypeLike,
    with_rows: bool,
) -> Iterator[Group]:
    """:func:`rebatch` for a dtype."""
    b = batch_size
    chunks = _tiles(chunks, b)
    digest = RangeDigests(b)
    # the carry: a batch being completed across chunks
    cx: Any = None
    cy: Any = None
    filled = carried = 0  # its rows, and their digest
    runs: list[tuple[int, int]] = []  # with_rows: the carry's ids, as runs of the stream
    for x, y, id0 in chunks:
        rows, pos = x.shape[0], 0
        if filled:
            pos = min(b - filled, rows)
            cx, cy = _room(cx, cy, filled + pos, b, dtype=dtype)
            put(cx[filled : filled + pos], x[:pos])
            put(cy[filled : filled + pos], y[:pos])
            carried += digest(id0, id0 + pos)
            filled += pos
            if with_rows:
                runs.append((id0, id0 + pos))
            if filled == b:
                yield [(cx, cy, carried & _MASK, *_ids(runs, with_rows))]
                cx = cy = None
                filled = carried = 0
                runs.clear()
        while rows - pos >= b:
            bx, by = batch_pair(b, x.shape[1], y.shape[1], dtype)
            put(bx, x[pos : pos + b])  # a copy, cast as it copies
            put(by, y[pos : pos + b])
            if with_rows:
                ids = np.arange(id0 + pos, id0 + pos + b, dtype=np.int64)
                yield [(bx, by, digest(id0 + pos, id0 + pos + b), ids)]
            else:
                yield [(bx, by, digest(id0 + pos, id0 + pos + b))]
            pos += b
        if pos < rows:
            filled = rows - pos
            cx, cy = _room(None, None, filled, b, x.shape[1], y.shape[1], dtype)
            put(cx[:filled], x[pos:])
            put(cy[:filled], y[pos:])
            carried = digest(id0 + pos, id0 + rows)
            if with_rows:
                runs.append((id0 + pos, id0 + rows))
        del x, y  # let the chunk go before the source makes the next one
    if filled and not drop_last:
        yield [(cx[:filled], cy[:filled], carried & _MASK, *_ids(runs, with_rows))]
    elif filled and dropped is not None:
        dropped.add(filled, carried)


def _ids(runs: list[tuple[int, int]], with_rows: bool) -> tuple[np.ndarray, ...]:
    """``(ids,)``: the int64 ids of consecutive ``runs`` of the stream, or ``()``
    without ``with_rows`` (a batch then has no third array)."""
    if not with_rows:
        return ()
    return (np.concatenate([np.arange(a, z, dtype=np.int64) for a, z in runs]),)


def _room(
    cx: np.ndarray | None,
    cy: Any,  # an array, None exactly when cx is (a pair mypy cannot tie)
    need: int,
    b: int,
    d: int = 0,
    l: int = 0,  # noqa: E741
    dtype: DTypeLike = np.float64,
) -> tuple[np.ndarray, np.ndarray]:
    """A carry with room for ``need`` rows: grown by doubling, never past ``b``,
    so a huge batch_size costs only the rows that actually arrive."""
    if cx is not None and len(cx) >= need:
        return cx, cy
    cap = min(b, max(need, 2 * (0 if cx is None else len(cx)), 1024))
    nx, ny = batch_pair(
        cap, d if cx is None else cx.shape[1], l if cy is None else cy.shape[1], dtype
    )
    if cx is not None:
        nx[: len(cx)], ny[: len(cy)] = cx, cy
    return nx, ny
