"""The rows of an epoch's keyed order, mapped a block of positions at a time
(:class:`BlockedOrder`), or all at once on a background thread (:data:`Whole`):
what a random-access epoch (:mod:`exactbatch.batching.random_access_epoch`) slices
its batches from, with their ledger digests (:mod:`exactbatch.order.digest`).
"""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any, Protocol

import numpy as np
from numpy.typing import DTypeLike

from exactbatch.order.digest import batch_digests, rows_digest

__all__ = ["BlockedOrder", "Positions", "Whole"]

# The whole order of an epoch: its rows, and its batches' digests (one a batch).
Whole = tuple[np.ndarray, memoryview]


class Positions(Protocol):
    """An order of ``n`` positions (a bijection of the order package): ``rows(a, z)``
    the rows at positions ``a .. z-1``; called, the rows at any positions."""

    def __call__(self, positions: np.ndarray) -> np.ndarray: ...

    @property
    def n(self) -> int: ...

    def rows(self, start: int, stop: int) -> np.ndarray: ...


class BlockedOrder:
    """Rows of an epoch's keyed order, computed a block of positions at a time.

    A bijection call has a fixed cost, so positions are mapped ``BLOCK`` at a
    time and batches sliced out of the block; memory is one block, whatever n.
    Once the Future given to :meth:`use_whole` (the entire order and its
    batches' digests, computed on a background thread for moderate n) is
    done, batches are sliced from it instead: the same rows, without the
    per-batch cost. Blocks start at batch boundaries, so a block's batch
    digests are computed with it. ``ids`` (a subset of the source,
    ``DataLoader(rows=)``): positions map to subset positions, and those to
    the source's row ids through it, so rows and digests are the source's.
    Not thread-safe: used under the loader's lock (but for the reference
    :meth:`use_whole`'s callback sets).
    """

    BLOCK = 4096

    def __init__(
        self,
        bijection: Positions,
        offset: int,
        dtype: DTypeLike,
        batch_size: int,
        ids: np.ndarray | None = None,
    ) -> None:
        self.bijection, self.offset, self.dtype = bijection, offset, dtype
        self.batch_size, self.ids = batch_size, ids
        self._whole: Whole | None = (
            None  # the whole order's (rows, digests), set by use_whole's callback
        )
        self._lo = self._hi = 0
        self._rows: Any = None
        self._digests: Any = None

    def take(self, a: int, z: int) -> tuple[np.ndarray, int]:
        """The rows at positions ``a .. z-1`` (``a`` a batch boundary) and their digest."""
        done = self._whole
        if done is not None:
            rows, digests = done
            return rows[a:z], digests[a // self.batch_size]
        if z - a >= self.BLOCK:
            rows = self.mapped(a, z)
            return rows, rows_digest(rows)
        if not (self._lo <= a and z <= self._hi):
            self._lo, self._hi = a, min(a + self.BLOCK, self.bijection.n)
            self._rows = self.mapped(self._lo, self._hi)
            self._digests = batch_digests(self._rows, self.batch_size).data
        lo = self._lo
        return self._rows[a - lo : z - lo], self._digests[(a - lo) // self.batch_size]

    @property
    def whole(self) -> Whole | None:
        """The whole order's ``(rows, digests)`` (one digest a batch) once computed, else
        None."""
        return self._whole

    def use_whole(self, whole: Future[Whole]) -> None:
        """Slice batches from ``whole``'s result once it is done (had it failed, the
        blocks still work). The future's thread sets it: no Future call per batch, and
        a reference is set atomically, so the loader's lock need not be held."""

        def done(fut: Future[Whole]) -> None:
            if fut.exception() is None:
                self._whole = fut.result()

        whole.add_done_callback(done)

    def mapped_all(self, out: np.ndarray) -> Whole:
        """The whole order, mapped block by block into ``out``, and its batches'
        digests: the temporaries stay one block small (a background thread's large
        temporaries would stay in its malloc arena after it ends)."""
        b = self.batch_size
        one_pass = getattr(self.bijection, "whole_into", None)  # (a keyed order's)
        if one_pass is not None and self.ids is None:  # in C: rows and digests together
            done = one_pass(out, b, self.offset)
            if done is not None:
                return out, done.data
        step = max(1, 2 * self.BLOCK // b) * b  # whole batches per step
        digests = np.empty(-(-len(out) // b), dtype=np.uint64)
        for a in range(0, len(out), step):
            z = min(a + step, len(out))
            out[a:z] = self.mapped(a, z)
            digests[a // b : -(-z // b)] = batch_digests(out[a:z], b)
        return out, digests.data

    def mapped(self, a: int, z: int) -> np.ndarray:
        rows = self.bijection.rows(a, z).astype(self.dtype, copy=False)
        if self.offset:
            rows += self.offset
        if self.ids is not None:  # subset positions to the source's row ids
            return self.ids.take(rows)
        return rows
