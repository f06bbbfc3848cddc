"""An open .ndf file: :class:`NdfFile` and :func:`open_ndf`.

Reads never move a shared file position, so threads may read one file at
once, and a file larger than RAM is never loaded whole. How a local file is
read (the compiled core's guarded gather from a read-only mapping, or on the
pure NumPy path positional reads and the read lease) is
:mod:`exactbatch.ndf.local`'s. Either way the file's size, modification
time and change time (ctime) are checked at every read: a file truncated, or
rewritten in place (even with its modification time put back), while open
is an :class:`NdfError` at the next read (so is one whose modification time
was merely touched, or whose metadata changed: see
:meth:`~exactbatch.ndf.local.LocalHandle.check_size`). A file replaced
(renamed over, as :func:`~exactbatch.ndf.write.save_ndf` does) or deleted
while open keeps being read as the file that was opened (POSIX semantics).

An open NdfFile pickles by its path (to spawned workers, Ray or Dask tasks):
unpickling opens the file again, and refuses with an :class:`NdfError` a
file whose size, modification time or change time differ from the pickled
one's (for a URL: its size or ETag), so a worker never reads other data
than the pickler would have. Its names and categories are read again from
the sidecar.

``open_ndf`` also opens URLs (``s3://...``, any fsspec protocol) for
reading, by ranged reads of the rows each batch needs: see
:mod:`exactbatch.ndf.remote`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from exactbatch.arrays import byte_view, check_out_array
from exactbatch.checks import check_int
from exactbatch.errors import NdfError
from exactbatch.hints import PathLike
from exactbatch.kernels import RowIndex, Rows, TransformKernel, staged
from exactbatch.ndf.format import HEADER_SIZE, check_header
from exactbatch.ndf.local import LocalHandle
from exactbatch.ndf.names import Categories, default_names, read_sidecar_doc
from exactbatch.ndf.regular import open_regular
from exactbatch.ndf.remote import RemoteHandle, open_url
from exactbatch.urls import is_url, local_path

if TYPE_CHECKING:  # (typing's own from Python 3.11; only mypy reads it here)
    from typing_extensions import Self

__all__ = ["NdfFile", "ReadRows", "Share", "open_ndf"]


class ReadRows(Protocol):
    """What :meth:`Share.rows_reader` returns: :meth:`Share.read_rows_into` of the rows
    held, the kernel passed only where the share :meth:`~Share.fuses` one."""

    def __call__(
        self, rows: RowIndex, out_x: np.ndarray, out_y: np.ndarray, kernel: TransformKernel = ..., /
    ) -> int | None: ...


class Share:
    """One holder's share of open rows (an NdfFile's handle, an NdfDataset's parts), kept
    in ``_h``, whose ``read_rows_into`` reads them: ``close()`` lets go of it (idempotent),
    ``closed`` says so, and a ``with`` block closes it; ``len()`` is ``n``, the rows; the
    read methods below, and ``share()`` for another holder. Reading a closed share is a
    ``ValueError``."""

    __slots__ = ()
    # what a subclass holds (in slots of its own)
    _h: Any

    if TYPE_CHECKING:  # (each subclass is made from what it holds: share() makes one)

        def __init__(self, held: Any) -> None: ...

    path: str
    n: int
    d: int
    l: int  # noqa: E741

    def _handle(self) -> Any:  # (what _h is: the subclass's own)
        h = self._h
        if h is None:
            raise ValueError(f"{self.path}: read from a closed {type(self).__name__}")
        return h

    def share(self) -> Self:
        """Another holder of the same open rows (what a loader keeps)."""
        return type(self)(self._handle())

    @property
    def closed(self) -> bool:
        return self._h is None

    def close(self) -> None:
        """Let go of this share; idempotent."""
        self._h = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
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

    def read_rows(
        self, indices: object, out_x: np.ndarray | None = None, out_y: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
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

    def read_rows_into(
        self,
        rows: np.ndarray | slice,
        out_x: np.ndarray,
        out_y: np.ndarray,
        kernel: TransformKernel | None = None,
    ) -> int | None:
        """Fill ``out_x``/``out_y`` with rows ``rows``, in that order: the loader's hot path.

        Unchecked: ``rows`` must be a slice of rows, or int32/int64 row
        numbers in ``[0, n)`` (any order, repeats allowed), the outputs
        C-contiguous arrays of shapes (r, d) and (r, l), both float64 or both
        float32 (the cast happens in the gather). :meth:`read_rows` checks
        all of that. ``kernel``: a transform applied to x as it is copied (a
        loader's ``transform``), where the reader :meth:`fuses` one; it returns
        the first row that held a NaN, or -1.
        """
        h = self._h
        if h is None:
            raise ValueError(f"{self.path}: read from a closed {type(self).__name__}")
        got: int | None
        if kernel is None:
            got = h.read_rows_into(rows, out_x, out_y)
        elif getattr(h, "fuses", False):
            got = h.read_rows_into(rows, out_x, out_y, kernel)
        else:
            got = staged(h.read_rows_into, rows, out_x, out_y, kernel)  # a URL's
        return got

    def fuses(self) -> bool:
        """Whether :meth:`read_rows_into` takes a transform kernel (a local file or
        dataset does; a URL's reader does not)."""
        fuses: bool = getattr(self._handle(), "fuses", False)
        return fuses

    def run_rows(self) -> Rows | None:
        """New compiled rows of what this share holds, for a reader of its own to hand out
        their ``read_run`` and ``take_run`` as they are (:func:`exactbatch.kernels.run_reads`),
        with the errors of :meth:`read_rows_into` (the file, or the dataset's part, named):
        a local file's (:meth:`~exactbatch.ndf.local.LocalHandle.run_rows`), a local
        dataset's (:meth:`~exactbatch.ndf.dataset_parts.Parts.run_rows`, which read the
        parts not open yet through the dataset's read). None where there are none: the
        pure NumPy path, a URL, a file without rows."""
        make = getattr(self._handle(), "run_rows", None)
        rows: Rows | None = None if make is None else make()
        return rows

    def rows_reader(self, threads: int | None = None) -> ReadRows:
        """:meth:`read_rows_into` without the check for a closed share: the function a
        reader that holds its own share (a loader's) calls per batch, one Python call
        less on the hot path. Same arguments, unchecked, and the same errors.
        ``threads``: the compiled gather's threads for each read (None: picked from
        the batch's bytes; a URL's reads ignore it)."""
        h = self._handle()
        read: ReadRows = h.read_rows_into
        if threads is None or not getattr(h, "splits", False):
            return read
        return partial(h.read_rows_into, threads=threads)


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
    ``x0..``/``y0..`` when it has none (:mod:`exactbatch.ndf.names`);
    ``categories`` the vocabularies of its columns stored as integer codes.
    Pickling reopens it by path (see the module's docstring).
    """

    __slots__ = ("_h", "_names", "d", "l", "n", "path")

    def __init__(self, handle: Any) -> None:
        self._names: tuple[Sequence[str], Sequence[str], Categories] | None
        self._h, self._names = handle, None
        self.path, self.n, self.d, self.l = handle.path, handle.n, handle.d, handle.l

    @property
    def features(self) -> Sequence[str]:
        """Names of the d feature columns (the sidecar's, a tuple, else ``x0..x{d-1}``,
        a :class:`~exactbatch.ndf.names.DefaultNames` equal to that tuple)."""
        return self._column_names()[0]

    @property
    def labels(self) -> Sequence[str]:
        """Names of the l label columns (the sidecar's, a tuple, else ``y0..y{l-1}``,
        as ``features``)."""
        return self._column_names()[1]

    @property
    def categories(self) -> Categories:
        """``{column: [value, ...]}`` for the columns stored as integer codes (code ``k``
        is the ``k``-th value), from the sidecar; ``{}`` when there are none."""
        return {c: list(v) for c, v in self._column_names()[2].items()}

    def _column_names(self) -> tuple[Sequence[str], Sequence[str], Categories]:
        if self._names is None:
            h: LocalHandle | RemoteHandle = self._handle()
            remote = {} if isinstance(h, LocalHandle) else {"fs": h.fs.get(), "key": h.key}
            stored = read_sidecar_doc(self.path, self.n, self.d, self.l, **remote)
            self._names = stored or (*default_names(self.d, self.l), {})
        return self._names

    def __reduce__(self) -> tuple[Callable[..., NdfFile], tuple[object, ...]]:
        h: LocalHandle | RemoteHandle = self._handle()  # a closed file is not pickled: ValueError
        if isinstance(h, LocalHandle):
            # absolute (from the folder current now): the receiver may run in another one
            return _reopen, (os.path.abspath(self.path), (h.size, h.mtime, h.ctime), None)
        fs = h.fs.get()
        return _reopen, (self.path, (h.size, h.etag), getattr(fs, "storage_options", None))

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
        return lease is None or bool(lease.guards())

    def __repr__(self) -> str:
        state = "closed" if self._h is None else "open"
        return f"NdfFile({self.path!r}, n={self.n}, d={self.d}, l={self.l}, {state})"

    def kernel_rows(self) -> Rows | None:
        """The compiled core's rows of this file (:func:`exactbatch.kernels.file_rows`):
        what a sharded dataset's gather reads this part through. None on the pure
        NumPy path, for a URL, and for a file without rows."""
        rows: Rows | None = getattr(self._handle(), "compiled", None)
        return rows

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
            self._handle().read_block_into(start_row, byte_view(out))

    def will_need(self, start_row: int, rows: int) -> None:
        """Rows ``[start_row, start_row + rows)`` are read soon: ask the kernel to start
        reading them now (``posix_fadvise``). A no-op for URLs, and where the OS has no
        such hint."""
        self._handle().will_need(start_row, rows)


def _reopen(
    path: str, identity: tuple[object, ...], storage_options: dict[str, Any] | None
) -> NdfFile:
    """An NdfFile unpickled: ``path`` opened again, refused if it is not the file pickled."""
    f = open_ndf(path, storage_options=storage_options or None)
    h: LocalHandle | RemoteHandle = f._h
    found: tuple[object, ...] = (
        (h.size, h.mtime, h.ctime) if isinstance(h, LocalHandle) else (h.size, h.etag)
    )
    if found != tuple(identity):
        f.close()
        raise NdfError(
            f"{path}: the file changed between pickling and unpickling (size, modification "
            f"and change times {tuple(identity)} when pickled, {found} now); open it again"
        )
    return f


def _as_row_indices(indices: object, n: int, path: str) -> np.ndarray:
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


def open_ndf(path: PathLike, *, storage_options: dict[str, Any] | None = None) -> NdfFile:
    """Open an ``.ndf`` file for reading, checking its header and exact size.

    A wrong magic, a short header, an impossible header or a size other
    than ``28 + 8*n*(d+l)`` is an :class:`NdfError` naming the file, what
    was expected and what was found, and so is a path that is not a regular
    file (a FIFO, a device: refused at once, never waited on). OS errors (a
    missing file, no permission, a folder) are raised as the OS reports them.

    ``path`` may be a URL (``s3://bucket/key``, any fsspec protocol; needs
    fsspec, and s3fs for S3): batches then fetch their rows by ranged reads
    (:mod:`exactbatch.ndf.remote`). ``storage_options`` (endpoint,
    credentials, ...) go to the filesystem; only for URLs.
    """
    if is_url(path):
        return NdfFile(open_url(os.fspath(path), storage_options))
    if storage_options is not None:
        raise ValueError(f"storage_options applies only to URLs; got the local path {path!r}")
    local = local_path(os.fspath(path))
    fd = open_regular(local, "an .ndf file")  # a FIFO or a device: refused, never waited on
    try:
        st = os.fstat(fd)
        head = os.pread(fd, HEADER_SIZE, 0) if st.st_size else b""
        n, d, l = check_header(head, st.st_size, local)  # noqa: E741
        return NdfFile(LocalHandle(local, fd, n, d, l, st))
    except BaseException:
        os.close(fd)
        raise
