"""A loader's state as small plain data (JSON-safe), and back.

A state records the seed, the epoch, the batches handed out (``pending``:
those claimed but not handed out, which come first on resume), every
setting that fixes the order and the source's shape (a loader refuses a
state taken under others), and the epoch's ledger. Version 2 adds the
ledger, pending batches and the source's shape; version 1 still loads
(its epoch's ledger is then not checked). A state also carries the
source's ``fingerprint`` (:mod:`exactbatch.sources.identity`), checked on
load unless the caller allows other data; a state without one (taken
before fingerprints) loads unchecked. ``history`` holds the records of
every epoch begun (:mod:`exactbatch.loader.history`), for
:func:`exactbatch.certify`; a state without it loads with none. Version 3
adds ``compacted``, the summaries of old records
(:mod:`exactbatch.loader.compaction`); a version-2 state, with every record in
full, still loads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exactbatch.checks import check_int
from exactbatch.distributed import torch_world_size
from exactbatch.feeds.base import Feed
from exactbatch.loader.compaction import check_summaries
from exactbatch.loader.history import check_records
from exactbatch.loader.lineage import state_id
from exactbatch.loader.records import Record, State, Summary
from exactbatch.order.digest import Tally
from exactbatch.sources.identity import describe, differences

__all__ = [
    "STATE_VERSION",
    "Position",
    "check_fingerprint",
    "pack_state",
    "settings",
    "unpack_state",
]

# 2: the ledger, pending batches and the source's shape; 3: the records' summaries
# ("compacted"). Versions 1 and 2 still load (a version-2 state's records are folded
# as the loader goes on).
STATE_VERSION = 3
_READS = (1, 2, STATE_VERSION)


@dataclass(frozen=True)
class Position:
    """Where a cursor stands, as a state records it.

    ``epoch`` the epoch in progress (the next one once every batch of it has
    been handed out); ``done`` the batches handed out, counted from the start
    of the epoch (from ``first`` under elastic) and ``pending`` those below
    ``done + len(pending)`` not handed out, which come first on resume;
    ``ledger`` the rows handed out this epoch; ``first`` the global batch an
    elastic epoch (re)started at; ``verified`` False for an epoch whose ledger
    cannot be checked (resumed from a state without one); ``history`` the
    records of every epoch begun (:mod:`exactbatch.loader.history`);
    ``parent`` and ``loaded_at`` its lineage (:mod:`exactbatch.loader.lineage`):
    of a state taken, the id of the state loaded before and when it was loaded;
    of a state being loaded, its own id (the parent of what follows).
    """

    seed: int
    epoch: int
    done: int = 0
    pending: tuple[int, ...] = ()
    ledger: Tally = field(default_factory=Tally)
    first: int = 0
    verified: bool = True
    history: tuple[Record, ...] = ()
    parent: str | None = None
    loaded_at: int | None = None
    compacted: tuple[Summary, ...] = ()  # the summaries of old clean records (loader.compaction)
    run: int = 0  # the reset(seed=...) calls before, along the lineage (each a new run)


def settings(feed: Feed) -> State:
    """Every setting that fixes the order, and the source's shape."""
    spec = feed.spec
    config = {
        "source": feed.kind,
        "batch_size": spec.batch_size,
        "shuffle": spec.shuffle,
        "drop_last": spec.drop_last,
        "even_batches": spec.even_batches,
        "elastic": spec.elastic,
        "total_size": feed.total_size,
        "d": feed.d,
        "l": feed.l,
    }
    if not spec.elastic:  # elastic states resume at any shard count
        config.update(num_shards=spec.shard.count, shard_index=spec.shard.index, n=feed.n)
    config.update(feed.state_config())
    return config


def pack_state(pos: Position, feed: Feed) -> State:
    """The state of a cursor's :class:`Position` over ``feed``."""
    seed, epoch, done, pending, ledger, first, verified = (
        pos.seed,
        pos.epoch,
        pos.done,
        pos.pending,
        pos.ledger,
        pos.first,
        pos.verified,
    )
    state = {
        "version": STATE_VERSION,
        "seed": seed,
        "epoch": epoch,
        "batches_done": done,
        **settings(feed),
    }
    if pending:
        state["pending"] = list(pending)
    if feed.spec.elastic:
        state["global_batches_done"] = first + done * feed.spec.shard.count
        if verified:  # every shard's batches before it, this shard's as measured
            ledger = feed.global_ledger(pos)
    if verified:
        state["ledger"] = {"rows": ledger.rows, "digest": f"{ledger.digest:016x}"}
    else:  # resumed from a state without one: this epoch cannot be checked
        state["ledger"] = None
    state["history"] = [dict(r) for r in pos.history]
    state["compacted"] = [dict(s) for s in pos.compacted]
    state["fingerprint"] = feed.fingerprint()
    if feed.spec.elastic:  # (its settings do not name the shard: any count resumes it)
        state["shard"] = [feed.spec.shard.index, feed.spec.shard.count]
    state["parent"], state["loaded_at"] = pos.parent, pos.loaded_at
    if pos.run:  # (a run reset(seed=...) began: certify merges no other run's states)
        state["run"] = pos.run
    state["id"] = state_id(state)
    return state


def check_fingerprint(state: State, feed: Feed) -> None:
    """A ``ValueError`` naming both fingerprints if ``state`` was taken on other data
    than ``feed`` reads (:func:`exactbatch.sources.identity.differences`); a state
    without a fingerprint (taken before they were recorded) passes."""
    theirs = state.get("fingerprint")
    if theirs is None:
        return
    if not isinstance(theirs, dict):
        raise TypeError(f"state['fingerprint'] must be a dict; got {theirs!r:.80}")
    mine = feed.fingerprint()
    differ = differences(theirs, mine)
    if differ:
        raise ValueError(
            f"state was taken on other data (they differ in {', '.join(differ)}): the state's data "
            f"is [{describe(theirs)}], this loader reads [{describe(mine)}]. Pass "
            "allow_other_data=True to load_state_dict to resume on this data anyway"
        )


def unpack_state(state: object, feed: Feed, seed: int) -> tuple[Position, int]:
    """``(position, claimed)`` for ``Cursor.restore``: ``claimed``, the batches of the
    epoch claimed before (``position.pending`` of them not handed out). A state from
    other settings (``seed``: the loader's) is a ``ValueError`` naming the setting and
    both values, a malformed one a ``TypeError`` or ``ValueError`` naming the key."""
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from state_dict(); got {type(state).__name__}")
    version = state.get("version")
    if version not in _READS:
        raise ValueError(
            f"state has version {version!r}; this exactbatch reads versions "
            f"{', '.join(map(str, _READS[:-1]))} and {STATE_VERSION}"
        )
    for key, mine in settings(feed).items():
        theirs = state.get(key)
        if key not in state and version == 1:
            continue  # not recorded by version 1
        if key == "even_batches" and feed.spec.elastic:
            continue  # elastic: it only says how each segment ends (check_ddp_steps)
        if key in ("d", "l") and (theirs is None or mine is None):
            continue  # a stream not read yet
        if theirs != mine:
            raise ValueError(
                f"state was taken with {key}={theirs!r}, this loader has {key}={mine!r}"
            )
    theirs = check_int("state['seed']", state.get("seed"), 0, maximum=None)
    if theirs != seed:
        raise ValueError(
            f"state was taken with seed={theirs}, this loader has seed={seed} (build the "
            f"loader with seed={theirs}, or reset(seed={theirs}) it, to resume that order)"
        )
    epoch = check_int("state['epoch']", state.get("epoch"), 0)
    done = check_int("state['batches_done']", state.get("batches_done"), 0)
    pending = state.get("pending", [])
    if not isinstance(pending, list):
        raise TypeError(f"state['pending'] must be a list of ints; got {pending!r}")
    pending = [check_int("state['pending'][i]", k, 0) for k in pending]
    claimed = done + len(pending)
    if len(set(pending)) != len(pending) or any(k >= claimed for k in pending):
        raise ValueError(
            f"state['pending']={pending} must be distinct batches below "
            f"batches_done + len(pending) = {claimed}"
        )
    first, ledger, verified = 0, Tally(), True
    if feed.spec.elastic:
        total = feed.total_batches
        first = check_int("state['global_batches_done']", state.get("global_batches_done"), 0)
        if first > total:  # type: ignore[operator]  # (elastic: an int)
            raise ValueError(
                f"state['global_batches_done']={first} exceeds the {total} batches of an epoch"
            )
        check_ddp_steps(feed, first)
        if pending:
            raise ValueError(
                f"this elastic state lists batches {pending} as not handed out below "
                "batches handed out (a batch whose read had failed waited to be read "
                "again), so its position is no global batch another shard count could "
                "resume at; take the state after that batch is handed out (a state waits "
                "for reads in flight, never for a failed one)"
            )
        claimed = 0
        if "ledger" in state:  # (an elastic state from before it carried one: unchecked)
            ledger, verified = _ledger_of(state, first)
        else:
            verified = first == 0
    else:
        if feed.nbatches is not None and claimed > feed.nbatches:
            raise ValueError(
                f"state['batches_done']={done} exceeds the {feed.nbatches} batches of an epoch"
            )
        ledger, verified = _ledger_of(state, done)
    history = tuple(check_records(state.get("history", [])))
    compacted = tuple(check_summaries(state.get("compacted", [])))
    parent = state_id(state)  # (its own, checked: an id is not trusted)
    position = Position(
        seed,
        epoch,
        done,
        tuple(pending),
        ledger,
        first,
        verified,
        history,
        parent,
        None,
        compacted,
        check_int("state['run']", state.get("run", 0), 0, maximum=None),
    )
    return position, claimed


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


def _ledger_of(state: State, done: int) -> tuple[Tally, bool]:
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
