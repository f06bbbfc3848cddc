"""A state's place in its run: its id, its parent, and the lineage :func:`exactbatch.certify`
follows.

Every state names itself: ``id`` is a digest of where it stands - the run
(seed, settings, data), the epoch, the batches handed out and the ledger, and
its ``parent`` - but not of its records nor of when it was loaded. Under
``elastic=True`` the batches counted are the global ones, so every rank's
state taken at one step of a run in lockstep has the same id: the id names
the checkpoint, not the rank (an elastic state names its rank in ``shard``).
``parent`` is the id of the state the loader was loaded from (None for a
loader that started fresh, or after ``reset(seed=...)``, a new run), and
``loaded_at`` when (nanoseconds since 1970 by the loading machine's clock;
None with no parent). A state's *clock* is the rows its records hold: along
a lineage it only grows.

A *session* is one loader's life after a load (or from its start): its
parent, its shard (``(index, count)``) and its ``loaded_at``. The rollback
rules, which make the states kept the run's lineage (:func:`follow`):

1. A restart from one of a session's states rolls the run back to it: the
   session's states with a later clock are abandoned.
2. Two sessions of one shard loaded from one state: the earlier was given up
   (a second restart from the same checkpoint); all its states are abandoned.
3. What descends from an abandoned state is abandoned.

The states kept are those the final states descend from, and the final
states; the rest are set aside. A state whose parent is not among the states
starts a lineage of its own. Not followed: a restart from a state already
abandoned (a roll forward past a rollback), and, under elastic, two restarts
from one checkpoint at different shard counts (the first's states of ranks
the second lacks are not set aside: certify then counts their rows twice,
and says the epoch is not exact - leave those states out).
"""

from __future__ import annotations

import hashlib
import json

from exactbatch.loader.compaction import summary_rows
from exactbatch.sources.identity import differences

__all__ = ["follow", "same_run", "state_id"]

# Where a state stands, less what differs between the ranks of an elastic run at one step.
_NOT_POSITION = frozenset({"id", "loaded_at", "history", "compacted"})
_PER_RANK = frozenset({"batches_done", "pending", "shard"})  # (elastic: the global count says it)
# What differs between the states of one run: where each stands, and each rank's own shard.
_NOT_RUN = frozenset(
    {
        "version",
        "epoch",
        "batches_done",
        "pending",
        "global_batches_done",
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


def state_id(state: dict) -> str:
    """The id of ``state`` (module docs): the same for two states that stand at the same
    place of the same lineage (under elastic, whatever their rank)."""
    drop = _NOT_POSITION | (_PER_RANK if state.get("elastic") else frozenset())
    content = {k: v for k, v in state.items() if k not in drop}
    text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _differ(key: str, a, b, elastic) -> bool:
    if key in ("d", "l") and (a is None or b is None):
        return False  # a stream not read yet
    if key == "even_batches" and elastic:
        return False  # elastic: each segment's own (a resume may change it)
    return a != b


def same_run(states: list[dict]) -> None:
    """A ``ValueError`` naming the field and both values (and the states) unless every
    state is of one run: the same seed, dataset size, settings and data (a key one
    state lacks, from an older exactbatch, is not compared)."""
    if not states:
        return
    first = states[0]
    for i, state in enumerate(states[1:], 1):
        for key in sorted((first.keys() & state.keys()) - _NOT_RUN):
            a, b = first[key], state[key]
            if _differ(key, a, b, first.get("elastic")):
                raise ValueError(
                    f"states[0] and states[{i}] are of different runs: {key}={a!r} and "
                    f"{key}={b!r}; certify one run's states at a time"
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


def _lane(state: dict) -> tuple:
    """Its parent and its shard: one loader's lane, whatever its load's time."""
    shard = state.get("shard") if state.get("elastic") else None
    if not isinstance(shard, list):
        shard = [state.get("shard_index"), state.get("num_shards")]
    return (state.get("parent"), *shard)


def _clock(state: dict) -> int:
    """The rows its records hold: along a lineage, only more."""
    return sum(r["rows"] for r in state["history"]) + summary_rows(state.get("compacted", []))


def follow(states: list[dict]) -> tuple[list[int], list[int]]:
    """``(kept, aside)``: the indices of ``states`` (their records checked) on the run's
    lineage, and those the rollback rules set aside (module docs)."""
    ids = [state_id(s) for s in states]  # (made again: an id is not trusted)
    lanes: dict[tuple, list[int]] = {}
    for i, s in enumerate(states):
        lanes.setdefault(_lane(s), []).append(i)
    loaded = {s.get("parent") for s in states} - {None}
    abandoned: set[int] = set()
    for members in lanes.values():
        at = {states[i].get("loaded_at") for i in members}
        if len(at) > 1:  # rule 2: the session loaded last stands (an unknown time: first)
            last = max(at, key=lambda t: -1 if not isinstance(t, int) else t)
            gone = {i for i in members if states[i].get("loaded_at") != last}
            abandoned |= gone
            members = [i for i in members if i not in gone]
        points = [i for i in members if ids[i] in loaded]
        if points:  # rule 1: back to the earliest state restarted from
            back = min(_clock(states[i]) for i in points)
            abandoned.update(i for i in members if _clock(states[i]) > back)
    while True:  # rule 3 (an id also held by a state kept is not abandoned)
        alive = {ids[i] for i in range(len(states)) if i not in abandoned}
        dead = {ids[i] for i in abandoned} - alive
        more = {i for i, s in enumerate(states) if i not in abandoned and s.get("parent") in dead}
        if not more:
            break
        abandoned |= more
    kept = [i for i in range(len(states)) if i not in abandoned]
    return kept, sorted(abandoned)
