"""Atomic writes of .ndf files (and of any file): nothing half-written is ever seen.

Every writer here goes through one :class:`AtomicFile`: bytes go to
``.NAME.<host>.<pid>.<random>.tmp`` in the target's folder, which is
fsynced and renamed over the target, then the folder is fsynced. On any
error (a Ctrl-C included) the temporary file is removed and an existing
target keeps its old bytes. No folder is created: a missing one is
``FileNotFoundError``.

- :func:`save_ndf` writes a whole dataset held in memory.
- :class:`NdfWriter` writes rows slab by slab, for files larger than memory;
  the real header is written at :meth:`~NdfWriter.commit` (n may be unknown
  until then), so until then the temporary file's header is zeros and a
  crash leaves no file that looks valid.
- :func:`atomic_path` lends a temporary path to another writer (pyarrow).

Both writers take optional column names (``features=``, ``labels=``), which
go to the file's names sidecar, ``PATH.json`` (:mod:`exactbatch.ndf.names`),
written atomically too: its temporary file is written before the data is
renamed into place and renamed just after, so a failed write leaves neither.
Written without names, a file loses the sidecar an earlier write left, which
describes other data.

A writer killed mid-write (SIGKILL, power loss) leaves its temporary file
behind; the next writer of the same path removes such files whose writer
process (on this host) is gone, so they do not pile up. (The host in the
name is the host name and the process id namespace together, so a writer in
another container with the same host name is taken for another host's: its
files are left alone.)
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TYPE_CHECKING, Any, BinaryIO

import numpy as np

from exactbatch.arrays import byte_view
from exactbatch.dataset import Dataset
from exactbatch.hints import Columns, PathLike
from exactbatch.ndf.format import HEADER_SIZE, check_shape, expected_size, pack_header
from exactbatch.ndf.names import (
    SIDECAR_FORMAT,
    Names,
    check_categories,
    sidecar_bytes,
    sidecar_path,
    validate_names,
)
from exactbatch.ndf.regular import regular_file
from exactbatch.ndf.temps import create_temp, fsync_folder, remove_own_temps, remove_stale_temps

if TYPE_CHECKING:  # (typing's own from Python 3.11; only mypy reads it here)
    from typing_extensions import Self

__all__ = [
    "AtomicFile",
    "Committing",
    "NamesSidecar",
    "NdfWriter",
    "as_dataset",
    "atomic_path",
    "leaves_no_temps",
    "save_ndf",
    "write_ndf_to",
]

_WRITE_ROWS_BYTES = 8 << 20  # rows are written in slabs of about this size


def save_ndf(
    path: PathLike, data: Any, *, features: Columns = None, labels: Columns = None
) -> None:
    """Write ``data`` (a Dataset, an ``(x, y)`` pair, or an array ``x``) to ``path``.

    Atomic: rows go to a temporary file in the same folder, which is flushed,
    fsynced and renamed over ``path``. On any error no new file is left
    behind and an existing file at ``path`` keeps its old bytes. No folders
    are created: a missing folder is ``FileNotFoundError``.

    ``features``/``labels``: names of the d feature and l label columns
    (lists of distinct strings; one side alone gives the other the default
    names ``x0..``/``y0..``), written to the sidecar ``path + ".json"``
    (see :mod:`exactbatch.ndf.names`), which ``open_ndf(path).features``
    reads back. Checked before anything is written
    (:func:`~exactbatch.ndf.names.validate_names`), and so is the shape: data
    no reader would open (more than 2**31 - 1 values a row) is an
    :class:`~exactbatch.errors.NdfError`.
    """
    path = os.fspath(path)
    data = as_dataset(data)
    check_shape(data.n, data.d, data.l, path)
    names = NamesSidecar(path, validate_names(features, labels, data.d, data.l, path))
    try:
        with atomic_path(path) as tmp:
            with open(tmp, "wb") as f:
                write_ndf_to(f, data)
            names.prepare(data.n, data.d, data.l)
    except BaseException:
        names.abort()
        raise
    names.commit()


def as_dataset(data: Any) -> Dataset:
    """``data`` (a Dataset, an ``(x, y)`` pair, or an array ``x``) as a :class:`Dataset`."""
    if isinstance(data, tuple):
        if len(data) != 2:
            raise TypeError(f"data must be a Dataset or an (x, y) pair; got a {len(data)}-tuple")
        return Dataset(*data)
    return data if isinstance(data, Dataset) else Dataset(data)


def write_ndf_to(f: BinaryIO, data: Dataset) -> None:
    """Write ``data`` as a whole ``.ndf`` (header, then rows) to the binary file object ``f``.

    Not atomic by itself: the caller makes ``f`` appear whole or not at all
    (:func:`atomic_path` locally; an uncommitted upload for a URL).
    """
    f.write(pack_header(data.n, data.d, data.l))
    _write_rows(f, data)


class NamesSidecar:
    """The names sidecar of the ``.ndf`` being written at ``path``, in step with the data.

    ``names`` is ``(features, labels)`` from :func:`~exactbatch.ndf.names.validate_names`,
    or None. :meth:`prepare` (before the data's rename) writes the sidecar's
    temporary file; :meth:`commit` (just after) renames it into place, or,
    without names, removes a sidecar of ours an earlier write left;
    :meth:`abort` removes the temporary file.
    """

    __slots__ = ("_out", "categories", "names", "path")

    def __init__(
        self,
        path: str,
        names: Names | None,
        categories: object = None,
    ) -> None:
        self._out: AtomicFile | None
        self.path, self.names, self._out = sidecar_path(path), names, None
        self.categories = check_categories(categories, names, path)

    def prepare(self, n: int, d: int, l: int) -> None:  # noqa: E741
        if self.names is None:
            return
        self._out = AtomicFile(self.path)
        features, labels = self.names
        _write_all(self._out.fd, sidecar_bytes(features, labels, n, d, l, self.categories))

    def commit(self) -> None:
        if self._out is not None:
            self._out.commit()
        elif self.names is None:
            _remove_stale_sidecar(self.path)

    def abort(self) -> None:
        if self._out is not None:
            self._out.abort()


def _remove_stale_sidecar(path: str) -> None:
    """Remove ``path`` if it is a names sidecar (of the data just replaced)."""
    try:
        with regular_file(path, "a names sidecar") as f:  # a FIFO there: left alone, no wait
            head = f.read(256)
    except (OSError, ValueError):
        return
    if SIDECAR_FORMAT.encode() in head:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass


def _write_rows(f: BinaryIO, data: Dataset) -> None:
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
        f.write(byte_view(np.ascontiguousarray(slab, dtype=le)))


class AtomicFile:
    """A new temporary file next to ``path`` (``temp``, open as ``fd``), renamed over
    ``path`` by :meth:`commit` or removed by :meth:`abort`.

    Creating it removes temporary files of ``path`` left by killed writers.
    ``before_rename``, if given, is called at commit before anything else;
    what it raises aborts (the CLI raises a Ctrl-C some library swallowed).
    """

    __slots__ = ("before_rename", "fd", "folder", "path", "temp")

    def __init__(self, path: PathLike, before_rename: Callable[[], object] | None = None) -> None:
        self.path = os.fspath(path)
        self.before_rename = before_rename
        self.folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(self.folder):
            raise FileNotFoundError(
                errno.ENOENT, "folder does not exist (nothing creates it)", self.path
            )
        name = os.path.basename(self.path)
        remove_stale_temps(self.folder, name)
        self.temp, self.fd = create_temp(self.folder, name)

    def close_fd(self) -> None:
        """Close the descriptor (another writer opens ``temp`` itself); commit fsyncs anyway."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def commit(self, finish: Callable[[], object] | None = None) -> None:
        """Fsync the temporary file, rename it over ``path``, fsync the folder.

        ``finish()``, if given, runs just after ``before_rename``: the last
        writes and checks; what it raises aborts too.
        """
        try:
            if self.before_rename is not None:
                self.before_rename()
            if finish is not None:
                finish()
            if self.fd < 0:
                self.fd = os.open(self.temp, os.O_RDONLY)
            os.fsync(self.fd)
            self.close_fd()
            os.replace(self.temp, self.path)
        except BaseException:
            self.abort()
            raise
        fsync_folder(self.folder)

    def abort(self) -> None:
        """Close and remove the temporary file; ``path`` is untouched. Idempotent."""
        self.close_fd()
        try:
            os.unlink(self.temp)
        except FileNotFoundError:
            pass


@contextlib.contextmanager
def atomic_path(path: PathLike, before_rename: Callable[[], object] | None = None) -> Iterator[str]:
    """A temporary path next to ``path`` to write to; renamed over ``path`` on success.

    The file is fsynced before the rename and the folder after. On any
    exception out of the block the temporary file is removed and ``path``
    keeps its old bytes. No folder is created (a missing one is
    ``FileNotFoundError``); temporary files of killed writers of ``path`` are
    removed first, so they do not pile up. ``before_rename``: as
    :class:`AtomicFile`'s.
    """
    out = AtomicFile(path, before_rename)
    out.close_fd()
    try:
        yield out.temp
    except BaseException:
        out.abort()
        raise
    out.commit()


def _write_all(fd: int, buf: Any) -> None:  # (a buffer: NumPy's are none to mypy for 3.10)
    view = byte_view(buf)
    while view:
        view = view[os.write(fd, view) :]


class Committing:
    """A writer used as a context manager: a clean exit calls ``commit()``, an exception
    ``abort()``."""

    __slots__ = ()

    def commit(self) -> None:
        raise NotImplementedError

    def abort(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.commit()
        else:
            self.abort()


class NdfWriter(Committing):
    """Write an ``.ndf`` file row slab by row slab; atomic on :meth:`commit`.

    ``n`` is the row count when known up front (it is then checked at
    commit); None when it is only known at the end. Use as a context manager:
    a clean exit commits, an exception aborts. ``before_rename``: as
    :class:`AtomicFile`'s. ``features``/``labels``: column names for the
    sidecar, as :func:`save_ndf`'s (checked here, written at commit), and
    ``categories`` the vocabularies of columns stored as codes
    (:func:`~exactbatch.ndf.names.check_categories`).
    """

    def __init__(
        self,
        path: PathLike,
        d: int,
        l: int,  # noqa: E741
        n: int | None = None,
        *,
        before_rename: Callable[[], object] | None = None,
        features: Columns = None,
        labels: Columns = None,
        categories: object = None,
    ) -> None:
        self.path = os.fspath(path)
        self.d, self.l, self.n = int(d), int(l), n
        self.row_bytes = 8 * (self.d + self.l)
        self.rows = 0
        check_shape(0 if n is None else n, self.d, self.l, self.path)
        self._names = NamesSidecar(
            self.path, validate_names(features, labels, self.d, self.l, self.path), categories
        )
        self._out = AtomicFile(self.path, before_rename)
        try:
            _write_all(self._out.fd, bytes(HEADER_SIZE))  # the real header comes at commit
        except BaseException:
            self.abort()
            raise

    @property
    def temp_path(self) -> str:
        return self._out.temp

    def write(self, block: np.ndarray) -> None:
        """Append rows: a (rows, d + l) array of numbers, written as float64."""
        block = np.ascontiguousarray(block, dtype="<f8")
        if block.ndim != 2 or block.shape[1] != self.d + self.l:
            raise ValueError(
                f"{self.path}: expected rows of shape (r, {self.d + self.l}); got {block.shape}"
            )
        _write_all(self._out.fd, block)
        self.rows += block.shape[0]

    def write_raw(self, rows: Any) -> None:  # (a buffer, as _write_all's)
        """Append whole rows already in the file's byte layout (a bytes-like object)."""
        view = byte_view(rows)
        if self.row_bytes == 0 or len(view) % self.row_bytes:
            raise ValueError(f"{self.path}: {len(view)} bytes is not a whole number of rows")
        _write_all(self._out.fd, view)
        self.rows += len(view) // self.row_bytes

    def commit(self) -> None:
        """Write the header, fsync, rename over the destination, fsync the folder;
        then the names sidecar's rename."""
        try:
            self._out.commit(self._finish)
        except BaseException:
            self._names.abort()
            raise
        self._names.commit()

    def _finish(self) -> None:
        if self.n is not None and self.rows != self.n:
            raise ValueError(
                f"{self.path}: the input promised {self.n} rows but {self.rows} were written"
            )
        fd = self._out.fd
        os.pwrite(fd, pack_header(self.rows, self.d, self.l), 0)
        size = os.fstat(fd).st_size
        if size != expected_size(self.rows, self.d, self.l):  # pragma: no cover - a bug
            raise ValueError(f"{self.path}: wrote {size} bytes, expected another size")
        self._names.prepare(self.rows, self.d, self.l)

    def abort(self) -> None:
        """Close and remove the temporary files; the destination is untouched."""
        self._names.abort()
        self._out.abort()


@contextlib.contextmanager
def leaves_no_temps(path: str) -> Iterator[None]:
    """On an exception out of the block, remove this process's temporary files of ``path``.

    :class:`NdfWriter` and :func:`atomic_path` remove theirs, but an
    exception raised asynchronously (a Ctrl-C) can land between a file's
    creation and the ``with`` that takes charge of it.
    """
    try:
        yield
    except BaseException:
        remove_own_temps(path)
        remove_own_temps(sidecar_path(path))  # the names sidecar's, written with it
        raise
