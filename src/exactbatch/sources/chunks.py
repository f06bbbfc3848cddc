"""Chunk streams: sources that can only be read front to back, once per epoch.

A chunk is ``x`` or ``(x, y)``: ``x`` 2-D (rows, d) or 1-D for one row;
``y`` 2-D (rows, l), or 1-D for one label per row (one row's labels when
``x`` is 1-D). :func:`normalize_chunk` turns each into a float64 pair and
checks it against the widths of the stream's first chunk.

A stream must restart every epoch, so the sources accepted are a
zero-argument callable returning a fresh iterator, or a re-iterable (a list
of chunks, an object whose ``__iter__`` returns a fresh iterator). A bare
iterator or generator object is refused: it has one pass only
(:func:`exactbatch.sources.kinds.open_source` decides which is which).
A stream's optional hooks (``n_rows``, and for a chunk source the widths and
its buffer and hint hooks) are read once, into ``Stream.hooks``
(:func:`exactbatch.sources.protocols.stream_hooks`); a pass of it is
:func:`exactbatch.sources.passes.open_pass`.

Beside ``(x, y, id0)``, a pass yields two forms of a chunk that a shuffle
buffer reads straight into its rows (defined here, with the streams, so
that the sources never import the batching above them): :class:`ChunkRead`
(rows not read yet) and :class:`WholeRows` (rows read ahead, laid out as a
buffer holds them).
"""

from __future__ import annotations

import collections.abc as cabc
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from exactbatch.arrays import as_numpy
from exactbatch.hints import Source
from exactbatch.sources.column_chunk import Columns
from exactbatch.sources.protocols import RowsInto, StreamHooks, stream_hooks

__all__ = [
    "ChunkError",
    "ChunkIndexedStream",
    "ChunkList",
    "owned",
    "ChunkRead",
    "ChunkTypeError",
    "FactoryStream",
    "IndexedStream",
    "IterableStream",
    "Stream",
    "Widths",
    "WholeRows",
    "close_iterator",
    "laid_out",
    "normalize_chunk",
]


class ChunkError(ValueError):
    """A chunk of a stream is malformed; names its position and the shapes."""


class ChunkTypeError(ChunkError, TypeError):
    """A chunk holds something other than real numbers (also a ``TypeError``)."""


# a side of a chunk, normalized: float64 rows, or float64 columns (column_chunks)
Side = np.ndarray | Columns


def _chunk_array(a: object, what: str, index: int) -> Side:
    if isinstance(a, Columns):  # float64 columns already (column_chunks)
        return a
    try:
        arr = as_numpy(a, what)  # a chunk may be a DataFrame, a tensor, ... as well
    except TypeError as e:
        raise ChunkTypeError(f"chunk {index}: {e}") from e
    except ValueError as e:  # ragged
        raise ChunkError(f"chunk {index}: {e}") from e
    if arr.dtype.kind not in "biuf":
        raise ChunkTypeError(
            f"chunk {index}: {what} must hold real numbers; got dtype {arr.dtype} "
            f"with shape {arr.shape}"
        )
    return arr.astype(np.float64, copy=False)


def owned(read: Callable[[int], Any]) -> Callable[[int], Any]:
    """``read`` (a chunk source's ``read_chunk``) called by one thread at a time, its
    NumPy arrays copied before the next call: a source that fills one buffer at each
    call (``fresh_chunks`` not said) would otherwise change a chunk the loader still
    holds, or one another thread is copying. Other types are left to
    :func:`normalize_chunk`, which makes arrays of its own of them."""
    lock = threading.Lock()

    def read_owned(i: int) -> Any:
        with lock:
            chunk = read(i)
            if isinstance(chunk, np.ndarray):
                return chunk.copy()
            if isinstance(chunk, tuple):
                return tuple(a.copy() if isinstance(a, np.ndarray) else a for a in chunk)
            return chunk

    return read_owned


def normalize_chunk(chunk: object, index: int, width: tuple[int, int] | None) -> tuple[Side, Side]:
    """``chunk`` as float64 ``(x, y)`` of shapes (rows, d) and (rows, l).

    ``index`` is the chunk's 0-based position in the epoch's stream, used in
    errors; ``width`` is ``(d, l)`` from the first chunk, or None for the
    first. A chunk whose widths or row counts disagree is a :class:`ChunkError`.
    """
    if isinstance(chunk, tuple):
        if len(chunk) != 2:
            raise ChunkError(
                f"chunk {index}: expected x or a pair (x, y); got a {len(chunk)}-tuple"
            )
        x, y = _chunk_array(chunk[0], "x", index), _chunk_array(chunk[1], "y", index)
    else:
        x, y = _chunk_array(chunk, "x", index), None
    if isinstance(x, np.ndarray) and x.ndim == 1:  # (a Columns is 2-D)
        x = x.reshape(1, -1)
        if y is not None:
            y = np.asarray(y).reshape(1, -1)
    elif x.ndim != 2:
        raise ChunkError(f"chunk {index}: x must be 2-D (rows, d) or 1-D (d,); got shape {x.shape}")
    if y is None:
        y = np.empty((x.shape[0], 0), dtype=np.float64)
    elif isinstance(y, np.ndarray) and y.ndim == 1:
        y = y.reshape(-1, 1)
    elif y.ndim != 2:
        raise ChunkError(f"chunk {index}: y must be 2-D (rows, l) or 1-D; got shape {y.shape}")
    if y.shape[0] != x.shape[0]:
        raise ChunkError(
            f"chunk {index}: y has {y.shape[0]} rows but x has {x.shape[0]}: "
            f"x shape {x.shape}, y shape {y.shape}"
        )
    if width is not None and (x.shape[1], y.shape[1]) != width:
        d, l = width  # noqa: E741
        raise ChunkError(
            f"chunk {index}: expected x of shape (rows, {d}) and y of shape (rows, {l}) "
            f"as in chunk 0; found x {x.shape} and y {y.shape}"
        )
    return x, y


class Widths:
    """A stream's widths ``(d, l)``: from its source's hooks, else learnt from the first
    chunk read (None until then); every chunk is checked against them."""

    __slots__ = ("d", "l")

    def __init__(self, d: int | None = None, l: int | None = None):  # noqa: E741
        self.d, self.l = d, l

    def known(self) -> tuple[int, int] | None:
        return None if self.d is None or self.l is None else (self.d, self.l)

    def normalize(self, chunk: object, index: int) -> tuple[Side, Side]:
        """``chunk`` (the ``index``-th of its pass) as float64 ``(x, y)``, checked against
        the widths, which it sets if unknown (:func:`normalize_chunk`)."""
        x, y = normalize_chunk(chunk, index, self.known())
        if self.d is None:
            self.d, self.l = x.shape[1], y.shape[1]
        return x, y


class Stream:
    """A source read front to back, once per pass: ``open()`` starts a pass.

    ``source`` is the user's object; ``hooks`` what it provides beyond its
    chunks (:class:`~exactbatch.sources.protocols.StreamHooks`, read once);
    ``chunk_indexed`` whether it can also be read chunk by chunk in any order
    (a :class:`~exactbatch.sources.protocols.ChunkSource`: Parquet,
    ``ndf_blocks``), so that a shard reads only its chunks and their order can
    be shuffled. ``had_rows``: has a pass yielded rows (then an empty pass
    cannot be right: the source did not restart). A stream's batches are ready
    to hand out once read: no prefetch by default.
    """

    hooks: StreamHooks

    def __init__(self, source: Source) -> None:
        self.source = source
        self.hooks = stream_hooks(source)
        self.had_rows = False

    @property
    def chunk_indexed(self) -> bool:
        return self.hooks.chunk_indexed

    def open(self) -> Iterator[Any]:
        columns = self.hooks.column_chunks
        return iter(self.source) if columns is None else columns()

    def prefetch_default(self, batch_bytes: int) -> int:
        return 0


class IterableStream(Stream):
    """A re-iterable of chunks: ``iter(source)`` is called once per pass (its
    ``column_chunks()`` where it has one: chunks held column by column)."""


class ChunkIndexedStream(Stream):
    """A chunk source: chunk ``i`` is ``source.read_chunk(i)``, of
    ``source.chunk_rows[i]`` rows; a pass front to back (to count its rows, or
    learn its widths) reads every chunk in order, so the source need not be
    iterable."""

    def open(self) -> Iterator[Any]:
        read, rows = self.hooks.read_chunk, self.hooks.chunk_rows
        if read is None or rows is None:  # (stream_hooks gives a chunk source both)
            raise TypeError(f"{type(self.source).__name__} is not a chunk source")
        return (read(i) for i in range(len(rows)))


IndexedStream = ChunkIndexedStream  # the old name, kept working


class ChunkList:
    """A list of chunks as a :class:`~exactbatch.sources.protocols.ChunkSource`: what
    ``elastic=True`` reads a list as (chunk by chunk, in any order). Each chunk is
    checked once here, in list order, as a pass would check it (its widths against
    the first's); its rows are counted so."""

    fresh_chunks = True  # the user's own arrays, held as they are

    def __init__(self, chunks: list[Any]):
        self.chunks = chunks
        widths = Widths()
        counts = [widths.normalize(chunk, i)[0].shape[0] for i, chunk in enumerate(chunks)]
        self.chunk_rows = np.array(counts, dtype=np.int64)
        self.n_rows = int(self.chunk_rows.sum())
        self.d, self.l = widths.d, widths.l

    def read_chunk(self, i: int) -> Any:
        return self.chunks[i]


class FactoryStream(Stream):
    """A zero-argument callable returning a fresh iterator of chunks per pass."""

    def open(self) -> Iterator[Any]:
        it = self.source()
        if not isinstance(it, cabc.Iterator):
            try:
                it = iter(it)
            except TypeError:
                raise TypeError(
                    f"the source factory must return an iterator of chunks; "
                    f"it returned {type(it).__name__}"
                ) from None
        chunks: Iterator[Any] = it
        return chunks


def close_iterator(it: object) -> None:
    """Close ``it`` now if it can be closed (a generator's ``finally`` runs)."""
    close = getattr(it, "close", None)
    if close is not None:
        close()


class ChunkRead:
    """A chunk not read yet: ``rows`` rows from row ``id0`` on (of the stream, which
    for a chunk-indexed source is the source's own row number), which
    ``read_into(row, out)`` reads (rows ``row ..``, as many as ``out`` has: a
    C-contiguous float64 (k, d + l) array, x then y a row) straight into a
    buffer's rows. One copy a row less than a chunk read into arrays of its
    own, then copied. ``held``: its rows are in memory already (a chunk decoded
    by ``open_chunk``), so reading a part of them costs only that part; else
    each read is a read of the source (a positional read, a ranged GET), and a
    chunk is read whole, once (:func:`~exactbatch.batching.gather.read_whole`).
    ``narrows``: ``read_into`` also takes a float32 ``out`` (each value narrowed
    from its float64 as it is copied: a float32 buffer's rows)."""

    __slots__ = ("d", "held", "id0", "l", "narrows", "read_into", "rows")

    def __init__(
        self,
        read_into: Callable[[int, np.ndarray], object],
        id0: int,
        rows: int,
        d: int,
        l: int,  # noqa: E741
        held: bool = False,
        narrows: bool = False,
    ):
        self.read_into, self.id0, self.rows, self.d, self.l = read_into, id0, rows, d, l
        self.held, self.narrows = held, narrows


class WholeRows:
    """A chunk's rows from stream row ``first`` on, held as whole rows (``whole``: a
    C-contiguous float64 (rows, d + l) array, x then y a row, as a buffer holds them):
    :meth:`read_rows_into` copies them, one contiguous copy (into float64 rows, or
    float32 ones: ``narrows``). What a chunk read ahead on a thread of its own becomes
    (``ndf_blocks`` reads a block so; :func:`laid_out` lays any other out)."""

    __slots__ = ("first", "whole")
    narrows = True  # read_rows_into casts into a float32 out (a float32 shuffle buffer)

    def __init__(self, whole: np.ndarray, first: int):
        self.whole, self.first = whole, first

    def read_rows_into(self, row: int, out: np.ndarray) -> None:
        a = row - self.first
        with np.errstate(over="ignore", invalid="ignore"):  # (narrowed: past float32, inf)
            out[...] = self.whole[a : a + out.shape[0]]


def laid_out(chunk: RowsInto, first: int, rows: int, width: int) -> WholeRows:
    """``chunk`` (a :class:`~exactbatch.sources.protocols.RowsInto` of ``rows`` rows
    from stream row ``first`` on, ``width`` values a row) as :class:`WholeRows`."""
    if isinstance(chunk, WholeRows):
        return chunk
    whole = np.empty((rows, width), dtype=np.float64)
    chunk.read_rows_into(first, whole)
    return WholeRows(whole, first)
