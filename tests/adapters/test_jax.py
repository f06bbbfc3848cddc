"""The JAX adapter: device batches equal the loader's, put ahead by prefetch; pad_last
masks; sharding over two CPU devices; resume counts only the batches handed out."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from helpers import chunks_of, ids, make_data  # noqa: E402

from exactbatch import DataLoader  # noqa: E402
from exactbatch.adapters.jax_put import Putter  # noqa: E402
from exactbatch.arrays import batch_pair  # noqa: E402
from exactbatch.jax import JaxLoader, as_jax  # noqa: E402


def loader_of(n=100, batch=32, seed=5, **kw):
    return DataLoader(make_data(n), batch, seed=seed, **kw)


def test_importing_the_adapter_does_not_import_jax():
    """`import exactbatch` and `import exactbatch.jax` leave jax unloaded; as_jax loads it."""
    code = (
        "import sys, exactbatch, exactbatch.jax\n"
        "assert not [m for m in sys.modules if m.startswith(('jax', 'numpyro'))]\n"
        "import numpy as np\n"
        "exactbatch.jax.as_jax(exactbatch.DataLoader(np.zeros((4, 1)), 2))\n"
        "assert 'jax' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_batches_equal_the_loaders():
    """Each batch is a jax.Array pair with the loader's values in the loader's order;
    float64 becomes float32 without 64-bit JAX (the default); len() is the loader's; each
    iter() is the next epoch."""
    jl = as_jax(loader_of(100, 32))
    ref = loader_of(100, 32)
    assert isinstance(jl, JaxLoader) and len(jl) == len(ref) == 4
    assert jl.dtype == np.float32 and not jax.config.jax_enable_x64
    for _ in range(2):  # two epochs: a new shuffle each
        got = list(jl)
        want = list(ref)
        assert [tuple(xb.shape) for xb, _ in got] == [(32, 3)] * 3 + [(4, 3)]
        for (xb, yb), (rx, ry) in zip(got, want, strict=True):
            assert isinstance(xb, jax.Array) and xb.dtype == yb.dtype == np.float32
            assert np.array_equal(np.asarray(xb), rx.astype(np.float32))
            assert np.array_equal(np.asarray(yb), ry.astype(np.float32))


def test_float64_with_64_bit_jax_is_exact():
    """With jax_enable_x64 the batches keep the loader's float64 values, bit for bit;
    dtype=float32 casts (on the host) even then."""
    with jax.enable_x64(True):
        jl, jl32 = as_jax(loader_of(50, 20)), as_jax(loader_of(50, 20), dtype="float32")
        assert jl.dtype == np.float64 and jl32.dtype == np.float32
        got, got32 = list(jl), list(jl32)
    for (xb, yb), (x32, _), (rx, ry) in zip(got, got32, loader_of(50, 20), strict=True):
        assert xb.dtype == np.float64 and x32.dtype == np.float32
        assert np.array_equal(np.asarray(xb), rx) and np.array_equal(np.asarray(yb), ry)


def test_class_labels_stay_integers_int32_without_64_bit_jax():
    """label_dtype=int32: int32 on the device; int64: int32 without x64 (a label beyond
    int32 is a ValueError), int64 with it; pad_last pads the labels with zeros."""
    x = np.random.default_rng(0).standard_normal((50, 3))
    y = (np.arange(50) % 5).astype(np.float64)
    for label_dtype in (np.int32, np.int64):
        loader = DataLoader((x, y), 16, shuffle=False, label_dtype=label_dtype)
        got = list(as_jax(loader, pad_last=True))
        assert all(np.asarray(yb).dtype == np.int32 for _, yb, _ in got)
        labels = np.concatenate([np.asarray(yb)[np.asarray(m) > 0] for _, yb, m in got])
        assert labels[:, 0].tolist() == (np.arange(50) % 5).tolist()
    with jax.enable_x64(True):
        (_, yb), *_ = list(as_jax(DataLoader((x, y), 16, label_dtype=np.int64)))
        assert np.asarray(yb).dtype == np.int64
    big = y.copy()
    big[3] = 2.0**40
    with pytest.raises(ValueError, match="beyond int32"):
        list(as_jax(DataLoader((x, big), 16, shuffle=False, label_dtype=np.int64)))


def test_prefetch_puts_batches_ahead():
    """When the first batch is handed out, prefetch more are already read and put on the
    device; the loader counts only the one handed out, in its own state and the adapter's."""
    for prefetch in (0, 1, 3):
        loader = loader_of(200, 20)
        it = iter(as_jax(loader, prefetch=prefetch))
        next(it)
        assert len(it.ahead) == prefetch and all(isinstance(p[2][0], jax.Array) for p in it.ahead)
        assert loader.state_dict()["batches_done"] == 1, prefetch
        assert it.owner.state_dict() == loader.state_dict()


def test_pad_last_gives_one_shape_and_a_mask():
    """pad_last: every batch has batch_size rows and a mask; the partial last batch's real
    rows come first, padding is zeros with mask 0; no row is dropped."""
    jl = as_jax(loader_of(100, 32), pad_last=True)
    got, want = list(jl), list(loader_of(100, 32))
    assert [tuple(a.shape) for b in got for a in b] == [(32, 3), (32, 1), (32,)] * 4
    for (xb, yb, mask), (rx, ry) in zip(got, want, strict=True):
        rows = rx.shape[0]
        mask = np.asarray(mask)
        assert mask.dtype == np.float32 and mask.tolist() == [1.0] * rows + [0.0] * (32 - rows)
        assert np.array_equal(np.asarray(xb)[:rows], rx.astype(np.float32))
        assert np.array_equal(np.asarray(yb)[:rows], ry.astype(np.float32))
        assert not np.asarray(xb)[rows:].any() and not np.asarray(yb)[rows:].any()
    assert sorted(i for xb, _, m in got for i in ids(np.asarray(xb)[np.asarray(m) > 0])) == list(
        range(100)
    )


@pytest.mark.parametrize("prefetch", [0, 2, 5])
@pytest.mark.parametrize("loader_prefetch", [0, 2])
def test_state_after_k_batches_resumes_exactly(prefetch, loader_prefetch):
    """The adapter's state after k batches (while batches are put ahead) resumes with
    batch k + 1, in a fresh loader; leaving the loop early rewinds the loader itself to the
    same place, so its own state agrees; the next iter() is the next epoch, as after
    leaving a loader's own loop."""

    def make():
        return loader_of(200, 16, prefetch=loader_prefetch)

    ref = make()
    want, following = [ids(xb) for xb, _ in ref], [ids(xb) for xb, _ in ref]
    for k in (1, 5, 12):
        loader = make()
        jl = as_jax(loader, prefetch=prefetch, dtype=None)
        for i, (xb, _) in enumerate(jl):
            assert ids(np.asarray(xb)) == want[i]
            if i + 1 == k:
                state = jl.state_dict()
                break
        assert state["batches_done"] == k
        assert loader.state_dict() == state  # the loop's end gave the batches back
        resumed = make()
        resumed.load_state_dict(state)
        assert [ids(np.asarray(xb)) for xb, _ in as_jax(resumed)] == want[k:]
        assert [ids(np.asarray(xb)) for xb, _ in jl] == following


def test_close_and_load_state_dict():
    """close() gives the batches put ahead back (the loader's next_into hands them out);
    load_state_dict drops the epoch in progress (which then no longer rewinds the loader)
    and resumes the loader."""
    loader = loader_of(200, 10)
    jl = as_jax(loader, prefetch=3)
    jl.load_state_dict(loader.state_dict())  # no epoch in progress: the loader's alone
    want = [ids(xb) for xb, _ in loader_of(200, 10)]
    it = iter(jl)
    assert [ids(np.asarray(next(it)[0])) for _ in range(2)] == want[:2]
    it.close()
    assert loader.state_dict()["batches_done"] == 2
    with pytest.raises(StopIteration):
        next(it)
    bx, by = np.empty((10, 3)), np.empty((10, 1))
    assert loader.next_into(bx, by) == 10 and ids(bx) == want[2]
    it = iter(jl)
    next(it)
    jl.load_state_dict(loader_of(200, 10).state_dict())
    assert loader.state_dict()["batches_done"] == 0
    with pytest.raises(StopIteration):  # dropped: closed
        next(it)
    del it
    assert ids(np.asarray(next(iter(jl))[0])) == want[0]


def test_bad_arguments():
    """A non-loader is a TypeError; prefetch, dtype, device and sharding are checked."""
    loader = loader_of()
    with pytest.raises(TypeError, match="DataLoader"):
        as_jax(np.zeros((10, 2)))
    with pytest.raises(ValueError, match="prefetch must be >= 0"):
        as_jax(loader, prefetch=-1)
    with pytest.raises(TypeError, match="prefetch must be an int"):
        as_jax(loader, prefetch=1.5)
    with pytest.raises(TypeError, match="pad_last must be a bool"):
        as_jax(loader, pad_last=1)
    with pytest.raises(TypeError, match="floating dtype"):
        as_jax(loader, dtype=np.int32)
    with pytest.raises(ValueError, match="jax_enable_x64"):
        as_jax(loader, dtype=np.float64)
    with pytest.raises(TypeError, match="jax.Device"):
        as_jax(loader, device="gpu")
    with pytest.raises(TypeError, match="Sharding"):
        as_jax(loader, sharding="batch")
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(ValueError, match="not both"):
        as_jax(loader, device=jax.devices()[0], sharding=one)
    got = list(as_jax(loader, sharding=one))  # one device: any batch size
    assert len(got) == 4 and got[0][0].sharding.device_set == {jax.devices()[0]}


def same_arrays(got, want) -> bool:
    """Whether two device arrays agree in everything a step can see."""
    return (
        got.shape == want.shape
        and got.dtype == want.dtype
        and got.sharding == want.sharding
        and got.committed == want.committed
        and np.array_equal(np.asarray(got), np.asarray(want))
    )


def put_both_ways(target, sharding, tamper=None):
    """Arrays of three shapes (one twice) put by XLA's batched put and by jax.device_put;
    ``tamper`` replaces the batched put. Returns the fast Putter's plans."""
    fast, slow = Putter(target, sharding), Putter(target, sharding, fast=False)
    if tamper is not None:
        fast.batched = (tamper(fast.batched[0]), *fast.batched[1:])
    for rows in (8, 3, 8):  # the second 8 is put by the plan the first one made
        x, y = batch_pair(rows, 3, 1, np.float32)
        x[:], y[:] = np.arange(rows * 3).reshape(rows, 3), np.arange(rows)[:, None]
        for got, want in zip(fast((x, y)), slow((x, y)), strict=True):
            assert same_arrays(got, want), (target, rows)
    return fast.plans


def test_the_batched_put_gives_what_device_put_gives():
    """On this JAX, XLA's batched put is used (a plan for each shape) and gives the arrays
    jax.device_put gives: values, sharding and committedness, for JAX's default device
    (uncommitted), a named device and a sharding (committed)."""
    dev = jax.devices()[0]
    one = jax.sharding.SingleDeviceSharding(dev)
    for target in (None, dev, one):
        plans = put_both_ways(target, one)
        assert len(plans) == 4 and all(p is not None for p in plans.values()), target


def test_the_batched_put_falls_back_to_device_put_where_it_fails_or_differs():
    """Where the batched put raises, or gives other arrays than jax.device_put (here:
    committed where device_put leaves them uncommitted), every array of that shape goes
    through jax.device_put, and the arrays are still device_put's."""
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])

    def raising(put):
        def bad(*args):
            raise TypeError("batched_device_put() got an unexpected argument")

        return bad

    def committing(put):
        return lambda aval, sharding, xs, devices, committed: put(aval, sharding, xs, devices, True)

    for tamper in (raising, committing):
        plans = put_both_ways(None, one, tamper)
        assert len(plans) == 4 and all(p is None for p in plans.values()), tamper


def test_a_float32_batch_reaches_a_cpu_device_without_a_copy():
    """The loader's float32 batches start on a 64-byte boundary, so the device array of a
    CPU device aliases the loader's host memory: no copy is made."""
    loader = loader_of(100, 32, dtype=np.float32)
    it = iter(as_jax(loader, prefetch=1))
    xb, yb = next(it)
    host = it.ahead[0][1] if it.ahead else None
    assert host is not None  # the next batch, put ahead
    nxb, nyb = next(it)
    assert nxb.unsafe_buffer_pointer() == host[0].ctypes.data
    assert nyb.unsafe_buffer_pointer() == host[1].ctypes.data


SHARDED = textwrap.dedent(
    """
    import jax, numpy as np, pytest
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
    from exactbatch import DataLoader
    from exactbatch.jax import as_jax
    assert jax.device_count() == 2, jax.devices()
    mesh = Mesh(np.array(jax.devices()), ("batch",))
    rows = NamedSharding(mesh, P("batch"))
    x, y = np.arange(60.0).reshape(30, 2), np.arange(30.0)[:, None]
    batches = list(as_jax(DataLoader((x, y), 10, seed=0), sharding=rows, pad_last=True))
    want = list(DataLoader((x, y), 10, seed=0))
    for (xb, yb, mask), (rx, ry) in zip(batches, want, strict=True):
        assert xb.sharding == rows and len(xb.addressable_shards) == 2
        assert [s.data.shape for s in xb.addressable_shards] == [(5, 2), (5, 2)]
        assert {s.device for s in yb.addressable_shards} == set(jax.devices())
        assert np.array_equal(np.asarray(xb), rx.astype(np.float32))
        assert np.asarray(mask).tolist() == [1.0] * 10
    # 25 rows: a last batch of 5 rows cannot be cut in two; pad_last pads it to 10
    ld = DataLoader((x[:25], y[:25]), 10, seed=0)
    with pytest.raises(ValueError, match="5 rows.*2 devices.*pad_last=True"):
        as_jax(ld, sharding=rows)
    last = list(as_jax(ld, sharding=rows, pad_last=True))[-1]
    assert np.asarray(last[2]).tolist() == [1.0] * 5 + [0.0] * 5
    assert [s.data.shape for s in last[2].addressable_shards] == [(5,), (5,)]
    with pytest.raises(ValueError, match="batch_size=9 does not divide evenly.* 2 devices"):
        as_jax(DataLoader((x, y), 9), sharding=rows)
    # a 2-D spec: rows over the devices, columns whole; the mask takes the rows' part
    two = NamedSharding(mesh, P("batch", None))
    xb, yb, mask = next(iter(as_jax(DataLoader((x, y), 10), sharding=two, pad_last=True)))
    assert [s.data.shape for s in mask.addressable_shards] == [(5,), (5,)]
    # XLA's batched put lays rows out over the devices as jax.device_put does
    from exactbatch.adapters.jax_put import Putter
    fast, slow = Putter(rows, rows), Putter(rows, rows, fast=False)
    for n in (10, 4, 10):
        a = np.arange(n * 2.0, dtype=np.float32).reshape(n, 2)
        (got,), (want,) = fast((a,)), slow((a,))
        assert got.sharding == want.sharding and got.committed == want.committed
        assert [s.data.shape for s in got.addressable_shards] == [(n // 2, 2)] * 2
        assert np.array_equal(np.asarray(got), a)
    assert all(p is not None for p in fast.plans.values())
    # no device given: JAX's default device as jax.device_put picks it, uncommitted
    with jax.default_device(jax.devices()[1]):
        xb, _ = next(iter(as_jax(DataLoader((x, y), 10, seed=0))))
    assert xb.devices() == {jax.devices()[1]} and not xb.committed
    print("ok")
    """
)


def test_sharding_over_two_cpu_devices():
    """In a process with two CPU devices (the device count is fixed when jax starts): each
    batch's rows are split over both devices, values intact; a batch_size or a last batch
    that does not split evenly is a ValueError naming both numbers (pad_last fixes the
    latter); XLA's batched put lays rows out as jax.device_put does; with no device given,
    batches go to JAX's default device of the moment (jax.default_device), uncommitted."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = subprocess.run(
        [sys.executable, "-c", SHARDED], env=env, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-3000:]


def test_an_epoch_collected_in_a_cycle_is_given_back():
    """An iterator dropped inside a reference cycle is finalized by the garbage collector
    (which may run while the loader holds its lock): the batches it put ahead go back to
    the loader, which counts only the batches handed out and hands the rest out next."""
    import gc

    loader = loader_of(200, 10)
    jl = as_jax(loader, prefetch=3)
    it = iter(jl)
    next(it), next(it)
    cycle = [it]
    cycle.append(cycle)  # the iterator now lives in a cycle only the collector frees
    del it, cycle
    gc.collect()
    assert loader.state_dict()["batches_done"] == 2
    assert jl.state_dict()["batches_done"] == 2
    want = [ids(xb) for xb, _ in loader_of(200, 10)]
    bx, by = np.empty((10, 3)), np.empty((10, 1))
    assert loader.next_into(bx, by) == 10 and ids(bx) == want[2]


@pytest.mark.parametrize("loader_prefetch", [0, 1])
def test_a_read_that_fails_while_reading_ahead_is_read_again_by_the_next_call(loader_prefetch):
    """A source read that raises while batches are read ahead reaches the caller, with the
    loader counting only the batches handed out; the next next() reads the same batches
    again: every row once, in the loader's order."""
    from laws import FlakyFactory

    chunks = chunks_of([30, 30, 30, 10])
    ref = DataLoader(chunks, 10, shuffle=False, total_size=100)
    want = [ids(xb) for xb, _ in ref]
    source = FlakyFactory(chunks)
    source.arm(2)  # the first pass fails at its third chunk (rows 60..89)
    loader = DataLoader(source, 10, shuffle=False, total_size=100, prefetch=loader_prefetch)
    it = iter(as_jax(loader, prefetch=3))
    got, failed = [], 0
    while True:
        try:
            xb, _ = next(it)
        except StopIteration:
            break
        except OSError:
            failed += 1
            assert loader.state_dict()["batches_done"] == len(got)
            continue
        got.append(ids(np.asarray(xb)))
    assert failed == source.raised == 1
    assert got == want


@pytest.mark.parametrize("pad_last", [False, True])
def test_row_ids_come_through_as_host_int64(pad_last):
    """A loader with_rows gives (xb, yb, rows) (and the mask after them with pad_last):
    rows the loader's own ids, a NumPy int64 array (exact without 64-bit JAX), padded
    with -1; resuming from the adapter's state hands out the ids left."""
    loader = loader_of(100, 32, with_rows=True)
    want = [rows.tolist() for _, _, rows in loader_of(100, 32, with_rows=True)]
    got = list(as_jax(loader, pad_last=pad_last))
    assert [len(b) for b in got] == [4 if pad_last else 3] * 4
    for batch, rows in zip(got, want, strict=True):
        ids_out = batch[2]
        assert isinstance(ids_out, np.ndarray) and ids_out.dtype == np.int64
        real = ids_out[: len(rows)].tolist()
        assert real == rows == ids(np.asarray(batch[0])[: len(rows)])
        assert (ids_out[len(rows) :] == -1).all()
        if pad_last:
            assert np.asarray(batch[3]).tolist() == [1.0] * len(rows) + [0.0] * (32 - len(rows))
    loader = loader_of(100, 32, with_rows=True)
    jl = as_jax(loader, prefetch=2)
    it = iter(jl)
    next(it)
    state = jl.state_dict()
    it.close()
    resumed = loader_of(100, 32, with_rows=True)
    resumed.load_state_dict(state)
    assert [b[2].tolist() for b in as_jax(resumed)] == want[1:]


@pytest.mark.parametrize("pad_last", [False, True])
@pytest.mark.parametrize("with_rows", [False, True])
def test_even_batches_pad_carries_the_mask(pad_last, with_rows):
    """A loader of even_batches="pad" hands out full batches with a bool mask: as_jax puts
    them as pad_last does, (xb, yb[, rows], mask) with the mask 1.0/0.0, whatever
    pad_last says; every rank the same steps, and every row once across the ranks."""
    n, b, S = 50, 8, 3
    seen, steps = [], set()
    for s in range(S):
        loader = loader_of(n, b, num_shards=S, shard_index=s, even_batches="pad",
                           with_rows=with_rows)  # fmt: skip
        got = list(as_jax(loader, pad_last=pad_last))
        steps.add(len(got))
        for batch in got:
            assert len(batch) == 3 + with_rows
            xb, yb, mask = np.asarray(batch[0]), np.asarray(batch[1]), np.asarray(batch[-1])
            assert xb.shape == (b, 3) and yb.shape == (b, 1) and mask.shape == (b,)
            assert mask.dtype == np.float32 and set(mask.tolist()) <= {0.0, 1.0}
            real = mask > 0
            assert not xb[~real].any()
            if with_rows:
                assert (batch[2][~real] == -1).all() and (batch[2][real] == ids(xb[real])).all()
            seen += ids(xb[real])
    assert len(steps) == 1 and sorted(seen) == list(range(n))


def test_bfloat16_is_a_floating_dtype_cast_on_the_host():
    """jnp.bfloat16 is floating to JAX (not to NumPy): handed out, the batches cast."""
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10.0)
    for dtype in (jnp.bfloat16, "bfloat16"):
        got = list(as_jax(DataLoader((x, y), 4, shuffle=False), dtype=dtype))
        assert all(a.dtype == jnp.bfloat16 for b in got for a in b)
        np.testing.assert_array_equal(
            np.concatenate([np.asarray(b[0], np.float64) for b in got]), x
        )


def test_partial_rows_and_row_pieces_on_their_own():
    """What the sharding checks read (their multi-device runs are a child process's, where
    no mutant reaches): the last batch's rows, and the pieces a sharding cuts rows into."""
    from types import SimpleNamespace

    from exactbatch.adapters.jax import _partial_rows, _row_pieces

    assert _partial_rows(DataLoader(make_data(10), 4)) == 2
    assert _partial_rows(DataLoader(make_data(12), 4)) == 0
    assert _partial_rows(DataLoader(make_data(10), 4, drop_last=True)) == 0
    assert _partial_rows(DataLoader(make_data(10), 4, even_batches="pad")) == 0
    assert _partial_rows(SimpleNamespace(n=None, batch_size=4)) == 0  # a size not known
    assert _partial_rows(SimpleNamespace(n=7, batch_size=4)) == 3  # nothing else said

    def sharding(m, rows):
        def shard_shape(shape):
            if rows is None:
                raise ValueError("not rows only")
            return (rows, 1)

        return SimpleNamespace(device_set=set(range(m)), shard_shape=shard_shape)

    assert _row_pieces(sharding(4, 1)) == 4 and _row_pieces(sharding(4, 2)) == 2
    assert _row_pieces(sharding(8, 8)) == 1 and type(_row_pieces(sharding(4, 2))) is int
    assert _row_pieces(sharding(4, None)) == 4


def test_without_jax_the_adapter_says_what_to_install(monkeypatch):
    """jax missing: as_jax is one ImportError naming the extra, chained to the import's."""
    for name in [m for m in sys.modules if m == "jax" or m.startswith("jax.")]:
        monkeypatch.setitem(sys.modules, name, None)  # `import jax` now fails
    with pytest.raises(ImportError) as e:
        as_jax(loader_of())
    assert str(e.value) == "exactbatch.jax needs JAX: pip install 'exactbatch[jax]'"
    assert isinstance(e.value.__cause__, ImportError)


@pytest.fixture
def two_cpu_devices():
    """Two CPU devices in this process (the backends made anew, then again as before),
    so that mutants of the sharding paths are reached here, not in a child process."""
    from jax.extend import backend

    if not hasattr(jax.config, "jax_num_cpu_devices"):  # (an older JAX: the child process test)
        pytest.skip("this JAX sets its CPU device count only by XLA_FLAGS, at start")
    before = jax.config.jax_num_cpu_devices
    backend.clear_backends()
    jax.config.update("jax_num_cpu_devices", 2)
    try:
        devices = jax.devices("cpu")
        assert len(devices) == 2, devices
        yield devices
    finally:
        backend.clear_backends()
        jax.config.update("jax_num_cpu_devices", before)


def test_sharding_over_two_devices_in_this_process(two_cpu_devices):
    """test_sharding_over_two_cpu_devices' checks, in this process, with the messages in
    full; the mask's sharding; a stream whose last batch does not split; the batched put's
    plans used on two devices; each epoch's putters kept; a named device committed."""
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from exactbatch.adapters.jax import _default_device, _mask_sharding, _row_pieces

    devs = two_cpu_devices
    mesh = Mesh(np.array(devs), ("batch",))
    rows = NamedSharding(mesh, P("batch"))
    x, y = np.arange(60.0).reshape(30, 2), np.arange(30.0)[:, None]
    jl = as_jax(DataLoader((x, y), 10, seed=0), sharding=rows, pad_last=True)
    assert repr(jl) == (
        f"JaxLoader({jl.loader!r}, dtype=float32, on={rows}, prefetch=2, pad_last=True)"
    )
    batches = list(jl)
    for (xb, yb, mask), (rx, _) in zip(batches, DataLoader((x, y), 10, seed=0), strict=True):
        assert xb.sharding == rows and yb.sharding == rows and mask.sharding == rows
        assert [s.data.shape for s in xb.addressable_shards] == [(5, 2), (5, 2)]
        assert np.array_equal(np.asarray(xb), rx.astype(np.float32))
        assert np.asarray(mask).tolist() == [1.0] * 10
    putters = jl._putters()
    assert jl._putters() is putters  # kept while the sharding holds
    assert all(p is not None for put in putters for p in put.plans.values())
    # 25 rows: a last batch of 5 rows cannot be cut in two; pad_last pads it to 10
    ld = DataLoader((x[:25], y[:25]), 10, seed=0)
    with pytest.raises(ValueError) as e:
        as_jax(ld, sharding=rows)
    assert str(e.value) == (
        "the loader's last batch has 5 rows, which do not divide evenly over the sharding's 2 "
        "devices: pass pad_last=True (or drop_last=True to the DataLoader)"
    )
    last = list(as_jax(ld, sharding=rows, pad_last=True))[-1]
    assert np.asarray(last[2]).tolist() == [1.0] * 5 + [0.0] * 5
    assert [s.data.shape for s in last[2].addressable_shards] == [(5,), (5,)]
    # a stream of unknown size: its last batch is refused when it comes
    chunks = [(x[:13], y[:13]), (x[13:25], y[13:25])]
    stream = DataLoader(chunks, 10, shuffle=False, total_size=None)
    it = iter(as_jax(stream, sharding=rows, prefetch=0))
    next(it), next(it)
    with pytest.raises(ValueError) as e:
        next(it)
    assert str(e.value) == (
        "a batch of 5 rows does not divide evenly over the sharding's 2 devices: pass "
        "pad_last=True (or drop_last=True to the DataLoader)"
    )
    with pytest.raises(ValueError) as e:
        as_jax(DataLoader((x, y), 9), sharding=rows)
    assert str(e.value) == (
        "batch_size=9 does not divide evenly over the sharding's 2 devices: pass a "
        "batch_size that is a multiple of 2"
    )
    # a 2-D spec: rows over the devices, columns whole; the mask takes the rows' part
    two = NamedSharding(mesh, P("batch", None))
    assert _mask_sharding(two) == rows and _mask_sharding(rows) is rows
    xb, yb, mask = next(iter(as_jax(DataLoader((x, y), 10), sharding=two, pad_last=True)))
    assert xb.sharding == two and mask.sharding == rows
    assert [s.data.shape for s in mask.addressable_shards] == [(5,), (5,)]
    # the pieces a sharding cuts rows into: replicated rows are one piece (any batch
    # size), columns cut over the devices are not rows alone (every device a piece)
    whole = NamedSharding(mesh, P())
    assert _row_pieces(rows) == 2 and type(_row_pieces(rows)) is int
    assert _row_pieces(whole) == 1 and len(list(as_jax(DataLoader((x, y), 9), sharding=whole)))
    cols = NamedSharding(Mesh(np.array(devs).reshape(1, 2), ("batch", "model")), P(None, "model"))
    assert _row_pieces(cols) == 2
    # XLA's batched put lays rows out over the devices as jax.device_put does
    fast, slow = Putter(rows, rows), Putter(rows, rows, fast=False)
    for n in (10, 4, 10):
        a = np.arange(n * 2.0, dtype=np.float32).reshape(n, 2)
        (got,), (want,) = fast((a,)), slow((a,))
        assert same_arrays(got, want)
        assert [s.data.shape for s in got.addressable_shards] == [(n // 2, 2)] * 2
    assert len(fast.plans) == 2 and all(p is not None for p in fast.plans.values())
    # a device named: there, committed, by the batched put; none: JAX's default device
    # of the moment (jax.default_device, a device or a platform's name), uncommitted
    jl = as_jax(DataLoader((x, y), 10, seed=0), device=devs[1], pad_last=True)
    assert repr(jl).endswith(f"on={devs[1]}, prefetch=2, pad_last=True)")
    for xb, yb, mask in jl:
        assert xb.devices() == yb.devices() == mask.devices() == {devs[1]}
        assert xb.committed and mask.committed
    assert all(p is not None for put in jl._putters() for p in put.plans.values())
    with jax.default_device(devs[1]):
        assert _default_device() == devs[1]
        xb, _ = next(iter(as_jax(DataLoader((x, y), 10, seed=0))))
    assert xb.devices() == {devs[1]} and not xb.committed
    with jax.default_device("cpu"):
        assert _default_device() == jax.local_devices(backend="cpu")[0]
    assert _default_device() == jax.local_devices()[0]


def test_the_batched_put_checks_each_shape_once():
    """jax.device_put is called for the first array of each shape and dtype only (the
    check of the batched put's plan), then never; with fast=False for every array."""
    import exactbatch.adapters.jax_put as module

    calls = []
    put = module._jax_device_put

    def counted(a, target):
        calls.append(a.shape)
        return put(a, target)

    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(module, "_jax_device_put", counted)
        fast, slow = Putter(None, one), Putter(None, one, fast=False)
        assert slow.batched is None and fast.batched is not None
        for n in (4, 4, 3, 4):
            fast((np.zeros((n, 2), np.float32),))
        assert calls == [(4, 2), (3, 2)]
        calls.clear()
        for n in (4, 4):
            slow((np.zeros((n, 2), np.float32),))
        assert calls == [(4, 2), (4, 2)]
        assert slow.plans == {((4, 2), np.dtype(np.float32)): None}


def test_defaults_messages_and_dtypes_of_the_jax_loader():
    """JaxLoader's own defaults (as_jax's); the refusals' texts; prefetch's ceiling; the
    dtype of a loader-like object without one; an iterator without peek()."""
    from exactbatch.prefetch import MAX_DEPTH

    loader = loader_of(20, 4)
    jl = JaxLoader(loader)
    assert (jl.prefetch, jl.pad_last, as_jax(loader).prefetch) == (2, False, 2)
    with pytest.raises(TypeError) as e:
        as_jax(np.zeros((10, 2)))
    assert str(e.value) == (
        "as_jax needs an exactbatch DataLoader; got ndarray (no batch_size, state_dict, "
        "load_state_dict)"
    )
    with pytest.raises(ValueError, match=f"prefetch must be <= {MAX_DEPTH}"):
        as_jax(loader, prefetch=MAX_DEPTH + 1)
    assert as_jax(loader, prefetch=MAX_DEPTH).prefetch == MAX_DEPTH
    dev = jax.devices()[0]
    with pytest.raises(ValueError) as e:
        as_jax(loader, device=dev, sharding=jax.sharding.SingleDeviceSharding(dev))
    assert str(e.value) == "pass device= or sharding=, not both (a sharding names its devices)"
    with pytest.raises(ValueError) as e:
        as_jax(loader, dtype="float64")
    assert str(e.value) == (
        "dtype=float64 needs 64-bit JAX: set jax.config.update('jax_enable_x64', True) "
        "first (without it JAX holds float32 only), or pass dtype=jnp.float32"
    )
    with pytest.raises(TypeError) as e:
        as_jax(loader, dtype="no-such-dtype")
    assert str(e.value) == (
        "dtype must be a floating dtype such as jnp.float32; got 'no-such-dtype'"
    )
    assert as_jax(loader, dtype=np.float16).dtype == np.float16
    # without a batch size odd or even matters not (one device: one piece)
    assert len(list(as_jax(DataLoader(make_data(9), 3)))) == 3

    # a loader-like object with no dtype, n, even_batches or drop_last: float64's rule
    class Like:
        batch_size = 4

        def __iter__(self):
            return iter(())  # (no peek)

        def state_dict(self):
            return {}

        def load_state_dict(self, state):
            pass

    like = Like()
    assert JaxLoader(like).dtype == np.float32
    with jax.enable_x64(True):
        assert JaxLoader(like).dtype == np.float64
        assert as_jax(loader_of(20, 4, dtype=np.float32)).dtype == np.float32
    with pytest.raises(TypeError) as e:
        iter(JaxLoader(like))
    assert str(e.value) == (
        "as_jax needs an exactbatch DataLoader, whose iterator reads ahead with peek(); got Like"
    )


def test_a_new_epoch_closes_the_one_in_progress():
    """iter() again: the older epoch gives its batches back and stops; the new one is the
    loader's next epoch, as after leaving a loader's own loop."""
    loader = loader_of(200, 10)
    jl = as_jax(loader, prefetch=3)
    ref = loader_of(200, 10)
    want = [[ids(xb) for xb, _ in ref] for _ in range(2)]
    old = iter(jl)
    assert ids(np.asarray(next(old)[0])) == want[0][0]
    new = iter(jl)
    with pytest.raises(StopIteration):
        next(old)
    assert [ids(np.asarray(xb)) for xb, _ in new] == want[1]


def test_host_batches_are_the_loaders_own_when_nothing_changes():
    """A batch of the put's dtype and rows is put as the loader's own arrays (no copy);
    a cast or a pad copies, in the dtype asked for, features and labels alike, and under
    64-bit JAX a float32 adapter's labels and masks are float32 too."""
    loader = loader_of(20, 8, dtype=np.float32)
    jl = as_jax(loader)
    xb, yb = next(iter(loader_of(20, 8, dtype=np.float32)))
    hx, hy = jl.host_pair(xb, yb, 8)
    assert hx is xb and hy is yb
    px, py = jl.host_pair(xb, yb, 10)
    assert px.shape == (10, 3) and py.shape == (10, 1) and not px[8:].any()
    labels = yb.astype(np.int32)
    cx, cy = jl.host_pair(xb, labels, 10)
    assert cx.dtype == np.float32 and cy.dtype == np.int32 and cx is not xb
    with pytest.raises(ValueError) as e:
        jl.host_pair(xb, np.full((8, 1), 2**40, np.int64), 8)
    assert str(e.value) == (
        "label_dtype=int64 labels beyond int32's range, which JAX without jax_enable_x64 "
        "cannot hold: enable x64, or use smaller class ids"
    )
    with jax.enable_x64(True):
        got = list(as_jax(loader_of(20, 8), dtype="float32", pad_last=True))
    assert all(a.dtype == np.float32 for b in got for a in b)
    assert [np.asarray(m).tolist().count(1.0) for _, _, m in got] == [8, 8, 4]
    rows = list(as_jax(loader_of(20, 8, with_rows=True), pad_last=True))
    assert [b[2].shape for b in rows] == [(8,)] * 3
