"""The streamed path: chunk sources re-batched into exact batches, and audited.

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
chunk: shard s takes chunks s, s+S, s+2S, ... of the stream.

Memory: the shuffle buffer, two batches (the one handed out and the one
read ahead) and the chunks backing them, whatever N is.
"""

from __future__ import annotations

import warnings

from exactbatch.audit import check_total_size_kind, count_rows, outside_window, probe_restart
from exactbatch.batching.buffer import shuffle_buffer
from exactbatch.batching.indexed import num_batches
from exactbatch.batching.rebatch import rebatch
from exactbatch.errors import TotalSizeWarning
from exactbatch.order import buffer_rng, chunk_order, chunk_pieces, shard_range
from exactbatch.prefetch import Hinter, Prefetcher
from exactbatch.sources.chunks import as_stream, close_iterator, normalize_chunk

__all__ = ["StreamFeed"]

_HINT_AHEAD = 16  # chunks a source with will_need() is told of before they are read


def _is_chunk_indexed(source) -> bool:
    return hasattr(source, "read_chunk") and hasattr(source, "chunk_rows")


class StreamJob:
    """One batch of a streamed epoch, already read."""

    __slots__ = ("size", "x", "y")

    def __init__(self, x, y):
        self.x, self.y, self.size = x, y, x.shape[0]

    def fill(self, out_x, out_y) -> None:
        out_x[...] = self.x
        out_y[...] = self.y

    def take(self):
        return self.x, self.y


class StreamEpoch:
    """Hands out the batches of one streamed epoch; a failed stream stays failed."""

    def __init__(self, batches, skip: int, limit: int | None = None):
        self._it = batches
        self._left = limit  # even_batches: batches this epoch may still hand out
        self._pending = None
        self._failed = None
        self._ended = False
        self._claimed = 0  # batches claimed (handed out, or prefetched)
        for _ in range(skip):  # resume: replay the batches already handed out
            if self.claim() is None:
                break

    def _next(self):
        if self._ended:
            return None
        if self._failed is not None:
            raise RuntimeError(
                "this epoch's stream failed (the error is chained below); call reset() or "
                "iter() to start an epoch again"
            ) from self._failed
        try:
            batch = next(self._it, None)
        except BaseException as e:
            self._failed = e
            raise
        if batch is None:
            self._ended = True
            return None
        return StreamJob(*batch)

    def close(self) -> None:
        """Stop the epoch early: the source's iterator is closed now, not at GC."""
        self._ended = True
        self._pending = None
        self._it.close()

    def finished(self, handed: int) -> bool:
        """Is the epoch over once ``handed`` batches have been handed out?

        (Claimed batches not handed out - prefetched - mean no; else reads
        one batch ahead to know.)
        """
        return handed >= self._claimed and self._failed is None and self.peek() is None

    def peek(self) -> StreamJob | None:
        if self._pending is None:
            self._pending = self._next()
        return self._pending

    def claim(self) -> StreamJob | None:
        if self._left is not None:
            if self._left <= 0:
                return None
            self._left -= 1
        if self._pending is not None:
            job, self._pending = self._pending, None
        else:
            job = self._next()
        self._claimed += job is not None
        return job


class StreamFeed:
    """A streamed source, one shard of it, its N and the audit of N."""

    def __init__(
        self,
        source,
        *,
        batch_size,
        shuffle,
        drop_last,
        num_shards,
        shard_index,
        total_size,
        buffer_size,
        even_batches=False,
    ):
        check_total_size_kind(total_size)
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.num_shards, self.shard_index = num_shards, shard_index
        self.buffer_size = buffer_size
        self.indexed = _is_chunk_indexed(source)
        self.source = source
        self.stream = None if self.indexed else as_stream(source)
        self.d = getattr(source, "d", None) if self.indexed else None
        self.l = getattr(source, "l", None) if self.indexed else None
        n_rows = getattr(source, "n_rows", None)
        if isinstance(total_size, str):  # "auto"
            total_size = int(n_rows) if n_rows is not None else self._count()
        self.total_size = total_size
        if total_size is None:
            self.start = self.stop = self.n = self.nbatches = None
        else:
            self.start, stop = shard_range(total_size, num_shards, shard_index)
            self.n = stop - self.start
            self.stop = None if shard_index == num_shards - 1 else stop
            self.nbatches = num_batches(self.n, batch_size, drop_last)
        self.limit = None  # even_batches: every shard's count, the smallest shard's
        if even_batches:
            if total_size is None:
                raise ValueError(
                    "even_batches=True needs the stream's size: pass total_size=N or \"auto\""
                )
            smallest = total_size // num_shards
            self.limit = self.nbatches = num_batches(smallest, batch_size, drop_last)
        self._warned = False
        self._spare = []  # the shuffle buffer's memory, kept from one epoch to the next

    def _count(self) -> int:
        rows, width, first = count_rows(self.stream, normalize_chunk)
        warnings.warn(
            f'total_size="auto": the source has no n_rows, so exactbatch counted its rows with '
            f"one full pass ({rows} rows). Pass total_size={rows} to skip the counting pass.",
            UserWarning,
            stacklevel=4,
        )
        if rows == 0:
            raise ValueError(
                "the source yielded no rows while counting: if it is really empty pass "
                "total_size=0; if it is a factory, check it returns a fresh iterator per call"
            )
        probe_restart(self.stream, first, rows)
        if width is not None:
            self.d, self.l = width
        return rows

    # -- one epoch ----------------------------------------------------------------

    def _width(self):
        return None if self.d is None else (self.d, self.l)

    def _set_width(self, x, y) -> None:
        if self.d is None:
            self.d, self.l = x.shape[1], y.shape[1]

    def _indexed_chunks(self, seed, epoch):
        rows = self.source.chunk_rows
        if self.total_size is None:
            pieces = [
                (i, 0, int(r))
                for i, r in enumerate(rows)
                if i % self.num_shards == self.shard_index
            ]
        else:
            pieces = chunk_pieces(rows, self.start, self.stop)
        if self.shuffle:
            order = chunk_order(len(pieces), seed=seed, epoch=epoch, shard=self.shard_index)
            pieces = [pieces[j] for j in order.tolist()]
        # The next chunk is read on a background thread while this one is cut into
        # batches (Parquet decoding and positional reads release the GIL): one
        # chunk more in memory, reads overlapped with batching.
        todo = iter(pieces)
        # A source that can start reads early (ndf_blocks: the kernel reads ahead)
        # is told the chunks coming next, up to _HINT_AHEAD chunks before they are
        # read, from a thread of its own (a hint can block while reads are queued).
        hint = getattr(self.source, "will_need", None)
        hints = None if hint is None else Hinter(hint, (i for i, _, _ in pieces), _HINT_AHEAD)

        def read_next():
            for i, _, _ in todo:
                if hints is not None:
                    hints.taken()
                return (self.source.read_chunk(i),)
            return None

        ahead = Prefetcher(read_next, 1)
        try:
            for pos, (_, lo, hi) in enumerate(pieces):
                (chunk,) = ahead.get()
                x, y = normalize_chunk(chunk, pos, self._width())
                del chunk
                self._set_width(x, y)
                yield x[lo:hi], y[lo:hi]
        finally:
            ahead.close()
            if hints is not None:
                hints.close()

    def _stream_chunks(self):
        it = self.stream.open()
        try:
            row = 0
            for i, chunk in enumerate(it):
                x, y = normalize_chunk(chunk, i, self._width())
                self._set_width(x, y)
                if self.total_size is None:
                    if i % self.num_shards == self.shard_index:
                        yield x, y
                    continue
                r = x.shape[0]
                lo = max(self.start - row, 0)
                hi = r if self.stop is None else min(self.stop - row, r)
                row += r
                if lo < hi:
                    yield x[lo:hi], y[lo:hi]
                del x, y, chunk
                if self.stop is not None and row >= self.stop:
                    break
        finally:
            close_iterator(it)

    def _audited(self, batches):
        """Run one batch ahead; audit N when the pass ends, before its last batch."""
        b = self.batch_size
        full = 0
        cur = next(batches, None)
        if cur is None:  # a pass with no batches is audited too
            self._audit(0)
        while cur is not None:
            nxt = next(batches, None)
            full += cur[0].shape[0] == b
            if nxt is None:
                self._audit(full * b)
            yield cur
            cur = nxt

    def _audit(self, seen: int) -> None:
        if self.n is None or self._warned or not outside_window(self.n, seen, self.batch_size):
            return
        self._warned = True
        share = (
            f"total_size={self.total_size}"
            if self.num_shards == 1
            else f"shard {self.shard_index}'s share of total_size={self.total_size} "
            f"({self.n} rows)"
        )
        warnings.warn(
            TotalSizeWarning(
                f"{share} disagrees with the stream: a full pass handed out {seen} rows in "
                f"full batches of {self.batch_size} (a correct N satisfies seen <= N < seen + "
                f"batch_size). A likelihood rescaled by the wrong N is biased: pass the true "
                f'row count, or total_size="auto".'
            ),
            stacklevel=4,
        )

    def _chunk_rows(self) -> int | None:
        """A chunk-indexed source's mean chunk size (None: not chunk-indexed)."""
        rows = self.source.chunk_rows if self.indexed else ()
        return max(1, int(sum(rows)) // len(rows)) if len(rows) else None

    def open_epoch(self, seed: int, epoch: int, skip: int, first: int = 0) -> StreamEpoch:
        chunks = (
            self._indexed_chunks(seed, epoch) if self.indexed else self._stream_chunks()
        )
        if self.shuffle:
            rng = buffer_rng(seed=seed, epoch=epoch, shard=self.shard_index)
            batches = shuffle_buffer(
                chunks,
                self.batch_size,
                self.buffer_size,
                rng,
                self.drop_last,
                self.n,
                self._spare,
                ahead=self._chunk_rows(),
            )
        else:
            batches = rebatch(chunks, self.batch_size, self.drop_last)
        return StreamEpoch(self._audited(batches), skip, self.limit)

    def close(self) -> None:
        self.source = self.stream = None
        self._spare.clear()
