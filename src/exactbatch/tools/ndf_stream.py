"""Streaming .ndf writes and sequential reads, for files larger than memory.

:class:`NdfWriter` writes rows slab by slab into a temporary file in the
destination's folder; only :meth:`NdfWriter.commit` writes the real header
(n may be unknown until then: a CSV is counted as it is written), fsyncs and
renames. Until then the temporary file's header is zeros, so a crash leaves
no file that looks valid; on an error or Ctrl-C (any exception out of the
``with`` block) the temporary file is removed and the destination keeps its
old bytes, if it had any. The byte layout is :mod:`exactbatch.ndf`'s.
A Ctrl-C that some library swallowed while the command ran (see
:func:`~exactbatch.tools._common.catch_signals`) is raised again at commit,
before the rename; :func:`atomic_output` does the same for other writers, and
:func:`leaves_no_temps` removes a temporary file a Ctrl-C left ownerless.

:func:`read_blocks` reads a file region front to back into one reused
buffer, so reading costs one slab of memory whatever the file's size.
"""

from __future__ import annotations

import contextlib
import errno
import os

import numpy as np

from exactbatch.ndf import (
    _HEADER,
    HEADER_SIZE,
    MAGIC,
    _create_temp,
    _fsync_folder,
    _remove_own_temps,
    atomic_path,
    expected_size,
)
from exactbatch.tools._common import check_interrupt

__all__ = ["NdfWriter", "atomic_output", "leaves_no_temps", "read_blocks", "read_into", "row_dtype"]

SLAB_BYTES = 8 << 20  # default read/write slab


def row_dtype(row_bytes: int) -> np.dtype:
    """One whole row as a single opaque item (alignment 1: any offset works)."""
    return np.dtype((np.void, max(1, row_bytes)))


def _folder_of(path: str) -> str:
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(errno.ENOENT, "folder does not exist", folder)
    return folder


def _bytes_view(buf) -> memoryview:
    view = memoryview(buf)
    return view.cast("B") if view.nbytes else memoryview(b"")


def _write_all(fd: int, buf) -> None:
    view = _bytes_view(buf)
    while view:
        view = view[os.write(fd, view) :]


class NdfWriter:
    """Write an ``.ndf`` file row slab by row slab; atomic on :meth:`commit`.

    ``n`` is the row count when known up front (it is then checked at
    commit); None when it is only known at the end. Use as a context manager:
    a clean exit commits, an exception aborts.
    """

    def __init__(self, path, d: int, l: int, n: int | None = None):  # noqa: E741
        self.path = os.fspath(path)
        self.d, self.l, self.n = int(d), int(l), n
        self.row_bytes = 8 * (self.d + self.l)
        self.rows = 0
        self._folder = _folder_of(self.path)
        self._tmp, self._fd = _create_temp(self._folder, os.path.basename(self.path))
        try:
            _write_all(self._fd, bytes(HEADER_SIZE))  # the real header comes at commit
        except BaseException:
            self.abort()
            raise

    @property
    def temp_path(self) -> str:
        return self._tmp

    def write(self, block: np.ndarray) -> None:
        """Append rows: a (rows, d + l) array of numbers, written as float64."""
        block = np.ascontiguousarray(block, dtype="<f8")
        if block.ndim != 2 or block.shape[1] != self.d + self.l:
            raise ValueError(
                f"{self.path}: expected rows of shape (r, {self.d + self.l}); got {block.shape}"
            )
        _write_all(self._fd, block)
        self.rows += block.shape[0]

    def write_raw(self, rows) -> None:
        """Append whole rows already in the file's byte layout (a bytes-like object)."""
        view = _bytes_view(rows)
        if self.row_bytes == 0 or len(view) % self.row_bytes:
            raise ValueError(f"{self.path}: {len(view)} bytes is not a whole number of rows")
        _write_all(self._fd, view)
        self.rows += len(view) // self.row_bytes

    def commit(self) -> None:
        """Write the header, fsync, rename over the destination, fsync the folder."""
        try:
            check_interrupt()
            if self.n is not None and self.rows != self.n:
                raise ValueError(
                    f"{self.path}: the input promised {self.n} rows but {self.rows} were written"
                )
            os.pwrite(self._fd, _HEADER.pack(MAGIC, self.rows, self.d, self.l), 0)
            size = os.fstat(self._fd).st_size
            if size != expected_size(self.rows, self.d, self.l):  # pragma: no cover - a bug
                raise ValueError(f"{self.path}: wrote {size} bytes, expected another size")
            os.fsync(self._fd)
            os.close(self._fd)
            self._fd = -1
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        _fsync_folder(self._folder)

    def abort(self) -> None:
        """Close and remove the temporary file; the destination is untouched."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        try:
            os.unlink(self._tmp)
        except FileNotFoundError:
            pass

    def __enter__(self) -> NdfWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


@contextlib.contextmanager
def atomic_output(path):
    """A temporary path to write ``path`` to (:func:`exactbatch.ndf.atomic_path`);
    renamed over ``path`` at the end of the block unless it raises or a Ctrl-C
    was noted while the command ran."""
    with atomic_path(path) as tmp:
        yield tmp
        check_interrupt()


@contextlib.contextmanager
def leaves_no_temps(path):
    """On an exception out of the block, remove this process's temporary files of ``path``.

    :class:`NdfWriter` and :func:`atomic_output` remove theirs, but a Ctrl-C
    can land between a file's creation and the ``with`` that takes charge of it.
    """
    try:
        yield
    except BaseException:
        _remove_own_temps(path)
        raise


def _fill(f, view: memoryview, path, offset: int) -> None:
    got = 0
    while got < len(view):
        k = f.readinto(view[got:])
        if not k:
            raise OSError(
                errno.EIO,
                f"file ended early: expected {len(view)} bytes at offset {offset}",
                os.fspath(path),
            )
        got += k


def read_into(path, offset: int, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` (a C-contiguous array) with the bytes at ``offset`` of ``path``."""
    view = _bytes_view(out)
    if len(view):
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            _fill(f, view, path, offset)
    return out


def read_blocks(path, offset: int, rows: int, row_bytes: int, block_rows: int):
    """Yield the ``rows`` rows at ``offset`` of ``path`` as (r,) void arrays, front to back.

    One buffer of ``block_rows`` rows is reused: each yielded array is only
    valid until the next one is requested. A file shorter than promised is
    an ``OSError`` naming it.
    """
    if rows == 0 or row_bytes == 0:
        return
    block_rows = max(1, min(block_rows, rows))
    buf = np.empty(block_rows, dtype=row_dtype(row_bytes))
    raw = memoryview(buf).cast("B")
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        done = 0
        while done < rows:
            r = min(block_rows, rows - done)
            _fill(f, raw[: r * row_bytes], path, offset + done * row_bytes)
            yield buf[:r]
            done += r
