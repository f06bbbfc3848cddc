"""Where rows come from: random-access readers and chunk streams. What a kind of
source provides is written in :mod:`exactbatch.sources.protocols`; which kind a
source is, is decided by :func:`exactbatch.sources.kinds.open_source`."""

from exactbatch.sources.protocols import ChunkSource, RowReader, RowsInto, RowSource
from exactbatch.sources.random_access import MemoryReader, NdfReader

__all__ = ["ChunkSource", "MemoryReader", "NdfReader", "RowReader", "RowSource", "RowsInto"]
