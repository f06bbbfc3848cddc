"""A state's place in its run: its id, its parent, and the lineage :func:`exactbatch.certify`
follows.

Every state names itself: ``id`` is a digest of where it stands - the run
(seed, settings, ``run``), the epoch, the batches handed out and the ledger, and
its ``parent`` - but not of its records, of when it was loaded, nor of its data's
fingerprint (a state taken after ``close()`` knows less of the data: the same
place; :func:`same_run` compares the data). Under
``elastic=True`` the batches counted are the global ones, so every rank's
state taken at one step of a run in lockstep has the same id: the id names
the checkpoint, not the rank (an elastic state names its rank in ``shard``).
``parent`` is the id of the state the loader was loaded from (None for a
loader that started fresh, or after ``reset(seed=...)``, a new run), and
``loaded_at`` when (nanoseconds since 1970 by the loading machine's clock;
None with no parent). A state's *clock* is the rows its records hold, then
the fewer rows its position's ledger holds: along a session it only grows (a
move back by ``set_epoch`` keeps the rows on record and drops the ledger's).

A *session* is one loader's life after a load (or from its start): its
parent and its ``loaded_at`` (to the nanosecond, one loader's load), in the
*lane* of its shard (``(index, count)``); a fresh start's (no time) is named by
its lane. A state taken after a load belongs to that load's session even before
any batch (it stands where the state loaded stood, a node of its own): a
restart that saves at once is on record, and under elastic the ranks of another
count that save as soon as they resume are that restart's states, whatever shard
each names. The rollback rules,
which make the states kept the run's lineage (:func:`follow`):

1. A restart from one of a session's states rolls the run back to it: the
   session's states with a later clock are abandoned. Two sessions of a lane
   may each reach a state of one id (two restarts from one checkpoint reach
   the same place): the state loaded is the one of the session loaded last
   before the restart (a load takes a state that existed then). One session
   may reach a place twice (``set_epoch`` back to it), the second time with
   more runs of an epoch on record: the state loaded is the latest whose runs
   the restarted session holds.
2. Two sessions loaded from one state, of one lane or (elastic) of other shard
   counts: the earlier was given up (a second restart from the same
   checkpoint); all its states are abandoned.
3. What descends from an abandoned state is abandoned.

The states kept are those the final states descend from, and the final
states; the rest are set aside. A state whose parent is not among the states
starts a lineage of its own. The load times of one run's machines are taken
to agree to within the time between two restarts. Not followed: a restart
from a state already abandoned (a roll forward past a rollback).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from typing import Any

from exactbatch.loader.compaction import expand, summary_rows
from exactbatch.loader.records import State
from exactbatch.sources.identity import differences

__all__ = ["follow", "same_run", "state_id"]

# Where a state stands, less what differs between the ranks of an elastic run at one step.
# (Not its data's fingerprint either: one taken after close() knows less of the data, and
# same_run compares what both know.)
_NOT_POSITION = frozenset({"id", "loaded_at", "history", "compacted", "fingerprint"})
_PER_RANK = frozenset({"batches_done", "pending", "shard"})  # (elastic: the global count says it)
# What differs between the states of one run: where each stands, and each rank's own shard.
_NOT_RUN = frozenset(
    {
        "version",
        "epoch",
        "batches_done",
        "pending",
        "global_batches_done",
        "segments",
        "ledger",
        "history",
        "compacted",
        "fingerprint",
        "id",
        "parent",
        "loaded_at",
        "shard_index",
        "shard",
        "n",
    }
)


_RESET = " (reset(seed=...) began a new run)"

# A lane, (parent, shard index, shard count), and a session, (parent, load time) or (parent,
# shard index, shard count, -1): values read from the states (plain data, checked by certify).
Lane = tuple[Any, ...]
Session = tuple[Any, ...]


def state_id(state: State) -> str:
    """The id of ``state`` (module docs): the same for two states that stand at the same
    place of the same lineage (under elastic, whatever their rank)."""
    drop = _NOT_POSITION | (_PER_RANK if state.get("elastic") else frozenset())
    content = {k: v for k, v in state.items() if k not in drop}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _differ(key: str, a: object, b: object, elastic: object) -> bool:
    if key in ("d", "l") and (a is None or b is None):
        return False  # a stream not read yet
    if key == "even_batches" and elastic:
        return False  # elastic: each segment's own (a resume may change it)
    return a != b


def same_run(states: list[State]) -> None:
    """A ``ValueError`` naming the field and both values (and the states) unless every
    state is of one run: the same seed, dataset size, settings, data and ``run`` (the
    ``reset(seed=...)`` calls before: each begins a new run; 0 where not written), a
    key one state lacks, from an older exactbatch, not compared."""
    if not states:
        return
    first = states[0]
    for i, state in enumerate(states[1:], 1):
        for key in [*sorted((first.keys() & state.keys()) - _NOT_RUN - {"run"}), "run"]:
            a, b = first.get(key, 0), state.get(key, 0)  # (only "run" may be missing: 0)
            if _differ(key, a, b, first.get("elastic")):
                raise ValueError(
                    f"states[0] and states[{i}] are of different runs: {key}={a!r} and "
                    f"{key}={b!r}{_RESET if key == 'run' else ''}; certify one run's "
                    "states at a time"
                )
        fa, fb = first.get("fingerprint"), state.get("fingerprint")
        if isinstance(fa, dict) and isinstance(fb, dict):
            differ = differences(fa, fb)
            if differ:
                raise ValueError(
                    f"states[0] and states[{i}] are of different runs: their fingerprints "
                    f"differ in {', '.join(differ)} (other data); certify one run's states "
                    "at a time"
                )


def _lane(state: State) -> Lane:
    """Its parent and its shard: one loader's lane, whatever its load's time."""
    shard = state.get("shard") if state.get("elastic") else None
    if not isinstance(shard, list):
        shard = [state.get("shard_index"), state.get("num_shards")]
    return (state.get("parent"), *shard)


def _time(state: State) -> int:
    """When its session was loaded (an unknown time: before any known one)."""
    t = state.get("loaded_at")
    return t if isinstance(t, int) and not isinstance(t, bool) else -1


def _clock(state: State) -> tuple[int, int]:
    """The rows its records hold, then the fewer its position's ledger holds: along a
    session it only grows (a move back, ``set_epoch``, keeps the rows on record)."""
    records = sum(r["rows"] for r in state["history"]) + summary_rows(state.get("compacted", []))
    ledger = state.get("ledger")
    return records, -(ledger["rows"] if isinstance(ledger, dict) else 0)


def _session(state: State) -> Session:
    """The session a state was taken in: by its parent and load's time (to the
    nanosecond, one loader's load; a state taken before any batch since the load
    included), or, of a fresh start (no time), by the shard its records are of."""
    t = _time(state)
    if t >= 0:
        return (state.get("parent"), t)
    lane = _lane(state)
    own = [*state.get("compacted", []), *state["history"]]
    if lane[0] is None and own:
        return (None, *own[0]["shard"], t)
    return (*lane, t)


def _loaded_from(
    ids: list[str], lanes: dict[Lane, dict[Session, list[int]]], child: Session
) -> set[Session]:
    """The sessions holding the state session ``child`` was loaded from: in each lane
    with a state of that id, the session loaded last before it (two sessions of a lane
    may each reach a state of one id - two restarts from one checkpoint both reach the
    same place - and a load can only take a state that existed then: a session of
    unknown time, a fresh start's, came before); every one for a load at an unknown
    time."""
    parent, loaded = child[0], child[-1]
    chosen: set[Session] = set()
    for found in lanes.values():
        holding = [s for s, members in found.items() if any(ids[i] == parent for i in members)]
        before = [s for s in holding if s[-1] < loaded]
        if loaded < 0:
            chosen.update(holding)
        elif before:
            chosen.add(max(before, key=lambda s: s[-1]))
    return chosen


def _runs(state: State) -> Counter[tuple[int, int]]:
    """How many runs of each segment (epoch, first global batch) its records hold."""
    runs = Counter((r["epoch"], r["start"]) for r in state["history"])
    for s in state.get("compacted", []):  # (a folded epoch: one run from its start)
        runs.update({(e, 0): 1 for e, _ in expand(s)})
    return runs


def _restart_point(states: list[State], points: list[int], child: State) -> tuple[int, int]:
    """The clock of the state ``child`` (a state of the session loaded from it) was
    loaded from, among ``points``, states of one session with its id: one place
    reached twice (``set_epoch`` back to it) holds more runs of an epoch the second
    time. The latest whose runs the child holds; the earliest if none says."""
    runs = _runs(child)
    fits = [i for i in points if not _runs(states[i]) - runs]
    if fits:
        return max(_clock(states[i]) for i in fits)
    return min(_clock(states[i]) for i in points)


def _given_up(
    sessions: dict[Session, list[int]],
    lanes: dict[Lane, dict[Session, list[int]]],
    parents: dict[Session, set[Session]],
) -> set[int]:
    """Rule 2: the states of the sessions given up - a session loaded from the same
    state as a later one, in its lane or (elastic) at another shard count."""
    gone: set[int] = set()
    for found in lanes.values():
        last = max(s[-1] for s in found)
        gone.update(i for s in found if s[-1] < last for i in sessions[s])
    counts: dict[Session, set[int]] = {}  # each session's shard counts
    for lane, found in lanes.items():
        for session in found:
            counts.setdefault(session, set()).add(lane[-1])
    for session in parents:
        if any(
            other[0] == session[0]
            and other[-1] > session[-1]
            and not counts[session] & counts[other]
            for other in parents
        ):
            gone.update(sessions[session])
    return gone


def follow(states: list[State]) -> tuple[list[int], list[int]]:
    """``(kept, aside)``: the indices of ``states`` (their records checked) on the run's
    lineage, and those the rollback rules set aside (module docs)."""
    ids = [state_id(s) for s in states]  # (made again: an id is not trusted)
    sessions: dict[Session, list[int]] = {}
    lanes: dict[Lane, dict[Session, list[int]]] = {}  # lane: its sessions' states in it
    for i, s in enumerate(states):
        sessions.setdefault(_session(s), []).append(i)
        lanes.setdefault(_lane(s), {}).setdefault(_session(s), []).append(i)
    parents = {c: _loaded_from(ids, lanes, c) for c in sessions if c[0] is not None}
    abandoned = _given_up(sessions, lanes, parents)  # rule 2
    loaded: dict[Session, list[int]] = {}  # each session's parent: the states it loaded
    for child, held in parents.items():  # rule 1: back to the state restarted from
        first = min(sessions[child], key=lambda i: _clock(states[i]))
        loaded[child] = []
        for session in held:
            points = [i for i in sessions[session] if ids[i] == child[0]]
            if points:
                back = _restart_point(states, points, states[first])
                loaded[child] += [i for i in points if _clock(states[i]) == back]
                abandoned.update(i for i in sessions[session] if _clock(states[i]) > back)
    while True:  # rule 3
        more = {
            i
            for child, held in loaded.items()
            if held and all(j in abandoned for j in held)
            for i in sessions[child]
        } - abandoned
        if not more:
            break
        abandoned |= more
    kept = [i for i in range(len(states)) if i not in abandoned]
    return kept, sorted(abandoned)
