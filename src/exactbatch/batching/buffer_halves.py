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
from collections.abc import Callable, Iterable, Iterator

import numpy as np

from exactbatch.batching.gather import (
    Chunk,
    Drawn,
    Group,
    Shaped,
    buffer_arrays,
    chunk_size,
    drain,
    fill_rows,
    read_whole,
    sides,
)
from exactbatch.order.digest import Tally
from exactbatch.prefetch import Prefetcher, shut

__all__ = ["shuffle_halves"]

# A half to fill: (index, whole rows, ids); None ends the helper.
_Half = tuple[int, np.ndarray, np.ndarray]
# A half filled: (index, rows, ended, perm, ids).
_Filled = tuple[int, int, bool, np.ndarray, np.ndarray]


def _halves_filled(
    chunks: Iterable[Chunk],
    halves: queue.Queue[_Half | None],
    half: int,
    b: int,
    rng: np.random.Generator,
    stop: threading.Event,
) -> Callable[[], _Filled | None]:
    """On a helper thread: fill free halves (from ``halves``, a queue; None there
    ends the helper) with the stream's rows, in order; return ``(index, rows,
    ended, perm, ids)`` for each, ``perm`` the order of its rows (the previous
    half's leftovers first) and ``ids`` their row ids in that order.

    The permutations are drawn here, in the order the main thread would draw
    them, so the order is the same and the main thread only gathers."""
    it = iter(chunks)
    pending: tuple[Chunk, int] | None = (
        None  # (chunk, pos): a chunk that did not fit in the last half
    )
    kept = np.zeros(0, dtype=np.uint64)  # ids of the previous half's leftovers (< b of them)
    scratch: list[np.ndarray] = []  # where read_whole reads a chunk cut by a half's end

    def produce() -> _Filled | None:
        nonlocal pending, kept
        if stop.is_set():
            return None
        got = halves.get()  # a free half, or None: the epoch is over
        if got is None:
            return None
        k, hw, hh = got
        drawn = Drawn(rng, len(kept) + half)
        filled, ended = 0, False
        while filled < half and not stop.is_set():
            if pending is None:
                nxt = next(it, None)
                if nxt is None:
                    ended = True
                    break
                pending = (nxt, 0)
                del nxt
            chunk, pos = pending
            rows = chunk_size(chunk)
            take = min(half - filled, rows - pos)
            chunk = read_whole(chunk, take, scratch)
            at = slice(b + filled, b + filled + take)
            fill_rows(chunk, pos, take, hw[at], hh[at])
            filled, pos = filled + take, pos + take
            pending = None if pos == rows else (chunk, pos)
            del chunk
        perm = drawn.result(len(kept) + filled)
        if stop.is_set():
            return None
        # The ids, put in the permutation's order here (the main thread only reads
        # them), in place: the previous half's leftovers' ids first.
        v = slice(b - len(kept), b + filled)
        hh[b - len(kept) : b] = kept
        hh[v] = hh[v].take(perm)
        kept = hh[v][len(perm) // b * b :].copy()
        return k, filled, ended, perm, hh[v]

    return produce


def shuffle_halves(
    chunks: Iterable[Chunk],
    b: int,
    size: int,
    rng: np.random.Generator,
    drop_last: bool,
    width: tuple[int, int],
    spare: list[tuple[np.ndarray, np.ndarray]] | None,
    dropped: Tally | None,
    dtype: Shaped = np.float64,
    with_rows: bool = False,
    held: np.dtype | type = np.float64,
) -> Iterator[Group]:
    """Batches of ``b`` rows from chunks (``(x, y, id0)`` or
    :class:`~exactbatch.sources.chunks.ChunkRead`) mixed in a buffer of
    ``size`` rows read ahead in two halves (``chunks`` is iterated on a helper
    thread; ``width`` is ``(d, l)``; ``held`` the rows' dtype, as for
    :func:`~exactbatch.batching.buffer_whole.shuffle_whole`; the rest as for
    :func:`exactbatch.batching.buffer.shuffle_buffer`)."""
    d, l = width  # noqa: E741
    half = max(b, size // 2)
    bw, bh = buffer_arrays(spare, 2 * (b + half), d, l, held)
    span = b + half  # a half: room for a batch's leftovers, then `half` new rows
    views = [(k, bw[k * span : (k + 1) * span], bh[k * span : (k + 1) * span]) for k in (0, 1)]
    free: queue.Queue[_Half | None] = queue.Queue()
    for v in views:
        free.put(v)
    stop = threading.Event()
    ahead, closed = Prefetcher(_halves_filled(chunks, free, half, b, rng, stop), 1), False
    try:
        while True:
            got = ahead.get()
            if got is None:
                return
            k, filled, ended, perm, ids = got
            hw, ow = views[k][1], views[1 - k][1]
            # The permutation covers the previous half's leftovers (at the end of
            # this half's first b rows) and the rows filled after them.
            now = slice(b + filled - len(perm), b + filled)
            rest = yield from drain(
                *sides(hw[now], d), ids, perm, b, ended, drop_last, dropped, dtype, with_rows
            )
            lo = len(rest)  # leftovers: at the end of the next half's first b rows
            ow[b - lo : b] = hw[now][rest]
            free.put(views[k])
            if ended:
                return
    except GeneratorExit:  # closed early, maybe by the collector: no wait (see shut)
        closed = True
        raise
    finally:
        stop.set()
        free.put(None)  # wakes the helper if it waits for a free half
        shut(ahead, wait=not closed)
        # Reused only once the helper is done writing into it (it stops at the
        # next chunk; a source stuck in a read keeps its halves to itself).
        if not closed and ahead.join(timeout=1.0) and spare is not None and not spare:
            spare.append((bw, bh))
