"""Where rows come from: random-access readers and chunk streams; which is which
is decided by :func:`exactbatch.sources.kinds.open_source`."""

from exactbatch.sources.random_access import MemoryReader, NdfReader

__all__ = ["MemoryReader", "NdfReader"]
