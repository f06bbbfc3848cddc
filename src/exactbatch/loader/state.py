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
full, still loads. Version 4 adds ``elastic="ranges"``, whose states hold
``segments``, the epoch's world-size history (:mod:`exactbatch.feeds.state_rules`);
what each dealing records is its rule's (:mod:`exactbatch.feeds.state_rules`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from exactbatch.checks import check_int
from exactbatch.feeds.base import Feed, First
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
# ("compacted"); 4: elastic="ranges" and its world-size history ("segments"). Versions
# 1 to 3 still load (a version-2 state's records are folded as the loader goes on; a
# state before 4 never holds elastic="ranges").
STATE_VERSION = 4
_READS = (1, 2, 3, STATE_VERSION)


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
    first: First = 0
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
    config.update(feed.rule.settings(feed))  # (a contiguous shard's; a dealt state's none)
    config.update(feed.state_config())
    return config


def pack_state(pos: Position, feed: Feed) -> State:
    """The state of a cursor's :class:`Position` over ``feed``."""
    seed, epoch, done, pending, ledger, verified = (
        pos.seed,
        pos.epoch,
        pos.done,
        pos.pending,
        pos.ledger,
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
    rule = feed.rule
    state.update(rule.position(pos, feed))
    if verified:  # (dealt: every shard's batches before it, this shard's as measured)
        ledger = rule.ledger(pos, feed)
        state["ledger"] = {"rows": ledger.rows, "digest": f"{ledger.digest:016x}"}
    else:  # resumed from a state without one: this epoch cannot be checked
        state["ledger"] = None
    state["history"] = [dict(r) for r in pos.history]
    state["compacted"] = [dict(s) for s in pos.compacted]
    state["fingerprint"] = feed.fingerprint()
    state.update(rule.shard(feed))  # (dealt: its settings do not name the shard)
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
        if key in feed.rule.free:
            continue  # dealt: even_batches only says how each segment ends
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
    first, claimed, done, ledger, verified = feed.rule.resume(state, feed, done, pending, claimed)
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
