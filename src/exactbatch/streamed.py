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
from collections import deque
from functools import partial

import numpy as np

from exactbatch.audit import check_total_size_kind, count_rows, outside_window, probe_restart
from exactbatch.batching.buffer import mixing_window, shuffle_buffer
from exactbatch.batching.indexed import num_batches
from exactbatch.batching.rebatch import rebatch
from exactbatch.errors import TotalSizeWarning
from exactbatch.order import buffer_rng, chunk_order, chunk_pieces, shard_range
from exactbatch.order.digest import Tally
from exactbatch.prefetch import Hinter, Prefetcher
from exactbatch.sources.chunks import as_stream, close_iterator, normalize_chunk

__all__ = ["StreamFeed"]

_HINT_AHEAD = 16  # chunks a source with will_need() is told of before they are read


def _is_chunk_indexed(source) -> bool:
    return hasattr(source, "read_chunk") and hasattr(source, "chunk_rows")


class StreamJob:
    """One batch of a streamed epoch, already read: batch ``k`` of the pass."""

    __slots__ = ("digest", "k", "size", "x", "y")

    def __init__(self, x, y, digest: int, k: int):
        self.x, self.y, self.size = x, y, x.shape[0]
        self.digest, self.k = digest, k

    def fill(self, out_x, out_y) -> None:
        out_x[...] = self.x
        out_y[...] = self.y

    def take(self):
        return self.x, self.y


class PassTally:
    """The ledger's view of one pass: rows fed into the batching, rows drop_last
    dropped, rows even_batches left out. What the pass promises is the first
    less the other two."""

    __slots__ = ("dropped", "fed", "left")

    def __init__(self):
        self.fed, self.dropped, self.left = Tally(), Tally(), Tally()

    def promise(self) -> Tally:
        return self.fed.minus(self.dropped).minus(self.left)


class StreamEpoch:
    """Hands out the batches of one streamed epoch.

    ``open_pass()`` starts the epoch's pass: ``(batches, tally)``. A pass
    that fails (the source raised) is started again at the next claim and
    replayed up to the batches already claimed, so a caller that retries
    gets the batch that failed, and no other. ``skip`` batches were handed
    out before (a resumed epoch), but for those in ``pending``; ``limit``
    (even_batches) caps the batches handed out, and the rest of the pass
    is read (so the audit and the ledger see it) but not handed out.
    """

    def __init__(self, open_pass, skip: int, limit: int | None = None, pending=()):
        self._open_pass = open_pass
        self._it, self.tally = open_pass()
        self._limit = limit
        self._pending = None
        self._failed = False
        self._ended = False
        self._drained = False
        self.claimed = 0  # batches of the pass claimed (handed out, prefetched, given back)
        self.returned: deque = deque()
        keep = set(pending)
        for _ in range(skip):  # resume: replay the batches already handed out
            job = self.claim()
            if job is None:
                break
            if job.k in keep:
                self.returned.append(job)

    def _next(self):
        if self._ended:
            return None
        if self._failed:  # start the pass again and replay what was claimed
            self._it.close()
            self._it, self.tally = self._open_pass()
            self._failed = False
            for _ in range(self.claimed):
                if self._pull() is None:
                    break
        return self._pull()

    def _pull(self):
        try:
            batch = next(self._it, None)
        except BaseException:
            self._failed = True
            raise
        if batch is None:
            self._ended = True
            return None
        return batch

    def close(self) -> None:
        """Stop the epoch early: the source's iterator is closed now, not at GC."""
        self._ended = True
        self._pending = None
        self._it.close()

    def exhausted(self) -> bool:
        """Has every batch been claimed (and none given back)? Reads one batch
        ahead to know."""
        if self.returned or self._failed:  # a failed pass is read again at the next claim
            return False
        if self._limit is not None and self.claimed >= self._limit:
            return True
        try:
            return self.peek() is None
        except Exception:  # the next claim reads it again, and raises there
            return False

    def peek(self):
        if self._pending is None:
            self._pending = self._next()
        return self._pending

    def _drain(self) -> None:
        """even_batches: read the rest of the pass, counted as left out."""
        if self._drained:
            return
        self._drained = True
        while (batch := self.peek()) is not None:
            self._pending = None
            self.tally.left.add(batch[0].shape[0], batch[2])

    def claim(self) -> StreamJob | None:
        if self.returned:
            return self.returned.popleft()
        if self._limit is not None and self.claimed >= self._limit:
            self._drain()
            return None
        batch = self.peek()
        if batch is None:
            return None
        self._pending = None
        self.claimed += 1
        return StreamJob(*batch, self.claimed - 1)

    def give_back(self, jobs) -> None:
        """Jobs claimed but not handed out: claimed again first, in batch order."""
        self.returned.extend(jobs)
        self.returned = deque(sorted(self.returned, key=lambda j: j.k))

    def given_back(self) -> list[int]:
        return [j.k for j in self.returned]

    def promise(self) -> Tally:
        return self.tally.promise()


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
        self._had_rows = False  # has a pass yielded rows? (then an empty one cannot be right)
        if isinstance(total_size, str):  # "auto"
            total_size = int(n_rows) if n_rows is not None else self._count()
        elif total_size is not None and n_rows is not None and total_size != int(n_rows):
            raise ValueError(
                f"total_size={total_size} disagrees with the source, which knows it has "
                f"n_rows={int(n_rows)} rows (from its metadata); pass total_size=\"auto\" "
                "(or the whole dataset's row count, not a shard's)"
            )
        self.total_size = total_size
        # Only a size the source vouches for (metadata, or rows counted) sizes the
        # buffer: a declared total_size, however wrong, never sizes an allocation.
        self._known_size = n_rows is not None or self._had_rows
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
        probe_restart(self.stream, first, rows, normalize_chunk)
        self._had_rows = True
        if width is not None:
            self.d, self.l = width
        return rows

    # -- one epoch ----------------------------------------------------------------

    def _width(self):
        return None if self.d is None else (self.d, self.l)

    def _set_width(self, x, y) -> None:
        if self.d is None:
            self.d, self.l = x.shape[1], y.shape[1]

    def _indexed_chunks(self, seed, epoch, fed: Tally):
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
        firsts = (np.cumsum(rows) - rows).tolist()  # each chunk's first row in the stream
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
            for pos, (i, lo, hi) in enumerate(pieces):
                (chunk,) = ahead.get()
                x, y = normalize_chunk(chunk, pos, self._width())
                del chunk
                self._set_width(x, y)
                id0 = firsts[i] + lo
                fed.add_range(id0, firsts[i] + hi)
                yield x[lo:hi], y[lo:hi], id0
        finally:
            ahead.close()
            if hints is not None:
                hints.close()

    def _stream_chunks(self, fed: Tally):
        it = self.stream.open()
        try:
            row = 0  # the stream's rows before this chunk
            for i, chunk in enumerate(it):
                x, y = normalize_chunk(chunk, i, self._width())
                self._set_width(x, y)
                r = x.shape[0]
                if self.total_size is None:  # shards split by chunk
                    lo, hi = (0, r) if i % self.num_shards == self.shard_index else (0, 0)
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

    def _size_hint(self) -> int | None:
        return self.n if self._known_size or self._had_rows else None

    def mixing_window(self) -> int | None:
        """Rows a row can be mixed with: see :func:`exactbatch.batching.buffer.mixing_window`
        (None while the widths of a stream not read yet are unknown)."""
        if not self.shuffle:
            return 1
        if self.d is None and self.buffer_size is None:  # the default size needs the widths
            return None
        return mixing_window(
            self.batch_size,
            self.buffer_size,
            (self.d or 0, self.l or 0),
            self._size_hint(),
            self._chunk_rows(),
        )

    def open_epoch(self, seed: int, epoch: int, skip: int, first: int = 0, pending=()):
        return StreamEpoch(partial(self._open_pass, seed, epoch), skip, self.limit, pending)

    def _open_pass(self, seed: int, epoch: int):
        tally = PassTally()
        chunks = (
            self._indexed_chunks(seed, epoch, tally.fed)
            if self.indexed
            else self._stream_chunks(tally.fed)
        )
        if self.shuffle:
            rng = buffer_rng(seed=seed, epoch=epoch, shard=self.shard_index)
            batches = shuffle_buffer(
                chunks,
                self.batch_size,
                self.buffer_size,
                rng,
                self.drop_last,
                self._size_hint(),
                self._spare,
                ahead=self._chunk_rows(),
                dropped=tally.dropped,
            )
        else:
            batches = rebatch(chunks, self.batch_size, self.drop_last, tally.dropped)
        return self._audited(batches), tally

    def close(self) -> None:
        self.source = self.stream = None
        self._spare.clear()
