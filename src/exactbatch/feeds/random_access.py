"""The random-access feed: a reader, one shard of it, and its epoch orders.

Sharding is contiguous (shard s owns rows [s*n//S, (s+1)*n//S) and
permutes them), or ``elastic``: one global order per (seed, epoch), cut
into batches dealt to the shards in turn (see
:class:`exactbatch.order.Shard`). ``even_batches=True`` caps every shard at
the smallest shard's batch count; ``"pad"`` gives every shard the largest
shard's, the batches past a shard's own being padding
(:mod:`exactbatch.batching.padding`). Orders are keyed bijections
(:class:`exactbatch.order.EpochBijection`): nothing of size n is stored,
except that for up to 2**24 rows an epoch's whole order (4 bytes a row)
is computed ahead on a background thread, so that batches slice it
instead of mapping positions.

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

import numpy as np

from exactbatch.audit import resolve_random_access_total
from exactbatch.batching.output import OutputReader
from exactbatch.batching.random_access_epoch import BlockedOrder, RandomAccessEpoch, num_batches
from exactbatch.feeds.base import BatchSpec, Place
from exactbatch.order import EpochBijection
from exactbatch.order.digest import Tally, range_digest, rows_digest
from exactbatch.order.subset import check_subset
from exactbatch.sources.identity import reader_fingerprint, source_facts

__all__ = ["RandomAccessFeed"]

# Up to this many rows an epoch's whole order (4 bytes a row) is computed
# ahead on a background thread, so batches slice it instead of mapping
# positions; beyond it, memory stays O(1).
_WHOLE_ROWS = 1 << 24


def _pair(t: Tally) -> tuple[int, int]:
    return t.rows, t.digest


def _in_background(compute) -> Future:
    fut: Future = Future()

    def work():
        try:
            fut.set_result(compute())
        except BaseException as e:  # surfaces only if someone asks for .result()
            fut.set_exception(e)

    threading.Thread(target=work, name="exactbatch-order", daemon=True).start()
    return fut


class RandomAccessFeed:
    """A random-access reader's rows as epochs of batches of one shard (module docs)."""

    kind = "random access"

    def __init__(self, reader, spec: BatchSpec, total_size="auto", rows=None, about=None):
        # The reader and its read as opened: the fingerprint's sample never goes through
        # what is put on the reader later (the output's rules, a test's fault injector).
        self._opened, self._sample_read = reader, reader.read
        if spec.output is not None:  # labels, transform or NaN rule: read through it
            reader = OutputReader(reader, spec.output)
        self.reader, self.spec = reader, spec
        # What a RowSource says of itself beyond its reader (names, a file's path): for
        # the fingerprint, read now (plain attributes), so the feed keeps no reference.
        self._about = source_facts(about)
        self.d, self.l = reader.d, reader.l
        # A subset's ids (rows=), or None: the source's rows are positions themselves.
        self.ids = None if rows is None else check_subset(rows, reader.n)
        self._whole: Tally | None = None
        size = reader.n if self.ids is None else len(self.ids)
        total = self.total_size = resolve_random_access_total(total_size, size)
        b, shard = spec.batch_size, spec.shard
        # Row numbers as int32 when they fit: half the bytes to move per batch.
        self._dtype = np.int32 if max(total, reader.n) < 2**31 else np.int64
        self._fingerprint: dict | None = None  # made when a state first asks
        self._shard_tally: tuple[int, int] | None = None  # the shard's rows: see _promise
        self.total_batches: int | None = None
        if spec.elastic:
            self.start = 0
            self.total_batches = num_batches(total, b, spec.drop_last)
            full, self.n = shard.elastic_share(total, b, self.total_batches)
            even = shard.even_share(self.total_batches)
            padded = shard.pad_share(self.total_batches)
        else:
            self.start, stop = shard.range(total)
            self.n = stop - self.start
            full = num_batches(self.n, b, spec.drop_last)
            even = num_batches(total // shard.count, b, spec.drop_last)
            padded = num_batches(-(-total // shard.count), b, False)  # the largest shard's
        self.nbatches = even if spec.capped else padded if spec.pad else full
        self._wholes: dict[tuple[int, int, int], Future] = {}  # see _whole_order
        self._prefix: tuple = (None, 0, Tally())  # see global_ledger: (key, stop, tally)
        self._step = max(1, (1 << 20) // b)  # elastic batches hashed a pass: small temporaries

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

    def time_reads(self, timed) -> bool:
        """A batch's gather is its read (the loader times it)."""
        return False

    def state_config(self) -> dict:
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

    def fingerprint(self) -> dict:
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
        self, seed: int, epoch: int, skip: int, first: int = 0, pending=()
    ) -> RandomAccessEpoch:
        """Epoch ``epoch`` less its first ``skip`` batches (but those in ``pending``);
        under elastic sharding the epoch starts at global batch ``first`` (a resume
        at another shard count)."""
        spec, total = self.spec, self.total_size
        b, shard = spec.batch_size, spec.shard
        locate: Callable[[int], tuple[int, int]]
        if spec.elastic:  # one global order, its batches dealt to the shards in turn
            global_batches = self.total_batches
            assert global_batches is not None  # set for an elastic feed
            key_shard, size, offset = 0, total, 0
            count, _ = shard.elastic_share(total, b, global_batches, first)
            real = count
            if spec.capped:
                count = shard.even_share(global_batches, first)
            elif spec.pad:
                count = shard.pad_share(global_batches, first)

            def locate(k):
                a = shard.dealt(k, first) * b
                return a, min(a + b, total)

        else:  # the shard's own order of its rows start .. start + n
            key_shard, size, offset, count = shard.index, self.n, self.start, self.nbatches
            real = num_batches(self.n, b, spec.drop_last)

            def locate(k, n=self.n):
                return k * b, min(k * b + b, n)

        order = None
        if spec.shuffle:
            order = BlockedOrder(
                self._bijection(seed, epoch, key_shard, size), offset, self._dtype, b, self.ids
            )
            if size <= _WHOLE_ROWS:
                order.use_whole(self._whole_order(seed, epoch, key_shard, size, offset))
        # (what is handed out: a capped count's batches, or every real one under "pad")
        promised = partial(self._promise, min(count, real), first)
        return RandomAccessEpoch(
            self.reader,
            count,
            locate,
            order,
            offset,
            b,
            promised,
            skip,
            pending,
            spec.dtype,
            span=None if spec.elastic else self.n,
            ids=self.ids,
            with_rows=spec.with_rows,
            real=real,
        )

    def _promise(self, count: int, first: int, epoch: RandomAccessEpoch) -> Tally:
        """The rows an epoch of ``count`` batches promises: the shard's rows less
        the tail that drop_last or even_batches leave out (contiguous sharding), or
        every shard's global batches before ``first`` and the global batches dealt
        to this shard from batch ``first`` on (elastic: the ledger a state carries
        holds the former, :meth:`global_ledger`)."""
        promised = Tally()
        b, shard = self.spec.batch_size, self.spec.shard
        if self.spec.elastic:
            bijection = None if epoch.order is None else epoch.order.bijection
            promised = self._prefix_tally(bijection, 0, first)
            for k0 in range(0, count, self._step):
                g = shard.dealt(np.arange(k0, min(count, k0 + self._step)), first)
                promised.add(*self._batches_tally(bijection, g))
            return promised
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

    def _batches_tally(self, bijection, g: np.ndarray) -> tuple[int, int]:
        """``(rows, digest)`` of the global batches ``g`` of an elastic epoch."""
        b, total = self.spec.batch_size, self.total_size
        pos = (g[:, None] * b + np.arange(b)).ravel()
        pos = pos[pos < total]
        rows = pos if bijection is None else bijection(pos)
        if self.ids is not None:
            rows = self.ids.take(rows)
        return len(rows), rows_digest(rows)

    def _prefix_tally(self, bijection, start: int, stop: int) -> Tally:
        """The rows of global batches ``[start, stop)`` of an elastic epoch."""
        out = Tally()
        for g0 in range(start, stop, self._step):
            out.add(*self._batches_tally(bijection, np.arange(g0, min(stop, g0 + self._step))))
        return out

    def global_promise(self, epoch: RandomAccessEpoch, first: int) -> Tally:
        """Elastic: the rows of every global batch ``epoch`` hands out, all shards', its
        last segment resumed at global batch ``first`` (even_batches leaves out the
        batches after the shards' equal shares)."""
        bijection = None if epoch.order is None else epoch.order.bijection
        stop, shard = self.total_batches, self.spec.shard
        assert stop is not None  # set for an elastic feed
        if self.spec.capped:
            stop = first + shard.count * shard.even_share(stop, first)
        # Every row less those of the batches not handed out (and, with drop_last, the
        # rows after the last full batch): a pass over those few, not over the epoch.
        b, size = self.spec.batch_size, self.total_size
        return self.whole().minus(self._prefix_tally(bijection, stop, -(-size // b)))

    def global_ledger(self, pos: Place) -> Tally:
        """Elastic: the ledger a state at ``pos`` (a cursor's
        :class:`~exactbatch.loader.state.Position`) carries - every shard's global batches
        before ``pos.first + pos.done * S`` - as this shard measured it: its own
        ledger (the batches before ``first``, as resumed, and those it handed out
        since) with the other shards' batches since ``first`` added from the order,
        assuming they stepped in lockstep. A state whose ``global_batches_done`` was
        changed then fails the ledger check at the end of the epoch it resumes."""
        shard, total = self.spec.shard, self.total_batches
        assert total is not None  # set for an elastic feed
        stop = min(total, pos.first + pos.done * shard.count)
        bijection = None
        if self.spec.shuffle:
            bijection = self._bijection(pos.seed, pos.epoch, 0, self.total_size)
        key = (pos.seed, pos.epoch, pos.first)
        cached_key, cached_stop, tally = self._prefix
        if cached_key != key or cached_stop > stop:  # (a state per checkpoint: extend it)
            cached_stop, tally = pos.first, Tally()
        tally = tally.copy()
        tally.add(*_pair(self._prefix_tally(bijection, cached_stop, stop)))
        self._prefix = (key, stop, tally)
        others = tally.copy()
        own = Tally()
        mine = shard.dealt(np.arange(pos.done), pos.first)
        for k0 in range(0, len(mine), self._step):
            own.add(*self._batches_tally(bijection, mine[k0 : k0 + self._step]))
        others = others.minus(own)
        out = pos.ledger.copy()
        out.add(*_pair(others))
        return out

    @staticmethod
    def _bijection(seed, epoch, key_shard, size):
        return EpochBijection(size, seed=seed, epoch=epoch, shard=key_shard)

    def _whole_order(self, seed, epoch, key_shard, size, offset) -> Future:
        """This epoch's whole order, and the next epoch's, computed in the background
        (the keyed bijection releases the GIL); batches use blocks until it is ready."""
        wanted = {}
        for e in (epoch, epoch + 1):
            key = (seed, e, key_shard)
            fut = self._wholes.get(key)
            if fut is None:
                bijection = self._bijection(seed, e, key_shard, size)
                b = self.spec.batch_size
                blocked = BlockedOrder(bijection, offset, self._dtype, b, self.ids)
                out = np.empty(size, dtype=self._dtype)  # allocated here, not in the thread
                fut = _in_background(partial(blocked.mapped_all, out))
            wanted[key] = fut
        self._wholes = wanted
        return wanted[(seed, epoch, key_shard)]

    def close(self) -> None:
        self._sample_read = None
        self.reader.close()
