"""One pass of a stream for one shard: the chunks it owns, as the batching reads them.

:func:`open_pass` picks one of two pipelines by what the source provides
(:class:`~exactbatch.sources.protocols.StreamHooks`):

* a chunk source (Parquet, ``ndf_blocks``, Dask partitions): only the
  chunks holding the shard's rows are read, in an order shuffled per epoch
  when ``order_key`` is given (:func:`shard_pieces`); the next chunk is read
  on a background thread while this one is cut into batches (Parquet
  decoding and positional reads release the GIL); a source with
  ``will_need`` is told of the chunks coming next, and a shuffle buffer reads
  through ``read_rows_into`` or ``open_chunk`` where the source has them;
* any other stream: read front to back, every chunk of it; each shard keeps
  its own rows.

Sharding: ``span`` is the shard's rows ``(start, stop)`` of a stream of
known size (``stop`` None for the last shard: it also takes any rows past
N), or None when N is unknown, and shard s then takes chunks s, s+S,
s+2S, ... of the stream.

A pass yields ``(x, y, id0)``: float64 arrays of the shard's rows of a chunk,
``id0`` the stream row of the first; or, for a shuffle buffer, a
:class:`~exactbatch.batching.gather.ChunkRead` (rows the buffer reads
itself). Every row yielded is added to ``fed``, the ledger's tally. Memory:
the chunk being cut and the one read ahead.
"""

from __future__ import annotations

import numpy as np

from exactbatch.batching.gather import ChunkRead
from exactbatch.order import Shard, chunk_order, chunk_pieces
from exactbatch.order.digest import Tally
from exactbatch.prefetch import Hinter, Prefetcher, shut
from exactbatch.sources.chunks import ChunkError, Stream, Widths, close_iterator
from exactbatch.sources.protocols import StreamHooks

__all__ = ["HINT_AHEAD", "chunk_source_pass", "open_pass", "sequential_pass", "shard_pieces"]

HINT_AHEAD = 16  # chunks a source with will_need() is told of before they are read


def open_pass(
    stream: Stream,
    shard: Shard,
    span: tuple[int, int | None] | None,
    widths: Widths,
    fed: Tally,
    order_key: tuple[int, int] | None = None,
    into_buffer: bool = False,
):
    """The chunks of one pass of ``stream`` for ``shard`` (module docs); ``order_key``
    ``(seed, epoch)`` shuffles a chunk source's chunk order; ``into_buffer``: for a
    shuffle buffer (its read hooks may be used)."""
    hooks = stream.hooks
    if hooks.chunk_indexed:
        pieces = shard_pieces(hooks.chunk_rows, shard, span, order_key)
        return chunk_source_pass(hooks, pieces, widths, fed, into_buffer)
    return sequential_pass(stream, shard, span, widths, fed)


def shard_pieces(chunk_rows, shard: Shard, span, order_key=None) -> list[tuple[int, int, int]]:
    """``(chunk, lo, hi)``: rows ``lo .. hi - 1`` of each chunk the shard reads, in
    stream order, or in the order keyed by ``order_key`` ``(seed, epoch)``."""
    if span is None:
        pieces = [(i, 0, int(r)) for i, r in enumerate(chunk_rows) if shard.owns_chunk(i)]
    else:
        pieces = chunk_pieces(chunk_rows, *span)
    if order_key is not None:
        seed, epoch = order_key
        order = chunk_order(len(pieces), seed=seed, epoch=epoch, shard=shard.index)
        pieces = [pieces[j] for j in order.tolist()]
    return pieces


def chunk_source_pass(hooks: StreamHooks, pieces, widths: Widths, fed: Tally, into_buffer: bool):
    """The ``pieces`` of a chunk source, in their order: read into arrays, or (with
    ``into_buffer``, where the source can and its widths are known) as
    :class:`~exactbatch.batching.gather.ChunkRead` for a shuffle buffer to read."""
    rows = hooks.chunk_rows
    assert rows is not None  # a chunk source has them (stream_hooks checked)
    firsts = (np.cumsum(rows) - rows).tolist()  # each chunk's first row in the stream
    known = widths.known()
    into_buffer = into_buffer and known is not None
    d, l = known or (0, 0)  # noqa: E741 (used only into a buffer: known then)
    # A source that can start reads early (ndf_blocks: the kernel reads ahead)
    # is told the chunks coming next, up to HINT_AHEAD chunks before they are
    # read, from a thread of its own (a hint can block while reads are queued).
    hint = hooks.will_need
    hints = None if hint is None else Hinter(hint, (i for i, _, _ in pieces), HINT_AHEAD)
    into = hooks.read_rows_into if into_buffer else None
    if into is not None:
        # Rows read straight into the shuffle buffer's (by its filling thread).
        closed = False
        try:
            for i, lo, hi in pieces:
                if hints is not None:
                    hints.taken()
                fed.add_range(firsts[i] + lo, firsts[i] + hi)
                yield ChunkRead(into, firsts[i] + lo, hi - lo, d, l)
        except GeneratorExit:
            closed = True
            raise
        finally:
            shut(hints, wait=not closed)
        return
    # The next chunk is read on a background thread while this one is cut into
    # batches: one chunk more in memory, reads overlapped with batching. A source
    # that can (Parquet: open_chunk) only decodes it there, and the shuffle
    # buffer's filling thread copies it straight into its rows.
    todo = iter(pieces)
    opened = hooks.open_chunk if into_buffer else None
    read = hooks.read_chunk if opened is None else opened

    def read_next():
        for i, _, _ in todo:
            if hints is not None:
                hints.taken()
            return (read(i),)
        return None

    ahead, closed = Prefetcher(read_next, 1), False
    try:
        for pos, (i, lo, hi) in enumerate(pieces):
            (chunk,) = ahead.get()
            if opened is not None:
                fed.add_range(firsts[i] + lo, firsts[i] + hi)
                yield ChunkRead(chunk.read_rows_into, firsts[i] + lo, hi - lo, d, l)
                continue
            x, y = widths.normalize(chunk, pos)
            del chunk
            if x.shape[0] != rows[i]:  # else rows would be lost, or counted twice
                raise ChunkError(
                    f"chunk {pos}: read_chunk({i}) returned {x.shape[0]} rows, "
                    f"but chunk_rows[{i}] says {rows[i]}"
                )
            id0 = firsts[i] + lo
            fed.add_range(id0, firsts[i] + hi)
            yield x[lo:hi], y[lo:hi], id0
    except GeneratorExit:
        closed = True
        raise
    finally:
        shut(ahead, hints, wait=not closed)


def sequential_pass(stream: Stream, shard: Shard, span, widths: Widths, fed: Tally):
    """A pass of ``stream`` front to back: each chunk's rows the shard owns. A pass
    with no rows after one with rows is a ``ValueError``: the source cannot restart."""
    it = stream.open()
    try:
        row = 0  # the stream's rows before this chunk
        start, stop = (0, None) if span is None else span
        for i, chunk in enumerate(it):
            x, y = widths.normalize(chunk, i)
            r = x.shape[0]
            if span is None:  # shards split by chunk
                lo, hi = (0, r) if shard.owns_chunk(i) else (0, 0)
            else:
                lo = max(start - row, 0)
                hi = r if stop is None else min(stop - row, r)
            if lo < hi:
                fed.add_range(row + lo, row + hi)
                yield x[lo:hi], y[lo:hi], row + lo
            row += r
            del x, y, chunk
            if stop is not None and row >= stop:
                break
        if row:
            stream.had_rows = True
        elif stream.had_rows:
            raise ValueError(
                "the source yielded no rows in this pass after an earlier pass that did: "
                "it cannot restart, and every epoch must. Pass a zero-argument function "
                "that returns a fresh iterator on every call (or a re-iterable such as a "
                "list), not one that returns the same, spent iterator"
            )
    finally:
        close_iterator(it)
