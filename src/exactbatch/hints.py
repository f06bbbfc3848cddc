"""Type aliases of the public signatures: what each kind of argument may be.

Names only (no code runs on them); the functions check their arguments
and say what was expected when one is wrong.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Literal

from numpy.typing import ArrayLike, DTypeLike

__all__ = [
    "ArrayLike",
    "ColumnSelection",
    "Columns",
    "DTypeLike",
    "Device",
    "Foreign",
    "PathLike",
    "PyTree",
    "Source",
    "TotalSize",
]

# A local path or a URL (``s3://bucket/key``); a str or an ``os.PathLike``.
PathLike = str | os.PathLike[str]

# What a DataLoader reads: an array or a pair of arrays (NumPy, torch, pandas,
# polars), a Dataset, an NdfFile or NdfDataset, a RowSource, a chunk source
# (ParquetSource, ndf_blocks, a Dask source), a list of chunks or a generator
# factory (see "DataLoader (one front door)" in the docs).
Source = Any

# N: an int, "auto" (from the source's metadata, else one counting pass), or
# None (unknown: a stream that is never audited).
TotalSize = int | Literal["auto"] | None

# Column names (a sequence of str, or one name) or None for a default.
Columns = Sequence[str] | str | None

# A loader's features= or labels=: columns by name or position (a sequence, or one),
# or None for a default.
ColumnSelection = Sequence[str | int] | str | int | None

# An object of a library that ships no types (a pyarrow array, table or schema, a
# polars frame, a DuckDB relation): what is called of it is checked where it is read.
Foreign = Any

# A JAX pytree (arrays in nested tuples, lists and dicts: a model's parameters, an
# optimiser's state): JAX itself types one Any; what is read of it is checked there.
PyTree = Any

# A device of the adapter's library (``"cuda:0"``, a ``torch.device``, a
# ``jax.Device``), or None for its default.
Device = Any
