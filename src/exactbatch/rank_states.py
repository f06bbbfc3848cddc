"""Loader states in a checkpoint folder: one file per rank, ``loader-{rank}.json``.

What :mod:`exactbatch.ray` and :mod:`exactbatch.torch` save beside the model in
each checkpoint, read back on a restart, and hand to :func:`exactbatch.certify`.
A rank is the loader's ``shard_index`` (with ``num_shards="auto"``, the worker's
world rank). Each file holds the bare ``state_dict()`` as JSON, so ``exactbatch
certify folder/loader-*.json`` reads it too. A checkpoint is *complete* when it
holds the state of every rank of the world that wrote it (the shard count each
state names). Pure functions over file names and texts, and one writer: the
engines' own modules list and read their storage.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable
from typing import Any, Protocol, cast

from exactbatch.ndf.write import atomic_path

__all__ = [
    "Resumable",
    "check_world",
    "checkpoint_states",
    "complete",
    "loader_of",
    "missing_ranks",
    "rank_files",
    "read_state",
    "resume",
    "shard_count",
    "state_name",
    "to_load",
    "write_state",
]

_FILE = re.compile(r"loader-(\d+)\.json\Z")


class Resumable(Protocol):
    """What these functions use of a DataLoader (:func:`loader_of` finds one): its shard,
    whether it is elastic, and its state."""

    @property
    def shard_index(self) -> int: ...
    @property
    def num_shards(self) -> int: ...
    @property
    def elastic(self) -> object: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


def state_name(rank: int) -> str:
    """The file name of rank ``rank``'s state."""
    return f"loader-{rank}.json"


def loader_of(loader: object, caller: str) -> Resumable:
    """The exactbatch DataLoader in ``loader`` (a DataLoader, or an adapter holding one as
    ``.loader``, as ``as_torch`` makes), or a ``TypeError`` naming ``caller``."""
    inner = loader if hasattr(loader, "state_dict") else getattr(loader, "loader", None)
    if not all(hasattr(inner, a) for a in ("state_dict", "load_state_dict", "shard_index")):
        raise TypeError(
            f"{caller} needs an exactbatch DataLoader (or as_torch's wrapper of one); "
            f"got {type(loader).__name__}"
        )
    return cast(Resumable, inner)  # (its methods and shard, checked just above)


def check_world(loader: Resumable, world: int | None, caller: str) -> None:
    """A ``ValueError`` unless the loader is sharded by the job's ``world`` ranks (None:
    not known): the state files are named by shard, so two ranks of one shard would
    overwrite each other's."""
    if world is not None and world != loader.num_shards:
        raise ValueError(
            f"{caller}: the loader has num_shards={loader.num_shards} in a job of {world} "
            'ranks; build it with num_shards="auto", shard_index="auto" so that each rank '
            "saves its own state"
        )


def write_state(folder: str, loader: Resumable) -> str:
    """Write ``loader``'s state into ``folder`` as its rank's file, atomically (a reader
    sees the old file or the whole new one, never a part); return the file's path."""
    path = os.path.join(folder, state_name(loader.shard_index))
    text = json.dumps(loader.state_dict())
    with atomic_path(path) as temp, open(temp, "w") as f:
        f.write(text)
    return path


def rank_files(names: Iterable[str]) -> dict[int, str]:
    """The state files among the file ``names`` of a checkpoint, by rank."""
    found: dict[int, str] = {}
    for name in names:
        m = _FILE.match(os.path.basename(name))
        if m:
            found[int(m[1])] = name
    return dict(sorted(found.items()))


def read_state(text: str | bytes, where: str) -> dict[str, Any]:
    """The state in ``text`` (the file at ``where``), or a ``ValueError`` naming it."""
    try:
        state = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{where}: not a loader state (not JSON: {e})") from None
    if not isinstance(state, dict) or "version" not in state:
        raise ValueError(f"{where}: not a loader state (a JSON object from state_dict())")
    return cast(dict[str, Any], state)  # (a JSON object)


def shard_count(state: dict[str, Any]) -> int | None:
    """The number of ranks of the world that took ``state``."""
    shard = state.get("shard")
    count: int | None = (
        shard[1] if isinstance(shard, list) and len(shard) == 2 else state.get("num_shards")
    )
    return count


def complete(ranks: dict[int, str], count: int | None) -> bool:
    """Whether the state files ``ranks`` are every rank of a world of ``count``."""
    return count is not None and set(ranks) == set(range(count))


def missing_ranks(ranks: dict[int, str], count: int | None, where: str) -> str:
    """Why the state files ``ranks`` of the checkpoint ``where`` are not complete, in
    words naming the files that are missing ("" when complete)."""
    if complete(ranks, count):
        return ""
    if not ranks:
        return f"{where}: no loader state ({state_name(0)}, ...) in this checkpoint"
    if count is None:
        return f"{where}: its states name no shard count"
    lost = [state_name(r) for r in range(count) if r not in ranks]
    extra = [state_name(r) for r in ranks if r >= count]
    what = f"{', '.join(lost)} missing" if lost else f"{', '.join(extra)} beyond them"
    return (
        f"{where}: a checkpoint of {count} ranks holds the states of ranks "
        f"{sorted(ranks)} ({what}): every rank must save its state into every checkpoint"
    )


def to_load(ranks: Iterable[int], loader: Resumable, where: str) -> int:
    """The rank among ``ranks`` (a complete checkpoint's) whose state ``loader`` resumes
    from: its own; under ``elastic=True`` any (they say the same), so the lowest when the
    new world is larger. A ``ValueError`` naming ``where`` when none fits."""
    have = sorted(ranks)
    rank = loader.shard_index
    if rank in have and (loader.elastic or len(have) == loader.num_shards):
        return rank
    if loader.elastic and have:
        return have[0]
    raise ValueError(
        f"{where}: a checkpoint of {len(have)} ranks cannot resume rank {rank} of "
        f"{loader.num_shards}: resume at the same number of ranks, or build the loader "
        "with elastic=True (any number of ranks resumes from its states)"
    )


def checkpoint_states(
    names: Iterable[str], read: Callable[[str], str | bytes], where: str
) -> tuple[dict[int, dict[str, Any]], str]:
    """The states of one checkpoint at ``where`` whose files are ``names``, each read by
    ``read(name)`` (its bytes), by rank; and why they are not a complete checkpoint, in
    words ("" when they are). A file that is not a state is a ``ValueError`` naming it."""
    ranks = rank_files(names)
    states = {
        r: read_state(read(name), f"{where}/{os.path.basename(name)}") for r, name in ranks.items()
    }
    counts = {shard_count(s) for s in states.values()}
    if len(counts) > 1:
        found = {r: shard_count(s) for r, s in states.items()}
        return states, (
            f"{where}: its states were taken at different numbers of ranks (by rank: "
            f"{found}): a killed run's checkpoint, partly overwritten"
        )
    return states, missing_ranks(ranks, counts.pop() if counts else None, where)


def resume(loader: Resumable, states: dict[int, dict[str, Any]], where: str) -> None:
    """Load into ``loader`` its state among a complete checkpoint's ``states`` (see
    :func:`to_load`); a state it refuses is a ``ValueError`` naming the file."""
    rank = to_load(states, loader, where)
    try:
        loader.load_state_dict(states[rank])
    except ValueError as e:
        raise ValueError(f"{where}/{state_name(rank)}: {e}") from e
