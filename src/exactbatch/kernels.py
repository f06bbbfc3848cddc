"""The row gather, compiled or pure NumPy: readers call the same functions either way.

Two backends give bit-identical batches:

* ``"compiled"``: the C extension :mod:`exactbatch._core` (built by ``pip
  install`` and by ``make``). A gather is one call that copies x and y in one
  pass, casting to the output dtype as it copies, with the GIL released;
  copies out of an ``.ndf`` file's mapping run under a guard that turns a
  truncation during the copy into an error (:class:`FileChanged`, which the
  reader raises as ``NdfError`` naming the file) instead of a SIGBUS.
* ``"numpy"``: ``np.take`` into the output buffers (for float32 output, a
  take and a cast); the ``.ndf`` reader then guards its copies from the
  mapping with a read lease (:mod:`exactbatch.ndf.guard`). Used when the
  extension is missing (it did not compile) or when the environment variable
  ``EXACTBATCH_PURE=1`` is set before exactbatch is imported (``1``, ``true``,
  ``yes`` or ``on`` select it; ``0``, ``false``, ``no``, ``off`` or empty do
  not; case is ignored; any other value is a ``ValueError`` at import, naming
  the variable, so that a typo never picks a backend silently).

:func:`backend` says which one runs. Every reader holds a *rows* object made
here once (:func:`memory_rows`, :func:`file_rows`) and calls its
``read(rows, out_x, out_y)`` per batch: ``rows`` a slice of consecutive rows
or a 1-D int32/int64 array of row numbers in ``[0, n)`` (any order, repeats
allowed), ``out_x``/``out_y`` C-contiguous arrays of shapes (r, d) and
(r, l), both float64 or both float32 (or out_y float64 under a float32 out_x:
labels converted after, exactly). The memory reader's ``read`` (and the
compiled ones of ``.ndf`` files and datasets) also takes a fourth argument, a
:class:`TransformKernel`, applied to x as it is copied (no second pass over
the batch), and a fifth, ``threads``: the compiled gather splits the rows into
that many consecutive ranges, each copied by a thread (the caller's, and a small
pool of C threads kept for the process, joined at exit, none in a forked child);
None (or 0) picks one thread a 256 KiB of rows, at most one fewer than the
cores ``os.sched_getaffinity`` gives, so small batches stay on one thread. The rows
object's ``threads`` attribute is the default. A batch is the same bytes
whatever the count; the pure path is one thread, and ignores it. The order's
keyed bijection makes its own kernel from :func:`core`
(:mod:`exactbatch.order.bijection`); the dtype rules are :mod:`exactbatch.checks`'.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any, Protocol

import numpy as np
from numpy.typing import DTypeLike

from exactbatch.arrays import batch_pair
from exactbatch.checks import DTYPES

__all__ = [
    "FileChanged",
    "NumpyRows",
    "Rows",
    "RowIndex",
    "RunReads",
    "TransformKernel",
    "backend",
    "columns_into",
    "core",
    "file_rows",
    "gather",
    "map_file",
    "memory_rows",
    "pair_check",
    "run_reads",
    "staged",
    "use_backend",
]

_BY_ITEMSIZE = {dt.itemsize: dt for dt in DTYPES}


def _import_core() -> ModuleType | None:
    try:
        return importlib.import_module("exactbatch._core")
    except ImportError:  # not built (a failed compile installs without it)
        return None


# The extension, when it is built. Any: a C module ships no types; what this module
# hands out of it is typed by the protocols below.
_BUILT: Any = _import_core()
_PURE_WORDS = {  # EXACTBATCH_PURE's values, stripped and lower-cased
    **dict.fromkeys(("1", "true", "yes", "on"), True),
    **dict.fromkeys(("", "0", "false", "no", "off"), False),
}


def _pure_from_env() -> bool:
    """``EXACTBATCH_PURE`` read strictly: one of the words above, or a ValueError."""
    value = os.environ.get("EXACTBATCH_PURE", "")
    word = value.strip().lower()
    if word not in _PURE_WORDS:
        raise ValueError(
            f"EXACTBATCH_PURE={value!r}: expected 1/true/yes/on (the pure NumPy path) or "
            "0/false/no/off/empty (the compiled core, when built)"
        )
    return _PURE_WORDS[word]


_PURE = _pure_from_env()
_CORE: Any = None if _PURE else _BUILT  # the extension, when it is used


class _FileChanged(OSError):
    """A file's rows could not be copied: truncated or rewritten while open (``part``:
    which part of a dataset). Raised by the compiled core only; without it, a class
    that nothing raises, so that ``except FileChanged`` still reads."""

    part: int | None


# (a class either way: ``except FileChanged as e`` reads ``e.part``)
FileChanged: type[_FileChanged] = _BUILT.FileChanged if _BUILT is not None else _FileChanged


# Which rows a read takes: a slice of consecutive rows, or an int32/int64 array of
# row numbers (module docs).
RowIndex = slice | np.ndarray


class Rows(Protocol):
    """What :func:`memory_rows` and :func:`file_rows` return, compiled or pure: ``read``
    gathers ``rows`` into ``out_x`` and ``out_y`` (module docs); with a ``tf`` it
    returns the first row that held a NaN, or -1, and None without one. ``threads``:
    the default of ``read``'s (module docs)."""

    threads: int | None

    def read(
        self,
        rows: RowIndex,
        out_x: np.ndarray,
        out_y: np.ndarray,
        tf: TransformKernel | None = None,
        threads: int | None = None,
    ) -> int | None: ...


def backend() -> str:
    """``"compiled"`` when exactbatch's C extension gathers rows, ``"numpy"`` on the
    pure NumPy path (the extension is missing, or ``EXACTBATCH_PURE=1``). Both give
    identical batches."""
    return "numpy" if _CORE is None else "compiled"


def use_backend(name: str) -> str:
    """For tests and benchmarks: readers made from now on use backend ``name``
    (``"compiled"`` or ``"numpy"``; readers already made keep theirs). Returns the
    backend used before. ``"compiled"`` where the extension is missing is a
    ``ValueError``."""
    global _CORE
    if name not in ("compiled", "numpy"):
        raise ValueError(f"backend must be 'compiled' or 'numpy'; got {name!r}")
    if name == "compiled" and _BUILT is None:
        raise ValueError("the compiled backend is not built (see docs/development.md)")
    before = backend()
    _CORE = _BUILT if name == "compiled" else None
    return before


def core() -> Any:
    """The compiled extension (:mod:`exactbatch._core`) when it is the backend in use,
    else None: for a kernel whose Python lives beside its caller (the order's keyed
    bijection, :mod:`exactbatch.order.bijection`), chosen when its object is made."""
    return _CORE


class TransformKernel:
    """A per-feature affine map fused into the gather: each feature ``v`` becomes
    ``(v - mean) * scale``, then a NaN becomes ``fill`` (None: stays NaN; a float
    array of d values: each column's own fill, NaN where a column keeps its NaN).

    ``mean`` and ``scale`` are float64 arrays of d values (finite; scale > 0), so a
    NaN out is a NaN in. Both backends compute in float64 and round once to the
    output dtype, with the same operations in the same order (no multiply-add can
    form), so they give the same bits. ``c`` is the compiled twin (None when the core
    is not built), which a compiled reader applies as it copies each row.
    """

    __slots__ = ("c", "fill", "mean", "scale")

    def __init__(self, mean: np.ndarray, scale: np.ndarray, fill: float | np.ndarray | None = None):
        self.mean = np.ascontiguousarray(mean, dtype=np.float64)
        self.scale = np.ascontiguousarray(scale, dtype=np.float64)
        self.fill: float | np.ndarray | None = None
        if isinstance(fill, np.ndarray):
            self.fill = np.ascontiguousarray(fill, dtype=np.float64)
        elif fill is not None:
            self.fill = float(fill)
        self.c = None if _BUILT is None else _BUILT.transform(self.mean, self.scale, self.fill)

    def apply(self, src: np.ndarray, out: np.ndarray) -> int:
        """``src`` (float64 rows of d features) through the map into ``out`` (float64 or
        float32, of src's shape): the pure path's twin of the compiled copy. Returns
        the position of the first row that held a NaN, or -1."""
        v = src - self.mean
        v *= self.scale
        nan = np.isnan(v)
        hit = np.asarray(nan.any(axis=1))
        first = int(hit.argmax()) if hit.any() else -1
        if first >= 0 and isinstance(self.fill, np.ndarray):  # a column's NaN fill keeps
            np.copyto(v, self.fill, where=nan & ~np.isnan(self.fill))
        elif first >= 0 and self.fill is not None:
            np.copyto(v, self.fill, where=nan)
        out[...] = v
        return first


def staged(
    read: Callable[[Any, np.ndarray, np.ndarray], object],
    rows: Any,
    out_x: np.ndarray,
    out_y: np.ndarray,
    kernel: TransformKernel,
) -> int:
    """For a reader whose copy cannot take ``kernel``: rows ``rows`` read by ``read``
    as float64, then mapped into ``out_x`` (a second pass, over a batch in cache).
    Returns what a fused read does: the first row that held a NaN, or -1."""
    x = np.empty(out_x.shape)
    read(rows, x, out_y)
    return kernel.apply(x, out_x)


class NumpyRows:
    """The pure path of :func:`memory_rows` (also :mod:`exactbatch.parts`' parts)."""

    __slots__ = ("contiguous", "d", "l", "threads", "x", "y")

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.x, self.y, self.d, self.l = x, y, x.shape[1], y.shape[1]
        self.contiguous = x.flags.c_contiguous and y.flags.c_contiguous
        self.threads: int | None = None  # the compiled twin's setting: here one thread always

    def read(
        self,
        rows: RowIndex,
        out_x: np.ndarray,
        out_y: np.ndarray,
        tf: TransformKernel | None = None,
        threads: int | None = None,
    ) -> int | None:
        if tf is not None:  # x staged as float64, then mapped (the compiled copy's twin)
            stage = np.empty(out_x.shape)
            self.read(rows, stage, out_y)
            return tf.apply(stage, out_x)
        _check_rows(rows, len(self.x))  # the compiled read's refusals, word for word
        # Columns of whole rows (a shuffle buffer's x and y): indexing, as np.take
        # would first copy the whole array to make it contiguous.
        if isinstance(rows, slice) or not self.contiguous:
            out_x[...] = self.x[rows]
            out_y[...] = self.y[rows]
            return None
        if (
            out_x.dtype != out_y.dtype or out_x.dtype != np.float64
        ):  # a take then a cast (np.take into a float32
            out_x[...] = self.x.take(rows, axis=0, mode="clip")  # `out` would copy
            out_y[...] = self.y.take(rows, axis=0, mode="clip")  # `out` in first)
            return None
        # mode="clip" skips the bounds check and the buffered copy of `out` (rows
        # come from the order module, always valid); the method, not np.take,
        # saves a Python-level dispatch per call.
        if self.d:
            self.x.take(rows, axis=0, out=out_x, mode="clip")
        if self.l:
            self.y.take(rows, axis=0, out=out_y, mode="clip")
        return None


def _check_rows(rows: RowIndex, n: int) -> None:
    """``IndexError`` for rows outside ``[0, n)``, as the compiled read raises: its gathers
    below clip (``mode="clip"`` skips a buffered copy), which would hand out the last row
    in place of a row out of range - garbage rows, were an order ever wrong."""
    if isinstance(rows, slice):
        start = 0 if rows.start is None else rows.start
        stop, step = rows.stop, rows.step
        if step not in (None, 1) or stop is None or not 0 <= start <= stop <= n:
            raise IndexError(f"rows {start}:{stop} out of range for n={n} rows")
    elif len(rows) and (rows.min() < 0 or rows.max() >= n):
        bad = rows[(rows < 0) | (rows >= n)][0]
        raise IndexError(f"row {bad} out of range for n={n} rows")


def memory_rows(x: np.ndarray, y: np.ndarray) -> Rows:
    """The rows of ``x`` (n, d) and ``y`` (n, l), float64, each row's values side by
    side (C-contiguous, or columns of a C-contiguous array of whole rows), as an object
    whose ``read(rows, out_x, out_y)`` gathers them (module docs). It holds both
    arrays for as long as it lives."""
    if _CORE is not None:
        compiled: Rows = _CORE.memory_rows(x, y)
        return compiled
    return NumpyRows(x, y)


def _fits(a: object, shape: tuple[int, int], dt: np.dtype) -> bool:
    """What :func:`~exactbatch.arrays.check_out_array` accepts, at a fraction of its cost."""
    if not isinstance(a, np.ndarray):
        return False
    f = a.flags
    return a.shape == shape and a.dtype == dt and f.c_contiguous and f.writeable


def _numpy_pair_fits(bx: object, by: object, rows: int, d: int, l: int, itemsize: int) -> bool:  # noqa: E741
    """The pure path of :func:`pair_check`'s function."""
    dt = _BY_ITEMSIZE.get(itemsize)
    return dt is not None and _fits(bx, (rows, d), dt) and _fits(by, (rows, l), dt)


class Readable(Protocol):
    """What :class:`RunReads` reads through: a reader's ``read(rows, out_x, out_y)``
    and its widths (a :class:`~exactbatch.sources.protocols.RowReader`, or the pure
    :func:`memory_rows`)."""

    @property
    def d(self) -> int: ...

    @property
    def l(self) -> int: ...  # noqa: E743

    def read(self, rows: RowIndex, out_x: np.ndarray, out_y: np.ndarray, /) -> object: ...


# run_reads' two: read_run(order, start, size, out_x, out_y), and take_run(order,
# start, size, dtype, ydtype) -> (x, y)
ReadRun = Callable[[np.ndarray, int, int, np.ndarray, np.ndarray], None]
TakeRun = Callable[
    [np.ndarray, int, int, DTypeLike, DTypeLike | None], tuple[np.ndarray, np.ndarray]
]


class RunReads:
    """The pure twins of a compiled rows object's ``read_run`` and ``take_run``, over
    ``reader``'s ``read`` (looked up at each call: a closed reader's refuses), ``d``
    and ``l``: the same bytes, by way of a view of the order."""

    __slots__ = ("reader",)

    def __init__(self, reader: Readable) -> None:
        self.reader = reader

    def read_run(
        self, rows: np.ndarray, start: int, size: int, out_x: np.ndarray, out_y: np.ndarray
    ) -> None:
        """Rows ``rows[start:start + size]`` into the first ``size`` rows of ``out_x``
        and ``out_y``."""
        if len(out_x) != size:
            out_x, out_y = out_x[:size], out_y[:size]
        self.reader.read(rows[start : start + size], out_x, out_y)

    def take_run(
        self, rows: np.ndarray, start: int, size: int, dtype: DTypeLike, ydtype: DTypeLike | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Rows ``rows[start:start + size]`` as a new pair (:func:`batch_pair`)."""
        reader = self.reader
        out_x, out_y = batch_pair(size, reader.d, reader.l, dtype, ydtype)
        reader.read(rows[start : start + size], out_x, out_y)
        return out_x, out_y


def run_reads(rows: Rows) -> tuple[ReadRun, TakeRun]:
    """``(read_run, take_run)`` of ``rows`` (what :func:`memory_rows` returns, or a
    sharded dataset's run reads, :meth:`~exactbatch.ndf.dataset_parts.Parts.run_rows`):
    ``read_run(order, start, size, out_x, out_y)`` reads rows ``order[start:start +
    size]`` into the first ``size`` rows of the outputs, ``take_run(order, start, size,
    dtype, ydtype)`` into a new pair (dtype float64 or float32; ``ydtype`` None or a
    float). A hand-out's read of a batch of an epoch's whole order: one call in C each
    on the compiled path, with no view of the order and no buffer export; else their
    twins (:class:`RunReads`), the same bytes."""
    if _BUILT is not None and type(rows) in (_BUILT.Rows, _BUILT.PartsRuns):
        compiled: Any = rows  # (the core's Rows or PartsRuns: its own read_run and take_run)
        return compiled.read_run, compiled.take_run
    if not isinstance(rows, NumpyRows):
        raise TypeError(f"run_reads takes what memory_rows returns; got {type(rows).__name__}")
    twin = RunReads(rows)
    return twin.read_run, twin.take_run


def pair_check() -> Callable[[object, object, int, int, int, int], bool]:
    """``fits(bx, by, rows, d, l, itemsize) -> bool``: whether ``bx`` and ``by`` are
    writeable C-contiguous NumPy arrays of shapes (rows, d) and (rows, l), both float64
    (``itemsize`` 8) or both float32 (4). What :func:`exactbatch.arrays.check_out_array`
    checks, in one call (``next_into`` checks its buffers on every call); False says
    to call that for the message."""
    return _numpy_pair_fits if _CORE is None else _CORE.pair_fits


def file_rows(
    mapping: object,
    offset: int,
    n: int,
    d: int,
    l: int,  # noqa: E741
    fd: int,
    size: int,
    mtime_ns: int | None,
    ctime_ns: int | None = None,
    changed: Callable[[BaseException], object] | None = None,
) -> Rows | None:
    """The rows of an ``.ndf`` file's read-only ``mapping`` (x then y per row, from
    byte ``offset``), read under the fault guard, with one ``fstat`` of ``fd`` after
    each copy: fewer than ``size`` bytes, a modification time other than ``mtime_ns``
    or a change time other than ``ctime_ns`` (each None: unchecked; the rule is
    :meth:`exactbatch.ndf.local.LocalHandle.check_size`'s) is :class:`FileChanged`.
    ``changed``: called with that :class:`FileChanged` (by ``read``, ``read_run`` and
    ``take_run``) to raise the error that names the file instead (the FileChanged its
    context; one that returns leaves the FileChanged): so a reader can hand out the
    object's own ``read_run`` and keep its error. The object holds it (and what it
    holds: a file's handle, keeping its descriptor open while the rows are read).
    A shape whose bytes do not fit in the address space is an ``OverflowError``.
    None on the pure path, where the reader copies under its read lease instead."""
    if _CORE is None:
        return None
    times = (-1 if t is None else t for t in (mtime_ns, ctime_ns))
    rows: Rows = _CORE.file_rows(mapping, offset, n, d, l, fd, size, *times, changed)
    return rows


def map_file(fd: int, length: int) -> memoryview | None:
    """A read-only shared mapping of the first ``length`` bytes of file ``fd``, as a
    buffer that holds no descriptor of its own (``mmap.mmap`` keeps a duplicate open
    for as long as it lives); unmapped when the last holder lets go. None on the pure
    path (the reader maps with ``mmap.mmap`` there)."""
    if _CORE is None:
        return None
    mapped: memoryview = _CORE.map_file(fd, length)
    return mapped


def gather(
    x: np.ndarray, y: np.ndarray, rows: np.ndarray, dtype: DTypeLike
) -> tuple[np.ndarray, np.ndarray]:
    """New arrays of ``dtype`` holding rows ``rows`` of ``x`` and ``y`` (a shuffle
    buffer's rows, gathered into batches). ``x`` and ``y`` float64 (cast as they are
    copied), or float32 (a buffer held at float32 batches' dtype: its rows' bytes
    copied as they are, the compiled core's ``take_rows32`` or a NumPy take)."""
    out_x, out_y = batch_pair(len(rows), x.shape[1], y.shape[1], dtype)
    if x.dtype != np.float32:
        memory_rows(x, y).read(rows, out_x, out_y)
    elif _CORE is not None and out_x.dtype == np.float32:
        _CORE.take_rows32(x, y, np.asarray(rows, dtype=np.int64), out_x, out_y)
    else:
        out_x[...] = x[rows]
        out_y[...] = y[rows]
    return out_x, out_y


# columns_into's pure path writes this much of the output's rows at a time: a tile
# stays in the core's cache while each column is written into it.
_TILE_BYTES = 512 << 10


def columns_into(cols: Sequence[np.ndarray], start: int, out: np.ndarray) -> None:
    """``out[i, j] = cols[j][start + i]``: rows of 1-D C-contiguous columns (float64,
    float32, or integers of at most 32 bits: each value exact as float64) into ``out``
    (a 2-D float64 or float32 array of ``len(cols)`` values a row, side by side, its
    rows any stride apart: a batch, or a shuffle buffer's x or y), cast as they are
    copied. The compiled core copies a block of rows at a time with the GIL released
    (four float64 or four float32 columns side by side at once, where the CPU has
    AVX); the pure path a tile at a time, column by column; the same bits either way."""
    if _CORE is not None:
        _CORE.columns_into(cols, start, out)
        return
    k = out.shape[0]
    step = max(1, _TILE_BYTES // max(1, out.strides[0]))
    for a in range(0, k, step):
        z = min(k, a + step)
        for j, v in enumerate(cols):
            out[a:z, j] = v[start + a : start + z]
