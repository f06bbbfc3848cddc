"""Where a process stands in a distributed job (exactbatch.distributed), each source
asked through a stand-in module in ``sys.modules`` (the real ones: tests/adapters/
test_torch.py, test_ray.py, test_dask.py; the environment and the loader's "auto":
tests/loader/test_distributed.py)."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import numpy as np
import pytest

from exactbatch import distributed as dist

SOURCES = ("torch", "ray.train", "distributed")


@pytest.fixture(autouse=True)
def _alone(monkeypatch):
    """No framework imported and no RANK/WORLD_SIZE: each test puts in what it asks."""
    for name in SOURCES:
        monkeypatch.delitem(sys.modules, name, raising=False)
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)


def _torch(monkeypatch, available=True, initialized=True, world=4, rank=3):
    group = SimpleNamespace(
        is_available=lambda: available,
        is_initialized=lambda: initialized,
        get_world_size=lambda: world,
        get_rank=lambda: rank,
    )
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(distributed=group))


def _ray(monkeypatch, world=6, rank=5, error=None):
    def get_context():
        if error is not None:
            raise error
        return SimpleNamespace(get_world_size=lambda: world, get_world_rank=lambda: rank)

    monkeypatch.setitem(sys.modules, "ray.train", SimpleNamespace(get_context=get_context))


def _dask(monkeypatch, address="tcp://b:1", workers=("tcp://c:1", "tcp://a:1", "tcp://b:1")):
    def get_worker():
        if address is None:
            raise ValueError("no worker found")
        return SimpleNamespace(address=address)

    def scheduler_info(n_workers):
        assert n_workers == -1  # every worker, not the first few
        return {"workers": {w: {} for w in workers}}

    client = SimpleNamespace(scheduler_info=scheduler_info)
    module = SimpleNamespace(get_worker=get_worker, get_client=lambda: client)
    monkeypatch.setitem(sys.modules, "distributed", module)


def test_alone_a_process_is_one_shard():
    assert dist.distributed_shard() == (1, 0)
    assert dist.torch_world_size() is None


def test_torch_distributed_answers_first_once_initialised(monkeypatch):
    _torch(monkeypatch)
    _ray(monkeypatch)
    _dask(monkeypatch)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert dist.distributed_shard() == (4, 3)
    assert dist.torch_world_size() == 4
    for off in ({"available": False}, {"initialized": False}):
        _torch(monkeypatch, **off)
        assert dist.torch_world_size() is None
        assert dist.distributed_shard() == (6, 5)  # Ray Train's, next
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace())  # no torch.distributed
    assert dist.torch_world_size() is None


def test_ray_train_answers_in_a_worker_not_in_the_driver(monkeypatch):
    _ray(monkeypatch, world=np.int64(6), rank=np.int64(2))  # made ints
    assert dist.distributed_shard() == (6, 2)
    assert all(type(v) is int for v in dist.distributed_shard())
    _ray(monkeypatch, error=RuntimeError("not in a training session"))
    assert dist.distributed_shard() == (1, 0)
    _ray(monkeypatch, world=None, rank=0)  # (an older Ray outside a session)
    assert dist.distributed_shard() == (1, 0)
    _dask(monkeypatch)
    assert dist.distributed_shard() == (3, 1)  # the Dask worker's place, next


def test_a_dask_worker_is_placed_among_the_workers_sorted_by_address(monkeypatch):
    for address, want in (("tcp://a:1", (3, 0)), ("tcp://b:1", (3, 1)), ("tcp://c:1", (3, 2))):
        _dask(monkeypatch, address=address)
        assert dist.distributed_shard() == want
    _dask(monkeypatch, address=None)  # not inside a task on a worker
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert dist.distributed_shard() == (2, 0)


def test_a_dask_worker_the_scheduler_does_not_know_is_refused_naming_it(monkeypatch):
    _dask(monkeypatch, address="tcp://z:9", workers=[f"tcp://w{i}:1" for i in range(10)])
    with pytest.raises(RuntimeError) as e:
        dist.distributed_shard()
    shown = [f"tcp://w{i}:1" for i in sorted(range(10), key=lambda i: f"tcp://w{i}:1")][:8]
    assert str(e.value) == (
        f"this Dask worker (tcp://z:9) is not among the scheduler's workers {shown}: "
        "cannot tell its shard; pass num_shards and shard_index"
    )


def test_auto_takes_what_the_job_says_for_either_argument(monkeypatch):
    _torch(monkeypatch, world=8, rank=5)
    assert dist.resolve_shard("auto", "auto") == (8, 5)
    assert dist.resolve_shard("auto", 1) == (8, 1)
    assert dist.resolve_shard(2, "auto") == (2, 5)
    assert dist.resolve_shard(3, 2) == (3, 2)
    with pytest.raises(ValueError) as e:
        dist.resolve_shard("Auto", 0)
    assert str(e.value) == "num_shards and shard_index must be ints or \"auto\"; got 'Auto'"


def test_the_environment_answers_last_with_its_edges_allowed(monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")  # a job of one: rank 0 of 1 is no error
    assert dist.distributed_shard() == (1, 0)
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert dist.distributed_shard() == (3, 2)
    monkeypatch.setenv("RANK", "3")
    with pytest.raises(
        ValueError, match=r"^need 0 <= RANK < WORLD_SIZE; got RANK=3, WORLD_SIZE=3$"
    ):
        dist.distributed_shard()
