"""One pass of a stream for one shard: the chunks it owns, as the batching reads them.

:func:`open_pass` picks one of two pipelines by what the source provides
(:class:`~exactbatch.sources.protocols.StreamHooks`):

* a chunk source (Parquet, ``ndf_blocks``, Dask partitions): only the
  chunks holding the shard's rows are read, in an order shuffled per epoch
  when ``order_key`` is given (:func:`shard_pieces`); the next ``depth``
  chunks are read ahead, at once, on threads of their own, while this one is
  cut into batches (Parquet decoding and positional reads release the GIL;
  :func:`read_depth` picks ``depth`` for a shuffle buffer); a source with
  ``will_need`` is told of the chunks coming next, and a shuffle buffer reads
  through ``read_rows_into`` or ``open_chunk`` where the source has them;
* any other stream: read front to back, every chunk of it; each shard keeps
  its own rows.

Sharding: ``span`` is the shard's rows ``(start, stop)`` of a stream of
known size (``stop`` None for the last shard: it also takes any rows past
N), or None when N is unknown, and shard s then takes chunks s, s+S,
s+2S, ... of the stream.

A pass yields ``(x, y, id0)``: float64 arrays of the shard's rows of a chunk
(or :class:`~exactbatch.sources.column_chunk.Columns`, where the source holds
its chunks column by column: ``read_columns``, ``column_chunks``), ``id0`` the
stream row of the first; or, for a shuffle buffer, a
:class:`~exactbatch.sources.chunks.ChunkRead` (rows the buffer reads
itself). Every row yielded is added to ``fed``, the ledger's tally. Memory:
the chunk being cut and the ``depth`` chunks read ahead (the order in which
chunks are handed on is the pieces' order, whatever ``depth``).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np

from exactbatch.order import Shard, chunk_order, chunk_pieces
from exactbatch.order.digest import Tally
from exactbatch.prefetch import Hinter, ReadAhead, cores, shut
from exactbatch.sources.chunks import (
    ChunkError,
    ChunkRead,
    Side,
    Stream,
    WholeRows,
    Widths,
    close_iterator,
    laid_out,
    owned,
)
from exactbatch.sources.protocols import StreamHooks

__all__ = [
    "AHEAD_SHARE",
    "HINT_AHEAD",
    "LAY_OUT_DEPTH",
    "chunk_source_pass",
    "open_pass",
    "read_depth",
    "sequential_pass",
    "shard_pieces",
]

HINT_AHEAD = 16  # chunks a source with will_need() is told of before they are read
AHEAD_SHARE = 2  # the chunks read ahead of a buffer hold at most 1/AHEAD_SHARE of its rows
LAY_OUT_DEPTH = 3  # reading threads lay chunks out as whole rows from this depth on
_DONE = object()  # a timed sequential pass's end

# What a pass yields: a piece of a chunk read, ``(x, y, id0)``, or one for a shuffle
# buffer to read (ChunkRead); ``timed`` wraps a read (the loader's telemetry).
Piece = tuple[Side, Side, int] | ChunkRead
Pass = Generator[Piece, None, None]
Timed = Callable[[Callable[..., Any]], Callable[..., Any]]


def read_depth(buffer_rows: int | None, chunk_rows: int | None, threads: int | None = None) -> int:
    """How many chunks a pass reads ahead, at once: 1 without a shuffle buffer
    (``buffer_rows`` None) or a chunk size (``chunk_rows``, the chunks' mean); else as
    many chunks as fit in ``1 / AHEAD_SHARE`` of the buffer's rows, at most one a
    core (``threads``: the cores this process may use), at least 1."""
    if not buffer_rows or not chunk_rows:
        return 1
    fit = buffer_rows // (AHEAD_SHARE * chunk_rows)
    return max(1, min(fit, cores() if threads is None else threads))


def open_pass(
    stream: Stream,
    shard: Shard,
    span: tuple[int, int | None] | None,
    widths: Widths,
    fed: Tally,
    order_key: tuple[int, int] | None = None,
    into_buffer: bool = False,
    depth: int = 1,
    timed: Timed | None = None,
) -> Generator[Any, None, None]:
    """The chunks of one pass of ``stream`` for ``shard`` (module docs); ``order_key``
    ``(seed, epoch)`` shuffles a chunk source's chunk order; ``into_buffer``: for a
    shuffle buffer (its read hooks may be used); ``depth``: chunks read ahead;
    ``timed``: wraps each read of a chunk (``timed(read)``: the loader's telemetry)."""
    # (Any: a Piece, but only a pass into a buffer yields ChunkRead, which rebatch
    # never takes: into_buffer decides, and a type cannot follow a flag)
    hooks = stream.hooks
    if hooks.chunk_rows is not None:  # (chunk-indexed)
        pieces = shard_pieces(hooks.chunk_rows, shard, span, order_key)
        return chunk_source_pass(hooks, pieces, widths, fed, into_buffer, depth, timed)
    return sequential_pass(stream, shard, span, widths, fed, timed)


def shard_pieces(
    chunk_rows: Sequence[int] | np.ndarray,
    shard: Shard,
    span: tuple[int, int | None] | None,
    order_key: tuple[int, int] | None = None,
) -> list[tuple[int, int, int]]:
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


def chunk_source_pass(
    hooks: StreamHooks,
    pieces: list[tuple[int, int, int]],
    widths: Widths,
    fed: Tally,
    into_buffer: bool,
    depth: int = 1,
    timed: Timed | None = None,
) -> Pass:
    """The ``pieces`` of a chunk source, in their order: read into arrays, or (with
    ``into_buffer``, where the source can and its widths are known) as
    :class:`~exactbatch.sources.chunks.ChunkRead` for a shuffle buffer to read;
    ``depth`` chunks read ahead, at once (module docs)."""
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
    taken = None if hints is None else hints.taken
    # Straight into the buffer, one chunk at a time, unless several can be read at
    # once (depth > 1) through open_chunk (ndf_blocks: blocks read past the page
    # cache then keep the disk busy while the buffer's rows are handed out).
    into = hooks.read_rows_into if into_buffer else None
    if depth > 1 and hooks.open_chunk is not None:
        into = None
    if into is not None:
        if timed is not None:
            into = timed(into)
        # Rows read straight into the shuffle buffer's (by its filling thread).
        closed = False
        try:
            for i, lo, hi in pieces:
                if taken is not None:
                    taken()
                fed.add_range(firsts[i] + lo, firsts[i] + hi)
                yield ChunkRead(into, firsts[i] + lo, hi - lo, d, l)
        except GeneratorExit:
            closed = True
            raise
        finally:
            shut(hints, wait=not closed)
        return
    # The next `depth` chunks are read on threads of their own while this one is cut
    # into batches: reads overlapped with batching, and with each other (Parquet row
    # groups decoded on every core), handed on in the pieces' order. A source that
    # can (Parquet: open_chunk) only decodes them there, and the shuffle buffer's
    # filling thread copies each straight into its rows.
    opened = hooks.open_chunk if into_buffer else None
    # Else chunks held column by column where the source can (read_columns: Parquet),
    # their rows then copied once, straight into the batches.
    read = (hooks.read_columns or hooks.read_chunk) if opened is None else opened
    name = "read_columns" if opened is None and hooks.read_columns else "read_chunk"
    if opened is not None and depth >= LAY_OUT_DEPTH:
        # Several reading threads (cores to spare): each also lays its chunk out as
        # whole rows, so that the buffer's thread, the one every batch waits on,
        # only copies them (one copy a row more, made off that thread). Not with
        # two: the buffer's thread and one reader already share two cores evenly
        # (measured: 14% slower with, on 2 cores; docs/benchmarks.md).
        def read(i: int, opened: Callable[[int], Any] = opened) -> WholeRows:
            return laid_out(opened(i), firsts[i], int(rows[i]), d + l)

    assert read is not None  # (a chunk-indexed source reads its chunks by index)
    arrays = read is hooks.read_chunk  # (read_chunk's own arrays, not columns or rows)
    if arrays and not hooks.fresh_chunks:
        # A source that may fill one buffer at every call: read one chunk at a time, each
        # copied on the reading thread before its next read starts (protocols' docs).
        read, depth = owned(read), 1
    if timed is not None:
        read = timed(read)
    ahead, closed = ReadAhead(read, (i for i, _, _ in pieces), depth, taken), False
    try:
        for pos, (i, lo, hi) in enumerate(pieces):
            chunk = ahead.get()
            assert chunk is not None  # (a piece's: read ahead for every piece)
            if opened is not None:
                fed.add_range(firsts[i] + lo, firsts[i] + hi)
                narrows = getattr(chunk, "narrows", False) is True  # (a float32 buffer's)
                yield ChunkRead(chunk.read_rows_into, firsts[i] + lo, hi - lo, d, l, True, narrows)
                del chunk  # before the next is taken: depth + 1 chunks at most
                continue
            x, y = widths.normalize(chunk, pos)
            del chunk
            if x.shape[0] != rows[i]:  # else rows would be lost, or counted twice
                raise ChunkError(
                    f"chunk {pos}: {name}({i}) returned {x.shape[0]} rows, "
                    f"but chunk_rows[{i}] says {rows[i]}"
                )
            id0 = firsts[i] + lo
            fed.add_range(id0, firsts[i] + hi)
            yield x[lo:hi], y[lo:hi], id0
            del x, y
    except GeneratorExit:
        closed = True
        raise
    finally:
        shut(ahead, hints, wait=not closed)


def _timed_chunks(it: Iterator[Any], timed: Timed) -> Iterator[Any]:
    """The chunks of ``it``, each pull through ``timed`` (the one that finds the end too)."""
    pull = timed(partial(next, it, _DONE))
    while True:
        chunk = pull()
        if chunk is _DONE:
            return
        yield chunk


def sequential_pass(
    stream: Stream,
    shard: Shard,
    span: tuple[int, int | None] | None,
    widths: Widths,
    fed: Tally,
    timed: Timed | None = None,
) -> Generator[tuple[Side, Side, int], None, None]:
    """A pass of ``stream`` front to back: each chunk's rows the shard owns (``timed``
    wraps each chunk's read). A pass with no rows after one with rows is a
    ``ValueError``: the source cannot restart."""
    it = stream.open()
    chunks = it if timed is None else _timed_chunks(it, timed)
    try:
        row = 0  # the stream's rows before this chunk
        start, stop = (0, None) if span is None else span
        for i, chunk in enumerate(chunks):
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
