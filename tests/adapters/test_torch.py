"""The PyTorch adapter: tensors from a loader, an IterableDataset, distributed_shard."""

import os
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from exactbatch import DataLoader  # noqa: E402
from exactbatch.distributed import distributed_shard as core_distributed_shard  # noqa: E402
from exactbatch.torch import TorchIterable, TorchLoader, as_torch, distributed_shard  # noqa: E402


def make_xy(n=100, d=3, l=1, seed=0):  # noqa: E741
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal((n, l))


def loader_of(n=100, batch=32, seed=5, **kw):
    return DataLoader(make_xy(n), batch, seed=seed, **kw)


class Recorder:
    """A loader wrapper that keeps the arrays the loader yielded."""

    def __init__(self, loader):
        self.loader, self.arrays = loader, []

    def __len__(self):
        return len(self.loader)

    def __iter__(self):
        for xb, yb in self.loader:
            self.arrays.append((xb, yb))
            yield xb, yb


def test_importing_exactbatch_imports_neither_torch_nor_pymc():
    """`import exactbatch` (and the adapter modules themselves) load neither torch nor PyMC."""
    code = (
        "import sys, exactbatch, exactbatch.torch, exactbatch.pymc, exactbatch.adapters; "
        "assert 'torch' not in sys.modules and 'pymc' not in sys.modules, "
        "sorted(m for m in sys.modules if m.startswith(('torch', 'pymc')))"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_distributed_shard_works_without_torch_installed():
    """With torch not importable, distributed_shard reads the environment only."""
    code = (
        "import sys; sys.modules['torch'] = None\n"  # `import torch` now fails
        "from exactbatch.torch import distributed_shard\n"
        "assert distributed_shard() == (3, 1), distributed_shard()\n"
    )
    env = {**os.environ, "RANK": "1", "WORLD_SIZE": "3"}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120, env=env)


# -- as_torch ------------------------------------------------------------------------


def test_batches_are_tensors_of_the_loader_shapes():
    """Tensors of shapes (rows, d) and (rows, l), float64, with the loader's values; len()
    is the loader's batch count, and the last batch is partial as the loader's is."""
    tl = as_torch(loader_of(100, 32))
    ref = loader_of(100, 32)
    assert isinstance(tl, TorchLoader) and len(tl) == len(ref) == 4
    got = list(tl)
    assert [tuple(xb.shape) for xb, _ in got] == [(32, 3)] * 3 + [(4, 3)]
    assert [tuple(yb.shape) for _, yb in got] == [(32, 1)] * 3 + [(4, 1)]
    for (xb, yb), (rx, ry) in zip(got, ref, strict=True):
        assert xb.dtype == yb.dtype == torch.float64
        assert np.array_equal(xb.numpy(), rx) and np.array_equal(yb.numpy(), ry)


def test_class_labels_come_as_long_tensors_never_cast_by_dtype():
    """label_dtype=np.int64: yb is a long tensor of the same labels, whatever ``dtype``;
    the features follow ``dtype`` as before."""
    x = np.random.default_rng(0).standard_normal((50, 3))
    y = (np.arange(50) % 4).astype(np.float64)
    ref = [(a.copy(), b.copy()) for a, b in DataLoader((x, y), 16, seed=1)]
    for dtype in (None, torch.float32):
        got = list(as_torch(DataLoader((x, y), 16, seed=1, label_dtype=np.int64), dtype=dtype))
        for (xb, yb), (rx, ry) in zip(got, ref, strict=True):
            assert yb.dtype == torch.int64 and xb.dtype == (dtype or torch.float64)
            assert np.array_equal(yb.numpy(), ry.astype(np.int64))
            assert np.allclose(xb.numpy(), rx)


def test_each_iteration_is_the_next_epoch():
    """Each iter() over as_torch(...) is one epoch of the loader: a new shuffle each time."""
    tl = as_torch(loader_of(100, 100))
    ref = loader_of(100, 100)
    for epoch in range(3):
        (xb, _), (rx, _) = next(iter(tl)), next(iter(ref))
        assert np.array_equal(xb.numpy(), rx), epoch
    assert tl.loader.epoch == 3  # epoch 2's one batch is handed out: epoch 3 is next


def test_float64_batches_share_the_loader_arrays():
    """Without a cast the tensors are torch.from_numpy views: same memory, no copy."""
    rec = Recorder(loader_of(100, 32))
    for (xb, yb), (ax, ay) in zip(as_torch(rec), rec.arrays, strict=False):
        assert xb.data_ptr() == ax.ctypes.data and yb.data_ptr() == ay.ctypes.data
        ax[0, 0] = 1234.5  # a change to the array shows in the tensor
        assert xb[0, 0].item() == 1234.5
    assert len(rec.arrays) == 4


def test_a_float32_loader_gives_float32_tensors_sharing_its_arrays():
    """DataLoader(dtype=np.float32): the loader's gather casts, so as_torch (dtype None or
    torch.float32) shares the loader's float32 arrays, with no second cast."""
    assert as_torch(loader_of(dtype=np.float32)).dtype == torch.float32
    assert as_torch(loader_of()).dtype == torch.float64
    ref = [ax.astype(np.float32) for ax, _ in loader_of(100, 32)]
    for dtype in (None, torch.float32):
        rec = Recorder(loader_of(100, 32, dtype=np.float32))
        got = list(as_torch(rec, dtype=dtype))
        for (xb, yb), (ax, ay), rx in zip(got, rec.arrays, ref, strict=True):
            assert xb.dtype == yb.dtype == torch.float32 and ax.dtype == np.float32
            assert xb.data_ptr() == ax.ctypes.data and yb.data_ptr() == ay.ctypes.data
            assert np.array_equal(xb.numpy(), rx)


def test_cast_to_float32():
    """dtype=torch.float32 casts (a copy), with the loader's values rounded to float32."""
    rec = Recorder(loader_of(100, 32))
    for (xb, yb), (ax, ay) in zip(as_torch(rec, dtype=torch.float32), rec.arrays, strict=False):
        assert xb.dtype == yb.dtype == torch.float32
        assert np.array_equal(xb.numpy(), ax.astype(np.float32))
        assert np.array_equal(yb.numpy(), ay.astype(np.float32))
        assert xb.data_ptr() != ax.ctypes.data


def test_device_moves():
    """device= moves every tensor: on "cpu" nothing changes, on "meta" only shapes remain
    (the meta device needs no accelerator, so the move is tested everywhere)."""
    cpu = list(as_torch(loader_of(), device="cpu"))
    assert all(xb.device.type == "cpu" for xb, _ in cpu)
    meta = list(as_torch(loader_of(), device="meta", dtype=torch.float32))
    assert [tuple(xb.shape) for xb, _ in meta] == [tuple(xb.shape) for xb, _ in cpu]
    assert all(xb.is_meta and yb.is_meta and xb.dtype == torch.float32 for xb, yb in meta)


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-CUDA fallback")
def test_pin_memory_without_cuda_is_ignored():
    """pin_memory=True without CUDA: a warning, plain (unpinned) zero-copy tensors."""
    with pytest.warns(RuntimeWarning, match="CUDA is not available"):
        tl = as_torch(loader_of(), pin_memory=True)
    assert tl.pin_memory is False
    assert all(not xb.is_pinned() for xb, _ in tl)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_pin_memory_and_cuda_device():
    """With CUDA: batches land on the device with the loader's values."""
    tl = as_torch(loader_of(), dtype=torch.float32, device="cuda", pin_memory=True)
    assert tl.pin_memory is True
    for (xb, yb), (rx, ry) in zip(tl, loader_of(), strict=True):
        assert xb.is_cuda and yb.is_cuda
        assert np.array_equal(xb.cpu().numpy(), rx.astype(np.float32))
        assert np.array_equal(yb.cpu().numpy(), ry.astype(np.float32))


def test_bad_arguments():
    """A wrong kind of dtype is a TypeError; an unknown device name fails at once."""
    with pytest.raises(TypeError, match="dtype"):
        as_torch(loader_of(), dtype="float32")
    with pytest.raises(RuntimeError):
        as_torch(loader_of(), device="no-such-device")
    with pytest.raises(TypeError, match="DataLoader"):
        as_torch(42)
    x = np.zeros((10, 2))
    for data in (x, (x, x[:, :1]), [x], torch.zeros(10, 2)):  # data, not a loader: at once
        with pytest.raises(TypeError, match=r"as_torch\(DataLoader\(data, batch_size="):
            as_torch(data)


def test_the_defaults_neither_pin_nor_move_nor_warn():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (pin_memory=True would warn without CUDA)
        tl = as_torch(loader_of())
    assert tl.pin_memory is False and tl.device is None and tl._pool is None


def test_reprs_name_the_loader_and_the_settings():
    loader = loader_of()
    tl = as_torch(loader, dtype=torch.float32, device="cpu")
    assert repr(tl) == (
        f"TorchLoader({loader!r}, dtype=torch.float32, device=cpu, pin_memory=False)"
    )
    assert repr(tl.dataset()) == f"TorchIterable({tl!r})"


def test_the_dataset_class_is_the_modules_and_pickles_by_name():
    """TorchIterable is made on first access, as exactbatch.adapters.torch's own."""
    import pickle

    import exactbatch.adapters.torch as module

    assert module.TorchIterable is TorchIterable
    assert (TorchIterable.__module__, TorchIterable.__qualname__) == (
        "exactbatch.adapters.torch",
        "TorchIterable",
    )
    assert pickle.loads(pickle.dumps(TorchIterable)) is TorchIterable
    with pytest.raises(AttributeError, match=r"^module 'exactbatch.adapters.torch' has no "
                       r"attribute 'Nothing'$"):  # fmt: skip
        module.Nothing  # noqa: B018


def test_the_dataset_class_made_anew_is_the_same_class():
    """TorchIterable is made once, on first access, and kept: made anew (as in a process
    where nothing asked for it yet) it is the same class, made once again."""
    import exactbatch.adapters.torch as module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "_TORCH_ITERABLE", None)
        cls = module._iterable_class()
        assert cls is not TorchIterable and module._iterable_class() is cls
        assert module.TorchIterable is cls and issubclass(cls, torch.utils.data.IterableDataset)
        assert (cls.__module__, cls.__qualname__) == ("exactbatch.adapters.torch", "TorchIterable")
        loader = loader_of()
        ds = cls(loader)
        assert isinstance(ds.source, TorchLoader) and ds.source.loader is loader
        assert len(ds) == 4 and repr(ds) == f"TorchIterable({ds.source!r})"
        tl = as_torch(loader_of(), dtype=torch.float32)
        assert cls(tl).source is tl
        got = [xb for xb, _ in cls(loader_of())]
        want = [torch.from_numpy(rx) for rx, _ in loader_of()]
        assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))
        dl = torch.utils.data.DataLoader(cls(loader_of()), batch_size=None, num_workers=1)
        with pytest.raises(RuntimeError) as info:
            list(dl)
        assert (
            "an exactbatch TorchIterable was iterated in a DataLoader worker process: every "
            "worker would hand out every batch. Use torch.utils.data.DataLoader(ds, "
            "batch_size=None, num_workers=0); the exactbatch loader shards and reads by itself"
        ) in str(info.value)


def test_row_ids_and_masks_move_to_the_device():
    """device= moves the row ids and the pad mask too (to "meta": no accelerator needed)."""
    x = np.zeros((20, 3))
    with_rows = list(as_torch(DataLoader(x, 8, with_rows=True), device="meta"))
    assert [len(b) for b in with_rows] == [3] * 3 and all(t.is_meta for b in with_rows for t in b)
    padded = DataLoader(x, 8, even_batches="pad", num_shards=3, shard_index=2)
    batches = list(as_torch(padded, device="meta"))
    assert batches and all(len(b) == 3 and b[2].shape == (8,) for b in batches)
    assert all(t.is_meta for b in batches for t in b)


def test_a_linear_model_trains():
    """nn.Linear fitted by SGD through as_torch on y = x @ w + 0.5 + noise (sd 0.1): the
    mean squared error over an epoch falls from above 0.5 in the first (it starts near 5.5,
    the mean of y**2) to below 0.02 in the fourth (the noise floor is 0.01)."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2000, 3))
    y = x @ np.array([2.0, -1.0, 0.5]) + 0.5 + 0.1 * rng.standard_normal(2000)
    batches = as_torch(DataLoader((x, y), 50, seed=0), dtype=torch.float32)
    model = torch.nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(4):
        total = 0.0
        for xb, yb in batches:
            loss = torch.nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item() * len(xb)
        losses.append(total / 2000)
    assert losses[0] > 0.5 and losses[-1] < 0.02, losses


# -- the IterableDataset -------------------------------------------------------------


def test_torch_dataloader_over_the_dataset_yields_the_same_batches():
    """torch's DataLoader(ds, batch_size=None) passes the batches through unchanged, one
    epoch of the exactbatch loader per pass, and has its length."""
    ds = as_torch(loader_of(), dtype=torch.float32).dataset()
    assert isinstance(ds, torch.utils.data.IterableDataset) and isinstance(ds, TorchIterable)
    dl = torch.utils.data.DataLoader(ds, batch_size=None)
    assert len(dl) == len(ds) == 4
    ref = as_torch(loader_of(), dtype=torch.float32)
    for _ in range(2):  # two epochs
        got, want = list(dl), list(ref)
        assert len(got) == len(want) == 4
        for (xb, yb), (rx, ry) in zip(got, want, strict=True):
            assert torch.equal(xb, rx) and torch.equal(yb, ry)


def test_dataset_class_wraps_a_loader_directly():
    """TorchIterable(loader) is as_torch(loader).dataset() with the defaults."""
    ds = TorchIterable(loader_of())
    got = [xb for xb, _ in ds]
    want = [torch.from_numpy(rx) for rx, _ in loader_of()]
    assert all(torch.equal(a, b) for a, b in zip(got, want, strict=True))


def test_worker_processes_are_refused():
    """num_workers > 0 would hand out every batch once per worker: a clear error instead."""
    dl = torch.utils.data.DataLoader(TorchIterable(loader_of()), batch_size=None, num_workers=1)
    with pytest.raises(RuntimeError, match="num_workers=0"):
        list(dl)


# -- distributed_shard ---------------------------------------------------------------


def test_one_implementation():
    """exactbatch.torch.distributed_shard is the one DataLoader's "auto" shards use."""
    assert distributed_shard is core_distributed_shard


def test_shard_from_the_environment(monkeypatch):
    """Without an initialised process group, RANK/WORLD_SIZE give (WORLD_SIZE, RANK)."""
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert distributed_shard() == (4, 2)
    num_shards, shard_index = distributed_shard()
    ld = DataLoader(make_xy(10), 2, num_shards=num_shards, shard_index=shard_index)
    assert ld.n == 2  # rows [5, 7) of 10


def test_shard_defaults_to_one(monkeypatch):
    """Neither a process group nor the environment: one shard, (1, 0)."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed_shard() == (1, 0)


@pytest.mark.parametrize(
    "rank,world",
    [("4", "4"), ("-1", "2"), ("one", "2"), ("0", "0"), ("1", None), (None, "2")],
    ids=["rank-too-big", "negative", "not-int", "empty-world", "no-world", "no-rank"],
)
def test_shard_refuses_a_bad_environment(monkeypatch, rank, world):
    """Anything but integers with 0 <= RANK < WORLD_SIZE is a ValueError naming both."""
    for name, value in (("RANK", rank), ("WORLD_SIZE", world)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match="RANK") as err:
        distributed_shard()
    assert "WORLD_SIZE" in str(err.value)


def test_shard_from_an_initialised_process_group(monkeypatch, tmp_path):
    """An initialised torch.distributed group wins over the environment."""
    dist = pytest.importorskip("torch.distributed")
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this build")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    # A file rendezvous: no port to pick (one picked by binding and closing may be taken).
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'rendezvous'}", rank=0, world_size=1
    )
    try:
        assert distributed_shard() == (1, 0)
    finally:
        dist.destroy_process_group()
    assert distributed_shard() == (4, 2)  # destroyed: back to the environment


def test_row_ids_come_through_as_an_int64_tensor():
    """A loader with_rows gives (xb, yb, rows): rows an int64 tensor sharing the loader's
    ids (never cast by dtype), equal to the rows' ids; the dataset() wrapper too."""
    x = np.random.default_rng(0).normal(size=(50, 3))
    loader = DataLoader(x, 16, seed=1, with_rows=True)
    got = list(as_torch(loader, dtype=torch.float32))
    assert [len(b) for b in got] == [3] * 4
    seen = []
    for xb, _, rows in got:
        assert rows.dtype == torch.int64 and xb.dtype == torch.float32
        assert torch.equal(xb, torch.from_numpy(x[rows.numpy()]).float())
        seen += rows.tolist()
    assert sorted(seen) == list(range(50))
    ds_batches = list(torch.utils.data.DataLoader(as_torch(loader).dataset(), batch_size=None))
    assert all(len(b) == 3 and b[2].dtype == torch.int64 for b in ds_batches)


@pytest.mark.parametrize("with_rows", [False, True])
def test_even_batches_pad_carries_the_mask_as_a_bool_tensor(with_rows):
    """A loader of even_batches="pad": (xb, yb, mask), or (xb, yb, rows, mask) with row
    ids; every batch batch_size rows, the mask a bool tensor; the masked sum over the
    ranks is the whole data's, and every rank runs the same steps."""
    x, y = make_xy(50)
    total, seen, steps = 0.0, [], set()
    for s in range(3):
        loader = DataLoader((x, y), 8, num_shards=3, shard_index=s, even_batches="pad",
                            with_rows=with_rows)  # fmt: skip
        batches = list(as_torch(loader, dtype=torch.float32))
        steps.add(len(batches))
        for batch in batches:
            assert len(batch) == 3 + with_rows
            xb, yb, mask = batch[0], batch[1], batch[-1]
            assert xb.shape == (8, 3) and xb.dtype == torch.float32 and mask.dtype == torch.bool
            total += float((yb[:, 0].double() * mask).sum())
            if with_rows:
                rows = batch[2]
                assert rows.dtype == torch.int64 and (rows[~mask] == -1).all()
                seen += rows[mask].tolist()
    assert len(steps) == 1
    assert abs(total - float(y.astype(np.float32).astype(np.float64).sum())) < 1e-9
    if with_rows:
        assert sorted(seen) == list(range(50))


def test_without_torch_the_adapter_says_what_to_install(monkeypatch):
    """torch missing: as_torch (and TorchIterable, made on first use) is one ImportError
    naming the extra to install, chained to the failed import."""
    import exactbatch.adapters.torch as module

    for name in [m for m in sys.modules if m == "torch" or m.startswith("torch.")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import torch` now fails
    monkeypatch.setattr(module, "_TORCH_ITERABLE", None)
    for call in (lambda: as_torch(loader_of()), module._iterable_class):
        with pytest.raises(ImportError) as e:
            call()
        assert str(e.value) == "exactbatch.torch needs PyTorch: pip install 'exactbatch[torch]'"
        assert isinstance(e.value.__cause__, ImportError)


def test_refusals_say_what_was_given_and_what_to_pass():
    """The messages in full: data given for a loader, an object that does not iterate, a
    pin_memory that is no bool, a dtype that is no torch.dtype."""
    x = np.zeros((10, 2))
    with pytest.raises(TypeError) as e:
        as_torch(x)
    assert str(e.value) == (
        "as_torch needs an exactbatch DataLoader; got ndarray, data itself: wrap it first, "
        "as_torch(DataLoader(data, batch_size=...))"
    )
    with pytest.raises(TypeError) as e:
        as_torch(42)
    assert str(e.value) == (
        "as_torch needs an exactbatch DataLoader (an iterable of (x, y) arrays); got int"
    )
    with pytest.raises(TypeError, match=r"^pin_memory must be a bool"):
        as_torch(loader_of(), pin_memory=1)
    with pytest.raises(TypeError) as e:
        as_torch(loader_of(), dtype="float32")
    assert str(e.value) == "dtype must be a torch.dtype such as torch.float32; got 'float32'"


def test_a_torch_loader_made_directly_has_the_same_defaults():
    """TorchLoader(loader) as as_torch(loader): no pinning, no device, no warning."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tl = TorchLoader(loader_of())
    assert tl.pin_memory is False and tl.device is None and tl._pool is None
    assert tl.dtype == torch.float64


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests the no-CUDA fallback")
def test_pin_memory_without_cuda_warns_in_full():
    with pytest.warns(RuntimeWarning) as got:
        as_torch(loader_of(), pin_memory=True)
    assert [str(w.message) for w in got] == [
        "as_torch(pin_memory=True): CUDA is not available, so there is no page-locked "
        "memory to pin: batches stay in ordinary memory (zero-copy tensors)"
    ]


def pinned_recorder(calls: list):
    """Tensor.pin_memory on a machine without CUDA: a copy, recorded in ``calls`` (the
    pinned path of a cast, of row ids and of a pad mask, which only CUDA runs for real)."""

    def pin_memory(t):
        calls.append((tuple(t.shape), t.dtype))
        return t.clone()

    return pin_memory


def test_a_cast_batch_its_row_ids_and_mask_are_copied_into_pinned_memory(monkeypatch):
    """pin_memory with a cast (or a pad loader, whose masks come from iter()): no pool;
    each tensor, cast first, then ids and mask uncast, goes through pin_memory()."""
    from test_torch_pinned import Allocator

    calls: list = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", pinned_recorder(calls))
    tl = as_torch(loader_of(20, 8, with_rows=True), dtype=torch.float32)
    tl = TorchLoader(tl.loader, dtype=torch.float32, pin_memory=True, allocator=Allocator())
    assert tl.pin_memory is True and tl._pool is None
    got = list(tl)
    want = list(loader_of(20, 8, with_rows=True))
    assert [len(b) for b in got] == [3] * 3
    for (xb, yb, rows), (rx, ry, rr) in zip(got, want, strict=True):
        assert xb.dtype == yb.dtype == torch.float32 and rows.dtype == torch.int64
        assert np.array_equal(xb.numpy(), rx.astype(np.float32))
        assert np.array_equal(yb.numpy(), ry.astype(np.float32))
        assert np.array_equal(rows.numpy(), rr)
    assert calls[:3] == [((8, 3), torch.float32), ((8, 1), torch.float32),
                                ((8,), torch.int64)]  # fmt: skip
    assert len(calls) == 9
    calls.clear()
    padded = DataLoader(make_xy(20), 8, even_batches="pad", num_shards=3, shard_index=2)
    tl = TorchLoader(padded, pin_memory=True, allocator=Allocator())
    assert tl._pool is None  # (a pad loader's batches come from iter(), with their masks)
    batches = list(tl)
    assert batches and all(len(b) == 3 and b[2].dtype == torch.bool for b in batches)
    assert calls[:3] == [((8, 3), torch.float64), ((8, 1), torch.float64),
                                ((8,), torch.bool)]  # fmt: skip
