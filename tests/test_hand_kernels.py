"""A hand-out's steps in the compiled core and their pure twins: the read of a batch of
an epoch's whole order into the caller's buffers (``read_run``) or a new pair
(``take_run``), and a wait counted in a telemetry slot; the same bytes and counts on
both backends, and bad arguments refused with a message naming them."""

from __future__ import annotations

import numpy as np
import pytest
from backends import on_backend
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch import kernels
from exactbatch.arrays import ALIGN
from exactbatch.loader import telemetry

COMPILED = kernels.backend() == "compiled"
needs_core = pytest.mark.skipif(
    not COMPILED, reason="the compiled core is not in use (not built, or EXACTBATCH_PURE=1)"
)


def _both(x, y):
    """``{backend: (read_run, take_run)}`` over the rows ``x``, ``y`` of each backend."""
    out = {}
    for name in ("compiled", "numpy"):
        with on_backend(name):
            out[name] = kernels.run_reads(kernels.memory_rows(x, y))
    return out


@needs_core
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_a_run_of_the_order_reads_the_same_bytes_on_both_backends(data):
    n = data.draw(st.integers(1, 50))
    d, l = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 2))  # noqa: E741
    dtype = np.dtype(data.draw(st.sampled_from([np.float64, np.float32])))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    x, y = rng.standard_normal((n, d)) * 1e3, rng.standard_normal((n, l))
    order = rng.permutation(n).astype(data.draw(st.sampled_from([np.int32, np.int64])))
    start = data.draw(st.integers(0, n))
    size = data.draw(st.integers(0, n - start))
    extra = data.draw(st.integers(0, 3))  # buffers of more rows: the first size written
    want_x, want_y = x[order[start : start + size]], y[order[start : start + size]]
    got = {}
    for name, (read_run, take_run) in _both(x, y).items():
        bx = np.full((size + extra, d), -7.0, dtype=dtype)
        by = np.full((size + extra, l), -7.0, dtype=dtype)
        assert read_run(order, start, size, bx, by) is None
        tx, ty = take_run(order, start, size, dtype, None)
        assert tx.shape == (size, d) and ty.shape == (size, l)
        assert tx.dtype == dtype and ty.dtype == dtype
        assert tx.flags.c_contiguous and tx.flags.writeable and ty.flags.writeable
        if size and d:
            assert tx.ctypes.data % ALIGN == 0  # batch_pair's layout: x on a cache line
        np.testing.assert_array_equal(bx[:size], want_x.astype(dtype))
        np.testing.assert_array_equal(by[:size], want_y.astype(dtype))
        assert (bx[size:] == -7.0).all() and (by[size:] == -7.0).all()  # the rest untouched
        np.testing.assert_array_equal(tx, bx[:size])
        np.testing.assert_array_equal(ty, by[:size])
        got[name] = (bx.tobytes(), by.tobytes(), tx.tobytes(), ty.tobytes())
    assert got["compiled"] == got["numpy"]  # bit for bit


@needs_core
def test_take_run_gives_float64_labels_under_float32_features():
    x, y = np.arange(12.0).reshape(6, 2), np.arange(6.0).reshape(6, 1) + 0.1
    order = np.array([5, 0, 3, 1, 2, 4], dtype=np.int32)
    for _, take_run in _both(x, y).values():
        tx, ty = take_run(order, 1, 3, np.dtype(np.float32), np.dtype(np.float64))
        assert tx.dtype == np.float32 and ty.dtype == np.float64
        assert ty[:, 0].tolist() == [0.1, 3.1, 1.1]


@needs_core
def test_the_compiled_run_reads_refuse_bad_arguments_naming_them():
    x, y = np.zeros((10, 3)), np.zeros((10, 1))
    rows = kernels.memory_rows(x, y)
    order = np.arange(10, dtype=np.int32)
    bx, by = np.empty((4, 3)), np.empty((4, 1))
    with pytest.raises(IndexError, match=r"order\[8:12\] is not within its 10 rows"):
        rows.read_run(order, 8, 4, bx, by)
    with pytest.raises(IndexError, match="order"):
        rows.read_run(order, -1, 2, bx, by)
    for bad in (order.astype(np.float64), order.reshape(2, 5), order[::2], list(range(10))):
        with pytest.raises(TypeError, match="order must be a 1-D"):
            rows.read_run(bad, 0, 2, bx, by)
    readonly = np.empty((4, 3))
    readonly.flags.writeable = False
    for ox, oy in (
        (np.empty((3, 3)), by),  # fewer rows than the batch
        (np.empty((4, 2)), by),  # another width
        (bx, np.empty((4, 1), dtype=np.float32)),  # float32 labels under float64 x
        (np.empty((4, 3), dtype=np.int64), by),
        (readonly, by),
        (np.asfortranarray(np.empty((4, 3))), by),
        (bytearray(96), by),
    ):
        with pytest.raises(TypeError, match="out_x and out_y must be writeable"):
            rows.read_run(order, 0, 4, ox, oy)
    with pytest.raises(TypeError, match="dtype must be float64 or float32"):
        rows.take_run(order, 0, 2, np.dtype(np.int64), None)
    with pytest.raises(TypeError, match="dtype must be float64 or float32"):
        rows.take_run(order, 0, 2, "float64", None)  # a dtype, not its name
    with pytest.raises(IndexError, match="row 99 out of range for n=10 rows"):
        rows.read_run(np.array([1, 99], dtype=np.int64), 0, 2, bx, by)
    with pytest.raises(TypeError, match="takes 5 arguments"):
        rows.read_run(order, 0, 2, bx)


def test_a_wait_is_counted_alike_on_both_backends():
    """The compiled ``waited`` and its twin add a wait's ns at ``at`` and, with a
    histogram, one in that wait's bucket; both return the clock's now."""
    counts = [telemetry._count]
    if COMPILED:
        counts.append(kernels.core().waited)
    for count in counts:
        for ns in (0, 5, 1000, 70_000, 3_000_000_000):
            slot = [0] * telemetry._SLOT
            t0 = telemetry.perf_counter_ns() - ns
            now = count(slot, t0, telemetry._BOTH_NS, telemetry._HIST)
            took = now - t0
            assert took >= ns and slot[telemetry._BOTH_NS] == took
            assert slot[telemetry._HIST + telemetry._bucket(took)] == 1
            assert sum(slot) == took + 1
            slot2 = [0] * telemetry._SLOT
            now = count(slot2, t0, telemetry._WAIT_NS, -1)  # no histogram: a wait only
            assert slot2[telemetry._WAIT_NS] == now - t0 and sum(slot2) == now - t0


class _Reports:
    """A loader's report, as a Telemetry holds it (weakly: a bound method)."""

    def stats(self):
        return {"stats": True}


@pytest.mark.parametrize("backend", ["compiled", "numpy"])
def test_a_wait_on_a_telemetry_is_recorded_alike_on_both_backends(backend):
    """``waited_on`` (next_into's one call a batch) counts into the calling thread's
    slot, made at its first record, and calls the progress report once it is due."""
    import threading

    if backend == "compiled" and not COMPILED:
        pytest.skip("the compiled core is not in use")
    with on_backend(backend):
        tel = telemetry.Telemetry()
    twin = telemetry.waited_on if backend == "numpy" else kernels.core().waited_on
    assert tel.waited_on is twin
    reports, owner = [], _Reports()
    tel.report_to(reports.append, 3600.0, owner.stats)
    at, hist = tel.waiter(True)
    assert (at, hist) == (telemetry._BOTH_NS, telemetry._HIST)
    assert tel.waiter(False) == (telemetry._WAIT_NS, -1)
    t0 = telemetry.perf_counter_ns() - 1000
    assert tel.waited_on(tel, t0, at, hist) is None
    (slot,) = tel._slots  # made at the first record
    assert slot[telemetry._BOTH_NS] >= 1000 and sum(slot[telemetry._HIST :]) == 1
    assert not reports  # not due for an hour

    def other():
        tel.waited_on(tel, telemetry.perf_counter_ns(), telemetry._WAIT_NS, -1)

    th = threading.Thread(target=other)
    th.start()
    th.join()
    assert len(tel._slots) == 2 and tel._slots[1][telemetry._WAIT_NS] >= 0
    assert sum(tel._slots[1][telemetry._HIST :]) == 0  # no histogram: a wait only
    tel._due = 0  # due now: the report is made, and the next one an hour on
    tel.waited_on(tel, telemetry.perf_counter_ns(), at, hist)
    assert reports == [{"stats": True}] and tel._due > telemetry.perf_counter_ns()
    with pytest.raises(TypeError):
        tel.waited_on(tel, t0, at)


def _order_run(n: int, b: int, with_rows: bool = False):
    """An :class:`OrderRun` over a shuffled order of ``n`` rows in batches of ``b``."""
    from exactbatch.batching.random_access_epoch import OrderRun
    from exactbatch.order.digest import batch_digests

    x, y = np.arange(float(n)).reshape(n, 1), np.zeros((n, 0))
    rows = np.random.default_rng(n).permutation(n).astype(np.int32)
    reader = kernels.memory_rows(x, y)
    return OrderRun(reader, rows, batch_digests(rows, b).data, b, n, np.float64, with_rows)


@needs_core
@pytest.mark.parametrize("with_rows", [False, True])
@pytest.mark.parametrize(("n", "b", "k0", "k1"), [(100, 7, 0, 15), (100, 7, 3, 9), (64, 8, 7, 8)])
def test_a_claims_jobs_are_the_same_tuples_on_both_backends(n, b, k0, k1, with_rows):
    run = _order_run(n, b, with_rows)
    made = run.jobs(k0, k1)  # in C
    run.make = None
    twin = run.jobs(k0, k1)  # its twin
    assert [type(j) for j in made] == [type(j) for j in twin] == [run.job] * (k1 - k0)
    assert made == twin  # run, k, size, digest, start: item for item
    assert [j.size for j in made][-1] == min(b, n - (k1 - 1) * b)
    assert all(j.run is run and j.start == j.k * b for j in made)


@needs_core
def test_run_jobs_refuses_bad_arguments_naming_them():
    run = _order_run(20, 8)
    make = kernels.core().run_jobs
    with pytest.raises(IndexError, match="batches 0 .. 4 of 20 rows in batches of 8"):
        make(run.job, run, 0, 4, 8, 20, run.digests)  # batch 3 would start at row 24
    with pytest.raises(IndexError, match="with 3 digests"):
        make(run.job, run, 0, 4, 8, 40, run.digests)
    with pytest.raises(TypeError, match="digests must be a 1-D uint64"):
        make(run.job, run, 0, 1, 8, 20, np.zeros(3).data)
    with pytest.raises(TypeError, match="job_type must be a subclass of tuple"):
        make(list, run, 0, 1, 8, 20, run.digests)
    assert make(run.job, run, 2, 2, 8, 20, run.digests) == []
