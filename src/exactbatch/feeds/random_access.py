"""The random-access feed: a reader, one shard of it, and its epoch orders.

Which rows and batches are the shard's is its dealing's
(:mod:`exactbatch.feeds.dealing`, picked where the feed is opened):
contiguous (shard s owns rows [s*n//S, (s+1)*n//S) and permutes them), or
elastic (one global order per (seed, epoch), cut into batches dealt to the
shards in turn). ``even_batches=True`` caps every shard at
the smallest shard's batch count; ``"pad"`` gives every shard the largest
shard's, the batches past a shard's own being padding
(:mod:`exactbatch.batching.padding`). Orders are keyed bijections
(:class:`exactbatch.order.EpochBijection`): nothing of size n is stored,
except that for up to 2**24 rows an epoch's whole order (4 bytes a row)
is computed ahead on a background thread, so that batches slice it
instead of mapping positions; and file order's (``shuffle=False``, batches
of up to 1024 rows, no subset) is made once and kept, so that its batches
are claimed as a shuffled epoch's (4 bytes a row).

A subset (``DataLoader(rows=ids)``) is a source of ``len(ids)`` rows whose
position p is the source's row ``ids[p]``: shards, orders and batches are
cut over the positions exactly as over a whole source, and each position is
mapped to its row id where rows are made (:class:`BlockedOrder`, file
order's slices of ``ids``), so jobs carry the source's row ids, the reader
gathers them directly (no copy of the data), and the ledger digests the
source's row ids.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from typing import Any

import numpy as np

from exactbatch.audit import resolve_random_access_total
from exactbatch.batching.output import OutputReader
from exactbatch.batching.random_access_epoch import BlockedOrder, RandomAccessEpoch, Whole
from exactbatch.feeds.base import (
    BatchSpec,
    DealingKind,
    First,
    Ordered,
    Orders,
    Place,
    Plan,
    Timer,
)
from exactbatch.order import EpochBijection
from exactbatch.order.digest import Tally, range_batch_digests, range_digest, rows_digest
from exactbatch.order.subset import check_subset
from exactbatch.sources.identity import reader_fingerprint, source_facts
from exactbatch.sources.protocols import RowReader

__all__ = ["RandomAccessFeed"]

# Up to this many rows an epoch's whole order (4 bytes a row) is computed
# ahead on a background thread, so batches slice it instead of mapping
# positions; beyond it, memory stays O(1).
_WHOLE_ROWS = 1 << 24
# Up to this many rows it is computed where it is asked for, at once: that takes less
# than starting a thread (about 40 us for 4,096 rows; a thread's start waits for the
# thread to run, 0.1 to 1 ms on a busy machine).
_AT_ONCE_ROWS = 1 << 12
# File order's batches of up to this many rows are claimed from a whole order too (made
# once): a claim's calls and job cost as much as a small batch's read, not a large one's.
_FILE_BATCH = 1024


def keyed_order(seed: int, epoch: int, key: int, size: int) -> EpochBijection:
    """The keyed order of ``size`` positions of ``(seed, epoch)`` and shard key ``key``."""
    return EpochBijection(size, seed=seed, epoch=epoch, shard=key)


Locate = Callable[[int], tuple[int, int]]


def unchanged(locate: Locate, order: Any, first: First) -> Locate:
    """No read-ahead: an epoch's ``locate`` as its dealing gives it."""
    return locate


def _in_background(compute: Callable[[], Whole]) -> Future[Whole]:
    fut: Future[Whole] = Future()

    def work() -> None:
        try:
            fut.set_result(compute())
        except BaseException as e:  # surfaces only if someone asks for .result()
            fut.set_exception(e)

    threading.Thread(target=work, name="exactbatch-order", daemon=True).start()
    return fut


def _at_once(compute: Callable[[], Whole]) -> Future[Whole]:
    """``compute()`` now, as a done future (its error kept in it, as a thread's)."""
    fut: Future[Whole] = Future()
    try:
        fut.set_result(compute())
    except Exception as e:  # surfaces only if someone asks for .result()
        fut.set_exception(e)
    return fut


class RandomAccessFeed:
    """A random-access reader's rows as epochs of batches of one shard (module docs).

    ``dealing``: how batches are dealt to the shards (:mod:`exactbatch.feeds.dealing`);
    ``orders``: the keyed order of ``(seed, epoch, key, size)`` (:func:`keyed_order`,
    or an elastic stream's windowed order); ``ahead``: ``(locate, order, first) ->
    locate``, what an epoch's batches are located through (a chunk cache's read-ahead).
    """

    kind = "random access"

    def __init__(
        self,
        reader: RowReader,
        spec: BatchSpec,
        dealing: DealingKind,
        total_size: int | str | None = "auto",
        rows: Any = None,
        about: Any = None,
        orders: Orders = keyed_order,
        ahead: Callable[[Locate, Any, First], Locate] = unchanged,
    ) -> None:
        # The reader and its read as opened: the fingerprint's sample never goes through
        # what is put on the reader later (the output's rules, a test's fault injector).
        self._opened = reader
        self._sample_read: Callable[..., int | None] | None = reader.read
        if spec.output is not None:  # labels, transform or NaN rule: read through it
            reader = OutputReader(reader, spec.output)
        self.reader, self.spec = reader, spec
        self._orders, self._ahead = orders, ahead
        # What a RowSource says of itself beyond its reader (names, a file's path): for
        # the fingerprint, read now (plain attributes), so the feed keeps no reference.
        self._about = source_facts(about)
        self.d, self.l = reader.d, reader.l
        # A subset's ids (rows=), or None: the source's rows are positions themselves.
        self.ids = None if rows is None else check_subset(rows, reader.n)
        self._whole: Tally | None = None
        size = reader.n if self.ids is None else len(self.ids)
        total = self.total_size = resolve_random_access_total(total_size, size)
        # Row numbers as int32 when they fit: half the bytes to move per batch.
        self._dtype = np.int32 if max(total, reader.n) < 2**31 else np.int64
        self._fingerprint: dict[str, Any] | None = None  # made when a state first asks
        deal = self.dealing = dealing(spec, total, self.ids, orders, self.whole)
        self.rule = deal.rule  # what a state records of the dealing (feeds.state_rules)
        self.start, self.n = deal.start, deal.n
        self.nbatches, self.total_batches = deal.nbatches, deal.total_batches
        self._wholes: dict[tuple[Any, ...], Future[Whole]] = {}  # see _whole_order
        self._file: tuple[tuple[int, int], Whole] | None = None  # see _file_order

    def mixing_window(self) -> int:
        """A full shuffle of the shard's rows (1 without ``shuffle``)."""
        return max(1, self.n) if self.spec.shuffle else 1

    def prefetch_default(self) -> int:
        return self.reader.prefetch_default(self.spec.batch_size * 8 * (self.d + self.l))

    def use_threads(self, threads: int | None) -> None:
        """The reader's gather on ``threads`` (a reader that cannot split ignores it)."""
        use = getattr(self.reader, "use_threads", None)
        if use is not None:
            use(threads)

    def time_reads(self, timed: Timer) -> bool:
        """A batch's gather is its read (the loader times it)."""
        return False

    def state_config(self) -> dict[str, Any]:
        return {}

    def whole(self) -> Tally:
        """Every row of the source, or of the subset (module docs of
        :mod:`exactbatch.feeds.base`)."""
        if self._whole is None:  # (a subset's: a pass over its ids, made once)
            ids, n = self.ids, self.reader.n
            self._whole = (
                Tally(n, range_digest(0, n)) if ids is None else Tally(len(ids), rows_digest(ids))
            )
        return self._whole

    def fingerprint(self) -> dict[str, Any]:
        """The source's identity (:func:`exactbatch.sources.identity.reader_fingerprint`),
        made once, at the first state taken or loaded."""
        if self._fingerprint is None:
            if self._sample_read is None:  # closed first: the sizes and the subset only
                return reader_fingerprint(self._opened, self.ids, about=self._about)
            read = self._sample_read
            self._fingerprint = reader_fingerprint(self._opened, self.ids, read, self._about)
        return self._fingerprint

    def learn_widths(self) -> None:
        """Known from the start: nothing to read."""

    def open_epoch(
        self, seed: int, epoch: int, skip: int, first: First = 0, pending: tuple[int, ...] = ()
    ) -> RandomAccessEpoch:
        """Epoch ``epoch`` less its first ``skip`` batches (but those in ``pending``);
        ``first``: the global batch a dealt epoch resumes at (another shard count)."""
        spec = self.spec
        plan = self.dealing.plan(first)
        order, file = None, None
        bijection = self.dealing.order(seed, epoch, plan, first)
        if bijection is None and plan.span is not None and self.ids is None:
            file = self._file_order(plan.offset, plan.span)
        if bijection is not None:
            order = BlockedOrder(bijection, plan.offset, self._dtype, spec.batch_size, self.ids)
            if plan.size <= _WHOLE_ROWS:
                order.use_whole(self._whole_order(seed, epoch, plan, first))
        # (what is handed out: a capped count's batches, or every real one under "pad")
        promised = partial(self.dealing.promise, min(plan.batches, plan.real), first)
        locate = self._ahead(plan.locate, None if order is None else order.bijection, first)
        return RandomAccessEpoch(
            self.reader,
            plan.batches,
            locate,
            order,
            plan.offset,
            spec.batch_size,
            promised,
            skip,
            pending,
            spec.dtype,
            span=plan.span,
            ids=self.ids,
            with_rows=spec.with_rows,
            real=plan.real,
            whole=file,
        )

    def _file_order(self, offset: int, span: int) -> Whole | None:
        """File order's whole order (rows ``offset .. offset + span - 1``, 4 bytes a row
        as int32, and its batches' digests in closed form), made once and kept, for
        small batches (up to _FILE_BATCH rows) of up to _WHOLE_ROWS rows: their claims
        are then one loop in C, their hand-outs next_into's one call; else None."""
        b = self.spec.batch_size
        if span > _WHOLE_ROWS or b > _FILE_BATCH:
            return None
        key = (offset, span)
        if self._file is None or self._file[0] != key:
            rows = np.arange(offset, offset + span, dtype=self._dtype)
            self._file = (key, (rows, range_batch_digests(offset, span, b).data))
        return self._file[1]

    def global_promise(self, epoch: Ordered, first: First) -> Tally:
        """Dealt: the rows of every global batch ``epoch`` hands out, all shards', its
        last segment resumed at global batch ``first`` (the dealing's)."""
        return self.dealing.global_promise(epoch, first)

    def global_ledger(self, pos: Place) -> Tally:
        """Dealt: the ledger a state at ``pos`` carries, every shard's global batches
        before it, as this shard measured it (the dealing's, from the batches' digests
        computed with the epoch's whole order where they are)."""
        return self.dealing.global_ledger(pos, self._digests(pos.seed, pos.epoch))

    def _digests(self, seed: int, epoch: int) -> np.ndarray | None:
        """The digests of the batches of epoch ``(seed, epoch)``'s whole order from its
        start (a keyed dealing's: the shard key 0 of a dealt one), where computed."""
        if not self.dealing.keyed:
            return None
        fut = self._wholes.get(self._whole_key(seed, epoch, self.dealing.plan(0), 0))
        if fut is None or not fut.done() or fut.exception() is not None:
            return None
        return np.frombuffer(fut.result()[1], dtype=np.uint64)

    def _whole_order(self, seed: int, epoch: int, plan: Plan, first: First) -> Future[Whole]:
        """This epoch's whole order (``plan``'s, resumed at ``first``), and the next
        epoch's (from its start), computed in the background (the keyed bijection
        releases the GIL; at once up to ``_AT_ONCE_ROWS`` rows); batches use blocks until
        it is ready. An order is known by
        its key, and by where it resumed unless the dealing's orders are ``keyed``."""
        wanted = {}
        for e, f in ((epoch, first), (epoch + 1, 0)):
            p = plan if e == epoch else self.dealing.plan(0)
            key = self._whole_key(seed, e, p, f)
            fut = self._wholes.get(key)
            if fut is None:
                bijection = self.dealing.order(seed, e, p, f)
                assert bijection is not None  # (shuffled: as the epoch whose order this is)
                b = self.spec.batch_size
                blocked = BlockedOrder(bijection, p.offset, self._dtype, b, self.ids)
                out = np.empty(p.size, dtype=self._dtype)  # allocated here, not in the thread
                run = _at_once if p.size <= _AT_ONCE_ROWS else _in_background
                fut = run(partial(blocked.mapped_all, out))
            wanted[key] = fut
        self._wholes = wanted
        return wanted[self._whole_key(seed, epoch, plan, first)]

    def _whole_key(self, seed: int, epoch: int, plan: Plan, first: First) -> tuple[Any, ...]:
        """``(seed, epoch, key)`` of an order (and where it resumed, unless ``keyed``)."""
        if self.dealing.keyed:
            return (seed, epoch, plan.key)
        return (seed, epoch, plan.key, first or ())

    def close(self) -> None:
        self._sample_read = None
        self.reader.close()
