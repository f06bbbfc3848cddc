"""Ray Train checkpoints that end at a certificate: every worker's loader state in each
reported ``ray.train.Checkpoint``, restored on a restart, and the run certified from
the checkpoints Ray Train registered.

Each worker's state goes into the checkpoint as ``loader-{rank}.json``
(:mod:`exactbatch.rank_states`); Ray Train merges the folders all workers report
into one checkpoint, so a registered checkpoint holds every rank's state. The
checkpoints registered are those Ray's public API lists
(``Result.best_checkpoints``, of ``trainer.fit()`` or ``ray.train.Result.from_path``);
their files are read through each checkpoint's own filesystem (local or remote),
only the state files, never the model. ray is imported on first use.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from types import ModuleType
from typing import Any

from exactbatch.certificate import Certificate, certify_named
from exactbatch.extras import need
from exactbatch.hints import Foreign, PathLike
from exactbatch.rank_states import (
    check_world,
    checkpoint_states,
    loader_of,
    resume,
    state_name,
    write_state,
)

__all__ = ["certify_run", "report_with_loader", "restore_loader"]


def _train() -> ModuleType:
    return need("ray.train", by="exactbatch.ray", package="Ray Train", extra="ray")


def report_with_loader(
    metrics: dict[str, Any],
    loader: Any,
    *,
    checkpoint_dir: PathLike | None = None,
    **report_options: Any,
) -> None:
    """``ray.train.report(metrics, checkpoint=...)`` with this worker's loader state in
    the checkpoint; every worker calls it at the same step, as ``ray.train.report``.

    ``checkpoint_dir``: the folder of this worker's checkpoint files (the model's, on
    rank 0), where the state file is added; None: a temporary folder holding the state
    alone, removed once Ray has copied it (under ``checkpoint_upload_mode=ASYNC`` Ray
    removes it). ``report_options`` go to ``ray.train.report``. ``loader``: the
    worker's DataLoader (or ``as_torch``'s wrapper), sharded by the worker's rank
    (``num_shards="auto"``). Report once more after the last epoch, so that the run's
    end is on record for :func:`certify_run`.
    """
    train = _train()
    loader = loader_of(loader, "report_with_loader")
    check_world(loader, train.get_context().get_world_size(), "report_with_loader")
    own = checkpoint_dir is None
    mode = report_options.get("checkpoint_upload_mode")
    mode = getattr(mode, "value", mode)
    if own and mode not in (None, "SYNC", "ASYNC"):
        raise ValueError(
            f"report_with_loader: checkpoint_upload_mode={mode} reports a folder already in "
            "storage; give it as checkpoint_dir (the state is written there)"
        )
    folder = (
        tempfile.mkdtemp(prefix="exactbatch-checkpoint-")
        if checkpoint_dir is None
        else os.fspath(checkpoint_dir)
    )
    try:
        write_state(folder, loader)
        checkpoint = train.Checkpoint.from_directory(folder)
        train.report(metrics, checkpoint=checkpoint, **report_options)
    finally:
        if own and mode != "ASYNC":
            shutil.rmtree(folder, ignore_errors=True)


def _listing(checkpoint: Foreign) -> tuple[list[str], Callable[[str], bytes], str]:
    """The file names of ``checkpoint``, a reader of one, and where it is (in words)."""
    import pyarrow.fs

    fs, path = checkpoint.filesystem, checkpoint.path
    where = path if isinstance(fs, pyarrow.fs.LocalFileSystem) else f"{fs.type_name}://{path}"
    try:
        infos = fs.get_file_info(pyarrow.fs.FileSelector(path))
    except (FileNotFoundError, OSError) as e:
        raise ValueError(f"{where}: cannot list the checkpoint ({e})") from None
    names = [os.path.basename(i.path) for i in infos if i.type == pyarrow.fs.FileType.File]

    def read(name: str) -> bytes:
        with fs.open_input_stream(f"{path}/{name}") as f:
            data: bytes = f.read()
            return data

    return names, read, where


def restore_loader(loader: Any, checkpoint: Any = None) -> Any:
    """Load this worker's state from ``checkpoint`` (None: ``ray.train.get_checkpoint()``,
    the checkpoint Ray Train restarts the run from) into ``loader``; return that
    checkpoint (restore the model from it), or None for a fresh start (nothing loaded).

    Under ``elastic=True`` any rank's state resumes any worker, so the run may restart
    at another worker count; otherwise the worker loads its own rank's. A checkpoint
    missing a rank's state, or a state the loader refuses, is a ``ValueError`` naming
    the file.
    """
    loader = loader_of(loader, "restore_loader")
    if checkpoint is None:
        checkpoint = _train().get_checkpoint()
        if checkpoint is None:
            return None
    names, read, where = _listing(checkpoint)
    states, why = checkpoint_states(names, read, where)
    if why:
        raise ValueError(why)
    resume(loader, states, where)
    return checkpoint


def certify_run(run: Any, *, storage_filesystem: Any = None) -> Certificate:
    """The run certificate (:func:`exactbatch.certify`) of a Ray Train run, from the
    loader states in every checkpoint Ray Train registered, the lineage followed (the
    checkpoints a restart did not resume from are set aside).

    ``run``: the ``ray.train.Result`` of ``trainer.fit()``, or the run's folder in
    storage (``RunConfig(storage_path=..., name=...)``'s ``storage_path/name``, a local
    path or a URL; ``storage_filesystem`` as for ``ray.train.Result.from_path``). Keep
    every checkpoint (``CheckpointConfig(num_to_keep=None)``, the default): the one
    each restart resumed from is needed. A ``ValueError`` naming the path: no run
    there, no checkpoint registered, a checkpoint missing a rank's state, a state of
    another run.
    """
    train = _train()
    if isinstance(run, (str, os.PathLike)):
        try:
            run = train.Result.from_path(run, storage_filesystem=storage_filesystem)
        except RuntimeError as e:
            raise ValueError(f"{os.fspath(run)}: not the folder of a Ray Train run ({e})") from None
    if not hasattr(run, "best_checkpoints"):
        raise TypeError(
            f"certify_run needs a ray.train.Result or a run's folder; got {type(run).__name__}"
        )
    where = str(run.path)
    checkpoints = [c for c, _ in run.best_checkpoints or ()]
    if not checkpoints:
        raise ValueError(
            f"{where}: Ray Train registered no checkpoint in this run (report the loader "
            "with exactbatch.ray.report_with_loader)"
        )
    states, owners = [], []
    for checkpoint in checkpoints:
        names, read, at = _listing(checkpoint)
        found, why = checkpoint_states(names, read, at)
        if why:
            raise ValueError(why)
        for rank, state in found.items():
            states.append(state)
            owners.append(f"{at}/{state_name(rank)}")
    return certify_named(states, owners, where)
