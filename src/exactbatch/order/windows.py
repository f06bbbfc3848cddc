"""The order of an elastic streamed epoch: chunks shuffled, rows mixed within windows.

A chunk-indexed stream (Parquet row groups, ``ndf_blocks``, Dask partitions,
a list of arrays) cannot be read in any order a row at a time, but it can be
read chunk by chunk in any order. An elastic epoch over it is one global
order, a pure function of ``(seed, epoch)``:

1. the chunks in an order keyed by ``(seed, epoch)`` (:func:`chunk_order`,
   shard key 0: the same for every shard count);
2. their rows, concatenated in that order, cut into windows of ``window``
   consecutive rows (the last one shorter), a window straddling chunks where
   it falls;
3. each window's rows permuted by its own keyed bijection
   (:class:`EpochBijection` of the window's size, keyed by the window's
   number): a row is mixed with the rows of its window, as it would be in a
   shuffle buffer of that many rows.

Position p of the epoch is then a row of the stream, as for random access,
so global batches are cut and dealt to the shards by
:class:`~exactbatch.order.Shard` exactly as for random access, and a state
at any global batch resumes at any shard count: what a partly consumed
window still owes is its positions past that batch, known from the key
alone (nothing is stored). :class:`WindowedOrder` has the bijection's
interface (``n``, ``__call__(positions)``, ``rows(start, stop)``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from exactbatch.order.bijection import EpochBijection
from exactbatch.order.keys import check_key, checked_positions, chunk_order

__all__ = ["WindowedOrder", "chunk_of_rows"]


def chunk_of_rows(firsts: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """The chunk holding each stream row of ``rows``, chunk ``i`` holding rows
    ``firsts[i] ..`` (an empty chunk never: the last chunk starting at a row wins)."""
    return np.searchsorted(firsts, rows, side="right") - 1


class WindowedOrder:
    """Epoch ``epoch``'s order of a chunk-indexed stream of ``chunk_rows`` (module docs):
    position p (in ``[0, n)``) to its row of the stream. Immutable but for a small cache
    of the windows' bijections; safe to share between threads."""

    def __init__(
        self, chunk_rows: Sequence[int] | np.ndarray, window: int, *, seed: int, epoch: int
    ) -> None:
        check_key(seed=seed, epoch=epoch)
        rows = np.asarray(chunk_rows, dtype=np.int64)
        self.seed, self.epoch = int(seed), int(epoch)
        self.n = int(rows.sum())
        self.window = max(1, int(window))
        firsts = np.cumsum(rows) - rows  # each chunk's first row in the stream
        order = chunk_order(len(rows), seed=seed, epoch=epoch, shard=0)
        order = order[rows[order] > 0]  # an empty chunk holds no position
        self.slot_chunks = order  # the chunks in the epoch's order
        self.slot_rows = rows[order]
        self.slot_starts = np.cumsum(self.slot_rows) - self.slot_rows  # their first position
        self._slot_firsts = firsts[order]
        # a position of the chunks' concatenation p in slot s is the stream row p + delta[s]
        self._delta = self._slot_firsts - self.slot_starts
        self._bijections: dict[int, EpochBijection] = {}
        self._runs: dict[int, np.ndarray] = {}  # see _window_rows

    def __repr__(self) -> str:
        return (
            f"WindowedOrder(n={self.n}, window={self.window}, seed={self.seed}, epoch={self.epoch})"
        )

    @property
    def windows(self) -> int:
        return -(-self.n // self.window)

    def _bijection(self, w: int) -> EpochBijection:
        bij = self._bijections.get(w)
        if bij is None:
            size = min(self.window, self.n - w * self.window)
            bij = EpochBijection(size, seed=self.seed, epoch=self.epoch, shard=w)
            if len(self._bijections) >= 8:  # windows are met in order: keep a few
                self._bijections.clear()
            self._bijections[w] = bij
        return bij

    def _window_rows(self, w: int) -> np.ndarray:
        """The rows of window ``w``'s positions before it is mixed (:meth:`unmixed` of
        them: a run of consecutive rows a chunk it crosses), int64, so that a mixed
        position's row is one lookup, not a search of the chunks. Kept for the last two
        windows met (8 bytes a row of a window each: less than the cache holds of them)."""
        rows = self._runs.get(w)
        if rows is None:
            base = w * self.window
            runs = self.unmixed_ranges(base, min(base + self.window, self.n))
            rows = np.concatenate([np.arange(a, z, dtype=np.int64) for a, z in runs])
            if len(self._runs) >= 2:  # windows are met in order: keep two
                self._runs.clear()
            self._runs[w] = rows
        return rows

    def __call__(self, positions: np.ndarray | int | list[int]) -> np.ndarray:
        """Rows of the stream (int64, the shape of ``positions``) at ``positions``."""
        pos = checked_positions(positions, self.n)
        flat = pos.reshape(-1)
        out = np.empty_like(flat)
        w_of = flat // self.window
        first, last = (int(w_of.min()), int(w_of.max())) if flat.size else (0, -1)
        for w in range(first, last + 1):  # a call spans a few windows: a mask each
            at = np.flatnonzero(w_of == w) if first != last else slice(None)
            local = flat[at] - w * self.window
            if local.size:
                out[at] = self._window_rows(w)[self._bijection(w)(local)]
        return out.reshape(pos.shape)

    def unmixed_ranges(self, start: int, stop: int) -> list[tuple[int, int]]:
        """The rows of positions ``start .. stop-1`` of :meth:`unmixed`, as runs of
        consecutive rows ``(first, past)``, one a chunk they cross."""
        out: list[tuple[int, int]] = []
        if stop <= start:
            return out
        lo = int(np.searchsorted(self.slot_starts, start, side="right")) - 1
        hi = int(np.searchsorted(self.slot_starts, stop, side="left"))
        for k in range(max(lo, 0), hi):
            a = max(start, int(self.slot_starts[k]))
            z = min(stop, int(self.slot_starts[k] + self.slot_rows[k]))
            if z > a:
                first = int(self._slot_firsts[k]) + a - int(self.slot_starts[k])
                out.append((first, first + z - a))
        return out

    def unmixed(self, positions: np.ndarray) -> np.ndarray:
        """Rows of the stream at ``positions`` (int64, 1-D) of the chunks' concatenation in
        the epoch's chunk order, before any window is mixed."""
        slot = np.searchsorted(self.slot_starts, positions, side="right") - 1
        out: np.ndarray = positions + self._delta[slot]
        return out

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows (int64) of positions ``start .. stop-1`` (as ``self(arange(start, stop))``,
        a window's run mapped at once: no masks, no positions made)."""
        check_key(start=start, stop=stop)
        stop = max(start, stop)
        if stop > self.n:
            bad = max(start, self.n)
            raise IndexError(f"position {bad} is out of range [0, n) = [0, {self.n})")
        out = np.empty(stop - start, dtype=np.int64)
        window = self.window
        for w in range(start // window, -(-stop // window)):
            base = w * window
            lo, hi = max(start, base), min(stop, base + window)
            run = self._bijection(w).rows(lo - base, hi - base)
            self._window_rows(w).take(run, out=out[lo - start : hi - start])
        return out

    def window_chunks(self, w: int) -> np.ndarray:
        """The chunks holding window ``w``'s rows, in the epoch's order."""
        a, z = w * self.window, min((w + 1) * self.window, self.n)
        lo = int(np.searchsorted(self.slot_starts, a, side="right")) - 1
        hi = int(np.searchsorted(self.slot_starts, z, side="left"))
        chunks: np.ndarray = self.slot_chunks[max(lo, 0) : hi]
        return chunks
