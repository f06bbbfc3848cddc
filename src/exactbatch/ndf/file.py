"""The .ndf file: a 28-byte header, then n rows of (d + l) float64.

Byte layout (little-endian)::

    bytes 0..3    b"NDF1"
    bytes 4..27   u64 n, u64 d, u64 l
    then n rows, each d feature values then l label values, float64

A valid file is exactly ``28 + 8*n*(d+l)`` bytes; :func:`open_ndf` checks it.
``open_ndf`` also opens URLs (``s3://...``, any fsspec protocol) for reading,
by ranged reads of the rows each batch needs: see
:mod:`exactbatch.sources.remote`.

Reads never move a shared file position: runs of adjacent rows are read
with one positional read each (``os.preadv``), and batches scattered over
many runs are gathered from a read-only mapping of the file. So threads may
read one file at once, and a file larger than RAM is never loaded whole.
Before every read the file's size and modification time are checked again:
a file truncated, or rewritten in place, while open is an :class:`NdfError`
at the next read (so is one whose modification time was merely touched).
A file replaced (renamed over, as :func:`save_ndf` does) or deleted while
open keeps being read as the file that was opened (POSIX semantics).

A copy from a mapping of a file that another process truncates during the
copy would end the process with SIGBUS. On Linux every copy from the map is
therefore made under a read lease (``fcntl(F_SETLEASE, F_RDLCK)``), taken
before the size check and released after the copy: a process that truncates
or opens the file for writing in that instant waits (microseconds to a few
milliseconds) until the copy is done, and the next read sees the change.
When the file is already open for writing somewhere (no lease is granted
then), scattered rows are read with positional reads, which cannot fault.
Where the OS gives no lease (not Linux, a file owned by another user, a
network filesystem) the copy is unguarded and the race remains: see
:attr:`NdfFile.guarded`.

Writes are atomic: :func:`save_ndf` writes ``.NAME.<host>.<pid>.<random>.tmp``
in the target's folder and renames it over the target. A writer killed
mid-write (SIGKILL, power loss) leaves that temporary file behind; the next
``save_ndf`` to the same path removes such files whose writer process (on
this host) is gone, so they do not pile up. (A writer in another PID
namespace with the same host name is not told apart: if such a writer's
temporary file is removed, its own rename fails loudly and its target keeps
its old bytes.)
"""

from __future__ import annotations

import errno
import hashlib
import mmap
import os
import re
import secrets
import signal
import socket
import stat
import struct
import threading
import weakref
from contextlib import contextmanager

import numpy as np

from exactbatch.arrays import check_out_array
from exactbatch.checks import check_int
from exactbatch.dataset import Dataset
from exactbatch.errors import NdfError

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None
# Linux only; all three or none (then copies from the map are unguarded)
_F_SETLEASE, _F_GETLEASE, _F_SETSIG = (
    (fcntl.F_SETLEASE, fcntl.F_GETLEASE, fcntl.F_SETSIG)
    if all(hasattr(fcntl, n) for n in ("F_SETLEASE", "F_GETLEASE", "F_SETSIG"))
    else (None, None, None)
)

__all__ = ["HEADER_SIZE", "MAGIC", "NdfFile", "open_ndf", "save_ndf"]

MAGIC = b"NDF1"
_HEADER = struct.Struct("<4sQQQ")
HEADER_SIZE = _HEADER.size  # 28
_MAX_FILE_BYTES = (1 << 63) - 1  # the largest offset the OS can address
_FEW_RUNS = 4  # up to this many runs of adjacent rows: one positional read each,
_LONG_RUN = 32  # and so for more runs averaging at least this many rows; else the map
_SORT_ROWS = 16  # unordered requests up to this size are sorted to find their runs
_WRITE_ROWS_BYTES = 8 << 20  # rows are written in slabs of about this size


def expected_size(n: int, d: int, l: int) -> int:  # noqa: E741
    """Bytes of a valid file with this header (Python ints: never overflows)."""
    return HEADER_SIZE + 8 * n * (d + l)


class _Lease:
    """The read lease held on one open file while rows are copied from its map.

    While it is held, a process that truncates the file or opens it for
    writing waits in the kernel until it is released (or for at most
    ``/proc/sys/fs/lease-break-time`` seconds), so a copy never meets a
    truncated page. The lease belongs to the open file, which threads
    share: the first copier takes it and the last one releases it.
    """

    __slots__ = ("__weakref__", "fd", "holders", "lock", "works")

    def __init__(self, fd: int):
        self.fd, self.holders, self.lock = fd, 0, threading.Lock()
        self.works = _F_SETLEASE is not None
        if self.works:
            _LEASES.add(self)

    def _after_fork(self) -> None:
        """In a forked child: a lease of its own, on a new open file of the same inode.

        (Parent and child share the inherited open file, and with it one
        lease: one's release would end the other's copy's lease.)
        """
        self.lock, self.holders = threading.Lock(), 0
        try:
            fd = os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no /proc: copies in the child are unguarded
            self.works = False
            return
        self.fd = fd
        weakref.finalize(self, os.close, fd)

    def acquire(self) -> bool | None:
        """Hold the lease for one copy from the map.

        True: held, call :meth:`release` after the copy. False: the OS gives
        no lease for this file (not Linux, not the file's owner, a network
        filesystem): copy unguarded. None: the file is open for writing
        somewhere, or about to be truncated: read with positional reads.
        """
        if not self.works:
            return False
        with self.lock:
            if self.holders:
                # A writer is waiting for the lease: do not hold it off with
                # more overlapping copies (it would wait the full break time).
                if fcntl.fcntl(self.fd, _F_GETLEASE) != fcntl.F_RDLCK:
                    return None
            else:
                try:
                    # The kernel signals a lease's holder when a writer waits for it:
                    # SIGIO by default, which kills a process with no handler. Make it
                    # SIGURG, ignored by default. (Every release resets it to SIGIO.)
                    fcntl.fcntl(self.fd, _F_SETSIG, signal.SIGURG)
                    fcntl.fcntl(self.fd, _F_SETLEASE, fcntl.F_RDLCK)
                except OSError as e:
                    if e.errno == errno.EAGAIN:
                        return None
                    self.works = False  # EACCES, EINVAL, ENOLCK: never retried
                    return False
            self.holders += 1
            return True

    def release(self) -> None:
        with self.lock:
            self.holders -= 1
            if not self.holders:
                try:
                    fcntl.fcntl(self.fd, _F_SETLEASE, fcntl.F_UNLCK)
                except OSError:  # pragma: no cover - broken by the kernel after the break time
                    pass


_LEASES: weakref.WeakSet = weakref.WeakSet()  # every lease in this process, for forks


def _leases_after_fork() -> None:
    for lease in list(_LEASES):
        lease._after_fork()


if _F_SETLEASE is not None:
    os.register_at_fork(after_in_child=_leases_after_fork)


class _Handle:
    """One open file, shared by every NdfFile and loader over it.

    The descriptor (and the mapping) are released when the last holder drops
    its reference: CPython frees the handle then, and the finalizer closes.
    """

    __slots__ = (
        "__weakref__",
        "d",
        "fd",
        "l",
        "lease",
        "mtime",
        "n",
        "path",
        "row_bytes",
        "rows",
        "size",
    )

    def __init__(self, path: str, fd: int, n: int, d: int, l: int, mtime: int | None = None):  # noqa: E741
        self.path, self.fd, self.n, self.d, self.l = path, fd, n, d, l
        self.mtime = mtime  # st_mtime_ns when opened; a change means rewritten in place
        self.row_bytes = 8 * (d + l)
        self.size = expected_size(n, d, l)
        self.rows = None  # (n,) of void rows over the mapping; None when no data
        if self.size > HEADER_SIZE:
            mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
            # Void rows have alignment 1, so np.take copies whole rows from the
            # unaligned offset 28 without making the array contiguous first.
            self.rows = np.frombuffer(
                mm, dtype=np.dtype((np.void, self.row_bytes)), count=n, offset=HEADER_SIZE
            )
        self.lease = _Lease(fd) if self.rows is not None else None
        # Only now does the handle own fd: if mapping failed, open_ndf closes it (once).
        weakref.finalize(self, os.close, fd)

    def check_size(self) -> None:
        st = os.fstat(self.fd)
        found = st.st_size
        if found < self.size:
            raise NdfError(
                f"{self.path}: the file changed while open: expected {self.size} bytes, "
                f"found {found} (truncated?)"
            )
        if self.mtime is not None and st.st_mtime_ns != self.mtime:
            raise NdfError(
                f"{self.path}: the file changed while open: it was modified in place after "
                "it was opened (its modification time changed); open it again to read the "
                "new contents, and replace files with save_ndf (a rename) instead"
            )

    def pread_into(self, buf: memoryview, first_row: int) -> None:
        offset = HEADER_SIZE + first_row * self.row_bytes
        done, total = 0, len(buf)
        while done < total:
            got = os.preadv(self.fd, [buf[done:]], offset + done)
            if got == 0:
                self.check_size()
                raise NdfError(
                    f"{self.path}: expected {total} bytes at offset {offset}, "
                    f"the file ended after {done}"
                )
            done += got


class NdfFile:
    """An open ``.ndf`` file: ``n`` rows of ``d`` features and ``l`` labels.

    Use :func:`open_ndf` to get one. ``read_row`` and ``read_rows`` may be
    called from several threads at once. ``close()`` releases this object's
    share of the file; loaders built over it keep their own share, and the
    descriptor closes when the last holder lets go.
    """

    __slots__ = ("_h", "d", "l", "n", "path")

    def __init__(self, handle: _Handle):
        self._h = handle
        self.path, self.n, self.d, self.l = handle.path, handle.n, handle.d, handle.l

    def _handle(self) -> _Handle:
        h = self._h
        if h is None:
            raise ValueError(f"{self.path}: read from a closed NdfFile")
        return h

    def share(self) -> NdfFile:
        """Another holder of the same open file (what a loader keeps)."""
        return NdfFile(self._handle())

    @property
    def closed(self) -> bool:
        return self._h is None

    @property
    def guarded(self) -> bool:
        """Can a truncation by another process never crash a read of this file?

        True on Linux for a local file you own (or with CAP_LEASE): copies
        from the memory map are made under a read lease (see the module
        docs). False where the OS gives no lease: a truncation during a
        copy of scattered rows would end the process with SIGBUS.
        """
        lease = self._handle().lease
        if lease is None:  # no rows: nothing is ever copied from a map
            return True
        held = lease.acquire()
        if held:
            lease.release()
        return held is not False

    def close(self) -> None:
        """Let go of this share; idempotent."""
        self._h = None

    def __enter__(self) -> NdfFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        state = "closed" if self._h is None else "open"
        return f"NdfFile({self.path!r}, n={self.n}, d={self.d}, l={self.l}, {state})"

    def read_row(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row ``i`` as ``(x_row, y_row)`` of shapes (d,) and (l,)."""
        check_int("row index", i)
        if not -self.n <= i < self.n:
            raise IndexError(f"row {i} out of range for {self.path} with n={self.n} rows")
        x, y = self.read_rows(np.array([i], dtype=np.int64))
        return x[0], y[0]

    def read_rows(self, indices, out_x=None, out_y=None) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``indices`` (in that order) as ``(x, y)`` of shapes (r, d), (r, l).

        ``out_x``/``out_y``, when given, must be float64 C-contiguous arrays
        of exactly those shapes; they are filled and returned. Negative
        indices count from the end; any index outside [-n, n) is an
        ``IndexError``.
        """
        h = self._handle()
        idx = _as_row_indices(indices, self.n, self.path)
        r = idx.shape[0]
        out_x = check_out_array(out_x, (r, self.d), "out_x")
        out_y = check_out_array(out_y, (r, self.l), "out_y")
        read_rows_into(h, idx, out_x, out_y)
        return out_x, out_y


def _as_row_indices(indices, n: int, path: str) -> np.ndarray:
    idx = np.asarray(indices)
    if idx.size == 0:
        return np.empty(0, dtype=np.int64)
    if idx.dtype.kind not in "iu":
        raise TypeError(f"row indices must be integers; got dtype {idx.dtype}")
    if idx.ndim != 1:
        raise ValueError(f"row indices must be 1-D; got shape {idx.shape}")
    lo, hi = int(idx.min()), int(idx.max())
    if lo < -n or hi >= n:
        bad = lo if lo < -n else hi
        raise IndexError(f"row {bad} out of range for {path} with n={n} rows")
    idx = idx.astype(np.int64, copy=False)
    if lo < 0:
        idx = np.where(idx < 0, idx + n, idx)
    return idx


def _runs(idx: np.ndarray, always: bool = False):
    """How to read rows ``idx`` with positional reads, or None to gather from the map.

    Returns ``(rows, inverse, starts)``: the distinct rows in file order
    (``inverse`` maps them back to ``idx``'s order, None when ``idx`` is
    already strictly increasing) and where each run of adjacent rows starts.
    Positional reads pay one system call per run, so they are used for few
    runs or long ones; scattered rows (a shuffled batch) come from the map,
    unless ``always``.
    """
    r = idx.shape[0]
    if bool(np.all(idx[1:] > idx[:-1])):
        rows, inverse = idx, None
    elif always or r <= _SORT_ROWS or int(idx.max()) - int(idx.min()) < 4 * r:
        # each distinct row once, in file order, so a repeat does not split a run
        rows, inverse = np.unique(idx, return_inverse=True)
    else:
        return None
    starts = [0, *(np.flatnonzero(np.diff(rows) != 1) + 1).tolist()]
    if not always and len(starts) > _FEW_RUNS and len(rows) < _LONG_RUN * len(starts):
        return None
    return rows, inverse, starts


def read_rows_into(h: _Handle, idx: np.ndarray, out_x: np.ndarray, out_y: np.ndarray) -> None:
    """Fill out_x/out_y with rows ``idx`` (valid, non-negative int64) of ``h``."""
    r = idx.shape[0]
    if r == 0 or h.row_bytes == 0:
        return
    if type(h) is not _Handle:  # a remote object (sources/remote.py): coalesced ranged reads
        h.read_rows_into(idx, out_x, out_y)
        return
    d, l = h.d, h.l  # noqa: E741
    # Rows on disk are x then y; stage them whole unless one side is empty.
    stage = out_x if l == 0 else out_y if d == 0 else np.empty((r, d + l), dtype=np.float64)
    runs = _runs(idx)
    # Copies from the map are made under the lease, taken before the size check.
    held = None if runs is not None else h.lease.acquire()
    try:
        h.check_size()
        if held is not None:
            h.rows.take(idx, out=stage.view(h.rows.dtype).reshape(r), mode="clip")
        else:
            rows, inverse, starts = runs or _runs(idx, always=True)
            target = stage if inverse is None else np.empty((len(rows), d + l), dtype=np.float64)
            raw = memoryview(target).cast("B")
            for a, b in zip(starts, [*starts[1:], rows.shape[0]], strict=True):
                h.pread_into(raw[a * h.row_bytes : b * h.row_bytes], int(rows[a]))
            if inverse is not None:
                stage[...] = target[inverse.reshape(r)]
    finally:
        if held:
            h.lease.release()
    if stage is not out_x and d:
        out_x[...] = stage[:, :d]
    if stage is not out_y and l:
        out_y[...] = stage[:, d:]


def open_ndf(path, *, storage_options: dict | None = None) -> NdfFile:
    """Open an ``.ndf`` file for reading, checking its header and exact size.

    A wrong magic, a short header, an impossible header or a size other
    than ``28 + 8*n*(d+l)`` is an :class:`NdfError` naming the file, what
    was expected and what was found. OS errors (a missing file, no
    permission, a folder) are raised as the OS reports them.

    ``path`` may be a URL (``s3://bucket/key``, any fsspec protocol; needs
    fsspec, and s3fs for S3): batches then fetch their rows by ranged reads
    (:mod:`exactbatch.sources.remote`). ``storage_options`` (endpoint,
    credentials, ...) go to the filesystem; only for URLs.
    """
    from exactbatch.sources import remote  # not at the top: remote imports this module

    if remote.is_url(path):
        return remote.open_ndf_url(os.fspath(path), storage_options)
    if storage_options is not None:
        raise ValueError(f"storage_options applies only to URLs; got the local path {path!r}")
    path = remote.local_path(os.fspath(path))
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "expected an .ndf file, found a folder", path)
        n, d, l = _read_header(fd, path, st.st_size)  # noqa: E741
        return NdfFile(_Handle(path, fd, n, d, l, st.st_mtime_ns))
    except BaseException:
        os.close(fd)
        raise


def _read_header(fd: int, path: str, size: int) -> tuple[int, int, int]:
    head = os.pread(fd, HEADER_SIZE, 0) if size else b""
    return check_header(head, size, path)


def check_header(head: bytes, size: int, path: str) -> tuple[int, int, int]:
    """``(n, d, l)`` from a file's first bytes (up to 28) and its size, or :class:`NdfError`.

    The one place the header rules live: local files and URLs alike.
    """
    if size == 0:
        raise NdfError(f"{path}: empty file; expected an .ndf file (a {HEADER_SIZE}-byte header)")
    head = bytes(head[:HEADER_SIZE])
    if head[:4] != MAGIC[: len(head[:4])]:
        raise NdfError(f"{path}: not an .ndf file: expected magic {MAGIC!r}, found {head[:4]!r}")
    if len(head) < HEADER_SIZE:
        raise NdfError(
            f"{path}: short header: expected {HEADER_SIZE} bytes "
            f"(magic, n, d, l), found only {len(head)}"
        )
    _, n, d, l = _HEADER.unpack(head)  # noqa: E741
    want = expected_size(n, d, l)
    if want > _MAX_FILE_BYTES:
        raise NdfError(
            f"{path}: impossible header n={n}, d={d}, l={l}: 28 + 8*n*(d+l) = {want} bytes "
            f"exceeds the largest possible file ({_MAX_FILE_BYTES} bytes); found {size} bytes"
        )
    if n > _MAX_FILE_BYTES or expected_size(1, d, l) > _MAX_FILE_BYTES:
        # With no rows (n = 0) or no values per row (d + l = 0) any n, d, l give a
        # 28-byte file; still, rows are numbered by int64 and a row must fit in a file.
        raise NdfError(
            f"{path}: impossible header n={n}, d={d}, l={l}: at most 2**63 - 1 rows, and one "
            f"row of 8*(d+l) bytes after the 28-byte header must fit in the largest possible "
            f"file ({_MAX_FILE_BYTES} bytes); found {size} bytes"
        )
    if size != want:
        how = "short" if size < want else "long"
        raise NdfError(
            f"{path}: file too {how}: header n={n}, d={d}, l={l} needs 28 + 8*n*(d+l) = "
            f"{want} bytes, found {size} bytes"
        )
    return n, d, l


def save_ndf(path, data) -> None:
    """Write ``data`` (a Dataset, an ``(x, y)`` pair, or an array ``x``) to ``path``.

    Atomic: rows go to a temporary file in the same folder, which is flushed,
    fsynced and renamed over ``path``. On any error no new file is left
    behind and an existing file at ``path`` keeps its old bytes. No folders
    are created: a missing folder is ``FileNotFoundError``.
    """
    path = os.fspath(path)
    if isinstance(data, tuple):
        if len(data) != 2:
            raise TypeError(f"data must be a Dataset or an (x, y) pair; got a {len(data)}-tuple")
        data = Dataset(*data)
    elif not isinstance(data, Dataset):
        data = Dataset(data)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        f.write(_HEADER.pack(MAGIC, data.n, data.d, data.l))
        _write_rows(f, data)


@contextmanager
def atomic_path(path):
    """A temporary path next to ``path`` to write to; renamed over ``path`` on success.

    The file is fsynced before the rename and the folder after. On any
    exception out of the block the temporary file is removed and ``path``
    keeps its old bytes. No folder is created (a missing one is
    ``FileNotFoundError``); temporary files of killed writers of ``path`` are
    removed first, so they do not pile up.
    """
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, "folder does not exist (nothing creates it)", path)
    name = os.path.basename(path)
    _remove_stale_temps(folder, name)
    tmp, fd = _create_temp(folder, name)
    os.close(fd)
    try:
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_folder(folder)


# What follows ".NAME." in a temporary file's name: host tag, writer's pid, random part.
_TEMP_TAIL = re.compile(r"(?P<host>[0-9a-f]{8})\.(?P<pid>[1-9][0-9]{0,9})\.[0-9a-f]{12}\.tmp")


def _temp_stem(name: str) -> str:
    # keep the temporary name within NAME_MAX (255 bytes) for long target names
    return os.fsdecode(os.fsencode(name)[:200])


def _host_tag() -> str:
    """8 hex digits naming this host: pids are only compared on the host that wrote them."""
    return hashlib.blake2s(socket.gethostname().encode(), digest_size=4).hexdigest()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: no signal is sent, only the existence is checked
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: it exists (someone else's);
        return True  # a pid too large for this OS: not ours to judge, keep the file
    return True


def _remove_stale_temps(folder: str, name: str) -> None:
    """Remove temporary files of ``name`` left by writers on this host that are gone.

    A writer killed mid-write leaves ``.NAME.<host>.<pid>.<random>.tmp``;
    such a file is removed once no process has that pid (a pid reused since
    keeps it until that process ends too). Best effort: errors are ignored.
    Files of live writers, of other hosts, or named otherwise are left alone.
    """
    if os.name != "posix":  # os.kill(pid, 0) only probes on POSIX
        return
    me = os.getpid()
    _remove_temps(folder, name, lambda pid: pid != me and not _pid_alive(pid))


def _remove_own_temps(path) -> None:
    """Remove this process's temporary files of ``path``, after a failed write.

    The writers remove their own, but an exception raised asynchronously (a
    Ctrl-C) can land between a file's creation and the code that would
    remove it. Best effort, like :func:`_remove_stale_temps`.
    """
    path = os.fspath(path)
    me = os.getpid()
    _remove_temps(os.path.dirname(os.path.abspath(path)), os.path.basename(path), me.__eq__)


def _remove_temps(folder: str, name: str, remove) -> None:
    """Remove this host's temporary files of ``name`` whose writer's pid passes ``remove``."""
    prefix, host = f".{_temp_stem(name)}.", _host_tag()
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
    except OSError:
        return
    for entry in names:
        m = _TEMP_TAIL.fullmatch(entry, len(prefix))
        if m is None or m["host"] != host or not remove(int(m["pid"])):
            continue
        try:
            os.unlink(os.path.join(folder, entry))
        except OSError:
            pass


def _create_temp(folder: str, name: str) -> tuple[str, int]:
    stem, host, pid = _temp_stem(name), _host_tag(), os.getpid()
    while True:
        tmp = os.path.join(folder, f".{stem}.{host}.{pid}.{secrets.token_hex(6)}.tmp")
        try:  # O_EXCL with mode 0o666 so the final file gets the umask's permissions
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue


def _write_rows(f, data: Dataset) -> None:
    x, y = data.x, data.y
    row_bytes = 8 * (data.d + data.l)
    if row_bytes == 0:
        return
    step = max(1, _WRITE_ROWS_BYTES // row_bytes)
    le = np.dtype("<f8")
    for a in range(0, data.n, step):
        if data.l == 0:
            slab = x[a : a + step]
        elif data.d == 0:
            slab = y[a : a + step]
        else:
            slab = np.concatenate((x[a : a + step], y[a : a + step]), axis=1)
        f.write(memoryview(np.ascontiguousarray(slab, dtype=le)).cast("B"))


def _fsync_folder(folder: str) -> None:
    """Make the rename durable; best effort where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
