"""Checkpoints of a torchrun job that end at a certificate: the model and optimizer with
every rank's loader state, per step.

``save_checkpoint(folder, step, loader=..., model=..., optimizer=...)``, called by
every rank at the same step, writes ``folder/step-{step:09d}/``: rank 0 writes
``model.pt`` (``{"step", "model", "optimizer", "extra"}`` by ``torch.save``; a DDP
model is saved unwrapped, as its replicas are one model), then every rank its
loader state, ``loader-{rank}.json`` (:mod:`exactbatch.rank_states`), each file
atomically. A step is *complete* when it holds the state of every rank of the
world that saved it; rank 0 writes its state after the model, so a complete step
holds the model too. ``load_checkpoint`` resumes from the latest complete step
(a run killed mid-save leaves an incomplete one: passed over, and removed), and
``certify_folder`` certifies the run from every complete step, with the lineage
rule of :func:`exactbatch.certify`. torch is imported on first use.
"""

from __future__ import annotations

import contextlib
import os
import re
from typing import TYPE_CHECKING, Any

from exactbatch.certificate import Certificate, certify_named
from exactbatch.checks import check_int
from exactbatch.distributed import torch_world_size
from exactbatch.hints import PathLike
from exactbatch.rank_states import (
    check_world,
    checkpoint_states,
    loader_of,
    rank_files,
    resume,
    state_name,
    write_state,
)

if TYPE_CHECKING:
    from torch.nn import Module

__all__ = ["certify_folder", "load_checkpoint", "save_checkpoint"]

MODEL = "model.pt"
_STEP = re.compile(r"step-(\d+)\Z")


def _step_folders(folder: str) -> list[tuple[int, str]]:
    """The step folders in ``folder``, ``(step, path)`` by step (none for a missing
    folder); a file at ``folder`` is a ``NotADirectoryError`` naming it."""
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise NotADirectoryError(f"{folder}: a file, not a checkpoint folder")
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return []
    found = []
    for name in names:
        m = _STEP.match(name)
        if m and os.path.isdir(os.path.join(folder, name)):
            found.append((int(m[1]), os.path.join(folder, name)))
    return sorted(found)


def _read(where: str) -> tuple[dict[int, dict[str, Any]], str]:
    """The states of the step folder ``where`` by rank, and why they are not complete."""

    def read(name: str) -> bytes:
        with open(os.path.join(where, name), "rb") as f:
            return f.read()

    try:
        return checkpoint_states(os.listdir(where), read, where)
    except FileNotFoundError:  # an incomplete step, removed by rank 0 as this rank read it
        return {}, f"{where}: removed"


def _remove_leftovers(steps: list[str]) -> None:
    """Remove the files ``save_checkpoint`` wrote in the incomplete steps ``steps`` (a killed
    run's), and each folder once empty: a later step left over would stand for the run's
    end in :func:`certify_folder`."""
    for here in steps:
        try:
            names = os.listdir(here)
        except FileNotFoundError:
            continue
        for name in [*rank_files(names).values(), *([MODEL] if MODEL in names else [])]:
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(here, name))
        with contextlib.suppress(OSError):  # a file of the user's own stays, and its folder
            os.rmdir(here)


def _unwrapped(model: Module) -> Module:
    import torch

    ddp = (torch.nn.parallel.DistributedDataParallel,)
    return model.module if isinstance(model, ddp) else model


def save_checkpoint(
    folder: PathLike,
    step: int,
    *,
    loader: Any,
    model: Any = None,
    optimizer: Any = None,
    extra: Any = None,
) -> str:
    """Save this rank's part of the checkpoint of ``step`` into ``folder`` (made if
    missing); every rank calls it at the same step. Returns the step's folder.

    ``loader``: this rank's DataLoader (or ``as_torch``'s wrapper of one), sharded by
    the job's ranks (``num_shards="auto"``). ``model``, ``optimizer`` and ``extra``
    (anything ``torch.save`` takes: a scheduler's state, a scaler's) are saved by rank 0
    only: under DDP every rank holds the same. Save once more after the last epoch, so
    that the run's end is on record for :func:`certify_folder`.
    """
    step = check_int("step", step, 0)
    loader = loader_of(loader, "save_checkpoint")
    check_world(loader, torch_world_size(), "save_checkpoint")
    here = os.path.join(os.fspath(folder), f"step-{step:09d}")
    os.makedirs(here, exist_ok=True)
    if loader.shard_index == 0:
        # States of ranks beyond this world, left by a killed run of more ranks, would
        # make the step look incomplete.
        for rank, name in rank_files(os.listdir(here)).items():
            if rank >= loader.num_shards:
                os.remove(os.path.join(here, name))
        if model is not None or optimizer is not None or extra is not None:
            import torch

            from exactbatch.ndf.write import atomic_path

            saved = {
                "step": step,
                "model": None if model is None else _unwrapped(model).state_dict(),
                "optimizer": None if optimizer is None else optimizer.state_dict(),
                "extra": extra,
            }
            with atomic_path(os.path.join(here, MODEL)) as temp:
                torch.save(saved, temp)
    write_state(here, loader)
    return here


def _latest(
    folder: str,
) -> tuple[tuple[int, str, dict[int, dict[str, Any]]] | None, list[str]]:
    """``(step, its folder, its states)`` of the latest complete step in ``folder`` (None:
    none), and the folders of the incomplete steps after it."""
    later: list[str] = []
    for step, here in reversed(_step_folders(folder)):
        states, why = _read(here)
        if not why:
            return (step, here, states), later
        later.append(here)
    return None, later


def load_checkpoint(
    folder: PathLike,
    *,
    loader: Any,
    model: Any = None,
    optimizer: Any = None,
    map_location: Any = "cpu",
) -> int | None:
    """Resume from the latest complete checkpoint in ``folder``: load this rank's loader
    state into ``loader`` (under ``elastic=True`` any rank's, so the job may restart at
    another number of ranks), and the model and optimizer saved with it into ``model``
    and ``optimizer`` (a DDP model's module). Returns the checkpoint's step, or None
    when ``folder`` holds no complete checkpoint (or does not exist): a fresh start.

    Call it on every rank before the first step. A step a killed run left incomplete
    is passed over, and its files removed (by rank 0). A checkpoint the loader
    refuses (other settings, other data, a non-elastic loader at another number of
    ranks), or one saved without the model asked for, is a ``ValueError`` naming the
    file.
    """
    loader = loader_of(loader, "load_checkpoint")
    found, later = _latest(os.fspath(folder))
    if loader.shard_index == 0:
        _remove_leftovers(later)
    if found is None:
        return None
    step, here, states = found
    resume(loader, states, here)
    if model is not None or optimizer is not None:
        import torch

        path = os.path.join(here, MODEL)
        if not os.path.exists(path):
            raise ValueError(f"{path}: missing; the checkpoint was saved without a model")
        saved = torch.load(path, map_location=map_location)
        for name, obj in (("model", model), ("optimizer", optimizer)):
            if obj is not None:
                if saved.get(name) is None:
                    raise ValueError(f"{path}: the checkpoint was saved with no {name} state")
                target = _unwrapped(obj) if name == "model" else obj
                target.load_state_dict(saved[name])
    return step


def certify_folder(folder: PathLike) -> Certificate:
    """The run certificate (:func:`exactbatch.certify`) of the checkpoints
    :func:`save_checkpoint` wrote into ``folder``: every rank's state of every
    complete step, the lineage followed (the steps a restart did not resume from set
    aside). Steps a killed run left incomplete are passed over, but the latest must be
    complete (the run's end). A ``ValueError`` naming the path: no checkpoint there,
    the latest step missing a rank's state, a state of another run.
    """
    folder = os.fspath(folder)
    steps = _step_folders(folder)
    if not steps:
        raise ValueError(
            f"{folder}: no checkpoint (step-*/ folders written by save_checkpoint) here"
        )
    states, owners = [], []
    for i, (_, here) in enumerate(steps):
        found, why = _read(here)
        if why and i == len(steps) - 1:
            raise ValueError(f"{why}; the run's last checkpoint is needed to certify it")
        if not why:
            for rank, state in found.items():
                states.append(state)
                owners.append(os.path.join(here, state_name(rank)))
    return certify_named(states, owners, folder)
