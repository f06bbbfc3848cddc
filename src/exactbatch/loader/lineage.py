"""A state's place in its run: its id, its parent, and the lineage :func:`exactbatch.certify`
follows.

Every state names itself: ``id`` is a digest of where it stands - the run
(seed, settings, data), the epoch, the batches handed out and the ledger, and
its ``parent`` - but not of its records nor of ``seq``. Under ``elastic=True``
the batches counted are the global ones, so every rank's state taken at one
step of a run in lockstep has the same id: the id names the checkpoint, not
the rank (an elastic state names its rank in ``shard``). ``parent`` is the id
of the state the loader was loaded from (None for a loader that started
fresh, or after ``reset(seed=...)``, a new run);
``seq`` counts the states a loader took since (1, 2, ...).

The rollback rule. The loaders that share a parent (and, unless elastic, a
shard) form one *session* of the run. A restart from one of a session's states
rolls the run back to it: the session's states taken after it (a larger
``seq``) are abandoned, with every state that descends from them. The states
kept are the run's lineage: those the final states descend from, and the final
states themselves; the rest are set aside (:func:`follow`). A state not loaded
from one given (its parent not among the states) starts a lineage of its own.
"""

from __future__ import annotations

import hashlib
import json

from exactbatch.sources.identity import differences

__all__ = ["follow", "same_run", "state_id"]

# Where a state stands, less what differs between the ranks of an elastic run at one step.
_NOT_POSITION = frozenset({"id", "seq", "history"})
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
        "fingerprint",
        "id",
        "parent",
        "seq",
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


def _session(state: dict) -> tuple:
    """One loader's states: its parent and its shard (an elastic state's ``shard``)."""
    shard = state.get("shard") if state.get("elastic") else None
    if not isinstance(shard, list):
        shard = [state.get("shard_index"), state.get("num_shards")]
    return (state.get("parent"), *shard)


def _seq(state: dict) -> int:
    seq = state.get("seq")
    return seq if isinstance(seq, int) and not isinstance(seq, bool) else 0


def follow(states: list[dict]) -> tuple[list[int], list[int]]:
    """``(kept, aside)``: the indices of ``states`` on the run's lineage, and those
    set aside by the rollback rule (module docs)."""
    ids = [state_id(s) for s in states]  # (made again: an id is not trusted)
    sessions: dict[tuple, list[int]] = {}
    for i, s in enumerate(states):
        sessions.setdefault(_session(s), []).append(i)
    loaded = {s.get("parent") for s in states} - {None}
    abandoned: set[int] = set()
    for members in sessions.values():
        # A restart from one of the session's states abandons those taken after it
        # (a state taken twice at one place: after the later of the two).
        points = [i for i in members if ids[i] in loaded]
        if points:
            first = min(points, key=lambda i: _seq(states[i]))
            back = max(_seq(states[i]) for i in members if ids[i] == ids[first])
            abandoned.update(i for i in members if _seq(states[i]) > back)
    # What descends from an abandoned state is abandoned too (its parent's id is
    # held by abandoned states only).
    while True:
        alive = {ids[i] for i in range(len(states)) if i not in abandoned}
        dead = {ids[i] for i in abandoned} - alive
        more = {i for i, s in enumerate(states) if i not in abandoned and s.get("parent") in dead}
        if not more:
            break
        abandoned |= more
    kept = [i for i in range(len(states)) if i not in abandoned]
    return kept, sorted(abandoned)
