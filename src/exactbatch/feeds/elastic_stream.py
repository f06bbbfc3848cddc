"""The elastic streamed feed: a chunk-indexed stream dealt as one global order.

``elastic=True`` on a stream whose chunks are indexed (Parquet row groups,
``ndf_blocks`` over a file or a dataset, Dask partitions of known length, a
list of arrays) makes each epoch one global order of the stream's rows, a
pure function of ``(seed, epoch)``: the chunks shuffled, their rows mixed
within windows of ``mixing_window`` rows (:class:`~exactbatch.order.windows.WindowedOrder`;
file order without shuffle). The order is cut into global batches dealt to
the shards by the feed's dealing (:mod:`exactbatch.feeds.dealing`) exactly as
for a random-access source, so this feed holds a random-access feed over the
stream's chunks (its ``orders`` the windowed order, its ``ahead`` the read
ahead below) and is that feed's epochs, ledger and certificate, and a state
taken at S shards resumes at any S': the rows a partly consumed window still
owes are its positions past the state's global batch.

Under ``elastic="ranges"`` (:mod:`exactbatch.feeds.ranges`) the same feed holds
that dealing instead: a shard's order is its contiguous share of the epoch's chunk
order, windows mixed within it, so it reads its own chunks only.

Rows are read through a :class:`~exactbatch.sources.chunk_cache.ChunkCacheReader`:
a shard reads the chunks its batches' rows lie in, when a batch first needs
them, and the chunks of the next window it needs are read ahead on a
background thread.

Costs (docs/usage/streaming.md, "Elastic streams"):

* Memory: up to two windows of rows and the chunks they straddle (the
  cache's budget), as a shuffle buffer reading ahead holds two halves.
* Reads: a window holds ``window / batch_size`` global batches, dealt in
  turn, so a shard reads every window its batches touch: about
  ``min(S, window / batch_size + 1)`` times the rows a contiguous shard of
  the same stream reads. That is the price of resuming at another shard
  count through a buffer; a smaller window reads less and mixes less.
* A resumed epoch reads again the chunks of the window it resumes in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from exactbatch.batching.buffer import mixing_window
from exactbatch.batching.random_access_epoch import RandomAccessEpoch
from exactbatch.feeds.base import BatchSpec, DealingKind, First, Ordered, Place, Timer
from exactbatch.feeds.random_access import RandomAccessFeed
from exactbatch.order.digest import Tally
from exactbatch.order.windows import WindowedOrder, chunk_of_rows
from exactbatch.sources.chunk_cache import ChunkCacheReader
from exactbatch.sources.chunks import Stream, Widths
from exactbatch.sources.identity import stream_identity

__all__ = ["ElasticStreamFeed", "refuse_unindexed"]


def refuse_unindexed(stream: Stream) -> None:
    """``ValueError`` unless ``stream`` is chunk-indexed (what elastic needs)."""
    if not stream.chunk_indexed:
        raise ValueError(
            f"elastic=True needs a source whose rows can be re-dealt to another shard count: "
            f"a random-access source, or a stream whose chunks are indexed (chunk_rows and "
            f"read_chunk: parquet_source, ndf_blocks, dask_source with known partition "
            f"lengths, a list of arrays). {type(stream.source).__name__} is read front to "
            "back only, so a state could not say which rows another shard count still owes; "
            "write it once to .ndf (exactbatch convert, save_ndf) or pass elastic=False"
        )


class ElasticStreamFeed:
    """A chunk-indexed stream as dealt epochs of one shard (module docs): a
    :class:`RandomAccessFeed` over its chunk cache, with the stream's identity."""

    kind = "stream"

    def __init__(
        self,
        stream: Stream,
        spec: BatchSpec,
        total_size: int | str | None,
        buffer_size: int | None,
        dealing: DealingKind,
    ) -> None:
        refuse_unindexed(stream)
        hooks = self.hooks = stream.hooks
        self.stream: Stream | None = stream  # None once closed
        self.buffer_size, self.spec = buffer_size, spec
        rows = hooks.chunk_rows
        assert rows is not None  # refuse_unindexed checked
        self._chunk_rows = rows
        n = int(rows.sum())
        self._identity: dict[str, Any] | None = None
        cache = ChunkCacheReader(stream, Widths(hooks.d, hooks.l), 1)  # (learns the widths)
        nonempty = rows[rows > 0]
        mean = max(1, int(nonempty.mean())) if len(nonempty) else None
        self.window = mixing_window(spec.batch_size, buffer_size, (cache.d, cache.l), n, mean)
        largest = int(rows.max()) if len(rows) else 0
        cache.budget = 2 * self.window + 4 * largest  # two windows, and what they straddle
        self._cache = cache
        self.rows = RandomAccessFeed(
            cache, spec, dealing, total_size, orders=self._order, ahead=self._read_ahead
        )
        self.dealing, self.rule = self.rows.dealing, self.rows.rule
        self.n, self.nbatches = self.rows.n, self.rows.nbatches
        self.total_size, self.total_batches = self.rows.total_size, self.rows.total_batches

    # -- as the random-access feed over the chunks ------------------------------------

    @property
    def d(self) -> int:
        d: int = self.rows.d
        return d

    @property
    def l(self) -> int:  # noqa: E743
        width: int = self.rows.l
        return width

    @property
    def reader(self) -> Any:
        """The reader every batch is read through (the chunk cache, as the output reads it)."""
        return self.rows.reader

    @reader.setter
    def reader(self, reader: Any) -> None:
        self.rows.reader = reader

    def open_epoch(
        self, seed: int, epoch: int, skip: int, first: First = 0, pending: tuple[int, ...] = ()
    ) -> RandomAccessEpoch:
        out = self.rows.open_epoch(seed, epoch, skip, first, pending)
        if out.order is not None and out.ids is None and self._one_run(first, out.nbatches):
            # One rank from the epoch's start: batch k is positions k*b .. of the order, so
            # (once the whole order is computed) batches are claimed many at a time and
            # read as slices of it, as a random-access shard's (its last one claimed is
            # still located: the read-ahead of the windows it enters)
            out.span = self.total_size
        return out

    def _one_run(self, first: First, nbatches: int) -> bool:
        """Is batch k of an epoch resumed at ``first`` positions ``k*b .. min(k*b + b,
        n)`` of the global order (one rank, from the start)? Asked of the dealing."""
        if first or self.spec.shard.count != 1 or not nbatches:
            return False
        b, n, locate = self.spec.batch_size, self.total_size, self.dealing.plan(first).locate
        return all(locate(k) == (k * b, min(k * b + b, n)) for k in {0, nbatches - 1})

    def use_threads(self, threads: int | None) -> None:
        self.rows.use_threads(threads)

    def time_reads(self, timed: Timer) -> bool:
        return self.rows.time_reads(timed)

    def whole(self) -> Tally:
        return self.rows.whole()

    def learn_widths(self) -> None:
        """Known from the start (the cache learnt them): nothing to read."""

    def global_promise(self, epoch: Ordered, first: First) -> Tally:
        return self.rows.global_promise(epoch, first)

    def global_ledger(self, pos: Place) -> Tally:
        return self.rows.global_ledger(pos)

    # -- what a state records -------------------------------------------------------

    def state_config(self) -> dict[str, Any]:
        """As a stream's: its buffer and what it knows of its size."""
        return {
            "buffer_size": self.buffer_size,
            "n_rows": self.hooks.n_rows,
            "block_rows": self.hooks.block_rows,
        }

    def fingerprint(self) -> dict[str, Any]:
        """The stream's identity (:func:`exactbatch.sources.identity.stream_identity`) and
        sizes, as a streamed feed's."""
        if self._identity is None and self.stream is not None:
            self._identity = stream_identity(self.stream.source, self.stream.hooks.identity)
        sizes = {"n": self.n_rows, "d": self.d, "l": self.l}
        return {**(self._identity or {"kind": "stream"}), **sizes}

    @property
    def n_rows(self) -> int:
        return self.total_size

    def mixing_window(self) -> int:
        """The window a row is mixed within (1 without ``shuffle``)."""
        return max(1, min(self.window, self.total_size)) if self.spec.shuffle else 1

    def prefetch_default(self) -> int:
        return 0  # the next window's chunks are read ahead

    def windows_of_epoch(self) -> int:
        """The windows an epoch's order is cut into."""
        return -(-self.total_size // self.window)

    @property
    def rows_read(self) -> int:
        """Rows of every chunk read so far (the read amplification's numerator)."""
        return self._cache.rows_read

    # -- the order and the read-ahead -------------------------------------------------

    def _order(self, seed: int, epoch: int, key_shard: int, size: int) -> WindowedOrder:
        """The epoch's windowed order (one for every shard: ``key_shard`` is 0)."""
        return WindowedOrder(self._chunk_rows, self.window, seed=seed, epoch=epoch)

    def _read_ahead(
        self,
        locate: Callable[[int], tuple[int, int]],
        order: Callable[[np.ndarray], np.ndarray] | None,
        first: First,
    ) -> Callable[[int], tuple[int, int]]:
        """``locate`` of an epoch resumed at ``first``, such that each batch claimed that
        enters a new window has the chunks of that window and the next read ahead,
        those this shard's batches need."""
        seen = [-1]
        window, cache = self.window, self._cache

        def located(k: int) -> tuple[int, int]:
            a, z = locate(k)
            w = (z - 1) // window if z > a else -1
            if w > seen[0]:
                ahead = range(max(seen[0] + 1, a // window), w + 2)
                seen[0] = w
                cache.read_ahead(lambda: self._needed(order, ahead, first))
            return a, z

        return located

    def _needed(
        self, order: Callable[[np.ndarray], np.ndarray] | None, windows: Iterable[int], first: First
    ) -> list[int]:
        """The chunks this shard's batches from global batch ``first`` on need in
        ``windows``, in the order its reads meet them (a window all of whose batches
        are this shard's: in the order's chunk slots)."""
        n, window = self.total_size, self.window
        windows = list(windows)
        if self._cache.holds(self._window_chunks(order, windows)):
            return []  # (a stream the cache holds whole: no order mapped to find out)
        out: list[np.ndarray] = []
        slots = getattr(order, "window_chunks", None)  # (a WindowedOrder's)
        for w in windows:
            a, z = w * window, min((w + 1) * window, n)
            if a >= z:
                break
            pos = self.dealing.positions(a, z, first)
            if len(pos) == z - a and slots is not None:
                # every position of the window is this shard's (one rank): its chunks,
                # in the order's slots, without mapping the window's positions
                out.append(slots(w))
                continue
            rows = pos if order is None else order(pos)
            out.append(chunk_of_rows(self._cache.firsts, rows))
        if not out:
            return []
        chunks = np.concatenate(out)  # each once, where a batch first meets it
        _, at = np.unique(chunks, return_index=True)
        needed: list[int] = chunks[np.sort(at)].tolist()
        return needed

    def _window_chunks(self, order: Any, windows: list[int]) -> list[int]:
        """Every chunk holding rows of ``windows`` (a superset of those a shard needs
        there), from the order's chunk slots (file order: ``order`` None)."""
        n, window, firsts = self.total_size, self.window, self._cache.firsts
        out: set[int] = set()
        for w in windows:
            a, z = w * window, min((w + 1) * window, n)
            if a >= z:
                break
            if order is not None:
                out.update(order.window_chunks(w).tolist())
            else:
                lo, hi = chunk_of_rows(firsts, np.array([a, z - 1])).tolist()
                out.update(c for c in range(lo, hi + 1) if self._chunk_rows[c])
        return sorted(out)

    def close(self) -> None:
        self.rows.close()
        self.stream = None
