"""The compiled core's own edges, in C terms (``exactbatch._core``; the backends side by
side are tests/test_kernels.py's): what its functions refuse, that a read writes nothing
outside its out buffers and lets go of every buffer it was given, that a failed
allocation is a MemoryError and a missing NumPy an ImportError, never a crash. Most of
these were found by the ``core`` target of ``make mutants`` (docs/development.md).
"""

from __future__ import annotations

import array
import mmap
import os
import sys

import numpy as np
import pytest
from helpers import make_data, run_compiled

from exactbatch import kernels, open_ndf, save_ndf

core = pytest.importorskip("exactbatch._core", reason="the compiled core is not built")


@pytest.fixture
def readers(tmp_path):
    """``readers(x, y)``: ``(name, reader)`` for rows ``x``/``y`` in each place the core
    reads them from: two arrays, columns of one array of whole rows (one pass a row for
    a shuffled read), an .ndf file's mapping, a dataset of one part (its file is closed
    after the test), a dataset of two parts in memory (two arrays, then whole rows)."""
    fds = []

    def make(x, y):
        n, d, l = x.shape[0], x.shape[1], y.shape[1]  # noqa: E741
        whole = np.hstack([x, y])
        path = tmp_path / f"rows-{d}-{l}.ndf"
        save_ndf(path, (x, y))
        fds.append(os.open(path, os.O_RDONLY))
        mapping = mmap.mmap(fds[-1], 0, access=mmap.ACCESS_READ)
        file = core.file_rows(mapping, 28, n, d, l, fds[-1], os.fstat(fds[-1]).st_size, -1, -1)
        parts = core.parts_rows(np.array([0, n], dtype=np.int64), d, l)
        parts.set(0, file)
        # a dataset of two parts in memory, x and y each its own array (an elastic
        # stream's chunks as they came: the parts read two bases a part)
        half = n // 2
        split = core.parts_rows(np.array([0, half, n], dtype=np.int64), d, l)
        split.set(0, core.memory_rows(x[:half], y[:half]))
        split.set(1, core.memory_rows(whole[half:, :d], whole[half:, d:]))
        return [
            ("memory", core.memory_rows(x, y)),
            ("columns", core.memory_rows(whole[:, :d], whole[:, d:])),
            ("file", file),
            ("parts", parts),
            ("memory parts", split),
        ]

    yield make
    for fd in fds:
        os.close(fd)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_read_writes_its_out_buffers_exactly_and_nothing_around_them(readers, dtype):
    """Every width the copy loops treat apart (1 to 4 values a row, and wider), either
    dtype, shuffled, sorted and a run of rows, from every kind of reader: the out buffers
    hold the rows, and the values just before and after them are untouched."""
    rng = np.random.default_rng(5)
    pad = 4
    mark = np.frombuffer(b"\xa5" * 8, dtype=dtype)[0]  # no byte of it is a copied value's
    for d, l in [(1, 0), (2, 1), (3, 2), (4, 4), (5, 1), (6, 3), (0, 3)]:  # noqa: E741
        x, y = make_data(40, d, l)
        for name, reader in readers(x, y):
            for rows in (rng.permutation(40)[:24], np.arange(7, 31).astype(np.int32), slice(3, 27)):
                want = np.arange(40)[rows]
                bx = np.full(len(want) * d + 2 * pad, mark, dtype=dtype)
                by = np.full(len(want) * l + 2 * pad, mark, dtype=dtype)
                ox = bx[pad : pad + len(want) * d].reshape(len(want), d)
                oy = by[pad : pad + len(want) * l].reshape(len(want), l)
                assert reader.read(rows, ox, oy) is None
                np.testing.assert_array_equal(ox, x[want].astype(dtype), err_msg=name)
                np.testing.assert_array_equal(oy, y[want].astype(dtype), err_msg=name)
                for around in (bx[:pad], bx[-pad:], by[:pad], by[-pad:]):
                    assert around.tobytes() == b"\xa5" * around.nbytes, (name, d, l, rows)


def test_a_read_lets_go_of_every_buffer_it_was_given(readers):
    """The rows and out buffers of a read (here array.array's, which refuse to grow while
    a buffer of theirs is held) are let go of when it returns, also after an error."""
    x, y = make_data(10, 2, 1)
    for name, reader in readers(x, y):
        for rows, r, outs, error in [  # (rows, their typecode), out_x's length, out_y's typecode
            (([3, 1], "q"), 4, "d", None),
            (([3, 10], "i"), 4, "d", IndexError),
            (([3, 1], "q"), 5, "d", ValueError),
            (([3, 1], "q"), 4, "f", TypeError),
            (([3, 1], "d"), 4, "d", TypeError),
        ]:
            rows = array.array(rows[1], rows[0])
            ox, oy = array.array("d", [0] * r), array.array(outs, [0] * 2)
            if error is None:
                assert reader.read(rows, ox, oy) is None
                assert list(ox) == x[[3, 1]].ravel().tolist(), name
            else:
                with pytest.raises(error):
                    reader.read(rows, ox, oy)
            for held in (rows, ox, oy):
                held.append(0)  # a BufferError if a buffer of it were still held


def test_rows_objects_let_go_of_their_arrays_and_mapping():
    x, y = make_data(10, 2, 1)
    before = sys.getrefcount(x), sys.getrefcount(y)
    rows = core.memory_rows(x, y)
    assert (sys.getrefcount(x), sys.getrefcount(y)) == (before[0] + 1, before[1] + 1)
    del rows
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before


def test_the_kernel_refuses_what_it_cannot_read(tmp_path):
    """Slices other than a run in [0, n), rows that are no buffer, a negative offset or
    shape, a mapping of no length, and pair_fits' sizes that are no ints."""
    x, y = make_data(10, 2, 1)
    rows = core.memory_rows(x, y)
    ox, oy = np.empty((2, 2)), np.empty((2, 1))
    for bad in (slice(-1, 1), slice(0, 4, 2), slice(9, 11), slice(5, 3)):
        with pytest.raises(IndexError, match="out of range for n=10"):
            rows.read(bad, ox, oy)
    with pytest.raises(TypeError):
        rows.read([1, 2], ox, oy)  # a list: no buffer
    save_ndf(tmp_path / "a.ndf", (x, y))
    fd = os.open(tmp_path / "a.ndf", os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        size = os.fstat(fd).st_size
        for off, n, d, l in [(-1, 10, 2, 1), (28, -1, 2, 1), (28, 10, -1, 1), (28, 10, 2, -1)]:  # noqa: E741
            with pytest.raises(ValueError, match="file_rows: negative offset or shape"):
                core.file_rows(mm, off, n, d, l, fd, size, -1, -1)
        # rows from byte 0 (the header read as a row of 3.5 values: only where they lie matters)
        whole = core.file_rows(mm, 4, 1, 3, 0, fd, size, -1, -1)
        head = core.file_rows(mm, 0, 1, 3, 0, fd, size, -1, -1)
        a, b = np.empty((1, 3)), np.empty((1, 3))
        whole.read(slice(0, 1), a, np.empty((1, 0)))
        head.read(slice(0, 1), b, np.empty((1, 0)))
        assert a.tobytes()[:20] == b.tobytes()[4:24]
        del whole, head  # (they hold the mapping)
        for length in (0, -1):
            with pytest.raises(ValueError, match="map_file: length must be positive"):
                core.map_file(fd, length)
        mm.close()
    finally:
        os.close(fd)
    with pytest.raises(TypeError):
        core.pair_fits(ox, oy, "2", 2, 1, 8)
    with pytest.raises(TypeError, match="takes 6 arguments"):
        core.pair_fits(ox, oy, 2, 2, 1)


def test_a_time_of_zero_is_checked_only_none_is_not(tmp_path):
    """file_rows' times: any value >= 0 is compared with the file's (0 is a time, the
    epoch's); only what kernels.file_rows gets as None (-1 here) is left unchecked."""
    save_ndf(tmp_path / "a.ndf", make_data(4, 1, 1))
    with open_ndf(tmp_path / "a.ndf") as f:
        fd = f._handle().fd
        size = os.fstat(fd).st_size
        mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        ox, oy = np.empty((1, 1)), np.empty((1, 1))
        core.file_rows(mm, 28, 4, 1, 1, fd, size, -1, -1).read(slice(0, 1), ox, oy)
        for times in ((0, -1), (-1, 0)):
            with pytest.raises(kernels.FileChanged):
                core.file_rows(mm, 28, 4, 1, 1, fd, size, *times).read(slice(0, 1), ox, oy)
        mm.close()


def test_the_core_without_numpy_is_an_error_as_it_loads():
    """The extension looks up numpy.ndarray as it loads (pair_fits accepts no other
    buffer): without NumPy, or with a numpy that has no ndarray, loading it is an error,
    never a crash or a module that half works."""
    r = run_compiled(
        """
        import importlib.util, sys, types
        for numpy in (None, types.ModuleType("numpy")):  # import numpy fails; no ndarray
            sys.modules["numpy"] = numpy
            spec = importlib.util.spec_from_file_location("exactbatch._core", sys.argv[1])
            try:
                spec.loader.exec_module(importlib.util.module_from_spec(spec))
            except (ImportError, AttributeError) as e:
                print(type(e).__name__, "numpy" in str(e) or "ndarray" in str(e))
        """,
        core.__file__,
    )
    want = ["ModuleNotFoundError", "True", "AttributeError", "True"]
    assert r.stdout.split() == want, (r.returncode, r.stdout, r.stderr[-2000:])


_ALLOCATIONS = """
    import os, sys
    import numpy as np
    import _testcapi
    from exactbatch import _core, open_ndf, save_ndf

    x, y = np.arange(40.0).reshape(10, 4), np.arange(10.0).reshape(10, 1)
    save_ndf(sys.argv[1], (x, y))
    f = open_ndf(sys.argv[1])
    fd, size = f._handle().fd, os.fstat(f._handle().fd).st_size
    mapping = _core.map_file(fd, size)
    starts = np.array([0, 4, 10], dtype=np.int64)
    unset = _core.parts_rows(starts, 4, 1)  # its reads name the parts to set: a list
    parts = _core.parts_rows(starts, 4, 1)
    for k, (a, b) in enumerate([(0, 4), (4, 10)]):
        save_ndf(f"{sys.argv[1]}.{k}", (x[a:b], y[a:b]))
    held = [open_ndf(f"{sys.argv[1]}.{k}") for k in range(2)]
    for k in range(2):
        parts.set(k, held[k].kernel_rows())
    idx, ox, oy = np.array([9, 0, 5]), np.empty((3, 4)), np.empty((3, 1))
    step = (True, 3, 5, 7, -(-(1 << 64) // 7))
    calls = {
        "memory_rows": lambda: _core.memory_rows(x, y),
        "file_rows": lambda: _core.file_rows(mapping, 28, 10, 4, 1, fd, size, -1, -1),
        "map_file": lambda: _core.map_file(fd, size),
        "parts_rows": lambda: _core.parts_rows(starts, 4, 1),
        "Rows.read": lambda: f.kernel_rows().read(idx, ox, oy),
        "Parts.read": lambda: parts.read(idx, ox, oy),
        "Parts.read (to set)": lambda: unset.read(idx, ox, oy),
        "bijection": lambda: _core.bijection(49, 7, False, [step] * 3),
    }
    for name, call in calls.items():
        failed = 0
        for k in range(1000):
            _testcapi.set_nomemory(k, k + 1)  # the k-th allocation from here fails
            try:
                call()
            except MemoryError:
                failed += 1
                continue
            finally:
                _testcapi.remove_mem_hooks()
            break
        print(name, failed > 0, flush=True)
"""


def test_a_failed_allocation_is_a_memory_error_never_a_crash(tmp_path):
    """Each allocation a function of the core makes is failed in turn (CPython's
    _testcapi.set_nomemory): every failure is a MemoryError, and the call then works."""
    pytest.importorskip("_testcapi")
    r = run_compiled(_ALLOCATIONS, tmp_path / "a.ndf")
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-3000:])
    assert all(line.endswith(" True") for line in r.stdout.splitlines()), r.stdout
    assert len(r.stdout.splitlines()) == 8, r.stdout


# -- the transform fused into the gather (_core_transform.c) --------------------------------


def _transform_reference(x, mean, scale, fill, dtype):
    v = (x - mean) * scale
    first = np.isnan(v).any(axis=1)
    if fill is not None:
        v = np.where(np.isnan(v), fill, v)
    return v.astype(dtype), int(first.argmax()) if first.any() else -1


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_transformed_read_maps_x_as_it_copies_and_writes_nothing_around(readers, dtype):
    """Every reader, widths narrow and wide (the prefetching loop from 5 values a row),
    shuffled, int32, a slice: x is (v - mean) * scale with NaN filled, y copied as it is
    (float64 under float32 x too), the result the first row whose x held a NaN."""
    rng = np.random.default_rng(8)
    pad = 4
    mark = np.frombuffer(b"\xa5" * 8, dtype=dtype)[0]
    for d, l in [(1, 1), (3, 0), (5, 2), (7, 1)]:  # noqa: E741
        x, y = make_data(40, d, l)
        x[[9, 21], d - 1] = np.nan
        mean, scale = rng.normal(size=d), rng.uniform(0.5, 2.0, d)
        for fill in (None, -2.0):
            tf = core.transform(mean, scale, fill)
            for name, reader in readers(x, y):
                for rows in (
                    rng.permutation(40)[:30],
                    np.arange(7, 31).astype(np.int32),
                    slice(3, 27),
                ):
                    want = np.arange(40)[rows]
                    for ydt in {dtype, np.float64}:
                        bx = np.full(len(want) * d + 2 * pad, mark, dtype=dtype)
                        ox = bx[pad : pad + len(want) * d].reshape(len(want), d)
                        oy = np.empty((len(want), l), dtype=ydt)
                        first = reader.read(rows, ox, oy, tf)
                        ref, ref_first = _transform_reference(x[want], mean, scale, fill, dtype)
                        assert ox.tobytes() == ref.tobytes(), (name, d, l, fill)
                        assert first == ref_first, (name, rows)
                        np.testing.assert_array_equal(oy, y[want].astype(ydt))
                        for around in (bx[:pad], bx[-pad:]):
                            assert around.tobytes() == b"\xa5" * around.nbytes


def test_a_read_takes_a_transform_kernel_or_none_and_refuses_anything_else(readers):
    x, y = make_data(10, 2, 1)
    kern = kernels.TransformKernel(np.array([1.0, 2.0]), np.array([0.5, 0.25]), 0.0)
    ox, oy = np.empty((3, 2)), np.empty((3, 1))
    for name, reader in readers(x, y):
        assert reader.read(np.array([1, 2, 3]), ox, oy, None) is None, name
        assert reader.read(np.array([1, 2, 3]), ox, oy, kern) == -1, name
        np.testing.assert_array_equal(ox, (x[1:4] - [1.0, 2.0]) * [0.5, 0.25])
        with pytest.raises(TypeError, match="transform must be a Transform"):
            reader.read(np.array([1]), ox[:1], oy[:1], object())
        with pytest.raises(ValueError, match="a transform of 3 features for rows of 2"):
            reader.read(
                np.array([1]), ox[:1], oy[:1], core.transform(np.zeros(3), np.ones(3), None)
            )
        with pytest.raises(TypeError, match="takes 3 arguments"):
            reader.read(np.array([1]), ox[:1], oy[:1], None, None, None)
        with pytest.raises(TypeError, match="same dtype"):  # float32 labels under float64 x
            reader.read(np.array([1]), ox[:1], np.empty((1, 1), dtype=np.float32), kern)


def test_transform_refuses_arrays_that_are_not_1d_float64_of_one_width():
    assert isinstance(core.transform(np.zeros(2), np.ones(2), 1), core.Transform)
    assert isinstance(core.transform(np.zeros(0), np.ones(0), None), core.Transform)
    for mean, scale, fill, error in [
        (np.zeros(2), np.ones(3), None, r"scale must be as long as mean \(2\); got 3"),
        (np.zeros(2, dtype=np.float32), np.ones(2), None, "mean must be a 1-D float64"),
        (np.zeros((2, 1)), np.ones(2), None, "mean must be a 1-D float64"),
        (np.zeros(2), np.ones(2, dtype=np.int64), None, "scale must be a 1-D float64"),
    ]:
        with pytest.raises(ValueError, match=error):
            core.transform(mean, scale, fill)
    with pytest.raises(TypeError):
        core.transform(np.zeros(2), np.ones(2), "0")
    with pytest.raises(TypeError):
        core.transform([0.0], np.ones(1), None)
    with pytest.raises(TypeError):
        core.transform(np.zeros(1), [1.0], None)
    with pytest.raises(TypeError):
        core.transform(np.zeros(1), np.ones(1))  # three arguments
    t = core.transform(np.array([1.0, 2.0]), np.array([4.0, 8.0]), -3)
    out, nan = np.empty((1, 2)), np.array([[np.nan, 3.0]])
    assert (
        core.memory_rows(nan, np.empty((1, 0))).read(np.array([0]), out, np.empty((1, 0)), t) == 0
    )
    assert out.tolist() == [[-3.0, 8.0]]  # the fill as given; (3 - 2) * 8


def test_a_transformed_read_names_the_first_row_with_a_nan_even_at_position_0(readers):
    """The first row holding a NaN is kept, not a later one (rows 0 and 1 both hold one)."""
    x, y = make_data(10, 5, 1)
    x[[2, 7], 1] = np.nan
    tf = core.transform(np.zeros(5), np.ones(5), None)
    ox, oy = np.empty((3, 5)), np.empty((3, 1))
    for name, reader in readers(x, y):
        assert reader.read(np.array([7, 2, 4]), ox, oy, tf) == 0, name
        assert reader.read(np.array([4, 7, 2]), ox, oy, tf) == 1, name
        assert reader.read(slice(2, 5), ox, oy, tf) == 0, name
