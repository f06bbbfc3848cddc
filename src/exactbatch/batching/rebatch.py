"""Re-batching: chunks of any sizes in, exact batches out, in source order.

Full batches are cut as soon as enough rows have arrived; the remainder of
a chunk is copied into a carry and completed by the next chunk, so no row
is lost mid-stream. Every batch handed out is a fresh array (never a view
of a source chunk, which a source may reuse). Holds: the current chunk and
the carry (under one batch).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

__all__ = ["rebatch"]


def rebatch(chunks: Iterable, batch_size: int, drop_last: bool) -> Iterator:
    """Yield ``(x, y)`` batches of exactly ``batch_size`` rows from ``(x, y)`` chunks.

    The last batch holds the remaining rows (fewer than ``batch_size``)
    unless ``drop_last``, when they are dropped.
    """
    b = batch_size
    cx = cy = None  # the carry: a batch being completed across chunks
    filled = 0
    for x, y in chunks:
        rows, pos = x.shape[0], 0
        if filled:
            pos = min(b - filled, rows)
            cx[filled : filled + pos] = x[:pos]
            cy[filled : filled + pos] = y[:pos]
            filled += pos
            if filled == b:
                yield cx, cy
                cx = cy = None
                filled = 0
        while rows - pos >= b:
            yield x[pos : pos + b].copy(), y[pos : pos + b].copy()
            pos += b
        if pos < rows:
            cx = np.empty((b, x.shape[1]), dtype=np.float64)
            cy = np.empty((b, y.shape[1]), dtype=np.float64)
            filled = rows - pos
            cx[:filled] = x[pos:]
            cy[:filled] = y[pos:]
        del x, y  # let the chunk go before the source makes the next one
    if filled and not drop_last:
        yield cx[:filled], cy[:filled]
