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

from typing import Any

from exactbatch.batching.random_access_epoch import num_batches
from exactbatch.checks import check_int
from exactbatch.distributed import torch_world_size
from exactbatch.feeds.base import Place
from exactbatch.order.digest import Tally
from exactbatch.order.ranges import check_segments, remaining

__all__ = ["ContiguousRule", "ElasticRule", "RangesRule", "check_ddp_steps", "ledger_of"]


class ContiguousRule:
    """A contiguous shard's state (module docs)."""

    free: frozenset[str] = frozenset()  # settings a state may differ in
    lands_flights = False  # a state may list batches not handed out below those that were

    @staticmethod
    def settings(feed: Any) -> dict[str, Any]:
        """The settings beyond the spec's that fix this shard's order: its shard."""
        spec = feed.spec
        return {"num_shards": spec.shard.count, "shard_index": spec.shard.index, "n": feed.n}

    @staticmethod
    def position(pos: Place, feed: Any) -> dict[str, Any]:
        """Where the epoch stands beyond ``batches_done``: nothing more."""
        return {}

    @staticmethod
    def ledger(pos: Place, feed: Any) -> Tally:
        """The ledger a state carries: the shard's own."""
        return pos.ledger

    @staticmethod
    def shard(feed: Any) -> dict[str, Any]:
        """The shard, where the settings do not name it: they do."""
        return {}

    @staticmethod
    def resume(
        state: dict[str, Any], feed: Any, done: int, pending: list[int], claimed: int
    ) -> tuple[Any, int, int, Tally, bool]:
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
    def start_of(feed: Any, first: Any) -> int:
        """A record's ``start``: 0 (a shard's one segment)."""
        return 0

    @staticmethod
    def promise(feed: Any, epoch: Any, first: Any, promised: Tally) -> Tally:
        """What a record says its ended epoch promised: the shard's own promise."""
        return promised

    @staticmethod
    def segment(pos: Place, feed: Any) -> tuple[Tally, Any, bool]:
        """``(base, first, continued)``: where the record of a loader resumed at ``pos``
        counts from (its hand-outs less ``base``), its segment's ``first``, and whether
        it goes on with the state's own segment (its live record, this loader's now):
        a contiguous shard's is its one segment, from the start of the epoch."""
        return Tally(), 0, True

    @staticmethod
    def rolled(feed: Any, epoch: Any, first: Any, done: int) -> bool:
        """Is the epoch over for a state taken now (``done`` batches handed out of the
        segment from ``first``)? When this shard claimed every batch."""
        return bool(epoch.exhausted())


class ElasticRule:
    """An elastic state: the global batches done, every rank's ledger (module docs)."""

    free: frozenset[str] = frozenset({"even_batches"})  # each segment's own (check_ddp_steps)
    lands_flights = True  # a state's position must be a global batch

    @staticmethod
    def settings(feed: Any) -> dict[str, Any]:
        """Nothing beyond the spec: any shard count resumes an elastic state."""
        return {}

    @staticmethod
    def position(pos: Place, feed: Any) -> dict[str, Any]:
        """The global batches every rank handed out (the ranks in lockstep)."""
        return {"global_batches_done": pos.first + pos.done * feed.spec.shard.count}

    @staticmethod
    def ledger(pos: Place, feed: Any) -> Tally:
        """Every rank's global batches before the state, this rank's as measured."""
        out: Tally = feed.global_ledger(pos)
        return out

    @staticmethod
    def shard(feed: Any) -> dict[str, Any]:
        """The rank and count the state was taken at (its settings do not name them)."""
        return {"shard": [feed.spec.shard.index, feed.spec.shard.count]}

    @staticmethod
    def resume(
        state: dict[str, Any], feed: Any, done: int, pending: list[int], claimed: int
    ) -> tuple[Any, int, int, Tally, bool]:
        """``(first, 0, done, ledger, verified)``: the global batch the epoch resumes at, at
        any shard count (a state listing batches not handed out is refused)."""
        total = feed.total_batches
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

    @staticmethod
    def start_of(feed: Any, first: Any) -> int:
        """A record's ``start``: the global batch its segment began at."""
        return int(first)

    @staticmethod
    def promise(feed: Any, epoch: Any, first: Any, promised: Tally) -> Tally:
        """Every rank's batches of the epoch, from the order."""
        out: Tally = feed.global_promise(epoch, first)
        return out

    @staticmethod
    def segment(pos: Place, feed: Any) -> tuple[Tally, Any, bool]:
        """A segment of its own from the global batch it resumes at, its hand-outs
        counted from the state's ledger."""
        return pos.ledger.copy(), pos.first, False

    @staticmethod
    def rolled(feed: Any, epoch: Any, first: Any, done: int) -> bool:
        """Every rank's state must say the same: the epoch is over when all ranks (in
        lockstep) have handed out every global batch, or when this rank has seen the
        end (then so have the others)."""
        if feed.spec.even_batches and epoch.exhausted():
            return True
        return bool(first + done * feed.spec.shard.count >= feed.total_batches)


class RangesRule(ElasticRule):
    """A state of ``elastic="ranges"``: the epoch's world-size history, every rank's
    ledger (module docs). As an elastic state: any shard count resumes it, its
    position is a step every rank shares, it carries every rank's ledger and the
    shard it was taken at."""

    @staticmethod
    def position(pos: Place, feed: Any) -> dict[str, Any]:
        """The epoch's segments ``[[num_shards, steps], ...]``, the one in progress last
        (a segment of no step is none: the same agenda)."""
        before, _ = feed.dealing.split(pos.first)
        segments = [list(s) for s in before]
        if pos.done:
            segments.append([feed.spec.shard.count, pos.done])
        return {"segments": segments}

    @staticmethod
    def resume(
        state: dict[str, Any], feed: Any, done: int, pending: list[int], claimed: int
    ) -> tuple[Any, int, int, Tally, bool]:
        """``(segments, claimed, done, ledger, verified)``: the epoch's segments,
        checked; at another shard count its rest is dealt anew (``claimed`` and ``done``
        0), at the last segment's count that segment goes on (both its steps)."""
        spec = feed.spec
        where = "state['segments']"
        segments = check_segments(state.get("segments"), feed.total_size, spec.batch_size, where)
        refuse_pending(pending)
        check_ranges_ddp(feed, segments)
        ledger, verified = ledger_of(state, len(segments))
        steps = feed.dealing.continued(segments)  # (the segment's steps: its done, resumed)
        return segments, steps, steps, ledger, verified

    @staticmethod
    def start_of(feed: Any, first: Any) -> int:
        """A record's ``start``: the rows every rank handed out before its segment."""
        n, (before, _) = feed.total_size, feed.dealing.split(first)
        return int(n - remaining(n, feed.spec.batch_size, before))

    @staticmethod
    def segment(pos: Place, feed: Any) -> tuple[Tally, Any, bool]:
        """At another shard count, a segment of its own after the state's, its
        hand-outs counted from the state's ledger; at the same count, the state's
        segment goes on, counted from the ledger less this rank's own steps of it."""
        done = feed.dealing.continued(pos.first)
        if not done:
            return pos.ledger.copy(), pos.first, False
        return pos.ledger.minus(feed.dealing.own_steps(pos, done)), pos.first, True

    @staticmethod
    def rolled(feed: Any, epoch: Any, first: Any, done: int) -> bool:
        """Every rank's state must say the same: the epoch is over when every rank
        (in lockstep) has handed out its share, the longest's ``done`` steps."""
        if feed.spec.even_batches and epoch.exhausted():
            return True
        return bool(done >= feed.dealing.counts(first)[2])


def check_ranges_ddp(feed: Any, segments: Any) -> None:
    """Under ``torch.distributed`` at the loader's shard count, ``elastic="ranges"`` with
    ``even_batches=False`` must give every rank the same step count, in the rest of
    this epoch and in every later one: a ``ValueError`` saying so otherwise (DDP's
    all-reduces would fall out of step)."""
    spec, world = feed.spec, torch_world_size()
    if spec.even_batches is not False or world is None or world < 2 or world != spec.shard.count:
        return
    b = spec.batch_size
    for what, first in (("the rest of this epoch", segments), ("every later epoch", ())):
        steps = sorted({num_batches(m, b, spec.drop_last) for m in feed.dealing.sizes(first)})
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


def check_ddp_steps(feed: Any, first: int) -> None:
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
