"""The bounded shuffle buffer: rows mixed within windows of ``buffer_size``.

Rows are copied into a buffer until it holds ``buffer_size`` rows (at least
one batch); the buffer is then permuted and every full batch in it handed
out; the leftover rows (fewer than a batch) stay and mix into the next
fill. At the end of the stream what is left is permuted and handed out,
the last batch partial unless ``drop_last``.

What it promises, and what it costs:

* Every row of the stream is handed out exactly once (less fewer than
  ``batch_size`` rows under ``drop_last``, a different random set each
  epoch), and the order is a pure function of the generator passed in.
* A buffer at least as large as the stream is a full, uniform shuffle.
* A smaller buffer only mixes locally: on data sorted on disk (by time,
  say) rows from the start of the stream still come out before rows from
  its end. Shuffle chunk order too, and for sorted data shuffle the file
  once on disk; the buffer then keeps batches well mixed cheaply.
* Memory: the buffer (``buffer_size`` rows of d + l float64, never past
  the stream's size: allocated at once when the stream's size is known,
  else grown as rows arrive) plus the chunk being read, and the rows of
  the batches being handed out (gathered several batches at a time, up to
  about 8 MiB; each batch a view of its group). A loader keeps its buffer
  from one epoch to the next: memory mapped afresh every epoch would cost
  a page fault per 4 KiB of it.

Read ahead (chunk-indexed sources, Parquet and ``ndf_blocks``, whose size
is known and larger than the buffer, with a buffer of at least 16 chunks):
the buffer is two halves. A helper thread fills one (reading and copying
chunks, then drawing its permutation) while the rows of the other are
handed out, so reading overlaps with batching instead of waiting for it,
and the consumer's thread only gathers. Rows then mix within windows of
half the buffer (the other half is being read; still at least 8 chunks);
the memory is the same. A stream that fits in the buffer is still one
window: a full shuffle.

For the epoch ledger, chunks are ``(x, y, id0)`` (rows ``id0, id0 + 1, ...``
of the stream) and batches ``(x, y, digest)``: the buffer keeps each row's
id beside it, 8 bytes a row, gathered with the rows a group at a time and
summed into each batch's digest (:mod:`exactbatch.order.digest`); rows that
``drop_last`` leaves out are counted in ``dropped``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from itertools import chain

import numpy as np

from exactbatch.order.digest import Tally, batch_digests, rows_digest
from exactbatch.prefetch import Prefetcher

__all__ = ["DEFAULT_BUFFER_BYTES", "mixing_window", "shuffle_buffer"]

DEFAULT_BUFFER_BYTES = 64 << 20  # buffer_size=None: rows filling about this much
_FIRST_ROWS = 1 << 14  # initial allocation; the buffer doubles up to its size
_GROUP_BYTES = 8 << 20  # batches are gathered from the buffer up to this much at a time
_AHEAD_CHUNKS = 8  # read ahead only if half the buffer still mixes this many chunks


def _batches(bx, by, bh, rows, b):
    """Batches of ``b`` of buffered ``rows`` (a whole number of batches): gathered
    several at a time (up to about 8 MiB, 1/8 of the rows), each batch a view."""
    group = max(1, min(_GROUP_BYTES // (8 * max(1, bx.shape[1] + by.shape[1])), len(rows) // 8))
    group = max(b, group // b * b)
    for a in range(0, len(rows), group):
        idx = rows[a : a + group]
        gx, gy = bx.take(idx, axis=0), by.take(idx, axis=0)
        digests = batch_digests(bh.take(idx), b).tolist()
        for j, c in enumerate(range(0, gx.shape[0], b)):
            yield gx[c : c + b], gy[c : c + b], digests[j]
        del gx, gy


def _drain(vx, vy, vh, perm, b, final, drop_last, dropped):
    """Yield the full batches of the buffered rows ``vx``/``vy`` (hashes ``vh``)
    in the order ``perm`` (a permutation of their row numbers); if ``final``,
    the rows left (fewer than a batch) are the last batch (none with
    ``drop_last``: counted in ``dropped``), else their row numbers are returned
    to keep."""
    full = vx.shape[0] // b * b
    yield from _batches(vx, vy, vh, perm[:full], b)
    rest = perm[full:]
    if not final:
        return rest
    if len(rest):
        digest = rows_digest(vh.take(rest))
        if not drop_last:
            yield vx.take(rest, axis=0), vy.take(rest, axis=0), digest
        elif dropped is not None:
            dropped.add(len(rest), digest)
    return rest[:0]


def _buffer(spare, rows: int, d: int, l: int):  # noqa: E741
    """``(bx, by, bh)`` of ``rows`` rows: the one in ``spare`` (emptied) if it fits."""
    if spare:
        bx, by, bh = spare.pop()
        if bx.shape[0] >= rows and bx.shape[1] == d and by.shape[1] == l:
            return bx, by, bh
    return (
        np.empty((rows, d), dtype=np.float64),
        np.empty((rows, l), dtype=np.float64),
        np.empty(rows, dtype=np.uint64),
    )


def _ids(id0: int, pos: int, take: int) -> np.ndarray:
    return np.arange(id0 + pos, id0 + pos + take, dtype=np.uint64)


def _plan(batch_size, buffer_size, width, size_hint, ahead) -> tuple[int, bool]:
    """``(rows, halves)``: the buffer's size in rows, and whether it reads ahead in
    two halves (module docs)."""
    if buffer_size is None:
        buffer_size = DEFAULT_BUFFER_BYTES // (8 * max(1, sum(width)))
    size = max(buffer_size, batch_size)
    halves = bool(
        ahead and size_hint is not None and size_hint > size and size >= 2 * _AHEAD_CHUNKS * ahead
    )
    return size, halves


def mixing_window(
    batch_size: int,
    buffer_size: int | None,
    width: tuple[int, int],
    size_hint: int | None = None,
    ahead: int | None = None,
) -> int:
    """How many consecutive rows of a stream a row can be mixed with: the buffer,
    or half of it when it reads ahead in halves, and never more than the stream
    (``size_hint``, when known). Arguments as for :func:`shuffle_buffer`;
    ``width`` is ``(d, l)``."""
    size, halves = _plan(batch_size, buffer_size, width, size_hint, ahead)
    window = max(batch_size, size // 2) if halves else size
    return window if size_hint is None else max(1, min(window, size_hint))


def shuffle_buffer(
    chunks: Iterable,
    batch_size: int,
    buffer_size: int | None,
    rng: np.random.Generator,
    drop_last: bool,
    size_hint: int | None = None,
    spare: list | None = None,
    ahead: int | None = None,
    dropped: Tally | None = None,
) -> Iterator:
    """Yield shuffled ``(x, y, digest)`` batches of ``batch_size`` rows from
    ``(x, y, id0)`` chunks.

    ``buffer_size`` is in rows; None means as many rows as fill
    :data:`DEFAULT_BUFFER_BYTES` (64 MiB). A size under one batch is one batch.
    ``size_hint``, the stream's row count when known, sizes the buffer at once
    (else it grows by doubling as rows arrive). ``spare``: a list where the
    buffer is left when the stream ends (or is closed), for the next call to
    reuse; batches are never views of it. ``ahead``: the chunks' typical row
    count, to read ahead: for a stream known (``size_hint``) to be larger than
    the buffer, and a buffer of at least ``2 * _AHEAD_CHUNKS`` such chunks,
    half the buffer is filled on a helper thread while the other half's rows
    are handed out (``chunks`` is then iterated on that thread; rows mix
    within windows of half the buffer, still many chunks). Rows that
    ``drop_last`` leaves out are counted in ``dropped``.
    """
    it = iter(chunks)
    first = next(it, None)
    if first is None:
        return
    stream = chain((first,), it)
    d, l = first[0].shape[1], first[1].shape[1]  # noqa: E741
    del first
    size, halves = _plan(batch_size, buffer_size, (d, l), size_hint, ahead)
    if halves:
        yield from _shuffle_ahead(stream, batch_size, size, rng, drop_last, (d, l), spare, dropped)
    else:
        yield from _shuffle_one(
            stream, batch_size, size, rng, drop_last, size_hint, spare, dropped
        )


def _shuffle_one(chunks, batch_size, size, rng, drop_last, size_hint, spare, dropped) -> Iterator:
    """The buffer in one piece: filled, then its rows handed out (module docs)."""
    b = batch_size
    bx = by = bh = None
    fill = 0
    try:
        for x, y, id0 in chunks:
            rows, pos = x.shape[0], 0
            if bx is None:
                first = max(_FIRST_ROWS, rows) if size_hint is None else max(size_hint, rows)
                bx, by, bh = _buffer(spare, min(size, first), x.shape[1], y.shape[1])
            while pos < rows:
                if fill == len(bx):  # grow toward `size` only as rows arrive
                    new = min(size, 2 * len(bx))
                    bx = np.concatenate((bx[:fill], np.empty((new - fill, bx.shape[1]))))
                    by = np.concatenate((by[:fill], np.empty((new - fill, by.shape[1]))))
                    bh = np.concatenate((bh[:fill], np.empty(new - fill, dtype=np.uint64)))
                take = min(min(len(bx), size) - fill, rows - pos)
                bx[fill : fill + take] = x[pos : pos + take]
                by[fill : fill + take] = y[pos : pos + take]
                bh[fill : fill + take] = _ids(id0, pos, take)
                fill += take
                pos += take
                if fill == size:  # the leftovers stay, first, for the next fill
                    perm = rng.permutation(fill)
                    rest = yield from _drain(
                        bx[:fill], by[:fill], bh[:fill], perm, b, False, drop_last, dropped
                    )
                    fill = len(rest)
                    bx[:fill], by[:fill], bh[:fill] = bx[rest], by[rest], bh[rest]
            del x, y  # let the chunk go before the source makes the next one
        if fill:
            perm = rng.permutation(fill)
            yield from _drain(bx[:fill], by[:fill], bh[:fill], perm, b, True, drop_last, dropped)
    finally:  # the next epoch reuses the buffer
        if bx is not None and spare is not None and not spare:
            spare.append((bx, by, bh))


def _halves_filled(chunks, halves, half: int, b: int, rng, stop: threading.Event):
    """On a helper thread: fill free halves (from ``halves``, a queue) with the
    stream's rows, in order; return ``(index, rows, ended, perm)`` for each,
    ``perm`` the order of its rows (with the previous half's leftovers).

    The permutations are drawn here, in the order the main thread would draw
    them, so the order is the same and the main thread only gathers."""
    it = iter(chunks)
    pending = None  # (x, y, id0, pos): a chunk that did not fit in the last half
    lo = 0  # the previous half's leftovers (fewer than b), mixed into this one

    def produce():
        nonlocal pending, lo
        if stop.is_set():
            return None
        while True:  # a free half (or the end of the epoch)
            try:
                k, hx, hy, hh = halves.get(timeout=0.05)
                break
            except queue.Empty:
                if stop.is_set():
                    return None
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
            hh[b + filled : b + filled + take] = _ids(id0, pos, take)
            filled += take
            pending = None if pos + take == x.shape[0] else (x, y, id0, pos + take)
            del x, y
        if stop.is_set():
            return None
        count = lo + filled
        lo = count % b
        return k, filled, ended, rng.permutation(count)

    return produce


def _shuffle_ahead(chunks, b, size, rng, drop_last, width, spare, dropped):
    """The buffer as two halves: one is filled on a helper thread while the
    other's rows are handed out (rows mix within windows of half the buffer)."""
    d, l = width  # noqa: E741
    half = max(b, size // 2)
    bx, by, bh = _buffer(spare, 2 * (b + half), d, l)
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
                break
            k, filled, ended, perm = got
            _, hx, hy, hh = views[k]
            _, ox, oy, oh = views[1 - k]
            # The permutation covers the previous half's leftovers (at the end of
            # this half's first b rows) and the rows filled after them.
            v = slice(b + filled - len(perm), b + filled)
            rest = yield from _drain(hx[v], hy[v], hh[v], perm, b, ended, drop_last, dropped)
            lo = len(rest)  # leftovers: at the end of the next half's first b rows
            ox[b - lo : b], oy[b - lo : b] = hx[v][rest], hy[v][rest]
            oh[b - lo : b] = hh[v][rest]
            free.put(views[k])
            if ended:
                break
    finally:
        stop.set()
        ahead.close()
        # Reused only once the helper is done writing into it (it stops at the
        # next chunk; a source stuck in a read keeps its halves to itself).
        if ahead.join(timeout=1.0) and spare is not None and not spare:
            spare.append((bx, by, bh))
