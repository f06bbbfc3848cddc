"""Where this process stands in a distributed job: (num_shards, shard_index).

Used by ``DataLoader(num_shards="auto", shard_index="auto")``. The answer
comes from the first of these that applies:

1. ``torch.distributed``, when it is initialised: the process group the
   collectives run on (Ray Train's ``TorchTrainer`` initialises it too, with
   the same ranks);
2. Ray Train, inside a Ray Train worker: ``ray.train.get_context()``'s world
   rank and world size (for every Ray Train trainer, torch or not), so a run
   Ray Train restarts at another worker count shards by the new count;
3. Dask, inside a task on a Dask worker: the worker's place among the
   workers the scheduler knows now, sorted by address, and their number
   (run one reading task per worker: ``client.submit(fn, workers=[address])``
   for each address in ``client.scheduler_info()["workers"]``);
4. the ``RANK``/``WORLD_SIZE`` environment variables (set by torchrun and
   most launchers);
5. else a single shard.

Neither torch, ray nor distributed is ever imported here: each is asked only if the
process has imported it already (a Ray Train worker has imported
``ray.train``; a process that has not imported torch has not initialised
``torch.distributed``).
"""

from __future__ import annotations

import os
import sys

__all__ = ["distributed_shard", "resolve_shard", "torch_world_size"]


def _from_torch() -> tuple[int, int] | None:
    if "torch" not in sys.modules:  # not imported by the user: not initialised either
        return None
    dist = getattr(sys.modules["torch"], "distributed", None)
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    return dist.get_world_size(), dist.get_rank()


def torch_world_size() -> int | None:
    """The world size of ``torch.distributed`` when it is initialised (else None)."""
    found = _from_torch()
    return None if found is None else found[0]


def _from_ray_train() -> tuple[int, int] | None:
    train = sys.modules.get("ray.train")
    if train is None:  # not imported: not a Ray Train worker
        return None
    try:
        ctx = train.get_context()
        world, rank = ctx.get_world_size(), ctx.get_world_rank()
    except RuntimeError:  # the driver, or a process that is not a training worker
        return None
    if world is None or rank is None:  # pragma: no cover - an older Ray outside a session
        return None
    return int(world), int(rank)


def _from_dask() -> tuple[int, int] | None:
    dist = sys.modules.get("distributed")
    if dist is None:  # not imported: not inside a Dask worker
        return None
    try:
        worker = dist.get_worker()
    except ValueError:  # not inside a task on a worker
        return None
    workers = sorted(dist.get_client().scheduler_info(n_workers=-1)["workers"])
    if worker.address not in workers:
        raise RuntimeError(
            f"this Dask worker ({worker.address}) is not among the scheduler's workers "
            f"{workers[:8]}: cannot tell its shard; pass num_shards and shard_index"
        )
    return len(workers), workers.index(worker.address)


def _from_env() -> tuple[int, int] | None:
    rank, world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if rank is None and world is None:
        return None
    try:
        if rank is None or world is None:
            raise TypeError  # (as int(None))
        r, w = int(rank), int(world)
    except (TypeError, ValueError):
        raise ValueError(
            f"RANK and WORLD_SIZE must both be set to integers; got RANK={rank!r}, "
            f"WORLD_SIZE={world!r}"
        ) from None
    if not (w >= 1 and 0 <= r < w):
        raise ValueError(f"need 0 <= RANK < WORLD_SIZE; got RANK={r}, WORLD_SIZE={w}")
    return w, r


def distributed_shard() -> tuple[int, int]:
    """``(num_shards, shard_index)``: torch.distributed, else Ray Train's context, else
    the Dask worker's place, else RANK/WORLD_SIZE, else (1, 0) (module docstring)."""
    return _from_torch() or _from_ray_train() or _from_dask() or _from_env() or (1, 0)


def resolve_shard(num_shards: int | str, shard_index: int | str) -> tuple[int, int]:
    """Replace ``"auto"`` in either argument by :func:`distributed_shard`'s answer."""
    auto = [v for v in (num_shards, shard_index) if isinstance(v, str)]
    for v in auto:
        if v != "auto":
            raise ValueError(f'num_shards and shard_index must be ints or "auto"; got {v!r}')
    world, rank = distributed_shard() if auto else (1, 0)  # (asked only for an "auto")
    return (
        world if isinstance(num_shards, str) else num_shards,
        rank if isinstance(shard_index, str) else shard_index,
    )
