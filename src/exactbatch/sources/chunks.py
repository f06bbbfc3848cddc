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
"""

from __future__ import annotations

import collections.abc as cabc

import numpy as np

from exactbatch.arrays import as_numpy

__all__ = [
    "ChunkError",
    "ChunkTypeError",
    "FactoryStream",
    "IndexedStream",
    "IterableStream",
    "Stream",
    "close_iterator",
    "normalize_chunk",
]


class ChunkError(ValueError):
    """A chunk of a stream is malformed; names its position and the shapes."""


class ChunkTypeError(ChunkError, TypeError):
    """A chunk holds something other than real numbers (also a ``TypeError``)."""


def _chunk_array(a, what: str, index: int) -> np.ndarray:
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


def normalize_chunk(chunk, index: int, width: tuple[int, int] | None):
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
    if x.ndim == 1:
        x = x.reshape(1, -1)
        if y is not None:
            y = y.reshape(1, -1)
    elif x.ndim != 2:
        raise ChunkError(f"chunk {index}: x must be 2-D (rows, d) or 1-D (d,); got shape {x.shape}")
    if y is None:
        y = np.empty((x.shape[0], 0), dtype=np.float64)
    elif y.ndim == 1:
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


class Stream:
    """A source read front to back, once per pass: ``open()`` starts a pass.

    ``source`` is the user's object; ``indexed`` says whether it can also be
    read chunk by chunk in any order (``read_chunk(i)``, ``chunk_rows``: Parquet,
    ``ndf_blocks``), so that a shard reads only its chunks and their order can
    be shuffled. A stream's batches are ready to hand out once read: no
    prefetch by default.
    """

    indexed = False

    def __init__(self, source):
        self.source = source

    def open(self):
        return iter(self.source)

    def prefetch_default(self, batch_bytes: int) -> int:
        return 0


class IterableStream(Stream):
    """A re-iterable of chunks: ``iter(source)`` is called once per pass."""


class IndexedStream(Stream):
    """A chunk-indexed source: chunk ``i`` is ``source.read_chunk(i)``, of
    ``source.chunk_rows[i]`` rows."""

    indexed = True


class FactoryStream(Stream):
    """A zero-argument callable returning a fresh iterator of chunks per pass."""

    def open(self):
        it = self.source()
        if not isinstance(it, cabc.Iterator):
            try:
                it = iter(it)
            except TypeError:
                raise TypeError(
                    f"the source factory must return an iterator of chunks; "
                    f"it returned {type(it).__name__}"
                ) from None
        return it


def close_iterator(it) -> None:
    """Close ``it`` now if it can be closed (a generator's ``finally`` runs)."""
    close = getattr(it, "close", None)
    if close is not None:
        close()
