"""How an epoch's batches are dealt to the shards: one strategy, chosen where a feed opens.

:func:`exactbatch.feeds.open_feed` reads ``BatchSpec.elastic`` once and picks
one of the two dealings here (:class:`~exactbatch.feeds.base.Dealing`, the
protocol); nothing below it asks the flag again:

* :class:`Contiguous`: shard s of S owns the rows ``[s*n//S, (s+1)*n//S)``
  and permutes them by its own key (shard key s); batch k is positions
  ``k*b ..`` of that order. A stream is read by a
  :class:`~exactbatch.feeds.streamed.StreamFeed` (its shard's rows through
  the shuffle buffer).
* :class:`Elastic`: one global order of every row per ``(seed, epoch)``
  (shard key 0), cut into global batches dealt in turn - global batch g to
  shard g mod S, counted from the global batch ``first`` an epoch resumes at
  (:meth:`exactbatch.order.Shard.dealt`) - so a state resumes at any shard
  count. A chunk-indexed stream is read by an
  :class:`~exactbatch.feeds.elastic_stream.ElasticStreamFeed`, and a list of
  arrays as such a stream. The ledger a state carries and the promise the
  run certificate checks are then every shard's (:meth:`Elastic.global_ledger`,
  :meth:`Elastic.global_promise`).

A dealing is bound to one feed's rows: the whole dataset's ``total`` rows (or
a subset's, ``ids``), the feed's keyed ``orders`` (a bijection, or a windowed
order for an elastic stream) and its ``whole()`` tally.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from exactbatch.batching.blocked_order import Positions
from exactbatch.batching.random_access_epoch import BlockedOrder, RandomAccessEpoch, num_batches
from exactbatch.feeds.base import BatchSpec, Feed, First, Ordered, Orders, Place, Plan, global_batch
from exactbatch.feeds.elastic_stream import ElasticStreamFeed
from exactbatch.feeds.state_rules import ContiguousRule, ElasticRule
from exactbatch.feeds.streamed import StreamFeed
from exactbatch.hints import Source
from exactbatch.order.digest import RangeDigests, Tally, range_digest, rows_digest
from exactbatch.sources.chunks import ChunkList, Stream

__all__ = ["Contiguous", "Elastic"]


# an epoch's order as a map of positions to rows
Bijection = Callable[[np.ndarray], np.ndarray]


_MASK = (1 << 64) - 1  # digests are sums mod 2**64 (exactbatch.order.digest)


def _pair(t: Tally) -> tuple[int, int]:
    return t.rows, t.digest


def _count(spec: BatchSpec, full: int, even: int, padded: int) -> int:
    """An epoch's batches: ``even`` with even_batches=True, ``padded`` with "pad"."""
    return even if spec.capped else padded if spec.pad else full


class Contiguous:
    """Shard s of S owns contiguous rows and permutes them (module docs)."""

    rule = ContiguousRule()  # what a state records of it (feeds.state_rules)
    keyed = True  # an epoch's order is the feed's keyed one, whatever ``first``

    def __init__(
        self,
        spec: BatchSpec,
        total: int,
        ids: np.ndarray | None,
        orders: Orders,
        whole: Callable[[], Tally],
    ) -> None:
        self.spec, self.ids, self._orders = spec, ids, orders
        b, shard = spec.batch_size, spec.shard
        self.start, stop = shard.range(total)
        self.n = stop - self.start
        self.total_batches: int | None = None
        self.nbatches = _count(
            spec,
            num_batches(self.n, b, spec.drop_last),
            num_batches(total // shard.count, b, spec.drop_last),
            num_batches(-(-total // shard.count), b, False),  # the largest shard's
        )
        self._shard_tally: tuple[int, int] | None = None  # the shard's rows: see promise

    @staticmethod
    def open_stream(
        stream: Stream, spec: BatchSpec, total_size: int | str | None, buffer_size: int | None
    ) -> Feed:
        """A stream's feed: its shard's rows through the shuffle buffer."""
        return StreamFeed(stream, spec, total_size, buffer_size)

    @staticmethod
    def chunked(source: Source) -> Source:
        """``source`` as a stream reads it (a list of arrays: a re-iterable of chunks)."""
        return source

    def plan(self, first: First) -> Plan:
        """The shard's own order of its rows ``start .. start + n`` (``first`` is 0)."""
        b, n = self.spec.batch_size, self.n

        def locate(k: int) -> tuple[int, int]:
            return k * b, min(k * b + b, n)

        real = num_batches(n, b, self.spec.drop_last)
        return Plan(self.spec.shard.index, n, self.start, self.nbatches, real, locate, n)

    def order(self, seed: int, epoch: int, plan: Plan, first: First = 0) -> Positions | None:
        """The epoch's keyed order of the shard's rows (None: file order)."""
        return self._orders(seed, epoch, plan.key, plan.size) if self.spec.shuffle else None

    def promise(self, count: int, first: First, epoch: RandomAccessEpoch) -> Tally:
        """The shard's rows less the tail that drop_last or even_batches leave out of an
        epoch of ``count`` batches."""
        promised = Tally()
        b = self.spec.batch_size
        if self._shard_tally is None:  # (a subset's: a pass over its ids, made once)
            self._shard_tally = self._run_tally(self.start, self.start + self.n)
        promised.add(*self._shard_tally)
        kept = min(self.n, count * b)
        if kept < self.n:
            left = Tally()
            if epoch.order is None:
                left.add(*self._run_tally(self.start + kept, self.start + self.n))
            else:
                rows = epoch.order.mapped(kept, self.n)
                left.add(len(rows), rows_digest(rows))
            promised = promised.minus(left)
        return promised

    def _run_tally(self, start: int, stop: int) -> tuple[int, int]:
        """``(rows, digest)`` of positions ``start .. stop-1``: the source's rows there."""
        if self.ids is None:
            return stop - start, rows_digest(slice(start, stop))
        return stop - start, rows_digest(self.ids[start:stop])

    def positions(self, a: int, z: int, first: First) -> np.ndarray:
        """Positions of the shard's order in ``[a, z)`` its batches hold: all of them."""
        return np.arange(max(a, 0), min(z, self.n), dtype=np.int64)

    def global_promise(self, epoch: Ordered, first: First) -> Tally:
        raise TypeError("contiguous sharding has no global batches: each shard's own promise")

    def global_ledger(self, pos: Place, digests: np.ndarray | None = None) -> Tally:
        raise TypeError("contiguous sharding has no global batches: the state's own ledger")


class Elastic:
    """One global order's batches dealt to the shards in turn (module docs)."""

    rule = ElasticRule()  # what a state records of it (feeds.state_rules)
    keyed = True  # an epoch's order is the feed's keyed one, whatever ``first``

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
        b, shard = spec.batch_size, spec.shard
        self.start = 0
        batches = self.total_batches = num_batches(total, b, spec.drop_last)
        full, self.n = shard.elastic_share(total, b, batches)
        self.nbatches = _count(spec, full, shard.even_share(batches), shard.pad_share(batches))
        # see global_ledger: (key, stop, tally)
        self._prefix: tuple[tuple[int, int, int] | None, int, Tally] = (None, 0, Tally())

    @staticmethod
    def open_stream(
        stream: Stream, spec: BatchSpec, total_size: int | str | None, buffer_size: int | None
    ) -> Feed:
        """A chunk-indexed stream's feed: its chunks as random access, one global order."""
        return ElasticStreamFeed(stream, spec, total_size, buffer_size, Elastic)

    @staticmethod
    def chunked(source: Source) -> Source:
        """``source`` as an elastic stream reads it: a list chunk by chunk, in any order."""
        return ChunkList(source) if isinstance(source, list) else source

    def plan(self, first: First) -> Plan:
        """The global order (shard key 0), this shard's batches from global batch
        ``first`` on."""
        first = global_batch(first)
        spec, total = self.spec, self.total
        b, shard, batches = spec.batch_size, spec.shard, self.total_batches
        count, _ = shard.elastic_share(total, b, batches, first)
        real = count
        if spec.capped:
            count = shard.even_share(batches, first)
        elif spec.pad:
            count = shard.pad_share(batches, first)

        def locate(k: int) -> tuple[int, int]:
            a = shard.dealt(k, first) * b
            return a, min(a + b, total)

        return Plan(0, total, 0, count, real, locate, None)

    def order(self, seed: int, epoch: int, plan: Plan, first: First = 0) -> Positions | None:
        """The epoch's one global order (None: file order)."""
        return self._orders(seed, epoch, plan.key, plan.size) if self.spec.shuffle else None

    def promise(self, count: int, first: First, epoch: RandomAccessEpoch) -> Tally:
        """Every shard's global batches before ``first`` and the ``count`` global batches
        dealt to this shard from batch ``first`` on (the ledger a state carries holds
        the former, :meth:`global_ledger`)."""
        first = global_batch(first)
        batches = self._batches(epoch.order)
        promised = batches.span(0, first)
        promised.add(*batches.tally(self.spec.shard.dealt(np.arange(count), first)))
        return promised

    def positions(self, a: int, z: int, first: First) -> np.ndarray:
        """Positions of the global order in ``[a, z)`` that this shard's batches from
        global batch ``first`` on hold."""
        first = global_batch(first)
        b, shard, last = self.spec.batch_size, self.spec.shard, self.total_batches
        g0, count = shard.dealt(0, first), shard.count
        lo = max(a // b, g0)
        lo = g0 + -(-(lo - g0) // count) * count  # this shard's first batch there
        gs = np.arange(lo, min((z - 1) // b, last - 1) + 1, count)
        pos = (gs[:, None] * b + np.arange(b)).ravel()
        return pos[(pos >= a) & (pos < z)]

    def _batches(self, order: BlockedOrder | None) -> GlobalBatches:
        """An epoch's global batches as its ledger counts them (``order``: the epoch's
        :class:`BlockedOrder`, None in file order): from the digests computed with its
        whole order once they are, else from its bijection."""
        bijection = digests = None
        if order is not None:
            bijection = order.bijection
            if order.whole is not None:
                digests = np.frombuffer(order.whole[1], dtype=np.uint64)
        return GlobalBatches(self.spec.batch_size, self.total, self.ids, bijection, digests)

    def global_promise(self, epoch: Ordered, first: First) -> Tally:
        """The rows of every global batch ``epoch`` hands out, all shards', its last
        segment resumed at global batch ``first`` (even_batches leaves out the batches
        after the shards' equal shares)."""
        first = global_batch(first)
        stop, shard = self.total_batches, self.spec.shard
        if self.spec.capped:
            stop = first + shard.count * shard.even_share(stop, first)
        # Every row less those of the batches not handed out (and, with drop_last, the
        # rows after the last full batch): a pass over those few, not over the epoch.
        b, size = self.spec.batch_size, self.total
        return self._whole().minus(self._batches(epoch.order).span(stop, -(-size // b)))

    def global_ledger(self, pos: Place, digests: np.ndarray | None = None) -> Tally:
        """The ledger a state at ``pos`` (a cursor's
        :class:`~exactbatch.loader.state.Position`) carries - every shard's global batches
        before ``pos.first + pos.done * S`` - as this shard measured it: its own
        ledger (the batches before ``first``, as resumed, and those it handed out
        since) with the other shards' batches since ``first`` added from the order,
        assuming they stepped in lockstep. A state whose ``global_batches_done`` was
        changed then fails the ledger check at the end of the epoch it resumes.
        ``digests``: the epoch's global batches' digests where the feed has computed
        its whole order (then no row is mapped here)."""
        shard, total = self.spec.shard, self.total_batches
        first = global_batch(pos.first)
        stop = min(total, first + pos.done * shard.count)
        bijection = None
        if self.spec.shuffle and digests is None:
            bijection = self._orders(pos.seed, pos.epoch, 0, self.total)
        batches = GlobalBatches(self.spec.batch_size, self.total, self.ids, bijection, digests)
        key = (pos.seed, pos.epoch, first)
        cached_key, cached_stop, tally = self._prefix
        if cached_key != key or cached_stop > stop:  # (a state per checkpoint: extend it)
            cached_stop, tally = first, Tally()
        tally = tally.copy()
        tally.add(*_pair(batches.span(cached_stop, stop)))
        self._prefix = (key, stop, tally)
        own = batches.tally(shard.dealt(np.arange(pos.done), first))
        out = pos.ledger.copy()
        out.add(*_pair(tally.minus(Tally(*own))))
        return out


class GlobalBatches:
    """The global batches of one epoch - batch g holds positions ``g*b .. min(g*b + b,
    total)`` of its order - as the ledger counts them: ``(rows, digest)`` of any set of
    them. Costs, fastest first: a sum of the digests computed with the epoch's whole
    order (``digests``, one a batch, made on the order's background thread with the
    batches' rows: no row mapped here); in file order (``bijection`` None, no subset
    ``ids``), closed forms; else the order mapped and hashed, ``step`` batches a pass."""

    def __init__(
        self,
        b: int,
        total: int,
        ids: np.ndarray | None,
        bijection: Bijection | None,
        digests: np.ndarray | None,
    ) -> None:
        self.b, self.total, self.ids = b, total, ids
        self.bijection, self.digests = bijection, digests
        self._step = max(1, (1 << 20) // b)  # batches hashed a pass: small temporaries
        self._full = RangeDigests(b)

    def rows(self, g: np.ndarray) -> int:
        """The rows of batches ``g`` (each ``b``, the last one what is left)."""
        return int(np.minimum(self.b, self.total - g * self.b).sum()) if len(g) else 0

    def tally(self, g: np.ndarray) -> tuple[int, int]:
        """``(rows, digest)`` of the global batches ``g`` (distinct, each < the epoch's)."""
        g = np.asarray(g, dtype=np.int64)
        if self.digests is not None:
            return self.rows(g), int(self.digests[g].sum(dtype=np.uint64))
        if self.bijection is None and self.ids is None:  # runs of rows: closed forms
            return self.rows(g), self._closed(g)
        out = Tally()
        for k0 in range(0, len(g), self._step):
            out.add(*self._mapped(g[k0 : k0 + self._step]))
        return out.rows, out.digest

    def span(self, start: int, stop: int) -> Tally:
        """The rows of global batches ``start .. stop-1``."""
        b = self.b
        if stop <= start:
            return Tally()
        if self.digests is not None:
            rows = min(stop * b, self.total) - start * b
            return Tally(rows, int(self.digests[start:stop].sum(dtype=np.uint64)))
        if self.bijection is None and self.ids is None:  # one run of rows
            return Tally(
                min(stop * b, self.total) - start * b,
                range_digest(start * b, min(stop * b, self.total)),
            )
        out = Tally()
        for g0 in range(start, stop, self._step):
            out.add(*self._mapped(np.arange(g0, min(stop, g0 + self._step))))
        return out

    def _closed(self, g: np.ndarray) -> int:
        """The digest of file order's batches ``g``: each a run of rows, a full one from
        row m hashing to ``(a*m + b')*m + c`` mod 2**64 (:class:`RangeDigests`)."""
        b, total, f = self.b, self.total, self._full
        full = g[(g + 1) * b <= total]
        m = full.astype(np.uint64) * np.uint64(b)
        out = int((((m * np.uint64(f.a) + np.uint64(f.b)) * m) + np.uint64(f.c)).sum())
        for k in g[(g + 1) * b > total].tolist():  # the last batch, partial
            out += range_digest(k * b, total)
        return out & _MASK

    def _mapped(self, g: np.ndarray) -> tuple[int, int]:
        """``(rows, digest)`` of the batches ``g``, their positions mapped by the order."""
        b, total = self.b, self.total
        pos = (g[:, None] * b + np.arange(b)).ravel()
        pos = pos[pos < total]
        rows = pos if self.bijection is None else self.bijection(pos)
        if self.ids is not None:
            rows = self.ids.take(rows)
        return len(rows), rows_digest(rows)
