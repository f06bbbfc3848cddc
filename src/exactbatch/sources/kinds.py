"""The kind of a source, decided here and nowhere else.

:func:`open_source` turns what a user passes to ``DataLoader`` into either

* a random-access reader (:mod:`exactbatch.sources.random_access`): a
  :class:`Dataset`, an :class:`NdfFile`, an :class:`NdfDataset` (a sharded
  dataset), an array ``x`` (anything NumPy
  views as an array: an ndarray, a CPU torch tensor, a pandas or polars
  DataFrame, read as :mod:`exactbatch.arrays` says) or a pair ``(x, y)``;
  every epoch is then a full permutation;
* or a stream (:mod:`exactbatch.sources.chunks`): chunk-indexed when it
  has ``read_chunk`` and ``chunk_rows`` (Parquet, ``ndf_blocks``: a shard
  reads only its chunks, in a shuffled order), else a zero-argument
  callable returning a fresh iterator of chunks, or a re-iterable of chunks.

A list is never an array: a list is a sequence of chunks. A bare iterator
or generator is refused (``TypeError``): it has one pass, and every epoch
must restart the stream.
"""

from __future__ import annotations

import collections.abc as cabc

from exactbatch.arrays import is_array_like
from exactbatch.dataset import Dataset
from exactbatch.ndf import NdfDataset, NdfFile
from exactbatch.sources.chunks import FactoryStream, IndexedStream, IterableStream, Stream
from exactbatch.sources.random_access import MemoryReader, NdfReader

__all__ = ["open_source"]


def open_source(source) -> MemoryReader | NdfReader | Stream:
    """A random-access reader for ``source``, or a stream; ``TypeError`` for neither."""
    if isinstance(source, (NdfFile, NdfDataset)):
        return NdfReader(source)
    if isinstance(source, Dataset):
        return MemoryReader(source)
    if hasattr(source, "__dask_graph__"):  # would be computed whole into memory as an array
        raise TypeError(
            f"a Dask collection ({type(source).__name__}) is not an in-memory array: stream "
            "it by partitions with DataLoader(exactbatch.dask.dask_source(collection), ...), "
            "or write it once with exactbatch.dask.to_ndf_dataset and open that"
        )
    if is_array_like(source):
        return MemoryReader(Dataset(source))
    if isinstance(source, tuple):
        if len(source) != 2:
            raise TypeError(
                f"a tuple source must be an (x, y) pair; got a {len(source)}-tuple "
                "(pass a list for a sequence of chunks)"
            )
        return MemoryReader(Dataset(*source))
    if hasattr(source, "read_chunk") and hasattr(source, "chunk_rows"):
        return IndexedStream(source)
    if isinstance(source, cabc.Iterator):
        raise TypeError(
            f"a bare iterator or generator ({type(source).__name__}) can be read only once, "
            "but every epoch must restart the stream: pass a zero-argument function that "
            "returns a fresh iterator, e.g. DataLoader(lambda: make_chunks(), ...)"
        )
    if callable(source):
        return FactoryStream(source)
    if isinstance(source, cabc.Iterable) and not isinstance(source, (str, bytes)):
        return IterableStream(source)
    raise TypeError(
        "source must be a Dataset, an NdfFile, an NdfDataset, an array x, a pair (x, y), "
        "a parquet_source, a zero-argument callable returning an iterator of chunks, "
        "or a re-iterable of chunks; "
        f"got {type(source).__name__}"
    )
