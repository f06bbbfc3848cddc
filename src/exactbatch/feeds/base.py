"""What a feed is to the loader: a batch spec in, epochs of jobs out.

A feed composes the three layers below it - an order (:mod:`exactbatch.order`),
a reader or stream (:mod:`exactbatch.sources`), and the cutting of an epoch
into batches (:mod:`exactbatch.batching`) - into what the loader hands out.
The loader knows feeds only through :class:`Feed` and :class:`Epoch`: these
protocols list every method and attribute it calls on them (mypy checks each
feed and epoch against them where the loader takes one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol, TypeVar

import numpy as np

from exactbatch.batching.blocked_order import BlockedOrder, Positions
from exactbatch.batching.output import Output
from exactbatch.batching.padding import PAD, check_even_batches
from exactbatch.batching.random_access_epoch import RandomAccessEpoch
from exactbatch.checks import check_dtype, check_flag, check_int
from exactbatch.hints import Source
from exactbatch.order.digest import Tally
from exactbatch.order.shards import Shard
from exactbatch.sources.chunks import Stream

__all__ = [
    "RANGES",
    "BatchSpec",
    "Dealing",
    "DealingKind",
    "Epoch",
    "Exhaustible",
    "Feed",
    "First",
    "Job",
    "Ordered",
    "Orders",
    "Place",
    "Plan",
    "StateRule",
    "Timer",
    "global_batch",
]


RANGES = "ranges"  # elastic="ranges": contiguous shares of each segment (feeds.ranges)

# Where a dealing's epoch (re)started, as a state rule says (feeds.state_rules): 0 for
# contiguous shards, the global batch for elastic ones, the segments (num_shards, steps)
# before the one in progress under "ranges" (0 or (): none).
First = int | tuple[tuple[int, int], ...]


def global_batch(first: First) -> int:
    """``first`` of an elastic (dealt) epoch: the global batch it resumes at."""
    if not isinstance(first, int):
        raise TypeError(f"an elastic epoch resumes at a global batch; got {first!r}")
    return first


def check_elastic(value: object) -> bool | str:
    """``elastic`` as given: ``False``, ``True`` (a ``bool`` or ``np.bool_``) or
    ``"ranges"``; another string a ``ValueError``, anything else a ``TypeError``, each
    naming ``elastic`` and what it accepts."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    accepted = "False, True or 'ranges'"
    if isinstance(value, str):
        if value == RANGES:
            return RANGES
        raise ValueError(f"elastic must be {accepted}; got {value!r}")
    raise TypeError(f"elastic must be {accepted}; got {value!r}")


@dataclass(frozen=True)
class BatchSpec:
    """The settings that cut every epoch into batches, validated once.

    ``batch_size`` an int >= 1; the flags ``bool`` (see :mod:`exactbatch.checks`);
    ``elastic`` False, True (one global order dealt in turn) or ``"ranges"``
    (contiguous shares of each segment: :mod:`exactbatch.feeds.ranges`);
    ``even_batches`` False, True (every shard the smallest shard's batch count) or
    ``"pad"`` (every shard the largest shard's, padded: :mod:`exactbatch.batching.padding`;
    not with ``drop_last``, a ``ValueError``);
    ``shard`` a :class:`~exactbatch.order.Shard`; ``dtype`` the batches' dtype,
    float64 or float32 (the cast happens in the gather); ``with_rows``: each batch
    also carries its rows' global ids (int64), a third element; ``output`` the rest
    of what batches are made into (:class:`~exactbatch.batching.output.Output`), or
    None for plain batches of ``dtype``.
    """

    batch_size: int
    shuffle: bool = True
    drop_last: bool = False
    even_batches: bool | str = False
    elastic: bool | str = False
    shard: Shard = Shard()
    dtype: np.dtype = np.dtype(np.float64)
    with_rows: bool = False
    output: Output | None = None  # label dtype, transform, NaN rule (None: plain)

    def __post_init__(self) -> None:
        fix = object.__setattr__
        fix(self, "batch_size", check_int("batch_size", self.batch_size, 1))
        fix(self, "dtype", check_dtype(self.dtype))
        for name in ("shuffle", "drop_last", "with_rows"):
            fix(self, name, check_flag(name, getattr(self, name)))
        fix(self, "elastic", check_elastic(self.elastic))
        fix(self, "even_batches", check_even_batches(self.even_batches))
        if self.pad and self.drop_last:
            raise ValueError(
                "even_batches='pad' hands out every row (the last batches padded, with a "
                "mask), drop_last=True drops the partial batches' rows: pass one of them"
            )
        if not isinstance(self.shard, Shard):
            raise TypeError(f"shard must be a Shard; got {self.shard!r}")
        if self.output is not None and self.output.plain:
            fix(self, "output", None)

    @property
    def pad(self) -> bool:
        """``even_batches="pad"``: every shard the largest shard's batch count, padded."""
        return self.even_batches == PAD

    @property
    def capped(self) -> bool:
        """``even_batches=True``: every shard the smallest shard's batch count."""
        return self.even_batches is True

    @property
    def shaped(self) -> np.dtype | Output:
        """What the batching makes batches with: the :class:`Output`, or the dtype."""
        return self.dtype if self.output is None else self.output


class Job(Protocol):
    """One claimed batch: batch ``k`` of the epoch, ``size`` rows, its ledger digest.

    ``take()`` is ``(x, y)``, or ``(x, y, rows)`` when the spec asks ``with_rows``
    (None for a padding batch: :func:`~exactbatch.batching.padding.masked` makes it);
    ``fill_rows(out)`` writes the rows' ids (the ones the digest is of) into ``out``.
    (Read-only: a job of a whole order's run is a tuple.)
    """

    @property
    def k(self) -> int: ...

    @property
    def size(self) -> int: ...

    @property
    def digest(self) -> int: ...

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None: ...

    def fill_rows(self, out: np.ndarray) -> None: ...

    def take(self) -> tuple[np.ndarray, ...] | None: ...


R = TypeVar("R")


class Timer(Protocol):
    """What a feed wraps its source's reads in (:meth:`Feed.time_reads`; the loader's
    :meth:`Telemetry.timed <exactbatch.loader.telemetry.Telemetry.timed>`): ``read``,
    each call recorded, its arguments and result the read's."""

    def __call__(self, read: Callable[..., R]) -> Callable[..., R]: ...


class Place(Protocol):
    """Where a state stands, as a feed reads it (the loader's
    :class:`~exactbatch.loader.state.Position` is one; the feeds sit below the loader,
    so they name only what they read)."""

    @property
    def seed(self) -> int: ...

    @property
    def epoch(self) -> int: ...

    @property
    def first(self) -> First: ...  # where a dealt epoch resumed (its state rule's)

    @property
    def done(self) -> int: ...

    @property
    def ledger(self) -> Tally: ...


class StateRule(Protocol):
    """What a state records of where a feed's dealing stands, and how it resumes
    (:mod:`exactbatch.feeds.state_rules`: one rule per dealing). ``free``: settings a
    state may differ in; ``lands_flights``: a state waits for reads in flight below a
    batch handed out (its position must be one every rank shares)."""

    free: frozenset[str]
    lands_flights: bool

    def settings(self, feed: Feed) -> dict[str, Any]: ...  # (a state's JSON)

    def position(self, pos: Place, feed: Feed) -> dict[str, Any]: ...

    def ledger(self, pos: Place, feed: Feed) -> Tally: ...

    def shard(self, feed: Feed) -> dict[str, Any]: ...

    def resume(
        self, state: dict[str, Any], feed: Feed, done: int, pending: list[int], claimed: int
    ) -> tuple[First, int, int, Tally, bool]: ...

    def start_of(self, feed: Feed, first: First) -> int: ...

    def promise(self, feed: Feed, epoch: Exhaustible, first: First, promised: Tally) -> Tally: ...

    def segment(self, pos: Place, feed: Feed) -> tuple[Tally, First, bool]: ...

    def rolled(self, feed: Feed, epoch: Exhaustible, first: First, done: int) -> bool: ...


class Ordered(Protocol):
    """An epoch as an elastic feed's :meth:`Feed.global_promise` reads it: its keyed
    order (None: file order). Every :class:`Epoch` is one (a stream's has no order),
    and so is the loader's :class:`~exactbatch.loader.lifecycle.ClosedEpoch`."""

    @property
    def order(self) -> BlockedOrder | None: ...


class Exhaustible(Ordered, Protocol):
    """An epoch as a :class:`StateRule` reads it: its order, and whether this shard
    claimed every batch of it (the loader's
    :class:`~exactbatch.loader.lifecycle.ClosedEpoch` is one too)."""

    def exhausted(self) -> bool: ...


class Epoch(Exhaustible, Protocol):
    """One epoch's batches, claimed in order (under the loader's lock)."""

    claimed: int  # batches claimed so far (handed out, prepared ahead or given back)

    def claim(self) -> Job | None: ...

    def claim_many(self, jobs: list[Job], count: int, ahead: bool = False) -> None:
        """Claim up to ``count`` next batches into ``jobs`` (fewer at the end, and from a
        stream, whose claims read, fewer where a claim would read past one group of its
        pass; ``ahead``: batches prepared ahead on request, a prefetch's, read as many
        as ``count``)."""

    def take_group(self, jobs: list[Job]) -> list[tuple[np.ndarray, ...]]:
        """The batches of ``jobs`` (claimed together), in order: what ``take()`` of
        each gives, made in as few reads as the epoch can."""

    def give_back(self, jobs: Sequence[Job]) -> None: ...

    def given_back(self) -> list[int]: ...

    def exhausted(self) -> bool: ...

    def promise(self) -> Tally: ...

    def peek(self) -> object: ...

    def close(self) -> None: ...


class Feed(Protocol):
    """A source cut into epochs of batches for one shard.

    ``n`` rows of this shard (None: a stream of unknown size), ``d``/``l``
    (None: a stream not read yet), ``nbatches`` per epoch (None: unknown),
    ``total_size`` (N, the whole dataset's rows), ``total_batches`` (the
    global batches of an elastic epoch; None otherwise), ``kind`` (what a
    state records: ``"random access"`` or ``"stream"``).
    """

    spec: BatchSpec
    kind: str

    @property
    def rule(self) -> StateRule: ...  # what a state records of its dealing

    @property
    def n(self) -> int | None: ...  # (read-only here: a feed may know it is an int)

    @property
    def nbatches(self) -> int | None: ...

    @property
    def total_size(self) -> int | None: ...  # (read-only here: a feed may know it is an int)

    @property
    def total_batches(self) -> int | None: ...

    @property
    def d(self) -> int | None: ...  # read-only: a stream learns it by reading

    @property
    def l(self) -> int | None: ...  # noqa: E743

    # (no mutate: a Protocol's signature, never called)
    def open_epoch(
        self,
        seed: int,
        epoch: int,
        skip: int,
        first: First = 0,
        pending: tuple[int, ...] = (),  # pragma: no mutate
    ) -> Epoch:
        """Epoch ``epoch`` less its first ``skip`` batches (but those in ``pending``,
        which come first); ``first``: the global batch an elastic epoch resumes at."""

    def mixing_window(self) -> int | None:
        """How many consecutive rows of the source a row can be mixed with."""

    def prefetch_default(self) -> int:
        """Batches to prepare ahead unless the user says (the reader's own rule)."""

    def use_threads(self, threads: int | None) -> None:
        """The threads that gather one batch or group (None: from its bytes)."""

    def time_reads(self, timed: Timer) -> bool:
        """Wrap the source's reads in ``timed(read)`` from now on (a stream's chunk
        reads): True; False where the reads are the gathers of batches (random
        access), which the loader times itself."""

    def state_config(self) -> dict[str, Any]:
        """What a state records of the source beyond the spec (checked on load)."""

    def fingerprint(self) -> dict[str, Any]:
        """The source's identity, as a state records it (:mod:`exactbatch.sources.identity`)."""

    def whole(self) -> Tally | None:
        """Every row an epoch covers, all shards' (their ids, as the ledger counts
        them; None while a stream's size is unknown): what the run certificate
        checks the shards' promises cover."""

    def learn_widths(self) -> None:
        """Set ``d``/``l`` if unknown (a stream not read yet), by reading."""

    def close(self) -> None:
        """Let go of the source."""

    def global_promise(self, epoch: Ordered, first: First) -> Tally:
        """Elastic: the rows of every global batch ``epoch`` (one this feed opened)
        hands out, all shards', its last segment resumed at global batch ``first``
        (a ``TypeError`` where batches are not dealt: a shard's own promise)."""

    def global_ledger(self, pos: Place) -> Tally:
        """Elastic: the ledger a state at ``pos`` carries, every shard's global batches
        before it, as this shard measured it (a ``TypeError`` where batches are not
        dealt: a state's ledger is then its shard's own)."""


# A feed's keyed orders: (seed, epoch, shard key, size) -> an order of that many positions
# (a bijection, an elastic stream's windowed order).
Orders = Callable[[int, int, int, int], Positions]


class Plan(NamedTuple):
    """One epoch of a shard, as its :class:`Dealing` lays it out: the order keyed by
    ``key`` over ``size`` positions, mapped to rows ``offset + ...``; ``batches``
    handed out (``real`` of them holding rows, the rest padding), batch k at
    positions ``locate(k)``; ``span``: the shard's rows when batches are consecutive
    runs of the order (None: dealt, not consecutive)."""

    key: int
    size: int
    offset: int
    batches: int
    real: int
    locate: Callable[[int], tuple[int, int]]
    span: int | None


class Dealing(Protocol):
    """How one feed's epochs deal batches to the shards (:mod:`exactbatch.feeds.dealing`:
    contiguous rows a shard, or one global order dealt in turn), bound to the feed's
    rows. ``start``/``n``: the shard's first row and rows (``start`` 0 when dealt);
    ``nbatches`` per epoch; ``total_batches`` the global batches an epoch is cut into
    (None: contiguous)."""

    @property
    def start(self) -> int: ...

    @property
    def n(self) -> int: ...

    @property
    def nbatches(self) -> int: ...

    @property
    def total_batches(self) -> int | None: ...

    @property
    def rule(self) -> StateRule: ...

    @property
    def keyed(self) -> bool: ...  # is an epoch's order its key's alone (not ``first``'s)?

    def plan(self, first: First) -> Plan:
        """The epoch's layout resumed at ``first`` (0 unless dealt)."""

    def order(self, seed: int, epoch: int, plan: Plan, first: First = 0) -> Positions | None:
        """The epoch's order of ``plan``'s positions (None: file order)."""

    def promise(self, count: int, first: First, epoch: RandomAccessEpoch) -> Tally:
        """The rows an epoch of ``count`` batches of this shard promises, from ``first``."""

    def positions(self, a: int, z: int, first: First) -> np.ndarray:
        """The positions of the epoch's order in ``[a, z)`` this shard's batches hold."""

    def global_promise(self, epoch: Ordered, first: First) -> Tally:
        """Every shard's rows of ``epoch`` (dealt only: :meth:`Feed.global_promise`)."""

    def global_ledger(self, pos: Place, digests: np.ndarray | None = None) -> Tally:
        """Every shard's rows before ``pos`` (dealt only: :meth:`Feed.global_ledger`);
        ``digests``: the epoch's global batches' digests, where its whole order is
        computed (:meth:`BlockedOrder.mapped_all`), so that no row need be mapped."""


class DealingKind(Protocol):
    """A dealing as :func:`~exactbatch.feeds.open_feed` picks it, before it is bound to
    a feed's rows (``orders``: the feed's keyed orders, ``(seed, epoch, key, size) ->``
    a bijection; ``whole``: its every-row tally)."""

    def __call__(
        self,
        spec: BatchSpec,
        total: int,
        ids: np.ndarray | None,
        orders: Orders,
        whole: Callable[[], Tally],
    ) -> Dealing:
        """The dealing of a feed of ``total`` rows (a subset's ``ids``, or None)."""

    @staticmethod
    def open_stream(
        stream: Stream, spec: BatchSpec, total_size: int | str | None, buffer_size: int | None
    ) -> Feed:
        """The feed of a stream under this dealing."""

    @staticmethod
    def chunked(source: Source) -> Source:
        """``source`` as this dealing's stream reads it."""
