"""The kind of a source, decided here and nowhere else.

:func:`open_source` turns what a user passes to ``DataLoader`` into either

* a random-access reader (a :class:`~exactbatch.sources.protocols.RowReader`):
  the one a :class:`~exactbatch.sources.protocols.RowSource` opens
  (``open_reader()``), or one of :mod:`exactbatch.sources.random_access` for
  a :class:`Dataset`, an :class:`NdfFile`, an :class:`NdfDataset` (a sharded
  dataset), an array ``x`` (anything NumPy views as an array: an ndarray, a
  CPU torch tensor, a pandas or polars DataFrame, read as
  :mod:`exactbatch.arrays` says) or a pair ``(x, y)``; every epoch is then a
  full permutation;
* or a stream (:mod:`exactbatch.sources.chunks`): chunk-indexed for a
  :class:`~exactbatch.sources.protocols.ChunkSource` (``read_chunk`` and
  ``chunk_rows``: Parquet, ``ndf_blocks``; a shard reads only its chunks, in a
  shuffled order), a polars ``LazyFrame`` or a DuckDB relation (its query run
  again each pass: :func:`exactbatch.polars_source`,
  :func:`exactbatch.duckdb_source`), else a zero-argument callable returning
  a fresh iterator of chunks, or a re-iterable of chunks.

The kinds are tried in the order of :data:`KINDS`, the protocols first, so a
new kind of source is a module whose objects follow a protocol: nothing here
changes. A list is never an array: a list is a sequence of chunks. A bare
iterator or generator (a pyarrow ``RecordBatchReader`` among them) is
refused (``TypeError``): it has one pass, and every epoch must restart the
stream.
"""

from __future__ import annotations

import collections.abc as cabc
from collections.abc import Callable
from typing import Any, NamedTuple, NoReturn

from exactbatch.arrays import is_array_like
from exactbatch.dataset import Dataset
from exactbatch.hints import Source
from exactbatch.ndf import NdfDataset, NdfFile
from exactbatch.sources.arrow_table import (
    arrow_source,
    is_arrow_reader,
    is_arrow_table,
    refuse_reader,
)
from exactbatch.sources.chunks import ChunkIndexedStream, FactoryStream, IterableStream, Stream
from exactbatch.sources.duckdb_relations import duckdb_source, is_duckdb_relation
from exactbatch.sources.hf_datasets import hf_source, is_hf_dataset
from exactbatch.sources.polars_frames import is_lazy_frame, polars_source
from exactbatch.sources.protocols import RowReader, check_reader, is_chunk_source, is_row_source
from exactbatch.sources.random_access import MemoryReader, NdfReader

__all__ = ["KINDS", "SourceKind", "open_source"]


class SourceKind(NamedTuple):
    """One kind of source: ``accepts(source)`` says it is one, ``open(source)`` opens it
    (a reader or a stream) or refuses it with a ``TypeError``; ``name`` is how errors
    list it (None: a kind refused, not listed)."""

    name: str | None
    accepts: Callable[[object], bool]
    open: Callable[[Any], RowReader | Stream]


def _open_reader(source: Source) -> RowReader:
    return check_reader(source.open_reader(), source)


def _pair(source: tuple[Any, ...]) -> MemoryReader:
    if len(source) != 2:
        raise TypeError(
            f"a tuple source must be an (x, y) pair; got a {len(source)}-tuple "
            "(pass a list for a sequence of chunks)"
        )
    return MemoryReader(Dataset(*source))


def _is_dask(source: object) -> bool:
    return hasattr(source, "__dask_graph__")


def _dask(source: object) -> NoReturn:  # it would be computed whole into memory as an array
    raise TypeError(
        f"a Dask collection ({type(source).__name__}) is not an in-memory array: stream "
        "it by partitions with DataLoader(exactbatch.dask.dask_source(collection), ...), "
        "or write it once with exactbatch.dask.to_ndf_dataset and open that"
    )


def _iterator(source: object) -> NoReturn:
    raise TypeError(
        f"a bare iterator or generator ({type(source).__name__}) can be read only once, "
        "but every epoch must restart the stream: pass a zero-argument function that "
        "returns a fresh iterator, e.g. DataLoader(lambda: make_chunks(), ...)"
    )


def _is_ndf(source: object) -> bool:
    return isinstance(source, (NdfFile, NdfDataset))


def _is_dataset(source: object) -> bool:
    return isinstance(source, Dataset)


def _is_pair(source: object) -> bool:
    return isinstance(source, tuple)


def _is_iterator(source: object) -> bool:
    return isinstance(source, cabc.Iterator)


def _is_reiterable(source: object) -> bool:
    return isinstance(source, cabc.Iterable) and not isinstance(source, (str, bytes))


KINDS: tuple[SourceKind, ...] = (
    SourceKind("a RowSource (open_reader())", is_row_source, _open_reader),
    SourceKind("an NdfFile, an NdfDataset", _is_ndf, NdfReader),
    SourceKind("a Dataset", _is_dataset, MemoryReader),
    # Arrow-native objects, before the array-likes (a pyarrow Table has __array__):
    # each is opened as its module's source with every numeric column a feature.
    SourceKind("a pyarrow Table", is_arrow_table, lambda s: open_source(arrow_source(s))),
    SourceKind(None, is_arrow_reader, refuse_reader),
    SourceKind("a polars LazyFrame", is_lazy_frame, lambda s: open_source(polars_source(s))),
    SourceKind("a Hugging Face Dataset", is_hf_dataset, lambda s: open_source(hf_source(s))),
    SourceKind("a DuckDB relation", is_duckdb_relation, lambda s: open_source(duckdb_source(s))),
    SourceKind(None, _is_dask, _dask),
    SourceKind("an array x", is_array_like, lambda s: MemoryReader(Dataset(s))),
    SourceKind("a pair (x, y)", _is_pair, _pair),
    SourceKind(
        "a ChunkSource (chunk_rows, read_chunk: a parquet_source, ndf_blocks)",
        is_chunk_source,
        ChunkIndexedStream,
    ),
    SourceKind(None, _is_iterator, _iterator),
    SourceKind("a zero-argument callable returning an iterator of chunks", callable, FactoryStream),
    SourceKind("a re-iterable of chunks", _is_reiterable, IterableStream),
)


def open_source(source: Source) -> RowReader | Stream:
    """A random-access reader for ``source``, or a stream: the first of :data:`KINDS`
    that accepts it; ``TypeError`` for none."""
    for kind in KINDS:
        if kind.accepts(source):
            return kind.open(source)
    names = [kind.name for kind in KINDS if kind.name is not None]
    raise TypeError(
        f"source must be {', '.join(names[:-1])} or {names[-1]}; got {type(source).__name__}"
    )
