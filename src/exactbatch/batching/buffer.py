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
  else grown as rows arrive) plus the chunk being read. A loader keeps its
  buffer from one epoch to the next: memory mapped afresh every epoch
  would cost a page fault per 4 KiB of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

__all__ = ["DEFAULT_BUFFER_BYTES", "shuffle_buffer"]

DEFAULT_BUFFER_BYTES = 64 << 20  # buffer_size=None: rows filling about this much
_FIRST_ROWS = 1 << 14  # initial allocation; the buffer doubles up to its size


def _drain(bx, by, fill, rng, b, final, drop_last):
    """Permute ``fill`` buffered rows, yield the batches, keep the leftovers first."""
    perm = rng.permutation(fill)
    full = fill // b
    for k in range(full):
        rows = perm[k * b : (k + 1) * b]
        yield bx.take(rows, axis=0), by.take(rows, axis=0)
    rest = perm[full * b :]
    if final:
        if len(rest) and not drop_last:
            yield bx.take(rest, axis=0), by.take(rest, axis=0)
        return
    bx[: len(rest)] = bx[rest]
    by[: len(rest)] = by[rest]


def _buffer(spare, rows: int, d: int, l: int):  # noqa: E741
    """``(bx, by)`` of ``rows`` rows: the one in ``spare`` (emptied) if it fits."""
    if spare:
        bx, by = spare.pop()
        if bx.shape[0] >= rows and bx.shape[1] == d and by.shape[1] == l:
            return bx, by
    return np.empty((rows, d), dtype=np.float64), np.empty((rows, l), dtype=np.float64)


def shuffle_buffer(
    chunks: Iterable,
    batch_size: int,
    buffer_size: int | None,
    rng: np.random.Generator,
    drop_last: bool,
    size_hint: int | None = None,
    spare: list | None = None,
) -> Iterator:
    """Yield shuffled ``(x, y)`` batches of ``batch_size`` rows from ``(x, y)`` chunks.

    ``buffer_size`` is in rows; None means as many rows as fill
    :data:`DEFAULT_BUFFER_BYTES` (64 MiB). A size under one batch is one batch.
    ``size_hint``, the stream's row count when known, sizes the buffer at once
    (else it grows by doubling as rows arrive). ``spare``: a list where the
    buffer is left when the stream ends (or is closed), for the next call to
    reuse; batches are never views of it.
    """
    b = batch_size
    size = None
    bx = by = None
    fill = 0
    try:
        for x, y in chunks:
            rows, pos = x.shape[0], 0
            if bx is None:
                if buffer_size is None:
                    buffer_size = DEFAULT_BUFFER_BYTES // (8 * max(1, x.shape[1] + y.shape[1]))
                size = max(buffer_size, b)
                first = max(_FIRST_ROWS, rows) if size_hint is None else max(size_hint, rows)
                bx, by = _buffer(spare, min(size, first), x.shape[1], y.shape[1])
            while pos < rows:
                if fill == len(bx):  # grow toward `size` only as rows arrive
                    new = min(size, 2 * len(bx))
                    bx = np.concatenate((bx[:fill], np.empty((new - fill, bx.shape[1]))))
                    by = np.concatenate((by[:fill], np.empty((new - fill, by.shape[1]))))
                take = min(min(len(bx), size) - fill, rows - pos)
                bx[fill : fill + take] = x[pos : pos + take]
                by[fill : fill + take] = y[pos : pos + take]
                fill += take
                pos += take
                if fill == size:
                    yield from _drain(bx, by, fill, rng, b, False, drop_last)
                    fill %= b
            del x, y  # let the chunk go before the source makes the next one
        if fill:
            yield from _drain(bx, by, fill, rng, b, True, drop_last)
    finally:  # the next epoch reuses the buffer
        if bx is not None and spare is not None and not spare:
            spare.append((bx, by))
