"""The shuffle buffer as two halves: one is filled on a helper thread while
the other's rows are handed out.

Trade-off: reading (and copying, and drawing the permutation) overlaps with
batching instead of waiting for it, and the consumer's thread only
gathers; the price is mixing: rows mix within windows of half the buffer,
since the other half is being read. The memory is the same as one piece.
Chosen by :func:`exactbatch.batching.buffer.shuffle_buffer` only where
half the buffer still mixes many chunks (see its module docs).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator

import numpy as np

from exactbatch.batching.gather import buffer_arrays, drain, row_ids
from exactbatch.prefetch import Prefetcher

__all__ = ["shuffle_halves"]


def _halves_filled(chunks, halves, half: int, b: int, rng, stop: threading.Event):
    """On a helper thread: fill free halves (from ``halves``, a queue; None there
    ends the helper) with the stream's rows, in order; return ``(index, rows,
    ended, perm)`` for each, ``perm`` the order of its rows (with the previous
    half's leftovers).

    The permutations are drawn here, in the order the main thread would draw
    them, so the order is the same and the main thread only gathers."""
    it = iter(chunks)
    pending = None  # (x, y, id0, pos): a chunk that did not fit in the last half
    lo = 0  # the previous half's leftovers (fewer than b), mixed into this one

    def produce():
        nonlocal pending, lo
        if stop.is_set():
            return None
        got = halves.get()  # a free half, or None: the epoch is over
        if got is None:
            return None
        k, hx, hy, hh = got
        filled, ended = 0, False
        while filled < half and not stop.is_set():
            if pending is None:
                nxt = next(it, None)
                if nxt is None:
                    ended = True
                    break
                pending = (*nxt, 0)
                del nxt
            x, y, id0, pos = pending
            take = min(half - filled, x.shape[0] - pos)
            hx[b + filled : b + filled + take] = x[pos : pos + take]
            hy[b + filled : b + filled + take] = y[pos : pos + take]
            hh[b + filled : b + filled + take] = row_ids(id0, pos, take)
            filled, pos = filled + take, pos + take
            pending = None if pos == x.shape[0] else (x, y, id0, pos)
            del x, y
        if stop.is_set():
            return None
        count = lo + filled
        lo = count % b
        return k, filled, ended, rng.permutation(count)

    return produce


def shuffle_halves(
    chunks, b, size, rng, drop_last, width, spare, dropped, dtype=np.float64
) -> Iterator:
    """Batches of ``b`` rows from ``(x, y, id0)`` chunks mixed in a buffer of
    ``size`` rows read ahead in two halves (``chunks`` is iterated on a helper
    thread; ``width`` is ``(d, l)``; the rest as for
    :func:`exactbatch.batching.buffer.shuffle_buffer`)."""
    d, l = width  # noqa: E741
    half = max(b, size // 2)
    bx, by, bh = buffer_arrays(spare, 2 * (b + half), d, l)
    span = b + half  # a half: room for a batch's leftovers, then `half` new rows
    views = [(k, *(a[k * span : (k + 1) * span] for a in (bx, by, bh))) for k in (0, 1)]
    free: queue.Queue = queue.Queue()
    for v in views:
        free.put(v)
    stop = threading.Event()
    ahead = Prefetcher(_halves_filled(chunks, free, half, b, rng, stop), 1)
    try:
        while True:
            got = ahead.get()
            if got is None:
                return
            k, filled, ended, perm = got
            _, hx, hy, hh = views[k]
            _, ox, oy, oh = views[1 - k]
            # The permutation covers the previous half's leftovers (at the end of
            # this half's first b rows) and the rows filled after them.
            v = slice(b + filled - len(perm), b + filled)
            rest = yield from drain(
                hx[v], hy[v], hh[v], perm, b, ended, drop_last, dropped, dtype
            )
            lo = len(rest)  # leftovers: at the end of the next half's first b rows
            ox[b - lo : b], oy[b - lo : b] = hx[v][rest], hy[v][rest]
            oh[b - lo : b] = hh[v][rest]
            free.put(views[k])
            if ended:
                return
    finally:
        stop.set()
        free.put(None)  # wakes the helper if it waits for a free half
        ahead.close()
        # Reused only once the helper is done writing into it (it stops at the
        # next chunk; a source stuck in a read keeps its halves to itself).
        if ahead.join(timeout=1.0) and spare is not None and not spare:
            spare.append((bx, by, bh))
