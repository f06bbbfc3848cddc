"""The source protocols: what a kind of source provides, written down once.

There are two kinds of source, and a new kind of source implements one of them
(docs/development.md, "Adding a source kind"):

* **Random access.** A :class:`RowSource` (``open_reader()``) opens a
  :class:`RowReader` of its own for each loader: any rows, in any order, on
  several threads at once. Every epoch is then a full permutation.
* **Chunk-indexed streams.** A :class:`ChunkSource` (``chunk_rows`` and
  ``read_chunk(i)``) is read chunk by chunk in any order: a shard reads only
  the chunks holding its rows, and a shuffled epoch shuffles their order
  before mixing rows in a bounded buffer. Parquet row groups, ``ndf_blocks``
  and Dask partitions are chunk sources. (A plain stream - a re-iterable or
  a factory of chunks - is read front to back: no protocol beyond iteration.)

:func:`exactbatch.sources.kinds.open_source` recognises both by these
protocols, so a new kind needs no edit there. A chunk source may have the
optional hooks below; :func:`stream_hooks` is the one place they are looked
up, once per loader. A stream without a hook is still read exactly; it only
costs more:

* ``n_rows``: the rows of the whole stream (of any stream, not only a chunk
  source). Without it, ``total_size="auto"`` counts the rows in one pass
  (with a warning), and a shuffle buffer grows by doubling.
* ``d`` and ``l`` (both, or neither): the widths. Without them, the feed
  learns them from the first chunk read (``loader.d`` is None until then).
* ``block_rows``: recorded in a state (of any stream), so that a state of
  other blocks is refused on load. Without it, None is recorded.
* ``identity()``: what names the data (of any stream, and of a
  :class:`RowSource`): a small JSON-safe dict with its ``kind``, its column
  ``names`` and what it can say of its rows without reading them
  (:mod:`exactbatch.sources.identity`), recorded in a state and compared on
  load. Without it, the kind alone is recorded (and a state of other data
  with the same sizes is not told apart).
* ``fresh_chunks``: True says ``read_chunk`` returns arrays of its own at
  each call, which the source never changes afterwards (Parquet,
  ``ndf_blocks``, Dask partitions say so). The loader holds several chunks
  at once (one being cut into batches, the next read ahead, a chunk cache's
  window), so without it chunks are read one at a time, each copied once on
  the thread that read it before the next read starts: a source that fills
  one buffer at every call is still read right (only a source that says
  ``fresh_chunks`` is read several chunks at once).
* ``will_need(i)``: chunk ``i`` is read soon; called up to ``HINT_AHEAD``
  (16) chunks ahead of the reads, from a thread of its own. Without it, no
  hints.
* ``read_rows_into(row, out)``: rows ``row ..`` of the stream straight into a
  shuffle buffer's rows (``out``: a C-contiguous float64 (k, d + l) array, x
  then y a row). Without it, ``open_chunk`` is used, else the chunk is read
  into arrays and copied.
* ``open_chunk(i)``: chunk ``i`` decoded on a read-ahead thread, as a
  :class:`RowsInto` for the buffer to copy from. Without it, the chunk is
  read into arrays. A pass that reads several chunks at once (see
  :func:`~exactbatch.sources.passes.read_depth`) reads through it even where
  the source has ``read_rows_into`` too (which reads one chunk at a time).
* ``read_columns(i)``: chunk ``i`` as ``(x, y)``, a pair of
  :class:`~exactbatch.sources.column_chunk.Columns` (held column by column,
  copied straight into batches, or into an elastic stream's chunk cache),
  read instead of ``read_chunk`` wherever the loader reads a chunk whole.
  Without it, ``read_chunk``'s arrays (Parquet has it: its row groups are
  never laid out as rows before a batch).

And of any stream:

* ``column_chunks()``: a fresh pass, as ``(x, y)`` pairs of
  :class:`~exactbatch.sources.column_chunk.Columns` (chunks held column by
  column, copied straight into batches), read instead of iterating the
  source (the Arrow-family streams have it). Without it, the source is
  iterated.

The two buffer hooks are used only by a shuffled pass, and only when the
widths are known. A chunk of other rows than ``chunk_rows`` says is a
``ChunkError``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol, Union

import numpy as np

from exactbatch.checks import check_int

__all__ = [
    "Chunk",
    "ChunkSource",
    "RowReader",
    "RowSource",
    "RowsInto",
    "StreamHooks",
    "check_reader",
    "is_chunk_source",
    "is_row_source",
    "stream_hooks",
]

# A chunk of a stream: x, or (x, y) (see exactbatch.sources.chunks.normalize_chunk).
Chunk = Union[np.ndarray, "tuple[np.ndarray, np.ndarray]"]


class ChunkSource(Protocol):
    """A stream read chunk by chunk, in any order: chunk ``i`` is ``read_chunk(i)``.

    ``chunk_rows``: the row count of each chunk (integers >= 0, in stream
    order); ``read_chunk(i)`` returns chunk ``i`` as ``x`` or ``(x, y)`` of
    exactly ``chunk_rows[i]`` rows (any array-like of real numbers: see
    :func:`exactbatch.sources.chunks.normalize_chunk`), and may be called
    from background threads, several at once. Optional hooks: the module docs
    (``fresh_chunks``: its arrays are its own, held without a copy).
    """

    chunk_rows: Sequence[int]

    def read_chunk(self, i: int) -> Chunk: ...


class RowsInto(Protocol):
    """Rows that can be read straight into a buffer (what ``open_chunk`` returns).
    Optional: ``narrows = True`` says ``read_rows_into`` also takes a float32 ``out``
    (each value narrowed from its float64 once), which a shuffle buffer for float32
    batches then holds; without it, such a buffer reads float64 rows and narrows them."""

    def read_rows_into(self, row: int, out: np.ndarray) -> None:
        """Rows ``row .. row + len(out) - 1`` (numbered as the stream's) into ``out``, a
        C-contiguous float64 (k, d + l) array, x then y a row."""


class RowReader(Protocol):
    """Rows of a random-access source, read by one loader.

    ``n``, ``d``, ``l``: its rows and widths (ints >= 0). ``read(rows, out_x,
    out_y)`` writes the rows ``rows`` - a ``slice`` of consecutive rows or an
    int32/int64 array of row numbers in ``[0, n)`` - into ``out_x`` (r, d) and
    ``out_y`` (r, l), float64 or float32 C-contiguous arrays (the reader
    casts); it may run on several threads at once, and a read that raises
    leaves its batch to be read again. ``prefetch_default(batch_bytes)``: the
    batches a loader prepares ahead unless told (0 where a read is as cheap
    as handing a batch between threads; 2 where reads wait on I/O).
    ``close()``: the loader is done with it (idempotent). Optional: ``fuses``
    True says ``read`` takes a fourth argument, a
    :class:`~exactbatch.kernels.TransformKernel` (a loader's ``transform`` or
    ``nan="error"``), applies it to x as it copies, returns the first row
    whose x held a NaN (or -1), and takes float64 ``out_y`` under a float32
    ``out_x``; without it, such a loader reads float64 rows and maps them
    after (one more pass over the batch).
    """

    n: int
    d: int
    l: int  # noqa: E741

    # (None; a reader that fuses returns the first row whose x held a NaN, or -1)
    def read(
        self, rows: np.ndarray | slice, out_x: np.ndarray, out_y: np.ndarray
    ) -> int | None: ...

    def prefetch_default(self, batch_bytes: int) -> int: ...

    def close(self) -> None: ...


class RowSource(Protocol):
    """A random-access source: ``open_reader()`` returns a new :class:`RowReader`,
    owned (and closed) by the loader that asked for it."""

    def open_reader(self) -> RowReader: ...


_READER_MEMBERS = ("n", "d", "l", "read", "prefetch_default", "close")


def is_row_source(source: object) -> bool:
    """Does ``source`` follow :class:`RowSource`? (Its reader is checked when opened.)"""
    return callable(getattr(source, "open_reader", None))


def is_chunk_source(source: object) -> bool:
    """Does ``source`` follow :class:`ChunkSource`? (``chunk_rows`` is checked by
    :func:`stream_hooks`.)"""
    return hasattr(source, "chunk_rows") and callable(getattr(source, "read_chunk", None))


def check_reader(reader: Any, source: object) -> RowReader:
    """``reader``, which ``source.open_reader()`` returned, if it is a :class:`RowReader`:
    else a ``TypeError`` naming what it lacks (or ``ValueError``: a size below 0)."""
    missing = [name for name in _READER_MEMBERS if not hasattr(reader, name)]
    if missing:
        raise TypeError(
            f"{type(source).__name__}.open_reader() returned {type(reader).__name__}, "
            f"which lacks {', '.join(missing)}: a RowReader has n, d, l, "
            "read(rows, out_x, out_y), prefetch_default(batch_bytes) and close()"
        )
    for name in ("n", "d", "l"):
        check_int(f"{type(source).__name__}.open_reader().{name}", getattr(reader, name), 0)
    checked: RowReader = reader  # (its members are there, its sizes checked)
    return checked


@dataclass(frozen=True)
class StreamHooks:
    """What a stream's source provides, looked up once (module docs): ``chunk_rows``
    (an int64 array) and ``read_chunk`` for a chunk source (else None, as for
    every hook it lacks), ``n_rows``, the widths ``d`` and ``l``, ``block_rows``,
    and the callables ``identity``, ``will_need``, ``read_rows_into``,
    ``open_chunk``, ``read_columns`` and ``column_chunks``; ``fresh_chunks``, whether
    ``read_chunk``'s arrays are its own (else copied once as read)."""

    # (the hooks are the source's own methods, a user's: what they return is checked
    # where it is read, as Any is)
    chunk_rows: np.ndarray | None = None
    read_chunk: Callable[[int], Chunk] | None = None
    n_rows: int | None = None
    d: int | None = None
    l: int | None = None  # noqa: E741
    block_rows: int | None = None
    identity: Callable[..., Any] | None = None
    will_need: Callable[..., Any] | None = None
    read_rows_into: Callable[..., Any] | None = None
    open_chunk: Callable[..., Any] | None = None
    read_columns: Callable[..., Any] | None = None
    column_chunks: Callable[..., Any] | None = None
    fresh_chunks: bool = False

    @property
    def chunk_indexed(self) -> bool:
        """Can the stream be read chunk by chunk, in any order?"""
        return self.chunk_rows is not None


def _chunk_rows(source: Any) -> np.ndarray:
    name = f"{type(source).__name__}.chunk_rows"
    try:
        rows = np.asarray(source.chunk_rows)
    except (TypeError, ValueError) as e:  # ragged
        raise TypeError(f"{name} must be a sequence of row counts; {e}") from None
    if rows.ndim != 1 or (rows.size and rows.dtype.kind not in "iu"):
        raise TypeError(
            f"{name} must be a 1-D sequence of integer row counts; got dtype {rows.dtype} "
            f"with shape {rows.shape}"
        )
    if rows.size and rows.min() < 0:
        raise ValueError(f"{name} must be row counts >= 0; got {int(rows.min())}")
    out = rows.astype(np.int64)
    out.flags.writeable = False
    return out


def stream_hooks(source: Any) -> StreamHooks:
    """The hooks ``source`` has (module docs): the one place a stream's source is
    asked what it can do. A hook of the wrong kind is a ``TypeError`` (or
    ``ValueError``) naming it."""
    owner = type(source).__name__

    def size(name: str, minimum: int) -> int | None:
        return check_int(f"{owner}.{name}", getattr(source, name, None), minimum, optional=True)

    identity = getattr(source, "identity", None)
    if identity is not None and not callable(identity):
        raise TypeError(f"{owner}.identity must be a method returning a dict; got {identity!r:.80}")
    columns = getattr(source, "column_chunks", None)
    if columns is not None and not callable(columns):
        raise TypeError(f"{owner}.column_chunks must be a method; got {columns!r:.80}")
    common = StreamHooks(
        n_rows=size("n_rows", 0),
        block_rows=size("block_rows", 1),
        identity=identity,
        column_chunks=columns,
    )
    if not is_chunk_source(source):
        return common
    d, l = size("d", 0), size("l", 0)  # noqa: E741
    if (d is None) != (l is None):
        raise TypeError(f"{owner} has only one of d and l; a chunk source has both, or neither")
    return replace(
        common,
        chunk_rows=_chunk_rows(source),
        read_chunk=source.read_chunk,
        d=d,
        l=l,
        will_need=getattr(source, "will_need", None),
        read_rows_into=getattr(source, "read_rows_into", None),
        open_chunk=getattr(source, "open_chunk", None),
        read_columns=getattr(source, "read_columns", None),
        fresh_chunks=_flag(owner, "fresh_chunks", getattr(source, "fresh_chunks", False)),
    )


def _flag(owner: str, name: str, value: object) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{owner}.{name} must be True or False; got {value!r:.80}")
    return bool(value)
