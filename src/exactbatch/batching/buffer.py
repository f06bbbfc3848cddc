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
* Memory: the buffer (``buffer_size`` rows of d + l float64, grown as rows
  arrive, never past the stream's size) plus the chunk being read.
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


def shuffle_buffer(
    chunks: Iterable,
    batch_size: int,
    buffer_size: int | None,
    rng: np.random.Generator,
    drop_last: bool,
) -> Iterator:
    """Yield shuffled ``(x, y)`` batches of ``batch_size`` rows from ``(x, y)`` chunks.

    ``buffer_size`` is in rows; None means as many rows as fill
    :data:`DEFAULT_BUFFER_BYTES` (64 MiB). A size under one batch is one batch.
    """
    b = batch_size
    size = None
    bx = by = None
    fill = 0
    for x, y in chunks:
        rows, pos = x.shape[0], 0
        if bx is None:
            if buffer_size is None:
                buffer_size = DEFAULT_BUFFER_BYTES // (8 * max(1, x.shape[1] + y.shape[1]))
            size = max(buffer_size, b)
            cap = min(size, max(_FIRST_ROWS, rows))
            bx = np.empty((cap, x.shape[1]), dtype=np.float64)
            by = np.empty((cap, y.shape[1]), dtype=np.float64)
        while pos < rows:
            if fill == len(bx):  # grow toward `size` only as rows arrive
                new = min(size, 2 * len(bx))
                bx = np.concatenate((bx, np.empty((new - len(bx), bx.shape[1]))))
                by = np.concatenate((by, np.empty((new - len(by), by.shape[1]))))
            take = min(len(bx) - fill, rows - pos)
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
