"""An open .ndf file: :class:`NdfFile`, :func:`open_ndf`, and how a local file is read.

Reads never move a shared file position, so threads may read one file at
once, and a file larger than RAM is never loaded whole. With the compiled
core (:func:`exactbatch.backend` is ``"compiled"``) every batch is one
gather from a read-only mapping of the file, under the fault guard of
:mod:`exactbatch._core` (a truncation during the copy is an
:class:`NdfError`, never a SIGBUS), followed by one ``fstat``: no lock, no
lease. On the pure NumPy path runs of adjacent rows are read with one
positional read each (``os.preadv``), and batches scattered over many runs
are gathered from the mapping under the read lease of
:mod:`exactbatch.ndf.guard`. Either way the file's size and modification
time are checked at every read: a file truncated, or rewritten in place,
while open is an :class:`NdfError` at the next read (so is one whose
modification time was merely touched). A file replaced
(renamed over, as :func:`~exactbatch.ndf.write.save_ndf` does) or deleted
while open keeps being read as the file that was opened (POSIX semantics).

``open_ndf`` also opens URLs (``s3://...``, any fsspec protocol) for
reading, by ranged reads of the rows each batch needs: see
:mod:`exactbatch.ndf.remote`.
"""

from __future__ import annotations

import errno
import mmap
import os
import stat
import weakref

import numpy as np

from exactbatch.arrays import check_out_array
from exactbatch.checks import check_int
from exactbatch.errors import NdfError
from exactbatch.kernels import FileChanged, file_rows
from exactbatch.ndf.format import HEADER_SIZE, check_header, expected_size
from exactbatch.ndf.guard import Lease
from exactbatch.ndf.names import default_names, read_sidecar
from exactbatch.ndf.remote import open_url
from exactbatch.urls import is_url, local_path

__all__ = ["LocalHandle", "NdfFile", "Share", "open_ndf"]

_FEW_RUNS = 4  # up to this many runs of adjacent rows: one positional read each,
_LONG_RUN = 32  # and so for more runs averaging at least this many rows; else the map
_SORT_ROWS = 16  # unordered requests up to this size are sorted to find their runs
_FADVISE = getattr(os, "POSIX_FADV_WILLNEED", None)  # not on macOS or Windows


class LocalHandle:
    """One open local file, shared by every NdfFile and loader over it.

    The descriptor (and the mapping) are released when the last holder drops
    its reference: CPython frees the handle then, and the finalizer closes.
    Its read methods are :class:`NdfFile`'s (see there); a URL's handle,
    :class:`~exactbatch.ndf.remote.RemoteHandle`, has the same ones.
    """

    __slots__ = (
        "__weakref__",
        "d",
        "fd",
        "l",
        "lease",
        "mtime",
        "n",
        "compiled",
        "compiled_raw",
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
        self.compiled = self.compiled_raw = None  # the compiled core's rows of the mapping
        if self.size > HEADER_SIZE:
            mm = mmap.mmap(fd, self.size, access=mmap.ACCESS_READ)
            # Void rows have alignment 1, so np.take copies whole rows from the
            # unaligned offset 28 without making the array contiguous first.
            self.rows = np.frombuffer(
                mm, dtype=np.dtype((np.void, self.row_bytes)), count=n, offset=HEADER_SIZE
            )
            self.compiled = file_rows(mm, HEADER_SIZE, n, d, l, fd, self.size, mtime)
            # the same rows read whole (x then y, as d + l features): read_raw_into
            self.compiled_raw = file_rows(mm, HEADER_SIZE, n, d + l, 0, fd, self.size, mtime)
        # The compiled core guards its copies itself; the lease is the pure path's guard.
        self.lease = Lease(fd) if self.rows is not None and self.compiled is None else None
        # Only now does the handle own fd: if mapping failed, open_ndf closes it (once).
        weakref.finalize(self, os.close, fd)

    def check_size(self) -> None:
        """:class:`NdfError` if the file was truncated or rewritten in place since opened."""
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
        """Fill ``buf`` with the bytes of rows from ``first_row`` on (no size check first)."""
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

    def read_block_into(self, start_row: int, buf: memoryview) -> None:
        self.check_size()
        self.pread_into(buf, start_row)

    def will_need(self, start_row: int, rows: int) -> None:
        if _FADVISE is not None and rows > 0:
            start = HEADER_SIZE + start_row * self.row_bytes
            os.posix_fadvise(self.fd, start, rows * self.row_bytes, _FADVISE)

    def read_rows_into(self, idx, out_x: np.ndarray, out_y: np.ndarray) -> None:
        compiled = self.compiled
        if compiled is None:
            return self._read_pure(idx, out_x, out_y)
        self._guarded(compiled, idx, out_x, out_y)

    def _guarded(self, compiled, idx, out_x: np.ndarray, out_y: np.ndarray) -> None:
        try:  # one guarded gather and one fstat, in C with the GIL released
            compiled.read(idx, out_x, out_y)
        except FileChanged:
            self.check_size()  # says what changed, if it can still see it
            raise NdfError(
                f"{self.path}: the file changed while open: a copy from it failed "
                "(truncated, or rewritten in place, during the read?)"
            ) from None

    def _read_pure(self, idx, out_x: np.ndarray, out_y: np.ndarray) -> None:
        if isinstance(idx, slice):
            idx = np.arange(idx.start, idx.stop, dtype=np.int64)
        r = idx.shape[0]
        if r == 0 or self.row_bytes == 0:
            return
        d, l = self.d, self.l  # noqa: E741
        # Rows on disk are x then y; stage them whole unless one side is empty (and
        # the output float64: a float32 batch is cast from the stage).
        wide = out_x.dtype == np.float64
        stage = (
            out_x
            if l == 0 and wide
            else out_y
            if d == 0 and wide
            else np.empty((r, d + l), dtype=np.float64)
        )
        self.read_raw_into(idx, stage)
        if stage is not out_x and d:
            out_x[...] = stage[:, :d]
        if stage is not out_y and l:
            out_y[...] = stage[:, d:]

    def read_raw_into(self, idx: np.ndarray, stage: np.ndarray, scattered: bool = False) -> None:
        """Fill ``stage`` ((r, d + l) float64, C-contiguous) with rows ``idx``, x then y.
        ``scattered``: the caller knows the rows are far apart: gather from the map
        without looking for runs first."""
        r = idx.shape[0]
        if r == 0 or self.row_bytes == 0:
            return
        if self.compiled is not None:  # whole rows as d + l features: one guarded gather
            self._guarded(self.compiled_raw, idx, stage, np.empty((r, 0)))
            return
        runs = None if scattered else _runs(idx)
        # Copies from the map are made under the lease, taken before the size check.
        held = None if runs is not None else self.lease.acquire()
        try:
            self.check_size()
            if held is not None:
                self.rows.take(idx, out=stage.view(self.rows.dtype).reshape(r), mode="clip")
            else:
                rows, inverse, starts = runs or _runs(idx, always=True)
                target = stage if inverse is None else np.empty((len(rows), stage.shape[1]))
                raw = memoryview(target).cast("B")
                rb = self.row_bytes
                for a, b in zip(starts, [*starts[1:], rows.shape[0]], strict=True):
                    self.pread_into(raw[a * rb : b * rb], int(rows[a]))
                if inverse is not None:
                    stage[...] = target[inverse.reshape(r)]
        finally:
            if held:
                self.lease.release()


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


class Share:
    """One holder's share of open rows (an NdfFile's handle, an NdfDataset's parts), kept
    in ``_h``, whose ``read_rows_into`` reads them: ``close()`` lets go of it (idempotent),
    ``closed`` says so, and a ``with`` block closes it; ``len()`` is ``n``, the rows; the
    read methods below, and ``share()`` for another holder. Reading a closed share is a
    ``ValueError``."""

    __slots__ = ()

    def _handle(self):
        h = self._h
        if h is None:
            raise ValueError(f"{self.path}: read from a closed {type(self).__name__}")
        return h

    def share(self):
        """Another holder of the same open rows (what a loader keeps)."""
        return type(self)(self._handle())

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self) -> None:
        """Let go of this share; idempotent."""
        self._h = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __len__(self) -> int:
        return self.n

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
        h.read_rows_into(idx, out_x, out_y)
        return out_x, out_y

    def read_rows_into(self, rows: np.ndarray, out_x: np.ndarray, out_y: np.ndarray) -> None:
        """Fill ``out_x``/``out_y`` with rows ``rows``, in that order: the loader's hot path.

        Unchecked: ``rows`` must be a slice of rows, or int32/int64 row
        numbers in ``[0, n)`` (any order, repeats allowed), the outputs
        C-contiguous arrays of shapes (r, d) and (r, l), both float64 or both
        float32 (the cast happens in the gather). :meth:`read_rows` checks
        all of that.
        """
        h = self._h
        if h is None:
            raise ValueError(f"{self.path}: read from a closed {type(self).__name__}")
        h.read_rows_into(rows, out_x, out_y)

    def rows_reader(self):
        """:meth:`read_rows_into` without the check for a closed share: the function a
        reader that holds its own share (a loader's) calls per batch, one Python call
        less on the hot path. Same arguments, unchecked, and the same errors."""
        return self._handle().read_rows_into

class NdfFile(Share):
    """An open ``.ndf`` file: ``n`` rows of ``d`` features and ``l`` labels.

    Use :func:`open_ndf` to get one. Every read method may be called from
    several threads at once. ``close()`` releases this object's share of the
    file; loaders built over it keep their own share, and the descriptor
    closes when the last holder lets go. Reading a closed NdfFile is a
    ``ValueError``.

    ``features`` and ``labels`` are the columns' names, read (once, on first
    use) from the file's names sidecar ``path + ".json"``, which
    ``save_ndf(..., features=, labels=)`` and ``exactbatch convert`` write;
    ``x0..``/``y0..`` when it has none (:mod:`exactbatch.ndf.names`).
    """

    __slots__ = ("_h", "_names", "d", "l", "n", "path")

    def __init__(self, handle):
        self._h, self._names = handle, None
        self.path, self.n, self.d, self.l = handle.path, handle.n, handle.d, handle.l

    @property
    def features(self) -> tuple[str, ...]:
        """Names of the d feature columns (the sidecar's, else ``x0..x{d-1}``)."""
        return self._column_names()[0]

    @property
    def labels(self) -> tuple[str, ...]:
        """Names of the l label columns (the sidecar's, else ``y0..y{l-1}``)."""
        return self._column_names()[1]

    def _column_names(self):
        if self._names is None:
            h = self._handle()
            remote = {} if isinstance(h, LocalHandle) else {"fs": h.fs.get(), "key": h.key}
            stored = read_sidecar(self.path, self.n, self.d, self.l, **remote)
            self._names = stored or default_names(self.d, self.l)
        return self._names

    @property
    def guarded(self) -> bool:
        """Can a truncation by another process never crash a read of this file?

        True with the compiled core (:func:`exactbatch.backend`), whose copies
        from the memory map run under a fault guard, on any POSIX system. On
        the pure NumPy path: True on Linux for a local file you own (or with
        CAP_LEASE), where copies from the map are made under a read lease
        (see :mod:`exactbatch.ndf.guard`); False where the OS gives no lease:
        a truncation during a copy of scattered rows would end the process
        with SIGBUS.
        """
        lease = self._handle().lease
        # None: no rows, or a URL: nothing is ever copied from a map
        return lease is None or lease.guards()

    def __repr__(self) -> str:
        state = "closed" if self._h is None else "open"
        return f"NdfFile({self.path!r}, n={self.n}, d={self.d}, l={self.l}, {state})"

    def kernel_rows(self):
        """The compiled core's rows of this file (:func:`exactbatch.kernels.file_rows`):
        what a sharded dataset's gather reads this part through. None on the pure
        NumPy path, for a URL, and for a file without rows."""
        return getattr(self._handle(), "compiled", None)

    def check_unchanged(self) -> None:
        """:class:`NdfError` naming the file if it was truncated or rewritten in place
        since it was opened (one ``fstat``; a no-op for a URL)."""
        check = getattr(self._handle(), "check_size", None)
        if check is not None:
            check()

    def read_raw_into(self, rows: np.ndarray, out: np.ndarray, scattered: bool = False) -> None:
        """Fill ``out``, a C-contiguous float64 array of shape (r, d + l), with rows ``rows``
        in that order, x then y per row (as on disk). Unchecked, like
        :meth:`read_rows_into`. ``scattered=True`` says the rows are far apart (a
        shuffled batch's), so no time is spent looking for runs of adjacent rows."""
        self._handle().read_raw_into(rows, out, scattered)

    def read_block_into(self, start_row: int, out: np.ndarray) -> None:
        """Fill ``out``, a C-contiguous float64 array of shape (r, d + l), with the ``r``
        consecutive rows from ``start_row`` on (x then y per row, as on disk): one
        positional read (one ranged read for a URL). Unchecked, like
        :meth:`read_rows_into`; the file is checked for changes first."""
        if out.size:
            self._handle().read_block_into(start_row, memoryview(out).cast("B"))

    def will_need(self, start_row: int, rows: int) -> None:
        """Rows ``[start_row, start_row + rows)`` are read soon: ask the kernel to start
        reading them now (``posix_fadvise``). A no-op for URLs, and where the OS has no
        such hint."""
        self._handle().will_need(start_row, rows)


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
    idx = np.ascontiguousarray(idx, dtype=np.int64)
    if lo < 0:
        idx = np.where(idx < 0, idx + n, idx)
    return idx


def open_ndf(path, *, storage_options: dict | None = None) -> NdfFile:
    """Open an ``.ndf`` file for reading, checking its header and exact size.

    A wrong magic, a short header, an impossible header or a size other
    than ``28 + 8*n*(d+l)`` is an :class:`NdfError` naming the file, what
    was expected and what was found. OS errors (a missing file, no
    permission, a folder) are raised as the OS reports them.

    ``path`` may be a URL (``s3://bucket/key``, any fsspec protocol; needs
    fsspec, and s3fs for S3): batches then fetch their rows by ranged reads
    (:mod:`exactbatch.ndf.remote`). ``storage_options`` (endpoint,
    credentials, ...) go to the filesystem; only for URLs.
    """
    if is_url(path):
        return NdfFile(open_url(os.fspath(path), storage_options))
    if storage_options is not None:
        raise ValueError(f"storage_options applies only to URLs; got the local path {path!r}")
    path = local_path(os.fspath(path))
    # pragma below: Python opens every descriptor close-on-exec anyway (PEP 446)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))  # pragma: no mutate
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "expected an .ndf file, found a folder", path)
        head = os.pread(fd, HEADER_SIZE, 0) if st.st_size else b""
        n, d, l = check_header(head, st.st_size, path)  # noqa: E741
        return NdfFile(LocalHandle(path, fd, n, d, l, st.st_mtime_ns))
    except BaseException:
        os.close(fd)
        raise
