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
  once on disk (or read an ``.ndf`` with random access, a full shuffle
  whatever the file order); the buffer then keeps batches well mixed cheaply.
* Memory: the buffer (``buffer_size`` rows of d + l float64, or float32
  where the batches are float32, never past the stream's size) plus the
  chunk being read (none for ``ndf_blocks``, whose blocks are read straight
  into the buffer), and the rows of the batches
  being handed out (gathered several batches at a time, up to about 8 MiB).
  A loader keeps its buffer from one epoch to the next: memory mapped
  afresh every epoch would cost a page fault per 4 KiB of it.

Two algorithms, and the rule that chooses between them:

* one piece (:mod:`exactbatch.batching.buffer_whole`): rows mix within the
  whole buffer; reading waits while the buffer's rows are handed out;
* two halves (:mod:`exactbatch.batching.buffer_halves`): one half is read
  on a helper thread while the other is handed out; rows mix within
  windows of **half** the buffer.

The buffer reads ahead in halves when, and only when, the source is
chunk-indexed (Parquet, ``ndf_blocks``: its chunks' typical size is known),
its size is known and larger than the buffer, and the buffer holds at least
16 such chunks (so a half still mixes at least 8). Otherwise it is one
piece; a stream that fits in the buffer is always one window, a full
shuffle. :func:`mixing_window` (``DataLoader.mixing_window``) says which
window a setting gives; ``exactbatch mixing`` prints it, with the buffer a
full mix needs.

For the epoch ledger, chunks are ``(x, y, id0)`` (rows ``id0, id0 + 1, ...``
of the stream) and batches ``(x, y, digest)`` (:mod:`exactbatch.batching.gather`);
rows that ``drop_last`` leaves out are counted in ``dropped``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from exactbatch.batching.buffer_halves import shuffle_halves
from exactbatch.batching.buffer_whole import shuffle_whole
from exactbatch.batching.gather import Chunk, Group, Shaped, buffer_dtype, chunk_width
from exactbatch.order.digest import Tally

__all__ = [
    "DEFAULT_BUFFER_BYTES",
    "buffer_rows",
    "full_mix_buffer",
    "mixing_window",
    "shuffle_buffer",
]

DEFAULT_BUFFER_BYTES = 64 << 20  # buffer_size=None: rows filling about this much
_AHEAD_CHUNKS = 8  # read ahead only if half the buffer still mixes this many chunks


def _plan(
    batch_size: int,
    buffer_size: int | None,
    width: tuple[int, int],
    size_hint: int | None,
    ahead: int | None,
) -> tuple[int, bool]:
    """``(rows, halves)``: the buffer's size in rows, and whether it reads ahead in
    two halves (the rule in the module docs)."""
    if buffer_size is None:
        buffer_size = DEFAULT_BUFFER_BYTES // (8 * max(1, sum(width)))
    size = max(buffer_size, batch_size)
    halves = bool(
        ahead and size_hint is not None and size_hint > size and size >= 2 * _AHEAD_CHUNKS * ahead
    )
    return size, halves


def buffer_rows(
    batch_size: int,
    buffer_size: int | None,
    width: tuple[int, int] | None,
    size_hint: int | None = None,
) -> int | None:
    """The rows a buffer holds (never more than the stream's ``size_hint``, when
    known); None while the default size's widths (``width``) are unknown."""
    if buffer_size is None and width is None:
        return None
    size = _plan(batch_size, buffer_size, width or (0, 0), None, None)[0]
    return size if size_hint is None else max(1, min(size, size_hint))


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


def full_mix_buffer(batch_size: int, size_hint: int) -> int:
    """The smallest ``buffer_size`` whose window covers a stream of ``size_hint``
    rows: the stream's rows (a buffer that holds the whole stream is one piece,
    never halves), or 1 when the stream fits in one batch."""
    return 1 if size_hint <= batch_size else size_hint


def _first_then(first: list[Chunk], it: Iterator[Chunk]) -> Iterator[Chunk]:
    """``first``'s one chunk, then ``it``'s, holding none of them once handed on (a
    ``chain((first,), it)`` holds the first chunk, decoded rows and all, to the end)."""
    yield first.pop()
    yield from it


def shuffle_buffer(
    chunks: Iterable[Chunk],
    batch_size: int,
    buffer_size: int | None,
    rng: np.random.Generator,
    drop_last: bool,
    size_hint: int | None = None,
    spare: list[tuple[np.ndarray, np.ndarray]] | None = None,
    ahead: int | None = None,
    dropped: Tally | None = None,
    dtype: Shaped = np.float64,
    with_rows: bool = False,
    expect: int | None = None,
) -> Iterator[Group]:
    """Yield shuffled ``(x, y, digest)`` batches (``(x, y, digest, rows)`` ``with_rows``:
    the int64 ids of its rows, the ones the digest is of) of ``batch_size`` rows, in groups
    (lists of batches gathered together: see :func:`~exactbatch.batching.gather.gathered`), from
    ``(x, y, id0)`` chunks (or :class:`~exactbatch.sources.chunks.ChunkRead`:
    rows a source reads straight into the buffer).

    ``buffer_size`` is in rows; None means as many rows as fill
    :data:`DEFAULT_BUFFER_BYTES` (64 MiB). A size under one batch is one batch.
    ``size_hint``, the stream's row count when known, sizes the buffer at once
    (else it grows by doubling as rows arrive). ``spare``: a list where the
    buffer is left when the stream ends (or is closed), for the next call to
    reuse; batches are never views of it. ``ahead``: the chunks' typical row
    count, for the rule that chooses two halves (module docs; ``chunks`` is
    then iterated on a helper thread). Rows that ``drop_last`` leaves out are
    counted in ``dropped``. Batches are ``dtype`` (float64 or float32, or an
    Output); the buffer holds float64 rows, cast as batches are gathered from it,
    or float32 rows where the batches are plain float32 (the same bits:
    :func:`~exactbatch.batching.gather.buffer_dtype`). ``expect``: the rows the stream
    was declared to have (a ``total_size`` its source does not vouch for): never sizes
    the buffer, only the permutation a one-piece buffer draws while a fill is read (a
    wrong one costs a second draw, never other batches).
    """
    it = iter(chunks)
    first = next(it, None)
    if first is None:
        return
    d, l = chunk_width(first)  # noqa: E741
    held = buffer_dtype(dtype, first)
    stream = _first_then([first], it)
    del first
    size, halves = _plan(batch_size, buffer_size, (d, l), size_hint, ahead)
    if halves:
        yield from shuffle_halves(
            stream, batch_size, size, rng, drop_last, (d, l), spare, dropped, dtype, with_rows,
            held,
        )  # fmt: skip
    else:
        yield from shuffle_whole(
            stream, batch_size, size, rng, drop_last, size_hint, spare, dropped, dtype, with_rows,
            held, expect,
        )  # fmt: skip
