"""Where rows come from: random-access readers and chunk streams."""

from exactbatch.sources.random_access import MemoryReader, NdfReader, random_access_reader

__all__ = ["MemoryReader", "NdfReader", "random_access_reader"]
