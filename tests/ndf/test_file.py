"""The .ndf file (DESIGN.md, "The .ndf file"): byte layout, checks, atomic saves,
positional reads, shared handles, and files that change under a reader.

Layout: b"NDF1", u64 n, u64 d, u64 l (little-endian), then n rows of (d + l)
little-endian float64, x values then y values. A valid file is exactly
28 + 8*n*(d+l) bytes.
"""

from __future__ import annotations

import errno
import gc
import os
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from helpers import rewrite_in_place, until_ctime_moves

import exactbatch
import exactbatch.ndf as ndf
from exactbatch import DataLoader, Dataset, NdfError, NdfFile, open_ndf, save_ndf

HEADER = struct.Struct("<4sQQQ")

SHAPES = [(7, 3, 2), (1, 1, 1), (5, 4, 0), (6, 0, 3), (0, 3, 2), (0, 0, 0), (4, 0, 0), (3, 1, 0)]
SHAPE_IDS = ["n{}-d{}-l{}".format(*shape) for shape in SHAPES]


# -- helpers --------------------------------------------------------------------


def ndf_bytes(x: np.ndarray, y: np.ndarray) -> bytes:
    """The bytes of an .ndf file, built value by value with struct (not NumPy)."""
    n, d = x.shape
    l = y.shape[1]  # noqa: E741
    out = [HEADER.pack(b"NDF1", n, d, l)]
    row = struct.Struct(f"<{d + l}d")
    for i in range(n):
        out.append(row.pack(*[float(v) for v in x[i]], *[float(v) for v in y[i]]))
    return b"".join(out)


def distinct_data(n: int, d: int, l: int):  # noqa: E741
    """x[i, j] = i*1000 + j + 0.25 and y[i, k] = -(i*1000 + k + 0.5): every value differs."""
    i = np.arange(n, dtype=np.float64)[:, None] * 1000.0
    x = i + np.arange(d, dtype=np.float64)[None, :] + 0.25
    y = -(i + np.arange(l, dtype=np.float64)[None, :] + 0.5)
    return np.ascontiguousarray(x.reshape(n, d)), np.ascontiguousarray(y.reshape(n, l))


def random_data(n: int, d: int, l: int, seed: int = 0):  # noqa: E741
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, d)), rng.standard_normal((n, l))


def fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


needs_proc_fd = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="counts open descriptors in /proc/self/fd"
)


@pytest.fixture
def saved(tmp_path):
    """A file of n=1000 rows, d=3, l=2 with random values; returns (path, x, y)."""
    x, y = random_data(1000, 3, 2, seed=42)
    path = tmp_path / "data.ndf"
    path.write_bytes(ndf_bytes(x, y))
    return path, x, y


@pytest.fixture
def preadv_calls(monkeypatch, numpy_backend):
    """Count os.preadv calls (exactbatch.ndf uses the os module's preadv), on the pure
    NumPy path: the compiled core gathers every batch from the mapping instead."""
    calls = []
    real = os.preadv

    def counting(fd, buffers, offset, *args):
        calls.append((offset, sum(len(b) for b in buffers)))
        return real(fd, buffers, offset, *args)

    monkeypatch.setattr(exactbatch.ndf.local.os, "preadv", counting)
    return calls


# -- 2. byte layout, both ways ----------------------------------------------------


def test_header_is_28_bytes_and_magic_is_ndf1():
    """The module's header size and magic are the contract's: 28 bytes, b"NDF1"."""
    assert ndf.HEADER_SIZE == 28 == HEADER.size
    assert ndf.MAGIC == b"NDF1"


@pytest.mark.parametrize(("n", "d", "l"), SHAPES, ids=SHAPE_IDS)
def test_struct_written_file_reads_back(tmp_path, n, d, l):  # noqa: E741
    """A file laid out by hand with struct opens with the right n, d, l and rows."""
    x, y = distinct_data(n, d, l)
    path = tmp_path / "hand.ndf"
    path.write_bytes(ndf_bytes(x, y))
    assert path.stat().st_size == 28 + 8 * n * (d + l)
    with open_ndf(path) as f:
        assert isinstance(f, NdfFile)
        assert (f.n, f.d, f.l) == (n, d, l)
        assert len(f) == n
        assert os.fspath(f.path) == os.fspath(path)
        for i in range(n):
            xr, yr = f.read_row(i)
            assert xr.shape == (d,) and yr.shape == (l,)
            assert xr.dtype == np.float64 and yr.dtype == np.float64
            np.testing.assert_array_equal(xr, x[i])
            np.testing.assert_array_equal(yr, y[i])
        xa, ya = f.read_rows(range(n))
        assert xa.shape == (n, d) and ya.shape == (n, l)
        np.testing.assert_array_equal(xa, x)
        np.testing.assert_array_equal(ya, y)
        rev = np.arange(n)[::-1]
        xr, yr = f.read_rows(rev)
        np.testing.assert_array_equal(xr, x[rev])
        np.testing.assert_array_equal(yr, y[rev])


def test_struct_written_special_values_read_back_bit_exact(tmp_path):
    """nan, +-inf, -0.0, subnormals and extremes are read back with the exact bits."""
    vals = [np.nan, np.inf, -np.inf, -0.0, 5e-324, -2.2250738585072014e-308, 1.7976931348623157e308]
    x = np.array(vals[:4] + vals[4:6], dtype=np.float64).reshape(2, 3)
    y = np.array([vals[6], -vals[6]]).reshape(2, 1)
    path = tmp_path / "special.ndf"
    path.write_bytes(ndf_bytes(x, y))
    with open_ndf(path) as f:
        xa, ya = f.read_rows([0, 1])
    assert xa.tobytes() == x.tobytes()
    assert ya.tobytes() == y.tobytes()


@pytest.mark.parametrize(("n", "d", "l"), SHAPES, ids=SHAPE_IDS)
def test_save_ndf_writes_exactly_the_layout(tmp_path, n, d, l):  # noqa: E741
    """save_ndf's file is byte for byte the struct-built layout (incl. l=0, d=0, n=0)."""
    x, y = random_data(n, d, l, seed=n + 10 * d + 100 * l)
    path = tmp_path / "saved.ndf"
    save_ndf(path, Dataset(x, y))
    assert path.read_bytes() == ndf_bytes(x, y)
    assert path.stat().st_size == 28 + 8 * n * (d + l)


def test_save_ndf_special_values_bit_exact(tmp_path):
    """save_ndf stores nan, +-inf, -0.0 and subnormals with their exact bits."""
    x = np.array([[np.nan, np.inf, -np.inf], [-0.0, 5e-324, 1.7976931348623157e308]])
    y = np.array([[-5e-324], [0.0]])
    path = tmp_path / "special.ndf"
    save_ndf(path, (x, y))
    assert path.read_bytes() == ndf_bytes(x, y)


def test_save_ndf_in_many_slabs_is_still_exact(tmp_path, monkeypatch):
    """Rows written in several chunks (slab size forced small) give the same exact bytes."""
    monkeypatch.setattr(ndf.write, "_WRITE_ROWS_BYTES", 100)  # a few rows per slab, uneven tail
    for d, l in [(3, 2), (4, 0), (0, 2)]:  # noqa: E741
        x, y = random_data(53, d, l, seed=d + l)
        path = tmp_path / f"slabs-{d}-{l}.ndf"
        save_ndf(path, (x, y))
        assert path.read_bytes() == ndf_bytes(x, y)


def test_save_ndf_accepts_dataset_pair_and_array(tmp_path):
    """save_ndf takes a Dataset, an (x, y) pair (y 2-D or 1-D) or a bare array x (l = 0)."""
    x, y = random_data(9, 3, 2, seed=3)
    want = ndf_bytes(x, y)
    save_ndf(tmp_path / "ds.ndf", Dataset(x, y))
    save_ndf(tmp_path / "pair.ndf", (x, y))
    assert (tmp_path / "ds.ndf").read_bytes() == want
    assert (tmp_path / "pair.ndf").read_bytes() == want

    save_ndf(tmp_path / "pair1d.ndf", (x, y[:, 0]))
    assert (tmp_path / "pair1d.ndf").read_bytes() == ndf_bytes(x, y[:, :1])

    save_ndf(tmp_path / "x.ndf", x)
    assert (tmp_path / "x.ndf").read_bytes() == ndf_bytes(x, np.empty((9, 0)))
    with open_ndf(tmp_path / "x.ndf") as f:
        assert (f.n, f.d, f.l) == (9, 3, 0)


def test_save_ndf_accepts_str_path_and_converts_ints(tmp_path):
    """A str path works; integer and non-contiguous inputs are stored as float64 values."""
    x = np.arange(20, dtype=np.int32).reshape(4, 5)[:, ::2]  # ints, non-contiguous
    y = np.array([True, False, True, True])
    path = str(tmp_path / "ints.ndf")
    save_ndf(path, (x, y))
    want = ndf_bytes(x.astype(np.float64), y.astype(np.float64).reshape(4, 1))
    with open(path, "rb") as fh:
        assert fh.read() == want


def test_save_ndf_then_open_round_trips(tmp_path):
    """What save_ndf writes, open_ndf reads back: same n, d, l and rows."""
    x, y = random_data(257, 6, 3, seed=7)
    path = tmp_path / "rt.ndf"
    save_ndf(path, (x, y))
    with open_ndf(path) as f:
        assert (f.n, f.d, f.l) == (257, 6, 3)
        xa, ya = f.read_rows(np.arange(257))
    np.testing.assert_array_equal(xa, x)
    np.testing.assert_array_equal(ya, y)


def test_save_ndf_rejects_a_tuple_that_is_not_a_pair(tmp_path):
    """A tuple of length other than 2 is a TypeError and creates nothing."""
    x = np.zeros((3, 2))
    with pytest.raises(TypeError):
        save_ndf(tmp_path / "t.ndf", (x, x, x))
    assert os.listdir(tmp_path) == []


# -- 3. malformed files -------------------------------------------------------------


def _open_error(path) -> str:
    with pytest.raises(NdfError) as info:
        open_ndf(path)
    msg = str(info.value)
    assert os.fspath(path) in msg, f"message does not name the file: {msg}"
    return msg


def test_ndf_error_is_a_value_error():
    """NdfError is a ValueError subclass, exported at the top level."""
    assert issubclass(NdfError, ValueError)
    assert exactbatch.NdfError is NdfError


def test_wrong_magic(tmp_path):
    """A file not starting with b"NDF1": NdfError naming the file, expected and found magic."""
    x, y = distinct_data(2, 2, 1)
    path = tmp_path / "magic.ndf"
    path.write_bytes(b"NDF2" + ndf_bytes(x, y)[4:])
    msg = _open_error(path)
    assert "NDF1" in msg and msg.endswith("found b'NDF2'"), msg


def test_wrong_magic_is_caught_as_value_error(tmp_path):
    """Malformed files can be caught with `except ValueError`."""
    path = tmp_path / "junk.ndf"
    path.write_bytes(b"PK\x03\x04" + b"\0" * 60)
    with pytest.raises(ValueError, match="NDF1"):
        open_ndf(path)


@pytest.mark.parametrize("size", [4, 10, 27])
def test_short_header(tmp_path, size):
    """A file with the magic but fewer than 28 bytes: NdfError saying 28 expected, size found."""
    path = tmp_path / "short.ndf"
    path.write_bytes((b"NDF1" + bytes(range(1, 30)))[:size])
    msg = _open_error(path)
    assert "28" in msg and str(size) in msg, msg


@pytest.mark.parametrize("data", [b"N", b"ND", b"NDF"], ids=["1", "2", "3"])
def test_file_shorter_than_magic_starting_like_it(tmp_path, data):
    """A 1-3 byte prefix of the magic is an NdfError (short header), not a crash."""
    path = tmp_path / "tiny.ndf"
    path.write_bytes(data)
    _open_error(path)


def test_tiny_file_with_wrong_magic(tmp_path):
    """A 3-byte file that is not a prefix of b"NDF1" is an NdfError naming the file."""
    path = tmp_path / "tiny.ndf"
    path.write_bytes(b"XYZ")
    _open_error(path)


def test_empty_file(tmp_path):
    """An empty file: NdfError naming the file and saying it is empty."""
    path = tmp_path / "empty.ndf"
    path.write_bytes(b"")
    msg = _open_error(path)
    assert "empty" in msg.lower() or " 0 " in msg, msg
    one = tmp_path / "one.ndf"
    one.write_bytes(b"N")  # one byte: a short header, not an empty file
    assert "empty file" not in _open_error(one)


@needs_proc_fd
def test_a_pipe_is_refused_as_not_a_regular_file_without_reading_it():
    """A pipe (a path like /dev/stdin) is not a regular file: an NdfError naming it, not
    the OS's "illegal seek" from a positional read, and nothing is consumed from it."""
    r, w = os.pipe()
    try:
        os.write(w, b"NDF1")
        path = f"/proc/self/fd/{r}"
        with pytest.raises(NdfError, match=f"{path}: not a regular file: .* found a FIFO"):
            open_ndf(path)
        assert os.read(r, 4) == b"NDF1"
    finally:
        os.close(r)
        os.close(w)


@pytest.mark.parametrize("cut", [1, 8, 71], ids=["1-byte", "1-value", "almost-all"])
def test_file_too_short(tmp_path, cut):
    """A file shorter than 28 + 8*n*(d+l): NdfError with the expected and found sizes."""
    x, y = distinct_data(3, 2, 1)  # 28 + 72 = 100 bytes
    data = ndf_bytes(x, y)
    assert len(data) == 100
    path = tmp_path / "short.ndf"
    path.write_bytes(data[:-cut])
    msg = _open_error(path)
    assert "100" in msg and str(100 - cut) in msg, msg
    assert "file too short" in msg, msg


@pytest.mark.parametrize("extra", [1, 8, 24])
def test_file_too_long(tmp_path, extra):
    """A file longer than 28 + 8*n*(d+l): NdfError with the expected and found sizes."""
    x, y = distinct_data(3, 2, 1)
    path = tmp_path / "long.ndf"
    path.write_bytes(ndf_bytes(x, y) + b"\x01" * extra)
    msg = _open_error(path)
    assert "100" in msg and str(100 + extra) in msg, msg
    assert "file too long" in msg, msg


def test_header_only_file_claiming_rows(tmp_path):
    """A 28-byte file whose header claims rows: too short, NdfError."""
    path = tmp_path / "hdr.ndf"
    path.write_bytes(HEADER.pack(b"NDF1", 5, 2, 1))
    msg = _open_error(path)
    assert str(28 + 8 * 5 * 3) in msg and "28" in msg, msg


@pytest.mark.parametrize(
    ("n", "d", "l"),
    [
        (2**63, 2**62, 0),
        (2**64 - 1, 2**64 - 1, 2**64 - 1),
        (2**61, 1, 0),  # 8*n*(d+l) = 2**64: wraps to 0 in u64, the file would "fit"
        (2**60, 1, 1),  # likewise 2**64
        (1, 2**63, 2**63),  # d + l = 2**64 wraps to 0
        (2**40, 2**20, 0),  # fits in u64 but larger than any file
    ],
    ids=["2^63x2^62", "all-max", "wrap-n", "wrap-nd", "wrap-dl", "huge"],
)
def test_impossible_header_is_ndf_error(tmp_path, n, d, l):  # noqa: E741
    """A header whose 8*n*(d+l) overflows u64 or exceeds any file is an NdfError, at once.

    No MemoryError, no hang, and no u64 wrap-around that makes a 28-byte file "fit".
    """
    path = tmp_path / "huge.ndf"
    path.write_bytes(HEADER.pack(b"NDF1", n, d, l))
    msg = _open_error(path)
    assert str(n) in msg, msg
    assert "28" in msg, msg


def test_missing_file_is_file_not_found(tmp_path):
    """A missing file is the OS's FileNotFoundError, not an NdfError."""
    with pytest.raises(FileNotFoundError) as info:
        open_ndf(tmp_path / "nope.ndf")
    assert not isinstance(info.value, NdfError)


def test_folder_is_an_os_error(tmp_path):
    """Opening a folder is an OS error (IsADirectoryError), not an NdfError."""
    folder = tmp_path / "dir.ndf"
    folder.mkdir()
    with pytest.raises(OSError) as info:
        open_ndf(folder)
    assert isinstance(info.value, IsADirectoryError)
    assert not isinstance(info.value, ValueError)
    assert info.value.errno == errno.EISDIR and info.value.filename == os.fspath(folder)
    assert info.value.strerror == "expected an .ndf file, found a folder"


def test_headers_at_the_edges_of_the_largest_file(tmp_path):
    """With no values per row any n up to 2**63 - 1 rows is a 28-byte file (2**63 is not);
    with no rows, a row may hold up to 2**31 - 1 values (MAX_WIDTH), d and l together."""
    path = tmp_path / "edge.ndf"
    for n, d, l, ok in [  # noqa: E741
        (2**63 - 1, 0, 0, True),
        (2**63, 0, 0, False),
        (0, 2**31 - 1, 0, True),
        (0, 2**31 - 2, 1, True),
        (0, 2**31, 0, False),
        (0, 2**30, 2**30, False),
        (0, 2**40, 0, False),  # passed before: its 2**40 default names were then made
        (0, 2**59, 0, False),
    ]:
        path.write_bytes(HEADER.pack(b"NDF1", n, d, l))
        if ok:
            with open_ndf(path) as f:
                assert (f.n, f.d, f.l) == (n, d, l)
        else:
            assert "impossible header" in _open_error(path)


def test_storage_options_for_a_local_path_is_a_value_error(saved):
    """storage_options applies only to URLs: with a local path it is refused, naming it."""
    path, _, _ = saved
    with pytest.raises(ValueError, match="storage_options applies only to URLs") as info:
        open_ndf(path, storage_options={})
    assert repr(os.fspath(path)) in str(info.value)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="POSIX permissions and fork")
def test_unreadable_file_is_permission_error(tmp_path):
    """A file without read permission is the OS's PermissionError. Root ignores
    permissions (most CI containers run as root): there the file opens for root, and the
    refusal is checked in a child run as the unprivileged user ``nobody``."""
    x, y = distinct_data(2, 2, 1)
    if os.geteuid() != 0:
        path = tmp_path / "locked.ndf"
        path.write_bytes(ndf_bytes(x, y))
        path.chmod(0)
        with pytest.raises(PermissionError):
            open_ndf(path)
        return
    import tempfile

    with tempfile.TemporaryDirectory() as folder:  # under /tmp: nobody may look in it
        os.chmod(folder, 0o755)
        path = os.path.join(folder, "locked.ndf")
        with open(path, "wb") as f:
            f.write(ndf_bytes(x, y))
        os.chmod(path, 0)
        with open_ndf(path) as opened:  # root: permissions do not apply
            assert opened.n == 2
        pid = os.fork()  # (no exec: the interpreter may lie where nobody cannot read)
        if pid == 0:
            code = 3
            try:
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                open_ndf(path)
            except PermissionError:
                code = 0
            except BaseException:
                code = 2
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0  # 3: it opened; 2: another error


@needs_proc_fd
def test_failed_opens_leak_no_descriptor(tmp_path):
    """open_ndf closes the descriptor again when the file is refused."""
    bad = {"magic": b"XXXX" + bytes(24), "short": b"NDF1\0\0", "empty": b""}
    x, y = distinct_data(3, 2, 1)
    bad["long"] = ndf_bytes(x, y) + b"\0"
    paths = []
    for name, data in bad.items():
        p = tmp_path / f"{name}.ndf"
        p.write_bytes(data)
        paths.append(p)
    (tmp_path / "dir").mkdir()
    paths.append(tmp_path / "dir")
    gc.collect()  # descriptors of earlier tests' garbage must not close mid-count
    before = fd_count()
    for p in paths:
        with pytest.raises((NdfError, OSError)):
            open_ndf(p)
    assert fd_count() == before


@needs_proc_fd
def test_failed_mapping_closes_the_descriptor_exactly_once(saved, monkeypatch):
    """If mapping the file fails, open_ndf raises the OSError and closes its fd once.

    A second close later (by a finalizer) would close whatever file reused the number.
    """
    path, _, _ = saved

    def no_mmap(*args, **kwargs):
        raise OSError(errno.ENOMEM, "injected mmap failure")

    monkeypatch.setattr(ndf.local, "_map", no_mmap)
    gc.collect()
    before = fd_count()
    with pytest.raises(OSError) as info:
        open_ndf(path)
    assert not isinstance(info.value, NdfError)
    assert fd_count() == before
    r, w = os.pipe()  # likely reuses the number open_ndf had
    try:
        del info
        gc.collect()
        os.fstat(r)
        os.fstat(w)
        assert fd_count() == before + 2
    finally:
        for fd in (r, w):
            try:
                os.close(fd)
            except OSError:
                pass


# -- 4. save_ndf atomicity --------------------------------------------------------


def test_save_into_missing_folder_is_file_not_found(tmp_path):
    """A missing folder is FileNotFoundError; save_ndf creates no folder and no file."""
    target = tmp_path / "no" / "such" / "dir" / "data.ndf"
    with pytest.raises(FileNotFoundError):
        save_ndf(target, np.zeros((3, 2)))
    assert os.listdir(tmp_path) == []


def _fail_fsync(monkeypatch):
    def boom(fd):
        raise OSError(errno.EIO, "injected fsync failure")

    monkeypatch.setattr(exactbatch.ndf.write.os, "fsync", boom)
    return OSError


def _fail_write_midway(monkeypatch):
    def partial(f, data):
        f.write(b"\xab" * 100)  # some rows' worth after the header, then the disk fills
        raise OSError(errno.ENOSPC, "injected: no space left on device")

    monkeypatch.setattr(exactbatch.ndf.write, "_write_rows", partial)
    return OSError


def _interrupt_write(monkeypatch):
    def interrupted(f, data):
        f.write(b"\xcd" * 64)
        raise KeyboardInterrupt

    monkeypatch.setattr(exactbatch.ndf.write, "_write_rows", interrupted)
    return KeyboardInterrupt


def _fail_rename(monkeypatch):
    def boom(src, dst, *args, **kwargs):
        raise OSError(errno.EXDEV, "injected rename failure")

    monkeypatch.setattr(exactbatch.ndf.write.os, "replace", boom)
    return OSError


FAILURES = [
    pytest.param(_fail_fsync, id="fsync"),
    pytest.param(_fail_write_midway, id="write-midway"),
    pytest.param(_interrupt_write, id="keyboard-interrupt"),
    pytest.param(_fail_rename, id="rename"),
]


@pytest.mark.parametrize("inject", FAILURES)
def test_failed_save_leaves_no_file(tmp_path, monkeypatch, inject):
    """An error part-way through a save leaves no file at the target and no temporary file."""
    exc = inject(monkeypatch)
    x, y = random_data(500, 4, 1)
    with pytest.raises(exc):
        save_ndf(tmp_path / "out.ndf", (x, y))
    monkeypatch.undo()
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("inject", FAILURES)
def test_failed_save_keeps_existing_file(tmp_path, monkeypatch, inject):
    """An error part-way through a save over an existing file keeps its old bytes."""
    target = tmp_path / "out.ndf"
    old_x, old_y = distinct_data(4, 2, 1)
    save_ndf(target, (old_x, old_y))
    old = target.read_bytes()
    exc = inject(monkeypatch)
    with pytest.raises(exc):
        save_ndf(target, random_data(500, 4, 1))
    monkeypatch.undo()
    assert target.read_bytes() == old
    assert os.listdir(tmp_path) == ["out.ndf"]


@needs_proc_fd
def test_failed_save_leaks_no_descriptor(tmp_path, monkeypatch):
    """A failed save closes the temporary file's descriptor."""
    _fail_write_midway(monkeypatch)
    before = fd_count()
    with pytest.raises(OSError):
        save_ndf(tmp_path / "out.ndf", np.zeros((5, 2)))
    assert fd_count() == before


def test_invalid_data_creates_nothing_and_keeps_existing(tmp_path):
    """Data refused by validation writes nothing: the folder keeps only the old file."""
    target = tmp_path / "out.ndf"
    save_ndf(target, np.ones((2, 2)))
    old = target.read_bytes()
    with pytest.raises(TypeError):
        save_ndf(target, np.array([["a", "b"]]))
    with pytest.raises(ValueError):
        save_ndf(target, (np.zeros((3, 2)), np.zeros(4)))
    assert target.read_bytes() == old
    assert os.listdir(tmp_path) == ["out.ndf"]


def test_save_over_a_folder_fails_and_cleans_up(tmp_path):
    """Saving onto a path that is a folder is an OSError; the folder and its files stay."""
    target = tmp_path / "taken"
    target.mkdir()
    (target / "keep.txt").write_text("hello")
    with pytest.raises(OSError):
        save_ndf(target, np.zeros((3, 2)))
    assert sorted(os.listdir(tmp_path)) == ["taken"]
    assert (target / "keep.txt").read_text() == "hello"


def test_successful_save_replaces_existing_file(tmp_path):
    """A save over an existing file replaces it entirely (shorter data too), no leftovers."""
    target = tmp_path / "out.ndf"
    big_x, big_y = random_data(300, 5, 2, seed=1)
    save_ndf(target, (big_x, big_y))
    small_x, small_y = random_data(3, 2, 1, seed=2)
    save_ndf(target, (small_x, small_y))
    assert target.read_bytes() == ndf_bytes(small_x, small_y)
    assert os.listdir(tmp_path) == ["out.ndf"]


def test_successful_save_over_open_file_leaves_reader_on_old_data(tmp_path):
    """Saving over a file that is open replaces the path; the open NdfFile still reads old rows."""
    target = tmp_path / "out.ndf"
    old_x, old_y = distinct_data(10, 2, 1)
    save_ndf(target, (old_x, old_y))
    with open_ndf(target) as f:
        new_x, new_y = random_data(20, 3, 0, seed=5)
        save_ndf(target, new_x)
        xa, ya = f.read_rows(range(10))
        np.testing.assert_array_equal(xa, old_x)
        np.testing.assert_array_equal(ya, old_y)
    with open_ndf(target) as g:
        assert (g.n, g.d, g.l) == (20, 3, 0)
        np.testing.assert_array_equal(g.read_rows(range(20))[0], new_x)


def test_save_fsyncs_a_temp_file_in_the_same_folder_then_renames(tmp_path, monkeypatch):
    """save_ndf writes a temporary file in the target's folder, fsyncs it, then renames it."""
    events = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        events.append(("fsync", os.fstat(fd).st_size))
        return real_fsync(fd)

    def replace(src, dst, *args, **kwargs):
        events.append(("replace", os.fspath(src), os.fspath(dst), os.path.getsize(src)))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(exactbatch.ndf.write.os, "fsync", fsync)
    monkeypatch.setattr(exactbatch.ndf.write.os, "replace", replace)
    target = tmp_path / "out.ndf"
    x = np.arange(12.0).reshape(4, 3)
    save_ndf(target, x)
    size = 28 + 8 * 12
    kinds = [e[0] for e in events]
    assert "replace" in kinds
    k = kinds.index("replace")
    assert ("fsync", size) in events[:k], events  # the full temp file is synced first
    _, src, dst, src_size = events[k]
    assert dst == os.fspath(target)
    assert os.path.dirname(src) == os.fspath(tmp_path) and src != dst
    assert src_size == size
    assert os.listdir(tmp_path) == ["out.ndf"]


def test_save_writes_no_stray_files(tmp_path):
    """A successful save leaves exactly the target in the folder (the temp file is renamed)."""
    save_ndf(tmp_path / "a.ndf", np.zeros((3, 2)))
    save_ndf(tmp_path / "b.ndf", (np.zeros((3, 2)), np.ones(3)))
    assert sorted(os.listdir(tmp_path)) == ["a.ndf", "b.ndf"]


# -- 5. reads -------------------------------------------------------------------------


INDEX_CASES = {
    "permutation-small": lambda rng, n: rng.permutation(n)[:40],
    "permutation-all": lambda rng, n: rng.permutation(n),
    "duplicates": lambda rng, n: rng.integers(0, 8, size=50),
    "negative": lambda rng, n: -1 - rng.integers(0, n, size=30),
    "mixed-signs": lambda rng, n: rng.integers(-n, n, size=200),
    "sorted-scattered": lambda rng, n: np.sort(rng.choice(n, size=150, replace=False)),
    "reversed-run": lambda rng, n: np.arange(600, 300, -1),
    "runs-shuffled": lambda rng, n: rng.permutation(np.r_[10:20, 500:530, 990:1000]),
    "repeated-one": lambda rng, n: np.full(17, 999),
}


@pytest.mark.parametrize("case", list(INDEX_CASES))
def test_read_rows_returns_rows_in_the_order_asked(saved, case):
    """read_rows(indices) gives exactly x[indices], y[indices]: order, duplicates, negatives."""
    path, x, y = saved
    idx = INDEX_CASES[case](np.random.default_rng(len(case)), len(x))
    with open_ndf(path) as f:
        xa, ya = f.read_rows(idx)
    assert xa.shape == (len(idx), 3) and ya.shape == (len(idx), 2)
    assert xa.dtype == np.float64 and ya.dtype == np.float64
    np.testing.assert_array_equal(xa, x[idx])
    np.testing.assert_array_equal(ya, y[idx])


@pytest.mark.parametrize(("d", "l"), [(3, 0), (0, 2), (1, 1)])  # noqa: E741
def test_read_rows_order_with_empty_side(tmp_path, d, l):  # noqa: E741
    """Scattered and contiguous reads are right when x or y has no columns."""
    x, y = random_data(400, d, l, seed=11)
    path = tmp_path / "side.ndf"
    save_ndf(path, (x, y))
    rng = np.random.default_rng(1)
    with open_ndf(path) as f:
        for idx in (rng.permutation(400), rng.integers(-400, 400, 7), np.arange(50, 90)):
            xa, ya = f.read_rows(idx)
            assert xa.shape == (len(idx), d) and ya.shape == (len(idx), l)
            np.testing.assert_array_equal(xa, x[idx])
            np.testing.assert_array_equal(ya, y[idx])


@pytest.mark.parametrize(
    "make",
    [
        list,
        tuple,
        np.array,
        lambda v: np.array(v, dtype=np.int32),
        lambda v: np.array(v, dtype=np.uint16),
    ],
    ids=["list", "tuple", "int64", "int32", "uint16"],
)
def test_read_rows_accepts_integer_sequences(saved, make):
    """Lists, tuples and integer arrays of any width are accepted as indices."""
    path, x, y = saved
    want = [3, 1, 4, 1, 5, 9, 2, 6]
    with open_ndf(path) as f:
        xa, ya = f.read_rows(make(want))
    np.testing.assert_array_equal(xa, x[want])
    np.testing.assert_array_equal(ya, y[want])


def test_read_rows_accepts_a_range(saved):
    """A range is accepted and read in order."""
    path, x, y = saved
    with open_ndf(path) as f:
        xa, ya = f.read_rows(range(100, 400))
    np.testing.assert_array_equal(xa, x[100:400])
    np.testing.assert_array_equal(ya, y[100:400])


@pytest.mark.parametrize("empty", [[], range(0), np.array([], dtype=np.int64)], ids=str)
def test_read_rows_of_nothing(saved, empty):
    """No indices give arrays of shape (0, d) and (0, l)."""
    path, _, _ = saved
    with open_ndf(path) as f:
        xa, ya = f.read_rows(empty)
    assert xa.shape == (0, 3) and ya.shape == (0, 2)


def test_read_row_negative_index(saved):
    """read_row(-1) is the last row, read_row(-n) the first."""
    path, x, y = saved
    with open_ndf(path) as f:
        for i in (-1, -2, -1000):
            xr, yr = f.read_row(i)
            np.testing.assert_array_equal(xr, x[i])
            np.testing.assert_array_equal(yr, y[i])
        xr, _ = f.read_row(np.int64(7))
        np.testing.assert_array_equal(xr, x[7])


@pytest.mark.parametrize("bad", [1000, 1001, -1001, 2**40, -(2**40)])
def test_read_row_out_of_range_is_index_error(saved, bad):
    """read_row(i) with i outside [-n, n) is an IndexError."""
    path, _, _ = saved
    with open_ndf(path) as f, pytest.raises(IndexError):
        f.read_row(bad)


@pytest.mark.parametrize(
    "bad",
    [
        [1000],
        [0, 1, 1000],
        [-1001],
        [5, -1001, 7],
        np.array([2**63 - 1]),
        np.array([2**64 - 1], dtype=np.uint64),
    ],
    ids=["n", "n-in-middle", "-n-1", "neg-in-middle", "int64-max", "uint64-max"],
)
def test_read_rows_out_of_range_is_index_error(saved, bad):
    """read_rows with any index outside [-n, n) is an IndexError."""
    path, _, _ = saved
    with open_ndf(path) as f, pytest.raises(IndexError):
        f.read_rows(bad)


def test_read_row_on_empty_file_is_index_error(tmp_path):
    """A file with n = 0 has no row 0 or -1."""
    path = tmp_path / "empty-rows.ndf"
    save_ndf(path, np.zeros((0, 3)))
    with open_ndf(path) as f:
        assert len(f) == 0
        for i in (0, -1):
            with pytest.raises(IndexError):
                f.read_row(i)
        with pytest.raises(IndexError):
            f.read_rows([0])


def test_read_rows_non_integer_indices_is_type_error(saved):
    """Float indices are a TypeError (a wrong kind), not silently truncated."""
    path, _, _ = saved
    with open_ndf(path) as f:
        with pytest.raises(TypeError):
            f.read_rows(np.array([1.0, 2.0]))
        with pytest.raises(TypeError):
            f.read_row(1.0)


@pytest.mark.parametrize(
    "idx",
    [np.array([9, 2, 7, 2]), np.arange(100, 140), np.random.default_rng(0).permutation(1000)[:300]],
    ids=["few", "run", "scattered"],
)
def test_read_rows_fills_and_returns_out_buffers(saved, idx):
    """out_x/out_y of the right shape are filled and returned (the same objects)."""
    path, x, y = saved
    out_x = np.full((len(idx), 3), np.nan)
    out_y = np.full((len(idx), 2), np.nan)
    with open_ndf(path) as f:
        rx, ry = f.read_rows(idx, out_x=out_x, out_y=out_y)
    assert rx is out_x and ry is out_y
    np.testing.assert_array_equal(out_x, x[idx])
    np.testing.assert_array_equal(out_y, y[idx])


def test_read_rows_with_only_one_out_buffer(saved):
    """Giving only out_x (or only out_y) fills that one and allocates the other."""
    path, x, y = saved
    idx = [4, 8, 15, 16, 23, 42]
    with open_ndf(path) as f:
        out_x = np.empty((6, 3))
        rx, ry = f.read_rows(idx, out_x=out_x)
        assert rx is out_x
        np.testing.assert_array_equal(rx, x[idx])
        np.testing.assert_array_equal(ry, y[idx])
        out_y = np.empty((6, 2))
        rx, ry = f.read_rows(idx, out_y=out_y)
        assert ry is out_y
        np.testing.assert_array_equal(rx, x[idx])
        np.testing.assert_array_equal(ry, y[idx])


@pytest.mark.parametrize("which", ["out_x", "out_y"])
@pytest.mark.parametrize(
    "shape_delta", [(1, 0), (-1, 0), (0, 1)], ids=["rows+1", "rows-1", "cols+1"]
)
def test_out_buffer_wrong_shape_is_value_error_naming_expected_shape(saved, which, shape_delta):
    """An out buffer of the wrong shape is a ValueError naming the expected shape."""
    path, _, _ = saved
    width = 3 if which == "out_x" else 2
    expected = (5, width)
    bad = np.empty((5 + shape_delta[0], width + shape_delta[1]))
    with open_ndf(path) as f, pytest.raises(ValueError) as info:
        f.read_rows([0, 1, 2, 3, 4], **{which: bad})
    assert str(expected) in str(info.value), str(info.value)


@pytest.mark.parametrize("which", ["out_x", "out_y"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128])
def test_out_buffer_wrong_dtype_is_type_error(saved, which, dtype):
    """An out buffer that is not float64 is a TypeError."""
    path, _, _ = saved
    width = 3 if which == "out_x" else 2
    with open_ndf(path) as f, pytest.raises(TypeError):
        f.read_rows([0, 1, 2, 3, 4], **{which: np.empty((5, width), dtype=dtype)})


def test_out_buffer_not_an_array_is_type_error(saved):
    """An out buffer that is not a NumPy array (a list) is a TypeError."""
    path, _, _ = saved
    with open_ndf(path) as f, pytest.raises(TypeError):
        f.read_rows([0, 1], out_x=[[0.0] * 3] * 2)


@pytest.mark.parametrize("which", ["out_x", "out_y"])
@pytest.mark.parametrize("layout", ["strided", "fortran", "readonly"])
def test_out_buffer_bad_layout_is_value_error(saved, which, layout):
    """A non-C-contiguous (or read-only) out buffer of the right shape is a ValueError."""
    path, _, _ = saved
    width = 3 if which == "out_x" else 2
    if layout == "strided":
        bad = np.empty((5, 2 * width))[:, ::2]
    elif layout == "fortran":
        bad = np.empty((5, width), order="F")
    else:
        bad = np.empty((5, width))
        bad.flags.writeable = False
    assert bad.shape == (5, width)
    with open_ndf(path) as f, pytest.raises(ValueError):
        f.read_rows([0, 1, 2, 3, 4], **{which: bad})


def test_one_run_is_one_positional_read(saved, preadv_calls):
    """read_rows(range(100, 400)): 300 adjacent rows, exactly one os.preadv call."""
    path, x, _ = saved
    with open_ndf(path) as f:
        xa, _ = f.read_rows(range(100, 400))
    assert len(preadv_calls) == 1, preadv_calls
    assert preadv_calls[0] == (28 + 100 * 40, 300 * 40)
    np.testing.assert_array_equal(xa, x[100:400])


def test_two_runs_are_two_positional_reads(saved, preadv_calls):
    """read_rows([5, 6, 7, 50, 51]): two runs of adjacent rows, exactly two os.preadv calls."""
    path, x, _ = saved
    with open_ndf(path) as f:
        xa, _ = f.read_rows([5, 6, 7, 50, 51])
    assert len(preadv_calls) == 2, preadv_calls
    assert sorted(preadv_calls) == [(28 + 5 * 40, 3 * 40), (28 + 50 * 40, 2 * 40)]
    np.testing.assert_array_equal(xa, x[[5, 6, 7, 50, 51]])


@pytest.mark.parametrize(
    "idx", [[7, 5, 6], [51, 7, 50, 5, 6], [9, 8, 7, 6, 5]], ids=["one-run", "two-runs", "reversed"]
)
def test_unsorted_adjacent_rows_are_read_together(saved, preadv_calls, idx):
    """Rows adjacent in the file are read in one call even when asked out of order."""
    path, x, y = saved
    runs = 1 + int(np.count_nonzero(np.diff(np.sort(idx)) != 1))
    with open_ndf(path) as f:
        xa, ya = f.read_rows(idx)
    assert len(preadv_calls) == runs, preadv_calls
    np.testing.assert_array_equal(xa, x[idx])
    np.testing.assert_array_equal(ya, y[idx])


@pytest.mark.parametrize("idx", [[6, 5, 6, 7], [5, 6, 6, 7], [5, 5, 5], [7, 7, 6, 5, 5]], ids=str)
def test_adjacent_rows_with_duplicates_are_read_together(saved, preadv_calls, idx):
    """Asking a row twice does not split a run: [6, 5, 6, 7] is one read of rows 5..7."""
    path, x, y = saved
    with open_ndf(path) as f:
        xa, ya = f.read_rows(idx)
    assert len(preadv_calls) == 1, preadv_calls
    lo, hi = min(idx), max(idx)
    assert preadv_calls[0] == (28 + lo * 40, (hi - lo + 1) * 40)
    np.testing.assert_array_equal(xa, x[idx])
    np.testing.assert_array_equal(ya, y[idx])


def test_short_positional_reads_are_continued_until_the_rows_are_read(
    saved, monkeypatch, numpy_backend
):
    """A positional read may return fewer bytes than asked (a signal, a network file
    system): the read goes on from where it stopped until every byte of the run is in."""
    path, x, y = saved
    real, calls = os.preadv, []

    def short(fd, buffers, offset):
        calls.append(offset)
        assert len(calls) <= 100, "a short read was not continued from where it stopped"
        return real(fd, [memoryview(buffers[0])[:7]], offset)

    monkeypatch.setattr(exactbatch.ndf.local.os, "preadv", short)
    with open_ndf(path) as f:
        gx, gy = f.read_rows(range(100, 110))
    np.testing.assert_array_equal(gx, x[100:110])
    np.testing.assert_array_equal(gy, y[100:110])
    assert calls == list(range(28 + 100 * 40, 28 + 110 * 40, 7))


def test_read_row_is_one_positional_read(saved, preadv_calls):
    """read_row(i) reads one row with one positional read of one row's bytes."""
    path, x, _ = saved
    with open_ndf(path) as f:
        xr, _ = f.read_row(123)
    assert preadv_calls == [(28 + 123 * 40, 40)]
    np.testing.assert_array_equal(xr, x[123])


def test_threads_read_one_file_at_once(saved):
    """8 threads reading one NdfFile at once, random indices, all get the right rows."""
    path, x, y = saved
    errors, barrier = [], threading.Barrier(8)

    def work(seed: int, f: NdfFile):
        rng = np.random.default_rng(seed)
        try:
            barrier.wait()
            for k in range(40):
                if k % 3 == 0:  # a contiguous run (positional read)
                    a = int(rng.integers(0, 900))
                    idx = np.arange(a, a + int(rng.integers(1, 100)))
                elif k % 3 == 1:  # a few runs (positional reads)
                    idx = rng.integers(-1000, 1000, size=int(rng.integers(1, 20)))
                else:  # scattered (the mapping)
                    idx = rng.integers(0, 1000, size=200)
                xa, ya = f.read_rows(idx)
                if not (np.array_equal(xa, x[idx]) and np.array_equal(ya, y[idx])):
                    errors.append(f"thread {seed}: wrong rows for {idx[:5]}...")
                i = int(rng.integers(-1000, 1000))
                xr, yr = f.read_row(i)
                if not (np.array_equal(xr, x[i]) and np.array_equal(yr, y[i])):
                    errors.append(f"thread {seed}: wrong row {i}")
        except Exception as e:  # noqa: BLE001 - report in the main thread
            errors.append(f"thread {seed}: {e!r}")

    with open_ndf(path) as f:
        threads = [threading.Thread(target=work, args=(s, f)) for s in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []


# -- 6. handles -----------------------------------------------------------------------


def test_loader_keeps_working_after_the_user_closes_the_file(saved):
    """Closing the user's NdfFile does not break a DataLoader over it: full epochs still read."""
    path, x, y = saved
    f = open_ndf(path)
    shuffled = DataLoader(f, 32)
    ordered = DataLoader(f, 32, shuffle=False)
    f.close()
    # file order without shuffle
    xs, ys = zip(*list(ordered), strict=True)
    np.testing.assert_array_equal(np.concatenate(xs), x)
    np.testing.assert_array_equal(np.concatenate(ys), y)
    # a shuffled epoch is a permutation of the rows, each row with its own labels
    batches = list(shuffled)
    assert len(batches) == len(shuffled) == 32  # ceil(1000 / 32)
    xb = np.concatenate([b[0] for b in batches])
    yb = np.concatenate([b[1] for b in batches])
    order = np.lexsort(xb.T[::-1])
    want = np.lexsort(x.T[::-1])
    np.testing.assert_array_equal(xb[order], x[want])
    np.testing.assert_array_equal(yb[order], y[want])


@needs_proc_fd
def test_descriptor_closes_when_the_last_holder_lets_go(saved):
    """The fd stays open while a loader holds the file, and closes when the last holder goes."""
    path, x, _ = saved
    gc.collect()
    before = fd_count()
    f = open_ndf(path)
    opened = fd_count()
    assert opened > before
    loader = DataLoader(f, 32, shuffle=False)
    f.close()
    assert fd_count() == opened  # the loader's share keeps the file open
    np.testing.assert_array_equal(np.concatenate([b[0] for b in loader]), x)
    assert fd_count() == opened
    del loader
    gc.collect()
    assert fd_count() == before


@needs_proc_fd
def test_close_without_other_holders_releases_the_descriptor(saved):
    """Closing the only holder closes the file descriptor right away."""
    path, _, _ = saved
    gc.collect()
    before = fd_count()
    f = open_ndf(path)
    f.read_rows(np.random.default_rng(0).integers(0, 1000, 300))  # also map it
    assert fd_count() > before
    f.close()
    assert fd_count() == before


@needs_proc_fd
def test_two_loaders_each_hold_a_share(saved):
    """Each loader holds its own share: dropping one keeps the file open for the other."""
    path, x, _ = saved
    gc.collect()
    before = fd_count()
    f = open_ndf(path)
    a = DataLoader(f, 100, shuffle=False)
    b = DataLoader(f, 100, shuffle=False)
    f.close()
    del a
    gc.collect()
    assert fd_count() > before
    np.testing.assert_array_equal(np.concatenate([xb for xb, _ in b]), x)
    del b
    gc.collect()
    assert fd_count() == before


def test_reading_a_closed_file_is_value_error(saved):
    """read_row/read_rows on a closed NdfFile raise ValueError; close() is idempotent."""
    path, _, _ = saved
    f = open_ndf(path)
    f.close()
    f.close()
    with pytest.raises(ValueError):
        f.read_rows([0, 1])
    with pytest.raises(ValueError):
        f.read_row(0)
    with pytest.raises(ValueError):
        f.read_rows(range(10), out_x=np.empty((10, 3)), out_y=np.empty((10, 2)))


def test_loader_over_a_closed_file_is_refused(saved):
    """A DataLoader cannot be built over an NdfFile that is already closed (ValueError)."""
    path, _, _ = saved
    f = open_ndf(path)
    f.close()
    with pytest.raises(ValueError):
        DataLoader(f, 8)


def test_context_manager_closes(saved):
    """`with open_ndf(p) as f` gives the file and closes it on exit, also on an exception."""
    path, x, _ = saved
    with open_ndf(path) as f:
        np.testing.assert_array_equal(f.read_row(0)[0], x[0])
    with pytest.raises(ValueError):
        f.read_row(0)
    with pytest.raises(RuntimeError), open_ndf(path) as g:
        raise RuntimeError("boom")
    with pytest.raises(ValueError):
        g.read_rows([0])


@needs_proc_fd
def test_context_manager_releases_the_descriptor(saved):
    """Leaving the with-block of the only holder closes the file descriptor."""
    path, _, _ = saved
    gc.collect()
    before = fd_count()
    with open_ndf(path) as f:
        f.read_rows(range(10))
        assert fd_count() > before
    assert fd_count() == before


# -- 7. files that change while open --------------------------------------------------


@pytest.mark.parametrize("new_size", [0, 28, 28 + 40 * 500, 28 + 40 * 1000 - 8])
def test_truncated_file_contiguous_read_is_ndf_error(saved, new_size):
    """A file truncated while open: the next contiguous read_rows/read_row is an NdfError."""
    path, _, _ = saved
    with open_ndf(path) as f:
        f.read_rows(range(10))
        os.truncate(path, new_size)
        with pytest.raises(NdfError) as info:
            f.read_rows(range(0, 10))
        assert os.fspath(path) in str(info.value)
        with pytest.raises(NdfError):
            f.read_rows(range(990, 1000))
        with pytest.raises(NdfError):
            f.read_row(0)


@pytest.mark.parametrize("unlinked", [False, True])
@pytest.mark.parametrize("new_size", [28 + 40 * 500, 28 + 40 * 1000 - 8])
def test_truncation_with_the_mtime_put_back_is_caught_by_the_size_check(
    saved, new_size, unlinked, each_backend
):
    """A file truncated while open, its modification time then set back to what it was:
    every read, on both backends, is still an NdfError that names the file and both
    sizes, also of rows that are still in the file. ``unlinked``: its last link gone as
    well, which leaves its change time uncounted (the rule of
    ``LocalHandle.check_size``): only the size check can see the change."""
    path, _, _ = saved
    full = 28 + 40 * 1000
    with open_ndf(path) as f:
        loader = DataLoader(f, 10, shuffle=False)
        f.read_rows(range(10))
        st = os.stat(path)
        os.truncate(path, new_size)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert os.stat(path).st_mtime_ns == st.st_mtime_ns  # the mtime check sees nothing
        if unlinked:
            os.unlink(path)
        scattered = np.random.default_rng(0).permutation(300)[:100]  # gathered from the map
        for read in (
            lambda: f.read_rows(range(0, 10)),  # one positional read
            lambda: f.read_rows(scattered),
            lambda: f.read_row(0),
            lambda: next(iter(loader)),
        ):
            with pytest.raises(NdfError, match="truncated") as info:
                read()
            assert os.fspath(path) in str(info.value)
            assert f"expected {full} bytes, found {new_size}" in str(info.value)
        loader.close()


def test_a_file_whose_mtime_changed_while_open_is_an_error_that_says_how_to_reread(saved):
    """Rewritten in place (same size, only the modification time tells): NdfError at the
    next read, naming the file and saying to open it again or replace it with save_ndf."""
    path, _, _ = saved
    with open_ndf(path) as f:
        f.read_rows(range(10))
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        for read in (lambda: f.read_rows(range(10)), lambda: f.read_row(3)):
            with pytest.raises(NdfError, match="modified in place") as info:
                read()
            msg = str(info.value)
            assert os.fspath(path) in msg and "modified in place after it was opened" in msg
            assert "open it again to read the new contents" in msg
            assert msg.endswith("replace files with save_ndf (a rename) instead")


@pytest.mark.parametrize("how", ["rewrite", "chmod"])
def test_a_change_with_the_mtime_put_back_is_an_error_on_both_backends(saved, how, each_backend):
    """Rewritten in place (same size), its modification time then put back (``touch -r``,
    ``os.utime``, ``rsync --inplace -t``): only the change time (ctime) tells, and every
    read path of both backends is an NdfError naming the file. So is a change of
    metadata alone (chmod), which the reader cannot tell from it. Opening the file does
    not move its ctime."""
    path, _, _ = saved
    opened = os.stat(path).st_ctime_ns
    with open_ndf(path) as f:
        loader = DataLoader(f, 10, shuffle=True)
        f.read_rows(range(10))
        assert os.stat(path).st_ctime_ns == opened  # opening and reading leave it alone
        change = {"rewrite": lambda: rewrite_in_place(path), "chmod": lambda: os.chmod(path, 0o600)}
        until_ctime_moves(path, opened, change[how])
        scattered = np.random.default_rng(0).permutation(300)[:100]
        for read in (
            lambda: f.read_rows(range(10)),  # a run (one positional read on the pure path)
            lambda: f.read_rows(scattered),  # gathered from the map
            lambda: f.read_row(3),
            lambda: f.read_block_into(0, np.empty((4, 5))),
            lambda: next(iter(loader)),
        ):
            with pytest.raises(NdfError, match="changed while open") as info:
                read()
            msg = str(info.value)
            assert os.fspath(path) in msg
            assert "its change time, ctime, moved though its modification time did" in msg
            assert "open it again to read the new contents" in msg
        loader.close()


_SCATTERED_AFTER_TRUNCATE = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    from exactbatch import NdfError, open_ndf

    path, new_size = sys.argv[1], int(sys.argv[2])
    f = open_ndf(path)
    rng = np.random.default_rng(0)
    f.read_rows(rng.integers(0, f.n, 300))  # the mapping is in use before the cut
    os.truncate(path, new_size)
    for _ in range(3):
        try:
            f.read_rows(rng.integers(0, f.n, 300))
        except NdfError as e:
            assert path in str(e), str(e)
        else:
            sys.exit("no NdfError after truncation")
    print("ok")
    """
)


@pytest.mark.parametrize("new_size", [28, 28 + 40 * 500])
def test_truncated_file_scattered_read_is_ndf_error_not_a_crash(saved, new_size):
    """A scattered read (>100 random rows, the mapping) after truncation raises NdfError.

    Run in a child process: reading a truncated mapping would be a SIGBUS crash.
    """
    path, _, _ = saved
    proc = subprocess.run(
        [sys.executable, "-c", _SCATTERED_AFTER_TRUNCATE, os.fspath(path), str(new_size)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout.strip() == "ok"


def test_shrink_between_check_and_read_is_ndf_error(saved, monkeypatch):
    """If the file ends early during a positional read, it is an NdfError, not short rows."""
    path, _, _ = saved
    with open_ndf(path) as f:
        os.truncate(path, 28 + 40 * 50 + 12)
        monkeypatch.setattr(ndf.local.LocalHandle, "check_size", lambda self: None)  # miss the cut
        with pytest.raises(NdfError) as info:
            f.read_rows(range(40, 60))
        assert os.fspath(path) in str(info.value)


def test_truncated_file_loader_read_is_ndf_error(saved):
    """A DataLoader over a file truncated while open raises NdfError instead of garbage."""
    path, _, _ = saved
    f = open_ndf(path)
    loader = DataLoader(f, 64)
    f.close()
    os.truncate(path, 28 + 40 * 10)
    with pytest.raises(NdfError):
        list(loader)


@pytest.mark.parametrize("how", ["replace", "unlink"])
def test_replaced_or_deleted_file_keeps_reading_old_contents(saved, tmp_path, how, each_backend):
    """A file replaced (os.replace) or deleted while open keeps reading the old contents
    (its ctime moves as its last link goes: that is no change to its rows)."""
    path, x, y = saved
    with open_ndf(path) as f:
        if how == "replace":
            new = tmp_path / "new.ndf"
            new_x, new_y = random_data(10, 3, 2, seed=99)
            new.write_bytes(ndf_bytes(new_x, new_y))
            os.replace(new, path)
        else:
            os.unlink(path)
        rng = np.random.default_rng(3)
        for idx in (np.arange(1000), rng.integers(0, 1000, 500), [999, 0, 500, 501]):
            xa, ya = f.read_rows(idx)
            np.testing.assert_array_equal(xa, x[idx])
            np.testing.assert_array_equal(ya, y[idx])
        np.testing.assert_array_equal(f.read_row(-1)[1], y[-1])
    if how == "replace":
        with open_ndf(path) as g:
            assert g.n == 10
            np.testing.assert_array_equal(g.read_rows(range(10))[0], new_x)
