"""The ``elastic="ranges"`` dealing: each segment's rows split among the ranks in
contiguous shares, the rest re-dealt at a resume (:mod:`exactbatch.order.ranges`).

Where ``elastic=True`` (:class:`~exactbatch.feeds.dealing.Elastic`) deals one global
order's batches in turn, so that every rank of a stream reads every window its
batches touch (about S times the rows at S ranks), here a rank's rows are a
contiguous share of the epoch's agenda: a stream's ranks together read about N
rows (plus a chunk shared at each cut between two shares). What it gives up: S
ranks no longer hand out the batches of a one-rank run. An epoch's batches are a
pure function of ``(seed, epoch, the world-size history of the epoch)``: its
segments ``((S0, steps0), (S1, steps1), ...)``, which a state records
(:class:`~exactbatch.feeds.state_rules.RangesRule`), so a state resumes at any
shard count, every row still handed out once.

A dealing's ``first`` is the segments before the one in progress (a tuple of
``(num_shards, steps)``; ``()`` or 0 at an epoch's start). The base order is the
stream's chunk order keyed by ``(seed, epoch)`` (a
:class:`~exactbatch.order.windows.WindowedOrder`'s, unmixed; file order without
shuffle) and its windows ``mixing_window`` rows; a random-access source's base is
its rows, its window the whole source (a rank's share is one window: a full
shuffle of it, as a contiguous shard's).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from exactbatch.batching.random_access_epoch import RandomAccessEpoch, num_batches
from exactbatch.feeds.base import BatchSpec, Feed, First, Ordered, Orders, Place, Plan
from exactbatch.feeds.elastic_stream import ElasticStreamFeed
from exactbatch.feeds.state_rules import RangesRule
from exactbatch.hints import Source
from exactbatch.order.digest import Tally, range_digest, rows_digest
from exactbatch.order.ranges import (
    Piece,
    RangesOrder,
    agenda_at,
    deal,
    remaining,
    segments_of,
    share,
    share_sizes,
)
from exactbatch.order.windows import WindowedOrder
from exactbatch.sources.chunks import ChunkList, Stream

__all__ = ["Ranges"]

_STEP = 1 << 18  # positions mapped and hashed a pass (small temporaries)


class Ranges:
    """Contiguous shares of each segment's agenda (module docs)."""

    keyed = False  # an epoch's order depends on its history (``first``) too

    def __init__(
        self,
        spec: BatchSpec,
        total: int,
        ids: np.ndarray | None,
        orders: Orders,
        whole: Callable[[], Tally],
    ) -> None:
        self.spec, self.total, self.ids = spec, total, ids
        self._orders, self._whole = orders, whole
        self.start = 0
        self.rule = RangesRule(self)  # what a state records of it (feeds.state_rules)
        self.total_batches: int | None = None  # no global batches
        a, z = share(total, spec.shard.count, spec.shard.index)
        self.n = z - a
        self.nbatches = self.counts(())[0]
        # see global_ledger: (key, steps, the other ranks' rows of those steps)
        self._others: tuple[Any, int, Tally] = (None, 0, Tally())
        # see _layout: the last epoch's ((seed, epoch), layout); rank_order's, a few
        self._last: tuple[Any, tuple[int, WindowedOrder | None]] = (None, (0, None))
        self._rank_orders: dict[tuple[Any, ...], RangesOrder] = {}

    @staticmethod
    def open_stream(
        stream: Stream, spec: BatchSpec, total_size: int | str | None, buffer_size: int | None
    ) -> Feed:
        """A chunk-indexed stream's feed: its chunks as random access."""
        return ElasticStreamFeed(stream, spec, total_size, buffer_size, Ranges)

    @staticmethod
    def chunked(source: Source) -> Source:
        """``source`` as a stream under this dealing reads it: a list chunk by chunk."""
        return ChunkList(source) if isinstance(source, list) else source

    # -- the segment in progress ------------------------------------------------------

    def split(self, first: First) -> tuple[tuple[tuple[int, int], ...], int]:
        """``(before, done)``: the segments before the one in progress and its steps
        done before (at this shard count, the last segment of ``first`` goes on)."""
        segs = segments_of(first)
        if segs and segs[-1][0] == self.spec.shard.count:
            return segs[:-1], segs[-1][1]
        return segs, 0

    def continued(self, first: First) -> int:
        """The steps of the segment in progress done before a resume at ``first``."""
        return self.split(first)[1]

    def sizes(self, first: First) -> list[int]:
        """Every rank's share of the segment in progress, in rows."""
        before, _ = self.split(first)
        b, count = self.spec.batch_size, self.spec.shard.count
        return share_sizes(remaining(self.total, b, before), count)

    def counts(self, first: First) -> tuple[int, int, int]:
        """``(batches, real, last)``: this rank's batches of the segment (its own, or
        every rank's smallest under even_batches=True, largest under "pad"), those
        holding rows, and the step after which every rank is done."""
        spec, b = self.spec, self.spec.batch_size
        own = [num_batches(m, b, spec.drop_last) for m in self.sizes(first)]
        real = own[spec.shard.index]
        batches = min(own) if spec.capped else max(own) if spec.pad else real
        last = min(own) if spec.capped else max(own)
        return batches, real, last

    def plan(self, first: First) -> Plan:
        """This rank's order of its share, batch k at positions ``k*b ..``."""
        b, n = self.spec.batch_size, self.sizes(first)[self.spec.shard.index]
        batches, real, _ = self.counts(first)

        def locate(k: int) -> tuple[int, int]:
            return k * b, min(k * b + b, n)

        return Plan(self.spec.shard.index, n, 0, batches, real, locate, n)

    # -- orders -------------------------------------------------------------------------

    def _layout(self, seed: int, epoch: int) -> tuple[int, WindowedOrder | None]:
        """``(window, base)`` of an epoch: a stream's windows and chunk order; a
        random-access source's whole rows (one window a share), positions as rows.
        Kept for the last ``(seed, epoch)`` asked: a state's ledger and every rank's
        order of a segment ask it again, and a keyed order is made afresh each time."""
        if not self.spec.shuffle:
            return max(1, self.total), None
        if self._last[0] == (seed, epoch):
            return self._last[1]
        order = self._orders(seed, epoch, 0, self.total)
        layout = (order.window, order) if isinstance(order, WindowedOrder) else None
        self._last = ((seed, epoch), layout or (max(1, self.total), None))
        return self._last[1]

    def _order(self, pieces: list[Piece], seed: int, epoch: int) -> RangesOrder:
        _, base = self._layout(seed, epoch)
        mix = self.spec.shuffle
        if base is None:
            return RangesOrder(pieces, seed=seed, epoch=epoch, mix=mix)
        return RangesOrder(
            pieces,
            seed=seed,
            epoch=epoch,
            mix=mix,
            base=base.unmixed,
            base_ranges=base.unmixed_ranges,
        )

    def _agenda(self, seed: int, epoch: int, segments: First) -> list[Piece]:
        window, _ = self._layout(seed, epoch)
        return agenda_at(self.total, window, self.spec.batch_size, segments_of(segments))

    def rank_order(self, seed: int, epoch: int, first: First, index: int) -> RangesOrder:
        """Rank ``index``'s order in the segment in progress at ``first`` (a few kept: a
        promise and a ledger ask for every rank's, at each save; orders are immutable)."""
        before, _ = self.split(first)
        key = (seed, epoch, before, index)
        order = self._rank_orders.get(key)
        if order is None:
            window, _ = self._layout(seed, epoch)
            count = self.spec.shard.count
            order = self._order(deal(self._agenda(seed, epoch, before), count, index, window),
                                seed, epoch)  # fmt: skip
            if len(self._rank_orders) >= 16:
                self._rank_orders.clear()
            self._rank_orders[key] = order
        return order

    def order(self, seed: int, epoch: int, plan: Plan, first: First = ()) -> RangesOrder:
        """This rank's order of the segment in progress (every time: even unshuffled, a
        resumed share is pieces of the base order)."""
        return self.rank_order(seed, epoch, first, self.spec.shard.index)

    # -- the ledger -----------------------------------------------------------------

    def _tally(self, order: RangesOrder, start: int, stop: int) -> Tally:
        """``(rows, digest)`` of ``order``'s positions ``start .. stop-1``, as row ids
        (the windows held whole in closed form; a subset's ids a pass over them)."""
        out = Tally()
        stop = min(stop, order.n)
        if self.ids is None:
            runs, arrays = order.row_sets(start, stop)
            for a, z in runs:
                out.add(z - a, range_digest(a, z))
            for rows in arrays:
                out.add(len(rows), rows_digest(rows))
            return out
        for a in range(start, stop, _STEP):
            rows = order.rows(a, min(stop, a + _STEP))
            if self.ids is not None:
                rows = self.ids.take(rows)
            out.add(len(rows), rows_digest(rows))
        return out

    def _before(self, seed: int, epoch: int, segments: First) -> Tally:
        """Every row handed out in ``segments``: every row less the agenda after them."""
        if not segments_of(segments):
            return Tally()
        agenda = self._order(self._agenda(seed, epoch, segments), seed, epoch)
        return self._whole().minus(self._tally(agenda, 0, agenda.n))

    def _steps(self, seed: int, epoch: int, first: First, steps: list[tuple[int, int]]) -> Tally:
        """Every rank's rows of the segment in progress, rank r's batches
        ``steps[r][0] .. steps[r][1]-1``."""
        b, out = self.spec.batch_size, Tally()
        for r, (k0, k1) in enumerate(steps):
            if k1 > k0:
                t = self._tally(self.rank_order(seed, epoch, first, r), k0 * b, k1 * b)
                out.add(t.rows, t.digest)
        return out

    def own_steps(self, pos: Place, done: int) -> Tally:
        """This rank's rows of its first ``done`` batches of the segment at ``pos``."""
        order = self.rank_order(pos.seed, pos.epoch, pos.first, self.spec.shard.index)
        return self._tally(order, 0, done * self.spec.batch_size)

    @staticmethod
    def _bijection(epoch: Ordered) -> RangesOrder:
        order = epoch.order
        assert order is not None  # (a ranges epoch always has one)
        bij = order.bijection
        assert isinstance(bij, RangesOrder)
        return bij

    def promise(self, count: int, first: First, epoch: RandomAccessEpoch) -> Tally:
        """Every rank's rows before the resume at ``first`` and this rank's batches of
        the segment from there to ``count`` (the ledger a state carries holds the
        former)."""
        bij = self._bijection(epoch)
        out = self._before(bij.seed, bij.epoch, first)
        b = self.spec.batch_size
        own = self._tally(bij, self.continued(first) * b, count * b)
        out.add(own.rows, own.digest)
        return out

    def positions(self, a: int, z: int, first: First) -> np.ndarray:
        """Positions of this rank's order in ``[a, z)``: all of them are its own."""
        n = self.sizes(first)[self.spec.shard.index]
        return np.arange(max(a, 0), min(z, n), dtype=np.int64)

    def global_promise(self, epoch: Ordered, first: First) -> Tally:
        """The rows every rank hands out in ``epoch`` (this rank's, resumed at
        ``first``): every row before the segment in progress, and each rank's batches
        of it (what drop_last / even_batches leave of its share left out)."""
        bij = self._bijection(epoch)
        spec, b = self.spec, self.spec.batch_size
        own = [num_batches(m, b, spec.drop_last) for m in self.sizes(first)]
        steps = [(0, min(own) if spec.capped else k) for k in own]
        before, _ = self.split(first)
        out = self._before(bij.seed, bij.epoch, before)
        t = self._steps(bij.seed, bij.epoch, first, steps)
        out.add(t.rows, t.digest)
        return out

    def global_ledger(self, pos: Place, digests: np.ndarray | None = None) -> Tally:
        """The ledger a state at ``pos`` carries - every rank's rows before it - as this
        rank measured it: its own ledger (the rows before its resume, and those it
        handed out since) with the other ranks' batches since added from the order,
        assuming they stepped in lockstep. A state whose segments were changed then
        fails the ledger check at the end of the epoch it resumes. (``digests``, a
        global order's batches', is not used: a rank's rows are counted in closed form.)"""
        count, me, d = self.spec.shard.count, self.spec.shard.index, self.continued(pos.first)
        key = (pos.seed, pos.epoch, segments_of(pos.first))
        cached, since, others = self._others
        if cached != key or since > pos.done:  # (a state per checkpoint: extend it)
            since, others = d, Tally()
        others = others.copy()
        steps = [(since, since if r == me else pos.done) for r in range(count)]
        t = self._steps(pos.seed, pos.epoch, pos.first, steps)
        others.add(t.rows, t.digest)
        self._others = (key, max(since, pos.done), others)
        out = pos.ledger.copy()
        out.add(others.rows, others.digest)
        return out
