"""The shuffle buffer in one piece: fill it, permute it, hand its rows out.

Trade-off: rows mix within the whole buffer (a buffer at least as large as
the stream is a full, uniform shuffle), but reading waits for batching:
while the buffer's rows are handed out nothing is read, and the consumer's
thread does the copying and the permutation. Memory: the buffer, never past
the stream's size (allocated at once when the size is known, else grown by
doubling as rows arrive).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from exactbatch.batching.gather import buffer_arrays, drain, row_ids

__all__ = ["shuffle_whole"]

_FIRST_ROWS = 1 << 14  # initial allocation; the buffer doubles up to its size


def shuffle_whole(
    chunks, b, size, rng, drop_last, size_hint, spare, dropped, dtype=np.float64
) -> Iterator:
    """Batches of ``b`` rows from ``(x, y, id0)`` chunks mixed in one buffer of
    ``size`` rows (arguments as for :func:`exactbatch.batching.buffer.shuffle_buffer`)."""
    bx = by = bh = None
    fill = 0
    try:
        for x, y, id0 in chunks:
            rows, pos = x.shape[0], 0
            if bx is None:
                first = max(_FIRST_ROWS, rows) if size_hint is None else max(size_hint, rows)
                bx, by, bh = buffer_arrays(spare, min(size, first), x.shape[1], y.shape[1])
            while pos < rows:
                if fill == len(bx):  # grow toward `size` only as rows arrive
                    new = min(size, 2 * len(bx))
                    bx = np.concatenate((bx[:fill], np.empty((new - fill, bx.shape[1]))))
                    by = np.concatenate((by[:fill], np.empty((new - fill, by.shape[1]))))
                    bh = np.concatenate((bh[:fill], np.empty(new - fill, dtype=np.uint64)))
                take = min(min(len(bx), size) - fill, rows - pos)
                bx[fill : fill + take] = x[pos : pos + take]
                by[fill : fill + take] = y[pos : pos + take]
                bh[fill : fill + take] = row_ids(id0, pos, take)
                fill += take
                pos += take
                if fill == size:  # the leftovers stay, first, for the next fill
                    perm = rng.permutation(fill)
                    rest = yield from drain(
                        bx[:fill], by[:fill], bh[:fill], perm, b, False, drop_last, dropped, dtype
                    )
                    fill = len(rest)
                    bx[:fill], by[:fill], bh[:fill] = bx[rest], by[rest], bh[rest]
            del x, y  # let the chunk go before the source makes the next one
        if fill:
            perm = rng.permutation(fill)
            yield from drain(
                bx[:fill], by[:fill], bh[:fill], perm, b, True, drop_last, dropped, dtype
            )
    finally:  # the next epoch reuses the buffer
        if bx is not None and spare is not None and not spare:
            spare.append((bx, by, bh))
