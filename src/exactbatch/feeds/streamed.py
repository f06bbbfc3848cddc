"""The streamed feed: a stream, one shard of it, its N and the audit of N, composed.

An epoch of a streamed source is one pass of it for this shard
(:func:`exactbatch.sources.passes.open_pass`: a chunk source's chunks in an
order shuffled per epoch, any other stream front to back), re-batched in
source order or mixed in a bounded shuffle buffer
(:mod:`exactbatch.batching`), then read one batch ahead so that the
total_size audit (:mod:`exactbatch.audit`) has run by the time the last
batch is handed out. What the source provides beyond its chunks (``n_rows``,
its widths, its read hooks) was read once, into ``stream.hooks``
(:mod:`exactbatch.sources.protocols`).

Sharding: with N known (``total_size`` an int, or resolved by ``"auto"``),
shard s owns rows [s*N//S, (s+1)*N//S) of the stream and the last shard also
takes any rows past N. A chunk source (Parquet) reads only the chunks its
rows lie in; any other stream is read by every shard, each keeping its
rows. With N unknown (``total_size=None``) shards split by chunk, round
robin: shard s takes chunks s, s+S, s+2S, ... of the stream.

Memory: the shuffle buffer, two batches (the one handed out and the one
read ahead) and the chunks backing them, whatever N is.
"""

from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import replace
from functools import partial
from operator import itemgetter
from typing import Any

import numpy as np

from exactbatch.audit import audit_pass, count_total, resolve_stream_total
from exactbatch.batching import num_batches
from exactbatch.batching.buffer import buffer_rows, mixing_window, shuffle_buffer
from exactbatch.batching.rebatch import rebatch
from exactbatch.batching.stream_epoch import PassTally, StreamEpoch
from exactbatch.feeds.base import BatchSpec, First, Ordered, Place, Timer
from exactbatch.feeds.state_rules import ContiguousRule
from exactbatch.order import buffer_rng
from exactbatch.order.digest import Tally, range_digest
from exactbatch.sources.chunks import Stream, Widths, close_iterator
from exactbatch.sources.identity import stream_identity
from exactbatch.sources.passes import HINT_AHEAD, open_pass, read_depth

__all__ = ["HINT_AHEAD", "StreamFeed"]  # HINT_AHEAD is sources.passes', importable here too


_X = itemgetter(0)  # a batch's x


class StreamFeed:
    """A stream, one shard of it, its N and the audit of N (module docs)."""

    kind = "stream"
    total_batches = None  # no elastic dealing (elastic streams: feeds.elastic_stream)
    rule = ContiguousRule()  # what a state records of its shard (feeds.state_rules)

    def __init__(
        self, stream: Stream, spec: BatchSpec, total_size: int | str | None, buffer_size: int | None
    ) -> None:
        self.spec, self.buffer_size = spec, buffer_size
        self.stream: Any = stream  # None once closed
        hooks = self.hooks = stream.hooks
        self.widths = Widths(hooks.d, hooks.l)
        self._counted = False  # did "auto" count the rows in a pass?
        total_size = self.total_size = resolve_stream_total(total_size, hooks.n_rows, self._count)
        # Only a size the source vouches for (metadata, or rows counted) sizes the
        # buffer: a declared total_size, however wrong, never sizes an allocation.
        self._known_size = hooks.n_rows is not None or self._counted
        b, shard = spec.batch_size, spec.shard
        self.span = None  # the shard's rows (start, stop), stop None for the last shard
        if total_size is None:
            self.n = self.nbatches = None
        else:
            start, stop = shard.range(total_size)
            self.n = stop - start
            self.span = (start, None if shard.is_last else stop)
            self.nbatches = num_batches(self.n, b, spec.drop_last)
        # even_batches: every shard's count, the smallest shard's (True) or the largest's
        # ("pad": the batches past the pass's own are padding)
        self.limit = None
        if spec.even_batches:
            if total_size is None:
                raise ValueError(
                    f"even_batches={spec.even_batches!r} needs the stream's size: pass "
                    f'total_size=N or "auto"'
                )
            if spec.pad:
                self.limit = self.nbatches = num_batches(-(-total_size // shard.count), b, False)
            else:
                smallest = total_size // shard.count
                self.limit = self.nbatches = num_batches(smallest, b, spec.drop_last)
        self._warned = False
        self._identity: dict[str, Any] | None = None  # see fingerprint
        # the shuffle buffer's memory, kept from one epoch to the next
        self._spare: list[tuple[np.ndarray, np.ndarray]] = []  # (rows, ids)
        # wraps each chunk read (time_reads), or None
        self._timed: Timer | None = None

    def _count(self) -> int:
        rows, width = count_total(self.stream)
        self._counted = self.stream.had_rows = True
        if width is not None:
            self.widths.d, self.widths.l = width
        counted: int = rows
        return counted

    @property
    def d(self) -> int | None:
        return self.widths.d

    @property
    def l(self) -> int | None:  # noqa: E743
        return self.widths.l

    def prefetch_default(self) -> int:
        width = (self.d or 0) + (self.l or 0)  # unknown (0) for a stream not read yet
        depth: int = self.stream.prefetch_default(self.spec.batch_size * 8 * width)
        return depth

    def use_threads(self, threads: int | None) -> None:
        """A buffer's groups are gathered with the threads picked from their bytes."""

    def time_reads(self, timed: Timer) -> bool:
        """Each chunk read of the passes opened from now on goes through ``timed``."""
        self._timed = timed
        return True

    def state_config(self) -> dict[str, Any]:
        """A stream's state records its buffer and what it knows of its size."""
        return {
            "buffer_size": self.buffer_size,
            "n_rows": self.hooks.n_rows,
            "block_rows": self.hooks.block_rows,
        }

    def whole(self) -> Tally | None:
        """Rows 0 .. N-1 of the stream's order, when N is known (see the Feed protocol)."""
        total = self.total_size
        return None if total is None else Tally(total, range_digest(0, total))

    def fingerprint(self) -> dict[str, Any]:
        """The stream's sizes as known now and its source's identity
        (:func:`exactbatch.sources.identity.stream_identity`, made once; a loader
        closed before that records its sizes only)."""
        if self._identity is None and self.stream is not None:
            self._identity = stream_identity(self.stream.source, self.stream.hooks.identity)
        n = self.hooks.n_rows if self.hooks.n_rows is not None else self.total_size
        return {**(self._identity or {"kind": "stream"}), "n": n, "d": self.d, "l": self.l}

    def learn_widths(self) -> None:
        """A stream not read yet: learn its widths (d, l) from the first chunk of a
        pass opened for it alone (a stream with no chunk stays unknown)."""
        if self.d is not None:
            return
        it = self.stream.open()
        try:
            chunk = next(it, None)
            if chunk is not None:
                self.widths.normalize(chunk, 0)
        finally:
            close_iterator(it)

    # -- one epoch ----------------------------------------------------------------

    def _audited(self, groups: Iterator[list[Any]]) -> Generator[list[Any], None, None]:
        """Groups of batches, read one batch ahead (the next group is read before a
        group's last batch, not its first, so a consumer's work on the group
        overlaps the read); audit N when the pass ends, before its last batch."""
        b = self.spec.batch_size
        full = 0
        cur = next(groups, None)
        if cur is None:  # a pass with no batches is audited too
            self._audit(0)
        while cur is not None:
            full += sum(map(b.__eq__, map(len, map(_X, cur))))  # full batches (C loops)
            if len(cur) > 1:
                yield cur[:-1]
            nxt = next(groups, None)
            if nxt is None:
                self._audit(full * b)
            yield cur[-1:]
            cur = nxt

    def _audit(self, seen: int) -> None:
        if self.n is not None and self.total_size is not None and not self._warned:
            spec = self.spec
            self._warned = audit_pass(self.total_size, self.n, seen, spec.batch_size, spec.shard)

    def _chunk_rows(self) -> int | None:
        """A chunk source's mean chunk size (None: not a chunk source)."""
        rows = self.hooks.chunk_rows
        return max(1, int(rows.sum()) // len(rows)) if rows is not None and len(rows) else None

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

    def open_epoch(
        self, seed: int, epoch: int, skip: int, first: First = 0, pending: tuple[int, ...] = ()
    ) -> StreamEpoch:
        return StreamEpoch(
            partial(self._open_pass, seed, epoch),
            skip,
            self.limit,
            pending,
            self._too_long if self.spec.pad else None,
        )

    def _too_long(self) -> ValueError:
        """even_batches="pad": the pass holds more batches than N gives the shard."""
        shard, n = self.spec.shard, self.total_size
        return ValueError(
            f"even_batches='pad': shard {shard.index} of {shard.count}'s pass holds more "
            f"rows than total_size={n} gives it ({self.n} rows, {self.limit} batches, "
            f"the count every shard hands out), so the ranks would fall out of step. "
            f'total_size is wrong: pass the stream\'s true row count, or "auto" to count it'
        )

    def _open_pass(
        self, seed: int, epoch: int
    ) -> tuple[Generator[list[Any], None, None], PassTally]:
        tally, spec = PassTally(), self.spec
        order_key = (seed, epoch) if spec.shuffle else None
        rows = None  # chunks read ahead at once: a share of the buffer (passes.read_depth)
        if spec.shuffle:
            width = None if self.d is None else (self.d, self.l or 0)
            rows = buffer_rows(spec.batch_size, self.buffer_size, width, self._size_hint())
        depth = read_depth(rows, self._chunk_rows())
        chunks = open_pass(
            self.stream,
            spec.shard,
            self.span,
            self.widths,
            tally.fed,
            order_key,
            spec.shuffle,
            depth,
            self._timed,
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
                dtype=spec.shaped,
                with_rows=spec.with_rows,
                expect=self.n,  # (a declared total_size: a guess for the draws only)
            )
        else:
            batches = rebatch(
                chunks, spec.batch_size, spec.drop_last, tally.dropped, spec.shaped, spec.with_rows
            )
        return self._audited(batches), tally

    def close(self) -> None:
        self.stream = None
        # the sizes stay (a state after close records them); the source's methods go
        self.hooks = replace(
            self.hooks,
            read_chunk=None,
            will_need=None,
            read_rows_into=None,
            open_chunk=None,
            read_columns=None,
        )
        self._spare.clear()

    def global_promise(self, epoch: Ordered, first: First) -> Tally:
        raise TypeError("a stream read front to back has no global batches: a shard's own promise")

    def global_ledger(self, pos: Place) -> Tally:
        raise TypeError("a stream read front to back has no global batches: the state's own ledger")
