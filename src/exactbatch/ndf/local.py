"""How a local ``.ndf`` file is read: :class:`LocalHandle`, one open file shared by
every :class:`~exactbatch.ndf.file.NdfFile` and loader over it (a URL's is
:class:`~exactbatch.ndf.remote.RemoteHandle`).

With the compiled core every batch is one gather from a read-only mapping
of the file under the core's fault guard, followed by one ``fstat``: no
lock, no lease. On the pure NumPy path runs of adjacent rows are read with
one positional read each (``os.preadv``), and batches scattered over many
runs are gathered from the mapping under the read lease of
:mod:`exactbatch.ndf.guard`. Either way the file's size, modification time
and change time are checked at every read (:meth:`LocalHandle.check_size`).
"""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from typing import Any, Literal, NoReturn, overload

import numpy as np

from exactbatch.arrays import byte_view
from exactbatch.errors import NdfError
from exactbatch.kernels import (
    FileChanged,
    RowIndex,
    Rows,
    TransformKernel,
    file_rows,
    map_file,
    staged,
)
from exactbatch.ndf.direct import MIN_DIRECT_BYTES, DirectReads, Unsupported, open_direct
from exactbatch.ndf.format import HEADER_SIZE, expected_size
from exactbatch.ndf.guard import Lease

__all__ = ["LocalHandle", "what_changed"]


def what_changed(st: os.stat_result, size: int, mtime: int | None, ctime: int | None) -> str | None:
    """How the file whose ``fstat`` is ``st`` changed since it had ``size`` bytes (at
    least), modification time ``mtime`` and change time ``ctime`` (in ns; None:
    unchecked), in words; None if it did not. The rule of :meth:`LocalHandle.check_size`,
    for every file read in place (an ``.ndf``, a mapped Arrow file)."""
    if st.st_size < size:
        return f"expected {size} bytes, found {st.st_size} (truncated?)"
    if mtime is not None and st.st_mtime_ns != mtime:
        what = "its modification time changed"
    elif ctime is not None and st.st_nlink and st.st_ctime_ns != ctime:
        what = (
            "its change time, ctime, moved though its modification time did not: "
            "written, then its modification time put back, or its metadata changed"
        )
    else:
        return None
    return f"it was modified in place after it was opened ({what})"


_FEW_RUNS = 4  # up to this many runs of adjacent rows: one positional read each,
_LONG_RUN = 32  # and so for more runs averaging at least this many rows; else the map
_SORT_ROWS = 16  # unordered requests up to this size are sorted to find their runs
_FADVISE = getattr(os, "POSIX_FADV_WILLNEED", None)  # not on macOS or Windows


class _Unopened:
    """LocalHandle.direct before the first block read."""


_UNOPENED = _Unopened()
# how rows are read with positional reads (_runs): the distinct rows in file order, the
# map back to the request's order (None: it was increasing), where each run starts
_Runs = tuple[np.ndarray, np.ndarray | None, list[int]]
_OPENING = threading.Lock()  # one open of a file's direct reads


class LocalHandle:
    """One open local file, shared by every NdfFile and loader over it.

    The descriptor (and the mapping) are released when the last holder drops
    its reference: CPython frees the handle then, and the finalizer closes.
    Its read methods are :class:`NdfFile`'s (see there); a URL's handle,
    :class:`~exactbatch.ndf.remote.RemoteHandle`, has the same ones.
    """

    __slots__ = (
        "__weakref__",
        "ctime",
        "d",
        "direct",
        "fd",
        "l",
        "lease",
        "mapping",
        "mtime",
        "n",
        "compiled",
        "compiled_raw",
        "path",
        "row_bytes",
        "rows",
        "size",
    )

    def __init__(
        self,
        path: str,
        fd: int,
        n: int,
        d: int,
        l: int,  # noqa: E741
        st: os.stat_result | None = None,
    ) -> None:
        self.path, self.fd, self.n, self.d, self.l = path, fd, n, d, l
        # st_mtime_ns and st_ctime_ns of ``st`` (the fstat at open): see check_size
        self.mtime: int | None = None if st is None else st.st_mtime_ns
        self.ctime: int | None = None if st is None else st.st_ctime_ns
        self.row_bytes = 8 * (d + l)
        self.size = expected_size(n, d, l)
        self.rows: Any = None  # (n,) of void rows over the mapping; None when no data
        self.mapping: Any = None  # the file's read-only mapping; None when no data
        self.compiled: Rows | None = None  # the compiled core's rows of the mapping
        self.compiled_raw: Rows | None = None
        # block reads past the page cache (ndf/direct.py)
        self.direct: DirectReads | _Unopened | None = _UNOPENED
        if self.size > HEADER_SIZE:
            mm = self.mapping = _map(fd, self.size)
            # Void rows have alignment 1, so np.take copies whole rows from the
            # unaligned offset 28 without making the array contiguous first.
            self.rows = np.frombuffer(
                mm, dtype=np.dtype((np.void, self.row_bytes)), count=n, offset=HEADER_SIZE
            )
            times = self.size, self.mtime, self.ctime
            self.compiled = file_rows(mm, HEADER_SIZE, n, d, l, fd, *times)
            # the same rows read whole (x then y, as d + l features): read_raw_into
            self.compiled_raw = file_rows(mm, HEADER_SIZE, n, d + l, 0, fd, *times)
        # The compiled core guards its copies itself; the lease is the pure path's guard.
        self.lease: Any = Lease(fd) if self.rows is not None and self.compiled is None else None
        # Only now does the handle own fd: if mapping failed, open_ndf closes it (once).
        weakref.finalize(self, os.close, fd)

    def check_size(self) -> None:
        """:class:`NdfError` if the file was truncated or rewritten in place since opened.

        Compared with the ``fstat`` at open: the size, the modification time, and
        the change time (ctime), which every write moves and no user call can set
        back, so a rewrite whose modification time was put back (``touch -r``,
        ``os.utime``, ``rsync --inplace -t``) is caught too. A change of metadata
        alone (chmod, a rename, a new hard link) moves ctime as well and is taken
        for a change; the last link going (the file deleted, or replaced by a
        rename over its path) is not: the file opened is still read.
        (The compiled core's check after each copy is the same rule.)
        """
        what = what_changed(os.fstat(self.fd), self.size, self.mtime, self.ctime)
        if what is not None:
            raise NdfError(
                f"{self.path}: the file changed while open: {what}; open it again to read "
                "the new contents, and replace files with save_ndf (a rename) instead"
            )

    def pread_into(self, buf: memoryview, first_row: int) -> None:
        """Fill ``buf`` with the bytes of rows from ``first_row`` on (no size check first)."""
        offset = HEADER_SIZE + first_row * self.row_bytes
        done, total = 0, len(buf)
        while done < total:
            got = os.preadv(self.fd, [buf[done:]], offset + done)
            if got == 0:
                self._ended(offset, total, done)
            done += got

    def _ended(self, offset: int, total: int, done: int) -> None:
        self.check_size()
        raise NdfError(
            f"{self.path}: expected {total} bytes at offset {offset}, the file ended after {done}"
        )

    def read_block_into(self, start_row: int, buf: memoryview) -> None:
        """One block of rows: past the page cache where it is cold and the file system
        allows it (:mod:`exactbatch.ndf.direct`), else a buffered positional read; the
        same bytes and errors either way."""
        direct = self._direct() if len(buf) >= MIN_DIRECT_BYTES else None
        offset = HEADER_SIZE + start_row * self.row_bytes
        if direct is None or direct.cached(offset, len(buf)):
            self.pread_into(buf, start_row)
        else:
            try:
                done = direct.read(offset, buf)
            except Unsupported:  # read buffered from now on
                self.direct = None
                self.pread_into(buf, start_row)
            else:
                if done < len(buf):
                    self._ended(offset, len(buf), done)
        self.check_size()  # after the read: see read_raw_into

    def _direct(self) -> DirectReads | None:
        """The file's direct reads, opened at the first block read; None without them."""
        direct = self.direct
        if isinstance(direct, _Unopened):
            with _OPENING:
                if isinstance(self.direct, _Unopened):
                    base = None if self.rows is None else self.rows.ctypes.data - HEADER_SIZE
                    self.direct = open_direct(self.fd, base)
                direct = self.direct
        assert not isinstance(direct, _Unopened)  # (opened just above)
        return direct

    def will_need(self, start_row: int, rows: int) -> None:
        if rows * self.row_bytes >= MIN_DIRECT_BYTES and self._direct() is not None:
            return  # a block read past the cache: a hint would have it read twice
        if _FADVISE is not None and rows > 0:
            start = HEADER_SIZE + start_row * self.row_bytes
            os.posix_fadvise(self.fd, start, rows * self.row_bytes, _FADVISE)

    fuses = True  # read_rows_into takes a transform kernel
    splits = True  # read_rows_into takes threads (the compiled gather's)

    def read_rows_into(
        self,
        idx: RowIndex,
        out_x: np.ndarray,
        out_y: np.ndarray,
        kernel: TransformKernel | None = None,
        threads: int | None = None,
    ) -> int | None:
        """Rows ``idx`` into the outputs; with ``kernel`` (a
        :class:`~exactbatch.kernels.TransformKernel`), x through it as it is copied,
        and the first row that held a NaN is returned (or -1). ``threads``: the
        compiled gather's (None: from the batch's bytes; the pure path ignores it)."""
        compiled = self.compiled
        if compiled is None:
            if kernel is not None:
                return staged(self._read_pure, idx, out_x, out_y, kernel)
            self._read_pure(idx, out_x, out_y)
            return None
        return self._guarded(compiled, idx, out_x, out_y, kernel, threads)

    def _guarded(
        self,
        compiled: Rows,
        idx: RowIndex,
        out_x: np.ndarray,
        out_y: np.ndarray,
        kernel: TransformKernel | None = None,
        threads: int | None = None,
    ) -> int | None:
        try:  # one guarded gather and one fstat, in C with the GIL released
            return compiled.read(idx, out_x, out_y, kernel, threads)
        except FileChanged as e:
            self.changed(e)

    def changed(self, exc: BaseException) -> NoReturn:
        """The error of a copy from the mapping that failed (``exc``: the core's
        :class:`~exactbatch.kernels.FileChanged`): :meth:`check_size`'s, which says what
        changed if it can still see it, else an NdfError naming the file."""
        self.check_size()
        raise NdfError(
            f"{self.path}: the file changed while open: a copy from it failed "
            "(truncated, or rewritten in place, during the read?)"
        ) from None

    def run_rows(self) -> Rows | None:
        """New compiled rows of the file's mapping whose copies fail with this handle's
        errors (:meth:`changed`, which they hold, and with it the handle: its descriptor
        stays open while they are read): a loader's reader's own, whose ``read_run`` and
        ``take_run`` it hands out as they are, one C call a batch. None on the pure path
        and for a file without rows."""
        if self.compiled is None:
            return None
        times = self.size, self.mtime, self.ctime
        n, d, l = self.n, self.d, self.l  # noqa: E741
        return file_rows(self.mapping, HEADER_SIZE, n, d, l, self.fd, *times, self.changed)

    def _read_pure(self, idx: RowIndex, out_x: np.ndarray, out_y: np.ndarray) -> None:
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
        if self.compiled_raw is not None:  # whole rows as d + l features: one guarded gather
            self._guarded(self.compiled_raw, idx, stage, np.empty((r, 0)))
            return
        runs = None if scattered else _runs(idx)
        # Copies from the map are made under the lease, taken before the size check.
        held = None if runs is not None else self.lease.acquire()
        if held is None:
            self._pread_rows(idx, stage, runs or _runs(idx, always=True))
        else:
            try:
                self.check_size()  # a copy from a map cut short would end in SIGBUS
                self.rows.take(idx, out=stage.view(self.rows.dtype).reshape(r), mode="clip")
            finally:
                if held:
                    self.lease.release()
        if not held:
            # Unleased, a truncation may run during the copy: a positional read (or a
            # copy from the map) racing it can hand back the zeroed tail of the file's
            # last page. The truncation shrinks the size before it zeroes, so a check
            # after the copy sees it (the compiled core's rule, for the same reason).
            self.check_size()

    def _pread_rows(self, idx: np.ndarray, stage: np.ndarray, runs: _Runs) -> None:
        """Rows ``idx`` into ``stage`` with one positional read a run of adjacent rows."""
        rows, inverse, starts = runs
        target = stage if inverse is None else np.empty((len(rows), stage.shape[1]))
        raw = byte_view(target)
        rb = self.row_bytes
        for a, b in zip(starts, [*starts[1:], rows.shape[0]], strict=True):
            self.pread_into(raw[a * rb : b * rb], int(rows[a]))
        if inverse is not None:
            stage[...] = target[inverse.reshape(idx.shape[0])]


def _map(fd: int, size: int) -> memoryview | mmap.mmap:
    """The file's first ``size`` bytes, mapped read-only: by the compiled core, which
    keeps no descriptor of its own (one descriptor an open file), else by
    ``mmap.mmap``, which keeps a duplicate (two)."""
    mm = map_file(fd, size)
    return mm if mm is not None else mmap.mmap(fd, size, access=mmap.ACCESS_READ)


@overload
def _runs(idx: np.ndarray, always: Literal[True]) -> _Runs: ...
@overload
def _runs(idx: np.ndarray, always: bool = False) -> _Runs | None: ...
def _runs(idx: np.ndarray, always: bool = False) -> _Runs | None:
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
