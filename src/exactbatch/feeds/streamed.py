"""The streamed feed: chunk sources re-batched into exact batches, and audited.

An epoch of a streamed source is: the shard's chunks (in an order shuffled
per epoch where the source can be read chunk by chunk, like Parquet row
groups), re-batched in source order or mixed in a bounded shuffle buffer,
then read one batch ahead so that the total_size audit has run by the time
the last batch is handed out.

Sharding: with N known (``total_size`` an int, or resolved by ``"auto"``),
shard s owns rows [s*N//S, (s+1)*N//S) of the stream and the last shard also
takes any rows past N. A chunk-indexed source (Parquet) reads only the
chunks its rows lie in; any other stream is read by every shard, each
keeping its rows. With N unknown (``total_size=None``) shards split by
chunk, round robin: shard s takes chunks s, s+S, s+2S, ... of the stream.

Memory: the shuffle buffer, two batches (the one handed out and the one
read ahead) and the chunks backing them, whatever N is.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from exactbatch.audit import audit_pass, check_total_size_kind, count_total
from exactbatch.batching.buffer import mixing_window, shuffle_buffer
from exactbatch.batching.gather import ChunkRead
from exactbatch.batching.indexed_epoch import num_batches
from exactbatch.batching.rebatch import rebatch
from exactbatch.batching.stream_epoch import PassTally, StreamEpoch
from exactbatch.feeds.base import BatchSpec
from exactbatch.order import buffer_rng, chunk_order, chunk_pieces
from exactbatch.order.digest import Tally
from exactbatch.prefetch import Hinter, Prefetcher, shut
from exactbatch.sources.chunks import Stream, close_iterator, normalize_chunk

__all__ = ["HINT_AHEAD", "StreamFeed"]

HINT_AHEAD = 16  # chunks a source with will_need() is told of before they are read


class StreamFeed:
    """A stream, one shard of it, its N and the audit of N (module docs)."""

    kind = "stream"
    total_batches = None  # no elastic dealing of a stream

    def __init__(self, stream: Stream, spec: BatchSpec, total_size, buffer_size: int | None):
        if spec.elastic:
            raise ValueError(
                "elastic=True needs a random-access source (a Dataset, an NdfFile, an "
                "array or a pair); a stream cannot be re-dealt across shards mid-epoch"
            )
        check_total_size_kind(total_size)
        self.spec, self.stream, self.buffer_size = spec, stream, buffer_size
        self.indexed = stream.indexed
        self.source = stream.source  # the user's object
        self.d = getattr(self.source, "d", None) if self.indexed else None
        self.l = getattr(self.source, "l", None) if self.indexed else None
        n_rows = getattr(self.source, "n_rows", None)
        self._had_rows = False  # has a pass yielded rows? (then an empty one cannot be right)
        # Only a size the source vouches for (metadata, or rows counted) sizes the
        # buffer: a declared total_size, however wrong, never sizes an allocation.
        self._known_size = total_size == "auto" or n_rows is not None
        if isinstance(total_size, str):  # "auto"
            total_size = int(n_rows) if n_rows is not None else self._count()
        elif total_size is not None and n_rows is not None and total_size != int(n_rows):
            raise ValueError(
                f"total_size={total_size} disagrees with the source, which knows it has "
                f'n_rows={int(n_rows)} rows (from its metadata); pass total_size="auto" '
                "(or the whole dataset's row count, not a shard's)"
            )
        self.total_size = total_size
        b, shard = spec.batch_size, spec.shard
        if total_size is None:
            self.start = self.stop = self.n = self.nbatches = None
        else:
            self.start, stop = shard.range(total_size)
            self.n = stop - self.start
            self.stop = None if shard.is_last else stop
            self.nbatches = num_batches(self.n, b, spec.drop_last)
        self.limit = None  # even_batches: every shard's count, the smallest shard's
        if spec.even_batches:
            if total_size is None:
                raise ValueError(
                    'even_batches=True needs the stream\'s size: pass total_size=N or "auto"'
                )
            smallest = total_size // shard.count
            self.limit = self.nbatches = num_batches(smallest, b, spec.drop_last)
        self._warned = False
        self._spare = []  # the shuffle buffer's memory, kept from one epoch to the next

    def _count(self) -> int:
        rows, width = count_total(self.stream)
        self._had_rows = True
        if width is not None:
            self.d, self.l = width
        return rows

    def prefetch_default(self) -> int:
        width = (self.d or 0) + (self.l or 0)  # unknown (0) for a stream not read yet
        return self.stream.prefetch_default(self.spec.batch_size * 8 * width)

    def state_config(self) -> dict:
        """A stream's state records its buffer and what it knows of its size."""
        return {
            "buffer_size": self.buffer_size,
            "n_rows": getattr(self.source, "n_rows", None),
            "block_rows": getattr(self.source, "block_rows", None),
        }

    # -- one epoch ----------------------------------------------------------------

    def _width(self):
        return None if self.d is None else (self.d, self.l)

    def _set_width(self, x, y) -> None:
        if self.d is None:
            self.d, self.l = x.shape[1], y.shape[1]

    def learn_widths(self) -> None:
        """A stream not read yet: learn its widths (d, l) from the first chunk of a
        pass opened for it alone (a stream with no chunk stays unknown)."""
        if self.d is not None:
            return
        it = self.stream.open()
        try:
            chunk = next(it, None)
            if chunk is not None:
                self._set_width(*normalize_chunk(chunk, 0, None))
        finally:
            close_iterator(it)

    def _indexed_chunks(self, seed, epoch, fed: Tally, into_buffer: bool = False):
        """The shard's chunks, in the epoch's chunk order: read into arrays, or (with
        ``into_buffer``, for a shuffle buffer, where the source can: ``read_rows_into``
        or ``open_chunk``) as :class:`~exactbatch.batching.gather.ChunkRead` for the
        buffer to read."""
        rows, shard = self.source.chunk_rows, self.spec.shard
        if self.total_size is None:
            pieces = [(i, 0, int(r)) for i, r in enumerate(rows) if shard.owns_chunk(i)]
        else:
            pieces = chunk_pieces(rows, self.start, self.stop)
        if self.spec.shuffle:
            order = chunk_order(len(pieces), seed=seed, epoch=epoch, shard=shard.index)
            pieces = [pieces[j] for j in order.tolist()]
        firsts = (np.cumsum(rows) - rows).tolist()  # each chunk's first row in the stream
        # A source that can start reads early (ndf_blocks: the kernel reads ahead)
        # is told the chunks coming next, up to HINT_AHEAD chunks before they are
        # read, from a thread of its own (a hint can block while reads are queued).
        hint = getattr(self.source, "will_need", None)
        hints = None if hint is None else Hinter(hint, (i for i, _, _ in pieces), HINT_AHEAD)
        into = getattr(self.source, "read_rows_into", None) if into_buffer else None
        if into is not None:
            # Rows read straight into the shuffle buffer's (by its filling thread).
            closed = False
            try:
                for i, lo, hi in pieces:
                    if hints is not None:
                        hints.taken()
                    fed.add_range(firsts[i] + lo, firsts[i] + hi)
                    yield ChunkRead(into, firsts[i] + lo, hi - lo, self.d, self.l)
            except GeneratorExit:
                closed = True
                raise
            finally:
                shut(hints, wait=not closed)
            return
        # The next chunk is read on a background thread while this one is cut into
        # batches (Parquet decoding and positional reads release the GIL): one
        # chunk more in memory, reads overlapped with batching. A source that can
        # (Parquet: open_chunk) only decodes it there, and the shuffle buffer's
        # filling thread copies it straight into its rows.
        todo = iter(pieces)
        opened = getattr(self.source, "open_chunk", None) if into_buffer else None
        read = self.source.read_chunk if opened is None else opened

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
                    yield ChunkRead(chunk.read_rows_into, firsts[i] + lo, hi - lo, self.d, self.l)
                    continue
                x, y = normalize_chunk(chunk, pos, self._width())
                del chunk
                self._set_width(x, y)
                id0 = firsts[i] + lo
                fed.add_range(id0, firsts[i] + hi)
                yield x[lo:hi], y[lo:hi], id0
        except GeneratorExit:
            closed = True
            raise
        finally:
            shut(ahead, hints, wait=not closed)

    def _stream_chunks(self, fed: Tally):
        it = self.stream.open()
        shard = self.spec.shard
        try:
            row = 0  # the stream's rows before this chunk
            for i, chunk in enumerate(it):
                x, y = normalize_chunk(chunk, i, self._width())
                self._set_width(x, y)
                r = x.shape[0]
                if self.total_size is None:  # shards split by chunk
                    lo, hi = (0, r) if shard.owns_chunk(i) else (0, 0)
                else:
                    lo = max(self.start - row, 0)
                    hi = r if self.stop is None else min(self.stop - row, r)
                if lo < hi:
                    fed.add_range(row + lo, row + hi)
                    yield x[lo:hi], y[lo:hi], row + lo
                row += r
                del x, y, chunk
                if self.stop is not None and row >= self.stop:
                    break
            if row:
                self._had_rows = True
            elif self._had_rows:
                raise ValueError(
                    "the source yielded no rows in this pass after an earlier pass that did: "
                    "it cannot restart, and every epoch must. Pass a zero-argument function "
                    "that returns a fresh iterator on every call (or a re-iterable such as a "
                    "list), not one that returns the same, spent iterator"
                )
        finally:
            close_iterator(it)

    def _audited(self, groups):
        """Groups of batches, read one batch ahead (the next group is read before a
        group's last batch, not its first, so a consumer's work on the group
        overlaps the read); audit N when the pass ends, before its last batch."""
        b = self.spec.batch_size
        full = 0
        cur = next(groups, None)
        if cur is None:  # a pass with no batches is audited too
            self._audit(0)
        while cur is not None:
            full += sum(x.shape[0] == b for x, _, _ in cur)
            if len(cur) > 1:
                yield cur[:-1]
            nxt = next(groups, None)
            if nxt is None:
                self._audit(full * b)
            yield cur[-1:]
            cur = nxt

    def _audit(self, seen: int) -> None:
        if self.n is not None and not self._warned:
            spec = self.spec
            self._warned = audit_pass(self.total_size, self.n, seen, spec.batch_size, spec.shard)

    def _chunk_rows(self) -> int | None:
        """A chunk-indexed source's mean chunk size (None: not chunk-indexed)."""
        rows = self.source.chunk_rows if self.indexed else ()
        return max(1, int(sum(rows)) // len(rows)) if len(rows) else None

    def _size_hint(self) -> int | None:
        return self.n if self._known_size else None

    def mixing_window(self) -> int | None:
        """Rows a row can be mixed with: see :func:`exactbatch.batching.buffer.mixing_window`
        (None while the widths of a stream not read yet are unknown)."""
        if not self.spec.shuffle:
            return 1
        if self.d is None and self.buffer_size is None:  # the default size needs the widths
            return None
        return mixing_window(
            self.spec.batch_size,
            self.buffer_size,
            (self.d or 0, self.l or 0),
            self._size_hint(),
            self._chunk_rows(),
        )

    def open_epoch(self, seed: int, epoch: int, skip: int, first: int = 0, pending=()):
        return StreamEpoch(partial(self._open_pass, seed, epoch), skip, self.limit, pending)

    def _open_pass(self, seed: int, epoch: int):
        tally, spec = PassTally(), self.spec
        chunks = (
            self._indexed_chunks(seed, epoch, tally.fed, into_buffer=spec.shuffle)
            if self.indexed
            else self._stream_chunks(tally.fed)
        )
        if spec.shuffle:
            rng = buffer_rng(seed=seed, epoch=epoch, shard=spec.shard.index)
            batches = shuffle_buffer(
                chunks,
                spec.batch_size,
                self.buffer_size,
                rng,
                spec.drop_last,
                self._size_hint(),
                self._spare,
                ahead=self._chunk_rows(),
                dropped=tally.dropped,
                dtype=spec.dtype,
            )
        else:
            batches = rebatch(chunks, spec.batch_size, spec.drop_last, tally.dropped, spec.dtype)
        return self._audited(batches), tally

    def close(self) -> None:
        self.source = self.stream = None
        self._spare.clear()
