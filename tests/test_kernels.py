"""The two backends (exactbatch.kernels): the compiled core and the pure NumPy path.

Laws: both give bit-identical batches, for any rows, index kind (slices, runs,
repeats, int32 and int64) and output dtype; ``backend()`` says which runs and
``EXACTBATCH_PURE=1`` selects the pure path; a loader's ``dtype`` is float64
or float32 for every kind of source, the cast happening in the gather, and a
wrong dtype (of the loader, or of ``next_into``'s buffers) is an error that
names it; a mapped ``.ndf`` truncated during the copies is an ``NdfError``,
never a crash (the compiled core's fault guard).
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from backends import built, on_backend
from helpers import TRUNCATE_LOOP, chunks_of, make_data, write_parquet
from hypothesis import given, settings
from hypothesis import strategies as st

import exactbatch
from exactbatch import DataLoader, kernels, ndf_blocks, open_ndf, parquet_source, save_ndf
from exactbatch.parts import parts_rows

COMPILED = kernels.backend() == "compiled"
needs_core = pytest.mark.skipif(
    not COMPILED, reason="the compiled core is not in use (not built, or EXACTBATCH_PURE=1)"
)


def _run(code: str, **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )


# -- which backend -----------------------------------------------------------------------


def test_backend_is_exported_and_says_compiled_or_numpy():
    assert "backend" in exactbatch.__all__
    assert exactbatch.backend() in ("compiled", "numpy")
    assert exactbatch.backend() == kernels.backend()


@pytest.mark.parametrize(
    "value, want",
    [
        ("1", "numpy"),
        ("0", None),
        ("", None),
        ("false", None),  # selected the pure path before: any value but 0 did
        (" No ", None),
    ],
)
def test_exactbatch_pure_selects_the_numpy_path(value, want):
    """EXACTBATCH_PURE (read at import): 1/true/yes/on select the pure path; 0/false/no/off
    or empty do not; case and spaces aside."""
    r = _run("import exactbatch; print(exactbatch.backend())", EXACTBATCH_PURE=value)
    assert r.returncode == 0, r.stderr
    expected = want or ("compiled" if built() else "numpy")  # (the same files as the child's)
    assert r.stdout.strip() == expected


def test_exactbatch_pure_reads_the_documented_words(monkeypatch):
    """Every documented word, in any case and with spaces around, read as documented."""
    for words, want in (("1 true yes on", True), ("0 false no off", False)):
        for word in words.split():
            for value in (word, word.upper(), f" {word.title()} "):
                monkeypatch.setenv("EXACTBATCH_PURE", value)
                assert kernels._pure_from_env() is want, value
    monkeypatch.setenv("EXACTBATCH_PURE", "")
    assert kernels._pure_from_env() is False
    monkeypatch.setenv("EXACTBATCH_PURE", "y")
    with pytest.raises(ValueError, match="EXACTBATCH_PURE='y'"):
        kernels._pure_from_env()


@pytest.mark.parametrize("value", ["ture", "2"])
def test_exactbatch_pure_of_another_value_is_an_error_naming_it(value):
    """A value that is none of the words: import fails, naming the variable and the
    value, instead of picking a backend silently."""
    r = _run("import exactbatch", EXACTBATCH_PURE=value)
    assert r.returncode != 0
    assert f"ValueError: EXACTBATCH_PURE={value!r}: expected 1/true/yes/on" in r.stderr


def test_use_backend_refuses_a_bad_name():
    with pytest.raises(ValueError) as info:
        kernels.use_backend("fortran")
    assert str(info.value) == "backend must be 'compiled' or 'numpy'; got 'fortran'"


def test_use_backend_switches_the_factories_and_returns_the_backend_before(monkeypatch):
    """Each switch is seen by backend(), core() and the factories, and returns the
    backend in use before it; "compiled" where the core is not built is refused, naming
    why, and changes nothing."""
    start = kernels.backend()
    try:
        assert kernels.use_backend("numpy") == start
        assert kernels.backend() == "numpy" and kernels.core() is None
        assert kernels.use_backend("numpy") == "numpy"
        assert kernels.pair_check() is kernels._numpy_pair_fits
        if built():
            assert kernels.use_backend("compiled") == "numpy"
            assert kernels.backend() == "compiled" and kernels.core() is kernels._BUILT
            assert kernels.pair_check() is kernels._BUILT.pair_fits
            assert kernels.use_backend("numpy") == "compiled"
        monkeypatch.setattr(kernels, "_BUILT", None)
        with pytest.raises(ValueError) as info:
            kernels.use_backend("compiled")
        assert str(info.value) == "the compiled backend is not built (see docs/development.md)"
        assert kernels.backend() == "numpy"
    finally:
        monkeypatch.undo()
        kernels.use_backend(start)


# -- identical batches --------------------------------------------------------------------


def _index_kinds():
    """Row selections of a source of n rows: slices, sorted runs, scattered rows with
    repeats; int32 or int64."""

    @st.composite
    def pick(draw, n):
        kind = draw(st.sampled_from(["slice", "runs", "scattered"]))
        if kind == "slice":
            a = draw(st.integers(0, n))
            return slice(a, draw(st.integers(a, n)))
        if kind == "runs":
            pieces = []
            for _ in range(draw(st.integers(0, 4))):
                a = draw(st.integers(0, n - 1))
                pieces.append(np.arange(a, min(n, a + draw(st.integers(1, 9)))))
            rows = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.int64)
        else:
            rows = np.array(draw(st.lists(st.integers(0, n - 1), max_size=40)), dtype=np.int64)
        return rows.astype(draw(st.sampled_from([np.int32, np.int64])))

    return pick


def _read_both(make, rows, r, d, l, dtype):  # noqa: E741
    """The rows read through ``make()``'s reader on each backend."""
    out = []
    for name in ("compiled", "numpy"):
        with on_backend(name):
            read = make()
            ox, oy = np.full((r, d), np.nan, dtype=dtype), np.full((r, l), np.nan, dtype=dtype)
            read(rows, ox, oy)
            out.append((ox, oy))
    return out


@needs_core
@settings(max_examples=150)
@given(data=st.data())
def test_the_backends_gather_identical_rows_from_memory(data):
    n = data.draw(st.integers(1, 60))
    d, l = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 3))  # noqa: E741
    dtype = data.draw(st.sampled_from([np.float64, np.float32]))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    # values that float32 rounds (and some it cannot hold: overflow to inf, NaN)
    x = rng.standard_normal((n, d)) * 10.0 ** rng.integers(-50, 50, (n, d))
    y = rng.standard_normal((n, l))
    if n > 1 and d:
        x[1, 0] = np.nan
    # x and y as arrays of their own, or as columns of one array of whole rows (a
    # shuffle buffer's: y just after x, copied in one pass; or apart)
    gap = data.draw(st.sampled_from([None, 0, 2]))
    if gap is not None:
        w = np.zeros((n, d + gap + l))
        w[:, :d], w[:, d + gap :] = x, y
        x, y = w[:, :d], w[:, d + gap :]
    rows = data.draw(_index_kinds()(n))
    r = rows.stop - rows.start if isinstance(rows, slice) else len(rows)
    with np.errstate(over="ignore"):
        (cx, cy), (px, py) = _read_both(
            lambda: kernels.memory_rows(x, y).read, rows, r, d, l, dtype
        )
        want = x[rows].astype(dtype), y[rows].astype(dtype)
    for got in ((cx, cy), (px, py)):
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    assert cx.tobytes() == px.tobytes() and cy.tobytes() == py.tobytes()  # bit for bit


@needs_core
@settings(max_examples=60)
@given(data=st.data())
def test_the_backends_read_identical_rows_from_an_ndf_file(data, tmp_path_factory):
    n = data.draw(st.integers(1, 50))
    d, l = data.draw(st.integers(0, 4)), data.draw(st.integers(0, 3))  # noqa: E741
    if d + l == 0:
        d = 1
    dtype = data.draw(st.sampled_from([np.float64, np.float32]))
    x, y = np.random.default_rng(n).standard_normal((n, d)), np.arange(n * l).reshape(n, l)
    path = tmp_path_factory.mktemp("both") / "f.ndf"
    save_ndf(path, (x, y))
    rows = data.draw(_index_kinds()(n))
    r = rows.stop - rows.start if isinstance(rows, slice) else len(rows)
    files = []

    def make():
        files.append(open_ndf(path))
        return files[-1].rows_reader()

    (cx, cy), (px, py) = _read_both(make, rows, r, d, l, dtype)
    for f in files:
        f.close()
    np.testing.assert_array_equal(cx, x[rows].astype(dtype))
    np.testing.assert_array_equal(cy, y[rows].astype(dtype))
    assert cx.tobytes() == px.tobytes() and cy.tobytes() == py.tobytes()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "kind", ["pair", "ndf", "chunks", "chunks_halves", "ndf_blocks", "parquet"]
)
def test_every_source_gives_the_same_batches_on_both_backends_in_each_dtype(
    tmp_path, kind, dtype, each_backend
):
    """The batches of a loader of ``dtype`` are the float64 loader's batches cast,
    the same on both backends (the rows of the float64 loader are the source's); at a
    batch_size that is a multiple of 16, each batch's x and y start on a 64-byte
    boundary, so that a CPU JAX device aliases them (docs/usage/jax.md)."""
    n, d, l = 203, 3, 2  # noqa: E741
    x, y = make_data(n, d, l)
    save_ndf(tmp_path / "f.ndf", (x, y))
    if kind == "parquet":
        pytest.importorskip("pyarrow")
        write_parquet(tmp_path / "p.parquet", [50, 0, 80, 73], d=d, l=l)

    def source():
        if kind == "pair":
            return x, y
        if kind == "ndf":
            return open_ndf(tmp_path / "f.ndf")
        if kind == "ndf_blocks":
            return ndf_blocks(open_ndf(tmp_path / "f.ndf"), 9)
        if kind == "chunks_halves":  # chunk-indexed, so the buffer reads ahead in halves
            return ndf_blocks(open_ndf(tmp_path / "f.ndf"), 2)
        if kind == "parquet":
            return parquet_source(tmp_path / "p.parquet", labels=["y0", "y1"])
        return chunks_of([17, 40, 1, 60, 85], d, l)

    opts = {"buffer_size": 64} if kind not in ("pair", "ndf") else {}
    if kind == "chunks":
        opts["total_size"] = n
    for shuffle in (True, False):
        wide = DataLoader(source(), 16, shuffle=shuffle, seed=4, **opts)
        loader = DataLoader(source(), 16, shuffle=shuffle, seed=4, dtype=dtype, **opts)
        assert loader.dtype == np.dtype(dtype)
        got, want = list(loader), list(wide)
        assert len(got) == len(want) > 0
        for (gx, gy), (wx, wy) in zip(got, want, strict=True):
            assert gx.dtype == dtype and gy.dtype == dtype
            assert gx.ctypes.data % 64 == 0 and gy.ctypes.data % 64 == 0, (kind, shuffle)
            np.testing.assert_array_equal(gx, wx.astype(dtype))
            np.testing.assert_array_equal(gy, wy.astype(dtype))
        bx, by = np.empty((16, d), dtype=dtype), np.empty((16, l), dtype=dtype)
        fresh = DataLoader(source(), 16, shuffle=shuffle, seed=4, dtype=dtype, **opts)
        rows = fresh.next_into(bx, by)  # epoch 0's first batch
        np.testing.assert_array_equal(bx[:rows], want[0][0].astype(dtype))
        np.testing.assert_array_equal(by[:rows], want[0][1].astype(dtype))


# -- dtype errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [np.int32, np.float16, "complex128", np.int64])
def test_a_dtype_other_than_float64_or_float32_is_a_value_error_naming_it(bad):
    with pytest.raises(ValueError, match="dtype"):
        DataLoader(make_data(10), 4, dtype=bad)


def test_a_dtype_that_is_no_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="dtype"):
        DataLoader(make_data(10), 4, dtype="no such dtype")


def test_dtype_accepts_names_and_numpy_dtypes():
    assert DataLoader(make_data(10), 4, dtype="float32").dtype == np.float32
    assert DataLoader(make_data(10), 4, dtype=np.dtype("f8")).dtype == np.float64
    assert DataLoader(make_data(10), 4).dtype == np.float64


@pytest.mark.parametrize("wrong", ["bx", "by"])
def test_next_into_buffers_of_another_dtype_are_a_type_error_naming_the_buffer(wrong):
    loader = DataLoader(make_data(10, 3, 1), 4, dtype=np.float32)
    bx, by = np.empty((4, 3), dtype=np.float32), np.empty((4, 1), dtype=np.float32)
    if wrong == "bx":
        bx = bx.astype(np.float64)
    else:
        by = by.astype(np.float64)
    with pytest.raises(TypeError, match=rf"{wrong} must have dtype float32"):
        loader.next_into(bx, by)
    loader64 = DataLoader(make_data(10, 3, 1), 4)
    with pytest.raises(TypeError, match="bx must have dtype float64"):
        loader64.next_into(np.empty((4, 3), dtype=np.float32), np.empty((4, 1)))


class _Sub(np.ndarray):
    """An ndarray subclass: a fine buffer."""


def _buffer(draw, rows: int, w: int, dtype):
    """A candidate for a next_into buffer of shape (rows, w) and ``dtype``: a fine one
    (a C-contiguous array, or a subclass), or one with a defect: a row or column off,
    another dtype (the other float, int64, byte-swapped), another layout (Fortran
    order, strided and column views), read-only, or no ndarray at all."""
    shape, dt = (rows, w), np.dtype(dtype)
    defect = draw(st.sampled_from(["none"] * 6 + list(_DEFECTS)))
    return _DEFECTS[defect](shape, dt) if defect != "none" else np.zeros(shape, dt)


def _readonly(shape, dt):
    a = np.zeros(shape, dt)
    a.flags.writeable = False
    return a


_DEFECTS = {
    "subclass": lambda s, dt: np.zeros(s, dt).view(_Sub),  # fine, in fact
    "row more": lambda s, dt: np.zeros((s[0] + 1, s[1]), dt),
    "column more": lambda s, dt: np.zeros((s[0], s[1] + 1), dt),
    "1-D": lambda s, dt: np.zeros(s[0] * s[1], dt),
    "other float": lambda s, dt: np.zeros(s, np.float32 if dt == np.float64 else np.float64),
    "int64": lambda s, dt: np.zeros(s, np.int64),
    "byte-swapped": lambda s, dt: np.zeros(s, dt.newbyteorder()),
    "fortran": lambda s, dt: np.asfortranarray(np.zeros((s[0] + 2, s[1] + 2), dt)[2:, 2:]),
    "row stride": lambda s, dt: np.zeros((2 * s[0] + 2, s[1]), dt)[2::2],
    "column view": lambda s, dt: np.zeros((s[0], s[1] + 1), dt)[:, 1:],
    "read-only": _readonly,
    "list": lambda s, dt: np.zeros(s, dt).tolist(),
    "memoryview": lambda s, dt: memoryview(np.zeros(s, dt)),
    "None": lambda s, dt: None,
    # the compiled check reads numpy's fields (not a buffer export): arrays whose dtype
    # was set in place, or whose native byte order is spelled out, are told apart alike
    "dtype set in place": lambda s, dt: _retyped(s, dt),
    "native order spelled": lambda s, dt: np.zeros(s, dt.newbyteorder("<" if _LE else ">")),
}
_LE = sys.byteorder == "little"


def _retyped(shape, dt):
    """An array of ``dt`` whose dtype was then set in place to the int of its itemsize."""
    a = np.zeros(shape, dt)
    a.dtype = np.int64 if dt.itemsize == 8 else np.int32
    return a


def _pair_checks() -> list:
    """``(backend, its pair_check() function)`` for each backend built."""
    out = []
    for name in ("compiled", "numpy") if COMPILED else ("numpy",):
        with on_backend(name):
            out.append((name, kernels.pair_check()))
    return out


def _accepted(a, shape, dtype) -> bool:
    """Does check_out_array take ``a`` as it is (None would be a new array: not taken)?"""
    from exactbatch.arrays import check_out_array

    try:
        return a is not None and check_out_array(a, shape, "a", dtype) is a
    except (TypeError, ValueError):
        return False


@settings(max_examples=400)
@given(data=st.data())
def test_next_into_buffer_check_is_check_out_array_on_both_backends(data):
    """``pair_check()``'s function (next_into's fast check, made per backend) says True
    exactly when check_out_array accepts both buffers, whatever they are."""
    rows, d, l = (data.draw(st.integers(0, 5)) for _ in range(3))  # noqa: E741
    dtype = data.draw(st.sampled_from([np.float64, np.float32]))
    bx, by = _buffer(data.draw, rows, d, dtype), _buffer(data.draw, rows, l, dtype)
    want = _accepted(bx, (rows, d), dtype) and _accepted(by, (rows, l), dtype)
    itemsize = np.dtype(dtype).itemsize
    for name, fits in _pair_checks():
        assert fits(bx, by, rows, d, l, itemsize) is want, name


def test_the_buffer_check_refuses_an_itemsize_other_than_8_or_4():
    for name, fits in _pair_checks():
        for dt in (np.float16, np.float64):
            bx, by = np.empty((2, 3), dtype=dt), np.empty((2, 1), dtype=dt)
            assert fits(bx, by, 2, 3, 1, 2) is False, name
        assert fits(np.empty((2, 3)), np.empty((2, 1)), 2, 3, 1, 8) is True, name


# -- the compiled kernel's own checks ---------------------------------------------------------


@needs_core
@pytest.mark.parametrize("kind", ["memory", "parts"])
def test_the_kernel_refuses_rows_out_of_range_and_wrong_buffers(tmp_path, kind):
    """Rows.read and Parts.read (a dataset of one part) check their arguments alike."""
    x, y = make_data(10, 3, 1)
    if kind == "memory":
        rows = kernels.memory_rows(x, y)
    else:
        save_ndf(tmp_path / "p.ndf", (x, y))
        part = open_ndf(tmp_path / "p.ndf")
        rows = parts_rows(np.array([0, 10], dtype=np.int64), 3, 1)
        rows.set(0, part.kernel_rows())
    ox, oy = np.empty((2, 3)), np.empty((2, 1))
    with pytest.raises(TypeError, match="takes 3 arguments"):
        rows.read(np.array([1, 2]), ox)
    with pytest.raises(IndexError, match="row 10 out of range"):
        rows.read(np.array([1, 10]), ox, oy)
    with pytest.raises(IndexError, match="row -1 out of range"):
        rows.read(np.array([-1, 2], dtype=np.int32), ox, oy)
    with pytest.raises(IndexError):
        rows.read(slice(9, 11), ox, oy)
    with pytest.raises(TypeError, match="int32 or int64"):
        rows.read(np.array([1.0, 2.0]), ox, oy)
    with pytest.raises(TypeError, match="float64 or float32"):
        rows.read(np.array([1, 2]), np.empty((2, 3), dtype=np.int64), oy)
    with pytest.raises(TypeError, match="same dtype"):
        rows.read(np.array([1, 2]), ox, np.zeros((2, 1), dtype=np.float32))
    with pytest.raises(ValueError, match="must hold"):
        rows.read(np.array([1, 2, 3]), ox, oy)
    with pytest.raises(ValueError, match="read-only"):
        ro = np.empty((2, 3))
        ro.flags.writeable = False
        rows.read(np.array([1, 2]), ro, oy)
    if kind == "parts":
        return
    w = np.zeros((10, 8))
    for x_bad in (w[:, ::2], w.T[:, :10], w[::-1, :3]):  # a row's values apart; rows reversed
        with pytest.raises(ValueError, match="x must hold each row's values side by side"):
            kernels.memory_rows(x_bad, np.zeros((len(x_bad), 1)))


@needs_core
@pytest.mark.parametrize(
    "offset, n, d, l, names",
    [
        (28, 2**61, 1, 0, "n=2305843009213693952"),  # 2**64 bytes: wrapped to 0 before
        (28, 2**60 + 1, 1, 0, "n=1152921504606846977"),  # wrapped to 8
        (28, 1, 2**62, 2**62, "d=4611686018427387904"),  # d + l wraps
        (28, 0, 2**60, 0, "d=1152921504606846976"),  # no rows, but a row's bytes wrap
        (2**63 - 1, 1, 1, 0, "offset=9223372036854775807"),
    ],
)
def test_the_kernel_refuses_a_shape_whose_byte_size_overflows(tmp_path, offset, n, d, l, names):  # noqa: E741
    """file_rows and parts_rows compute sizes with checked arithmetic: a shape whose
    bytes wrap around Py_ssize_t is an OverflowError naming the arguments, not a
    mapping that seems long enough and a read that segfaults."""
    import mmap

    save_ndf(tmp_path / "a.ndf", make_data(4, 1, 0))
    fd = os.open(tmp_path / "a.ndf", os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, 60, access=mmap.ACCESS_READ)
        with pytest.raises(OverflowError, match=f"file_rows: .*{names}"):
            kernels.file_rows(mm, offset, n, d, l, fd, 60, None)
        mm.close()
    finally:
        os.close(fd)
    if offset == 28 and n <= 1:
        with pytest.raises(OverflowError, match=f"parts_rows: .*{names}"):
            parts_rows(np.array([0, n], dtype=np.int64), d, l)


def test_kernel_rows_is_the_compiled_files_rows_or_none(tmp_path, each_backend):
    """NdfFile.kernel_rows(): the part a dataset's gather reads through; None on the
    pure path and for a file without rows."""
    save_ndf(tmp_path / "a.ndf", make_data(5, 2, 1))
    save_ndf(tmp_path / "empty.ndf", np.zeros((0, 2)))
    with open_ndf(tmp_path / "a.ndf") as f, open_ndf(tmp_path / "empty.ndf") as e:
        assert e.kernel_rows() is None
        if each_backend == "numpy":
            assert f.kernel_rows() is None
        else:
            ox, oy = np.empty((2, 2)), np.empty((2, 1))
            f.kernel_rows().read(np.array([4, 0]), ox, oy)
            np.testing.assert_array_equal(ox, make_data(5, 2, 1)[0][[4, 0]])
        f.check_unchanged()  # nothing changed: no error


@needs_core
@pytest.mark.parametrize("kind", ["file", "dataset"])
def test_truncations_during_copies_are_ndf_errors_never_a_crash(tmp_path, kind):
    """A file (or a dataset's part) truncated after its pages were read, 200 times: every
    read that faults inside the copy is an NdfError naming the file (helpers.TRUNCATE_LOOP).
    Run in a child process, so that a SIGBUS fails the test instead of ending pytest."""
    r = _run_args(TRUNCATE_LOOP, os.fspath(tmp_path), "200", kind, "nothing")
    assert r.returncode != -signal.SIGBUS, "killed by SIGBUS"
    assert r.returncode == 0, (r.returncode, r.stderr[-2000:])
    assert r.stdout.strip() == f"{kind} 200"


# A fault the guard does not own (outside any copy) still reaches the handler
# installed before it: here Python's faulthandler, which reports and ends the process.
FOREIGN_FAULT = textwrap.dedent(
    """
    import ctypes, faulthandler, sys
    faulthandler.enable()
    from exactbatch import open_ndf, save_ndf
    save_ndf(sys.argv[1], [[1.0]])
    f = open_ndf(sys.argv[1])  # installs the guard, on top of faulthandler's handler
    ctypes.string_at(16)  # a fault outside any copy
    """
)


@needs_core
def test_a_fault_outside_a_copy_goes_to_the_handler_installed_before(tmp_path):
    r = _run_args(FOREIGN_FAULT, os.fspath(tmp_path / "one.ndf"))
    assert r.returncode == -signal.SIGSEGV, (r.returncode, r.stderr[-2000:])
    assert "Fatal Python error" in r.stderr  # faulthandler ran: the fault was chained


def _run_args(code: str, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EXACTBATCH_PURE": "0"},
    )


def test_a_few_rows_of_whole_row_columns_are_read_without_copying_the_array(each_backend):
    """A shuffle buffer's x and y are columns of one array of whole rows: reading a
    batch copies that batch, never the whole buffer (np.take would, on either
    backend's NumPy path, to make a column view contiguous first)."""
    import tracemalloc

    w = np.zeros((200_000, 17))  # 27 MB
    rows = kernels.memory_rows(w[:, :16], w[:, 16:])
    ox, oy = np.empty((3, 16)), np.empty((3, 1))
    tracemalloc.start()
    try:
        rows.read(np.array([5, 70_000, 199_999]), ox, oy)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20


_VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, width=64),
    st.sampled_from([0.0, -0.0, 5e-324, -1e308, 1e308, 3.0000000000000004]),
)


@needs_core
@settings(max_examples=120)
@given(data=st.data())
def test_the_backends_transform_rows_to_the_same_bits(data):
    """Any values (NaN, inf, -0.0, subnormals, huge), any finite mean and scale > 0, with
    no fill, one fill, or one fill per column (``Standardize(nan_fill={name: v})``; NaN:
    that column keeps its NaN), float64 or float32 out: the compiled gather's transform
    and the pure path's (gather, then ``TransformKernel.apply``) agree bit for bit, and
    on the first row that held a NaN."""
    n = data.draw(st.integers(1, 12))
    d = data.draw(st.integers(1, 9))
    x = np.array(data.draw(st.lists(_VALUES, min_size=n * d, max_size=n * d))).reshape(n, d)
    y = np.arange(n, dtype=np.float64).reshape(n, 1)
    finite = st.floats(-1e6, 1e6, allow_nan=False, width=64)
    mean = np.array(data.draw(st.lists(finite, min_size=d, max_size=d)))
    scale = np.array(data.draw(st.lists(st.floats(1e-6, 1e6), min_size=d, max_size=d)))
    per_column = st.lists(st.one_of(finite, st.just(np.nan)), min_size=d, max_size=d)
    fill = data.draw(st.one_of(st.none(), finite, per_column.map(np.array)))
    rows = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=20)))
    dtype = data.draw(st.sampled_from([np.float64, np.float32]))
    kern = kernels.TransformKernel(mean, scale, fill)
    got = {}
    for name in ("compiled", "numpy"):
        with on_backend(name):
            ox, oy = np.empty((len(rows), d), dtype=dtype), np.empty((len(rows), 1))
            with np.errstate(all="ignore"):
                first = kernels.memory_rows(x, y).read(rows, ox, oy, kern)
            got[name] = (ox.tobytes(), oy.tobytes(), first)
    assert got["compiled"] == got["numpy"]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_each_column_takes_its_own_nan_fill_on_this_backend(dtype):
    """One NaN fill per column (a NaN fill: the column keeps its NaN), on the backend this
    process uses (the pure path under ``EXACTBATCH_PURE=1``, tests/test_backends.py),
    against the same arithmetic in NumPy; the first row holding a NaN is named."""
    x = np.array([[1.0, np.nan, np.nan], [np.nan, 2.0, np.nan], [3.0, 4.0, 5.0]] * 3)
    y = np.arange(len(x), dtype=np.float64).reshape(-1, 1)
    mean, scale = np.array([1.0, -2.0, 0.5]), np.array([0.5, 2.0, 4.0])
    fill = np.array([-1.0, np.nan, 7.5])
    rows = np.array([2, 0, 1, 4, 8])
    ox, oy = np.empty((len(rows), 3), dtype=dtype), np.empty((len(rows), 1))
    first = kernels.memory_rows(x, y).read(rows, ox, oy, kernels.TransformKernel(mean, scale, fill))
    want = (x[rows] - mean) * scale
    for j, f in enumerate(fill):
        if not np.isnan(f):
            want[np.isnan(want[:, j]), j] = f
    np.testing.assert_array_equal(ox, want.astype(dtype))
    np.testing.assert_array_equal(oy, y[rows])
    assert first == 1  # rows[1] (source row 0) is the first to hold a NaN


def test_exactbatch_pure_unset_is_not_the_pure_path_and_another_word_is_refused_whole(
    monkeypatch,
):
    monkeypatch.delenv("EXACTBATCH_PURE", raising=False)
    assert kernels._pure_from_env() is False
    monkeypatch.setenv("EXACTBATCH_PURE", " y ")
    with pytest.raises(ValueError) as e:
        kernels._pure_from_env()
    assert str(e.value) == (
        "EXACTBATCH_PURE=' y ': expected 1/true/yes/on (the pure NumPy path) or "
        "0/false/no/off/empty (the compiled core, when built)"
    )


def test_the_core_is_imported_when_built_and_none_when_it_cannot_be(monkeypatch):
    assert kernels._import_core() is kernels._BUILT
    monkeypatch.setitem(sys.modules, "exactbatch._core", None)  # as if it failed to build
    assert kernels._import_core() is None


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_gather_makes_new_batches_of_the_dtype_on_this_backend(dtype, each_backend):
    x, y = make_data(30, 3, 2)
    rows = np.array([29, 0, 7, 7, 3])
    gx, gy = kernels.gather(x, y, rows, dtype)
    assert (gx.dtype, gy.dtype, gx.shape, gy.shape) == (dtype, dtype, (5, 3), (5, 2))
    np.testing.assert_array_equal(gx, x[rows].astype(dtype))
    np.testing.assert_array_equal(gy, y[rows].astype(dtype))


def test_staged_reads_float64_rows_then_maps_them_into_the_batch():
    """A reader whose copy cannot take the kernel: its rows read as float64, then mapped
    into the batch's dtype; the first row that held a NaN comes back."""
    x, y = make_data(6, 3, 1)
    x[4, 1] = np.nan
    seen = []

    def read(rows, bx, by):
        seen.append(bx.dtype)
        bx[...], by[...] = x[rows], y[rows]

    kern = kernels.TransformKernel(np.ones(3), np.full(3, 0.5))
    out_x, out_y = np.empty((3, 3), np.float32), np.empty((3, 1), np.float32)
    assert kernels.staged(read, np.array([1, 4, 5]), out_x, out_y, kern) == 1
    assert seen == [np.float64]
    np.testing.assert_array_equal(out_x, ((x[[1, 4, 5]] - 1) * 0.5).astype(np.float32))
    np.testing.assert_array_equal(out_y, y[[1, 4, 5]].astype(np.float32))
    x[4, 1] = 0.0
    assert kernels.staged(read, np.array([1, 4, 5]), out_x, out_y, kern) == -1


def test_the_pure_transform_maps_fills_and_finds_the_first_nan_row():
    """TransformKernel.apply (the pure path's twin of the fused copy), against a
    reference written out: (v - mean) * scale in float64, a NaN filled by the one fill
    or by its column's (a NaN column fill keeps the NaN), the first NaN row returned
    (the batch's first row too), whatever the given arrays' dtypes."""
    src = np.arange(12, dtype=np.float64).reshape(4, 3)
    mean, scale = np.array([1, 2, 3]), np.array([2, 1, 4])  # ints: made float64
    ref = (src - mean) * scale
    for nan_rows, first in (([2], 2), ([0, 3], 0)):
        x = src.copy()
        x[nan_rows, 1] = np.nan
        x[nan_rows, 2] = np.nan
        for fill, want in (
            (None, np.nan),
            (7, 7.0),
            (np.array([5, 6, 8], dtype=np.int64), [6.0, 8.0]),
            (np.array([5.0, 6.0, np.nan]), [6.0, np.nan]),
        ):
            kern = kernels.TransformKernel(mean, scale, fill)
            assert kern.mean.dtype == kern.scale.dtype == np.float64
            assert (
                kern.fill is None or isinstance(kern.fill, float) or kern.fill.dtype == np.float64
            )
            out = np.empty((4, 3), np.float32)
            assert kern.apply(x, out) == first
            expect = ref.copy()
            expect[nan_rows, 1:] = want
            np.testing.assert_array_equal(out, expect.astype(np.float32))
    assert kernels.TransformKernel(mean, scale).apply(src, np.empty((4, 3))) == -1


@pytest.mark.parametrize("l", [2, 0])
def test_run_reads_read_and_take_a_run_of_the_order_on_this_backend(each_backend, l):  # noqa: E741
    """run_reads: ``read_run(order, start, size, out_x, out_y)`` reads rows
    ``order[start:start + size]`` into the first ``size`` rows of the outputs (the rest
    untouched), ``take_run`` into a new aligned pair of the dtype (y of ``ydtype`` when
    given): the compiled rows object's own, or the pure twins (RunReads), the same
    bytes."""
    x, y = make_data(20, 3, l)
    rows = kernels.memory_rows(x, y)
    read_run, take_run = kernels.run_reads(rows)
    if each_backend == "numpy":
        assert isinstance(read_run.__self__, kernels.RunReads)
    order = np.array([4, 19, 0, 7, 7, 12, 3], dtype=np.int64)
    ox, oy = np.full((5, 3), -1.0), np.full((5, l), -1.0)
    read_run(order, 2, 3, ox, oy)  # rows 0, 7, 7 into the first 3 of 5
    np.testing.assert_array_equal(ox[:3], x[[0, 7, 7]])
    np.testing.assert_array_equal(oy[:3], y[[0, 7, 7]])
    assert (ox[3:] == -1).all() and (oy[3:] == -1).all()
    ox, oy = np.full((2, 3), -1.0), np.full((2, l), -1.0)
    read_run(order, 5, 2, ox, oy)  # outputs of exactly the run's size
    np.testing.assert_array_equal(ox, x[[12, 3]])
    np.testing.assert_array_equal(oy, y[[12, 3]])
    f64, f32 = np.dtype(np.float64), np.dtype(np.float32)  # (as the epoch passes them)
    for dtype, ydtype in ((f64, None), (f32, None), (f32, f64)):
        tx, ty = take_run(order, 1, 4, dtype, ydtype)
        assert tx.shape == (4, 3) and ty.shape == (4, l)
        assert tx.dtype == dtype and ty.dtype == (ydtype or dtype)
        assert tx.ctypes.data % exactbatch.arrays.ALIGN == 0
        np.testing.assert_array_equal(tx, x[[19, 0, 7, 7]].astype(dtype))
        np.testing.assert_array_equal(ty, y[[19, 0, 7, 7]].astype(ydtype or dtype))


def test_run_reads_refuse_what_memory_rows_did_not_make(each_backend):
    """run_reads takes a rows object of :func:`memory_rows` (the compiled one's, or the
    pure one's, whose widths the twins read): anything else is a TypeError naming it."""
    with pytest.raises(TypeError, match="^run_reads takes what memory_rows returns; got object$"):
        kernels.run_reads(object())


def test_a_transform_kernel_has_no_compiled_twin_without_the_core(monkeypatch):
    """Where the core is not built, TransformKernel.c is None and apply maps alone."""
    monkeypatch.setattr(kernels, "_BUILT", None)
    tf = kernels.TransformKernel(np.array([1.0, 2.0]), np.array([2.0, 0.5]), fill=0.0)
    assert tf.c is None
    out = np.empty((2, 2))
    assert tf.apply(np.array([[3.0, 4.0], [np.nan, 2.0]]), out) == 1
    np.testing.assert_array_equal(out, [[4.0, 1.0], [0.0, 0.0]])


@needs_core
def test_file_rows_checks_the_times_it_is_given_and_none_it_is_not(tmp_path):
    """The compiled file reader fstat's after each copy: a modification or change time
    other than the one given is FileChanged; None (either) leaves that time unchecked."""
    x, y = make_data(4, 2, 1)
    save_ndf(tmp_path / "a.ndf", (x, y))
    fd = os.open(tmp_path / "a.ndf", os.O_RDONLY)
    try:
        st = os.fstat(fd)
        mm = kernels.map_file(fd, st.st_size)
        ox, oy = np.empty((2, 2)), np.empty((2, 1))
        rows = np.array([3, 1])
        for mtime, ctime in (
            (None, None),
            (st.st_mtime_ns, None),
            (None, st.st_ctime_ns),
            (st.st_mtime_ns, st.st_ctime_ns),
        ):
            r = kernels.file_rows(mm, 28, 4, 2, 1, fd, st.st_size, mtime, ctime)
            r.read(rows, ox, oy)
            np.testing.assert_array_equal(ox, x[rows])
            np.testing.assert_array_equal(oy, y[rows])
        for mtime, ctime in ((st.st_mtime_ns + 1, None), (None, st.st_ctime_ns + 1)):
            r = kernels.file_rows(mm, 28, 4, 2, 1, fd, st.st_size, mtime, ctime)
            with pytest.raises(kernels.FileChanged):
                r.read(rows, ox, oy)
    finally:
        os.close(fd)


_COMPILED = [importlib.import_module("exactbatch._core").memory_rows] if built() else []


@pytest.mark.parametrize("make", [kernels.NumpyRows, *_COMPILED])
def test_a_row_out_of_range_is_an_index_error_on_both_backends(make):
    """The pure twin refuses what the compiled read refuses, in the same words: its
    gathers clip, which would give the last row for one past it (garbage rows)."""
    x, y = np.arange(20.0).reshape(10, 2), np.arange(10.0).reshape(10, 1)
    rows = make(x, y)
    ox, oy = np.empty((2, 2)), np.empty((2, 1))
    for bad, word in ((np.array([1, 10]), "row 10"), (np.array([-1, 3]), "row -1")):
        for dtype in (np.int64, np.int32):
            with pytest.raises(IndexError, match=f"{word} out of range for n=10 rows"):
                rows.read(bad.astype(dtype), ox, oy)
    for bad in (slice(-1, 1), slice(0, 4, 2), slice(9, 11), slice(5, 3)):
        with pytest.raises(IndexError, match="out of range for n=10 rows"):
            rows.read(bad, ox, oy)
    assert rows.read(np.array([9, 0]), ox, oy) is None  # the edges themselves are rows
    np.testing.assert_array_equal(ox, x[[9, 0]])
    assert rows.read(slice(8, 10), ox, oy) is None
    np.testing.assert_array_equal(oy, y[8:10])
