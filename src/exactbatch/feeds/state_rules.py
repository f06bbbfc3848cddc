"""What a state records of where a dealing stands, and how it resumes: one rule per
dealing (:mod:`exactbatch.feeds.dealing`), bound to the feed where it opens.

The loader's state (:mod:`exactbatch.loader.state`), its records
(:mod:`exactbatch.loader.history`) and its cursor ask a feed's ``rule`` -
never the spec's ``elastic`` - what differs between dealings:

* :class:`ContiguousRule`: a shard's state is its own - its shard count and
  index are settings (another count is refused), its batches counted from the
  start of its epoch, its ledger its own rows;
* :class:`ElasticRule`: one global order's batches dealt in turn - a state
  says the global batches every rank handed out (``global_batches_done``) and
  carries every rank's ledger, so any shard count resumes it; its shard count
  is not a setting but a fact (``shard``).

A rule's ``first`` is where the dealing's epoch (re)started, as
:class:`~exactbatch.loader.lifecycle.Start` and the state's Position hold it: 0
for contiguous shards, the global batch for elastic ones.
"""

from __future__ import annotations

from typing import Any, Protocol

from exactbatch.batching.random_access_epoch import num_batches
from exactbatch.checks import check_int
from exactbatch.distributed import torch_world_size
from exactbatch.feeds.base import Exhaustible, Feed, First, Place, global_batch
from exactbatch.order.digest import Tally
from exactbatch.order.ranges import check_segments, remaining

__all__ = [
    "ContiguousRule",
    "ElasticRule",
    "RangesRule",
    "Segmented",
    "check_ddp_steps",
    "ledger_of",
]

Segments = tuple[tuple[int, int], ...]  # (num_shards, steps) of each segment before


class Segmented(Protocol):
    """The ranges dealing as its state rule reads it (:class:`~exactbatch.feeds.ranges.Ranges`,
    whose module imports this one): a resume's ``first`` is the epoch's segments."""

    def split(self, first: First) -> tuple[Segments, int]: ...

    def continued(self, first: First) -> int: ...

    def sizes(self, first: First) -> list[int]: ...

    def counts(self, first: First) -> tuple[int, int, int]: ...

    def own_steps(self, pos: Place, done: int) -> Tally: ...


def global_batches(feed: Feed) -> int:
    """An elastic feed's global batches an epoch is cut into (every dealt feed knows them)."""
    total = feed.total_batches
    if total is None:
        raise TypeError("an elastic feed's epoch is cut into global batches; got None")
    return total


def rows_of(feed: Feed) -> int:
    """A ranges feed's rows, all shards' (known: its stream is chunk-indexed)."""
    n = feed.total_size
    if n is None:
        raise TypeError("a feed dealt by ranges knows its rows; got None")
    return n


class ContiguousRule:
    """A contiguous shard's state (module docs)."""

    free: frozenset[str] = frozenset()  # settings a state may differ in
    lands_flights = False  # a state may list batches not handed out below those that were

    @staticmethod
    def settings(feed: Feed) -> dict[str, Any]:
        """The settings beyond the spec's that fix this shard's order: its shard."""
        spec = feed.spec
        return {"num_shards": spec.shard.count, "shard_index": spec.shard.index, "n": feed.n}

    @staticmethod
    def position(pos: Place, feed: Feed) -> dict[str, Any]:
        """Where the epoch stands beyond ``batches_done``: nothing more."""
        return {}

    @staticmethod
    def ledger(pos: Place, feed: Feed) -> Tally:
        """The ledger a state carries: the shard's own."""
        return pos.ledger

    @staticmethod
    def shard(feed: Feed) -> dict[str, Any]:
        """The shard, where the settings do not name it: they do."""
        return {}

    @staticmethod
    def resume(
        state: dict[str, Any], feed: Feed, done: int, pending: list[int], claimed: int
    ) -> tuple[First, int, int, Tally, bool]:
        """``(first, claimed, done, ledger, verified)`` of a state (its ``batches_done``,
        ``done``, and ``pending`` checked already): the same shard, its batches claimed
        before."""
        if feed.nbatches is not None and claimed > feed.nbatches:
            raise ValueError(
                f"state['batches_done']={done} exceeds the {feed.nbatches} batches of an epoch"
            )
        ledger, verified = ledger_of(state, done)
        return 0, claimed, done, ledger, verified

    @staticmethod
    def start_of(feed: Feed, first: First) -> int:
        """A record's ``start``: 0 (a shard's one segment)."""
        return 0

    @staticmethod
    def promise(feed: Feed, epoch: Exhaustible, first: First, promised: Tally) -> Tally:
        """What a record says its ended epoch promised: the shard's own promise."""
        return promised

    @staticmethod
    def segment(pos: Place, feed: Feed) -> tuple[Tally, First, bool]:
        """``(base, first, continued)``: where the record of a loader resumed at ``pos``
        counts from (its hand-outs less ``base``), its segment's ``first``, and whether
        it goes on with the state's own segment (its live record, this loader's now):
        a contiguous shard's is its one segment, from the start of the epoch."""
        return Tally(), 0, True

    @staticmethod
    def rolled(feed: Feed, epoch: Exhaustible, first: First, done: int) -> bool:
        """Is the epoch over for a state taken now (``done`` batches handed out of the
        segment from ``first``)? When this shard claimed every batch."""
        return bool(epoch.exhausted())


class ElasticRule:
    """An elastic state: the global batches done, every rank's ledger (module docs)."""

    free: frozenset[str] = frozenset({"even_batches"})  # each segment's own (check_ddp_steps)
    lands_flights = True  # a state's position must be a global batch

    def settings(self, feed: Feed) -> dict[str, Any]:
        """Nothing beyond the spec: any shard count resumes an elastic state."""
        return {}

    def position(self, pos: Place, feed: Feed) -> dict[str, Any]:
        """The global batches every rank handed out (the ranks in lockstep)."""
        return {"global_batches_done": global_batch(pos.first) + pos.done * feed.spec.shard.count}

    def ledger(self, pos: Place, feed: Feed) -> Tally:
        """Every rank's global batches before the state, this rank's as measured."""
        return feed.global_ledger(pos)

    def shard(self, feed: Feed) -> dict[str, Any]:
        """The rank and count the state was taken at (its settings do not name them)."""
        return {"shard": [feed.spec.shard.index, feed.spec.shard.count]}

    def resume(
        self, state: dict[str, Any], feed: Feed, done: int, pending: list[int], claimed: int
    ) -> tuple[First, int, int, Tally, bool]:
        """``(first, 0, done, ledger, verified)``: the global batch the epoch resumes at, at
        any shard count (a state listing batches not handed out is refused)."""
        total = global_batches(feed)
        first = check_int("state['global_batches_done']", state.get("global_batches_done"), 0)
        if first > total:
            raise ValueError(
                f"state['global_batches_done']={first} exceeds the {total} batches of an epoch"
            )
        check_ddp_steps(feed, first)
        refuse_pending(pending)
        if "ledger" in state:  # (an elastic state from before it carried one: unchecked)
            ledger, verified = ledger_of(state, first)
        else:
            ledger, verified = Tally(), first == 0
        return first, 0, done, ledger, verified

    def start_of(self, feed: Feed, first: First) -> int:
        """A record's ``start``: the global batch its segment began at."""
        return int(global_batch(first))

    def promise(self, feed: Feed, epoch: Exhaustible, first: First, promised: Tally) -> Tally:
        """Every rank's batches of the epoch, from the order."""
        return feed.global_promise(epoch, first)

    def segment(self, pos: Place, feed: Feed) -> tuple[Tally, First, bool]:
        """A segment of its own from the global batch it resumes at, its hand-outs
        counted from the state's ledger."""
        return pos.ledger.copy(), pos.first, False

    def rolled(self, feed: Feed, epoch: Exhaustible, first: First, done: int) -> bool:
        """Every rank's state must say the same: the epoch is over when all ranks (in
        lockstep) have handed out every global batch, or when this rank has seen the
        end (then so have the others)."""
        if feed.spec.even_batches and epoch.exhausted():
            return True
        return bool(global_batch(first) + done * feed.spec.shard.count >= global_batches(feed))


class RangesRule(ElasticRule):
    """A state of ``elastic="ranges"``: the epoch's world-size history, every rank's
    ledger (module docs). As an elastic state: any shard count resumes it, its
    position is a step every rank shares, it carries every rank's ledger and the
    shard it was taken at. Bound to its feed's dealing (``dealing``), which reads the
    segments."""

    def __init__(self, dealing: Segmented) -> None:
        self.dealing = dealing

    def position(self, pos: Place, feed: Feed) -> dict[str, Any]:
        """The epoch's segments ``[[num_shards, steps], ...]``, the one in progress last
        (a segment of no step is none: the same agenda)."""
        before, _ = self.dealing.split(pos.first)
        segments = [list(s) for s in before]
        if pos.done:
            segments.append([feed.spec.shard.count, pos.done])
        return {"segments": segments}

    def resume(
        self, state: dict[str, Any], feed: Feed, done: int, pending: list[int], claimed: int
    ) -> tuple[First, int, int, Tally, bool]:
        """``(segments, claimed, done, ledger, verified)``: the epoch's segments,
        checked; at another shard count its rest is dealt anew (``claimed`` and ``done``
        0), at the last segment's count that segment goes on (both its steps)."""
        spec = feed.spec
        where = "state['segments']"
        segments = check_segments(state.get("segments"), rows_of(feed), spec.batch_size, where)
        refuse_pending(pending)
        check_ranges_ddp(feed, self.dealing, segments)
        ledger, verified = ledger_of(state, len(segments))
        steps = self.dealing.continued(segments)  # (the segment's steps: its done, resumed)
        return segments, steps, steps, ledger, verified

    def start_of(self, feed: Feed, first: First) -> int:
        """A record's ``start``: the rows every rank handed out before its segment."""
        n, (before, _) = rows_of(feed), self.dealing.split(first)
        return int(n - remaining(n, feed.spec.batch_size, before))

    def segment(self, pos: Place, feed: Feed) -> tuple[Tally, First, bool]:
        """At another shard count, a segment of its own after the state's, its
        hand-outs counted from the state's ledger; at the same count, the state's
        segment goes on, counted from the ledger less this rank's own steps of it."""
        done = self.dealing.continued(pos.first)
        if not done:
            return pos.ledger.copy(), pos.first, False
        return pos.ledger.minus(self.dealing.own_steps(pos, done)), pos.first, True

    def rolled(self, feed: Feed, epoch: Exhaustible, first: First, done: int) -> bool:
        """Every rank's state must say the same: the epoch is over when every rank
        (in lockstep) has handed out its share, the longest's ``done`` steps."""
        if feed.spec.even_batches and epoch.exhausted():
            return True
        return bool(done >= self.dealing.counts(first)[2])


def check_ranges_ddp(feed: Feed, dealing: Segmented, segments: Segments) -> None:
    """Under ``torch.distributed`` at the loader's shard count, ``elastic="ranges"`` with
    ``even_batches=False`` must give every rank the same step count, in the rest of
    this epoch and in every later one: a ``ValueError`` saying so otherwise (DDP's
    all-reduces would fall out of step)."""
    spec, world = feed.spec, torch_world_size()
    if spec.even_batches is not False or world is None or world < 2 or world != spec.shard.count:
        return
    b = spec.batch_size
    for what, first in (("the rest of this epoch", segments), ("every later epoch", ())):
        steps = sorted({num_batches(m, b, spec.drop_last) for m in dealing.sizes(first)})
        if len(steps) > 1:
            raise ValueError(
                f'elastic="ranges" at {world} ranks under torch.distributed: {what} gives '
                f"the ranks {' and '.join(map(str, steps))} steps, and DDP's all-reduces "
                "would fall out of step (a hang). Build the loader with even_batches=True "
                'or even_batches="pad"'
            )


def refuse_pending(pending: list[int]) -> None:
    """A dealt state stands at a point every rank shares: none with batches pending."""
    if pending:
        raise ValueError(
            f"this elastic state lists batches {pending} as not handed out below "
            "batches handed out (a batch whose read had failed waited to be read "
            "again), so its position is no global batch another shard count could "
            "resume at; take the state after that batch is handed out (a state waits "
            "for reads in flight, never for a failed one)"
        )


def check_ddp_steps(feed: Feed, first: int) -> None:
    """Under ``torch.distributed`` at a world size > 1 (the loader's shard count), an
    elastic loader with ``even_batches=False`` resumed at global batch ``first`` must
    give every rank the same step count, this epoch and the next: else DDP's
    all-reduces fall out of step and the job hangs. A ``ValueError`` saying so, on
    every rank alike, before any batch."""
    spec = feed.spec
    world, total = torch_world_size(), feed.total_batches
    if spec.even_batches is not False or world is None or world < 2 or total is None:
        return
    if world != spec.shard.count:
        return
    uneven = [
        (what, left)
        for what, left in (("the rest of this epoch", total - first), ("every later epoch", total))
        if left % world
    ]
    if not uneven:
        return
    what, left = uneven[0]
    counts = sorted({-(-(left - s) // world) for s in range(world)}, reverse=True)
    raise ValueError(
        f"this elastic state resumes at global batch {first} of {total}: {what} has {left} "
        f"global batches, which {world} ranks under torch.distributed would take as "
        f"{' and '.join(map(str, counts))} steps, and DDP's all-reduces would fall out of "
        "step (a hang). Build the loader with even_batches=True (every rank the smallest "
        'share; the few batches past it are left out) or even_batches="pad" (every row, '
        "the last batches padded and masked), or resume at a world size that divides "
        f"{left} and {total}"
    )


def ledger_of(state: dict[str, Any], done: int) -> tuple[Tally, bool]:
    """The ledger a state carries, and whether the epoch can be checked (a state of
    version 1 has none: its epoch is not checked)."""
    if "ledger" not in state and state.get("version") != 1:
        raise ValueError("state has no 'ledger' (every state since version 2 has one)")
    ledger = state.get("ledger")
    if ledger is None:  # version 1, or resumed from it: the epoch is not checked
        return Tally(), done == 0
    if not isinstance(ledger, dict):
        raise TypeError(f"state['ledger'] must be a dict; got {ledger!r}")
    rows = check_int("state['ledger']['rows']", ledger.get("rows"), 0)
    digest = ledger.get("digest")
    try:
        if not isinstance(digest, str):
            raise TypeError
        value = int(digest, 16)
    except (TypeError, ValueError):
        raise ValueError(
            f"state['ledger']['digest'] must be a hexadecimal string; got {digest!r}"
        ) from None
    return Tally(rows, value), True
