"""The data ``exactbatch mixing`` examines: its chunks, each row's file position
appended, and the columns chosen (and those skipped, with the reason).

An ``.ndf`` file or a sharded dataset (local, or at a URL) is cut into chunks
as :func:`~exactbatch.ndf_blocks` cuts it for a streaming loader (a
dataset's chunks never cross a part boundary); Parquet streams by row group.
Each input gives the columns to score (``names``) and, when there is one,
the stratum column whose per-batch entropy is measured: the one given, else
the data's label column when it has exactly one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from exactbatch.extras import need
from exactbatch.tools.column_args import resolve_columns
from exactbatch.tools.common import CliError

if TYPE_CHECKING:
    from exactbatch.ndf import NdfDataset, NdfFile

__all__ = ["MAX_COLUMNS", "Input", "Tagged", "ndf_input", "parquet_input"]

MAX_COLUMNS = 8  # columns examined when none are chosen

# chunk i's rows [a, b) of the columns read: read(i, a, b)
_ReadChunk = Callable[[int, int, int], np.ndarray]


class Tagged:
    """The data's chunks as a chunk-indexed source, each row's file position appended."""

    def __init__(self, chunk_rows: Sequence[int] | np.ndarray, read: _ReadChunk) -> None:
        self.chunk_rows = np.asarray(chunk_rows, dtype=np.int64)
        self._starts = np.concatenate(([0], np.cumsum(self.chunk_rows)))
        self.n_rows = int(self._starts[-1])
        self._read = read

    def __len__(self) -> int:
        return len(self.chunk_rows)

    def read_chunk(self, i: int) -> np.ndarray:
        a, b = int(self._starts[i]), int(self._starts[i + 1])
        vals = self._read(i, a, b)  # (rows, columns)
        return np.column_stack((vals, np.arange(a, b, dtype=np.float64)))


class Input:
    """What :func:`ndf_input` and :func:`parquet_input` give: ``tagged`` (its rows:
    the scored columns, then the stratum's when it is not one of them, then the
    position), ``names`` (the scored columns), ``width`` (columns of a row, for the
    loader's default buffer), ``chunk_rows`` (None for row groups), ``skipped``
    (columns not scored, and why), ``stratum`` (its name, or None) and
    ``stratum_at`` (its column in ``tagged``'s rows)."""

    def __init__(
        self,
        tagged: Tagged,
        names: list[str],
        width: int,
        chunk_rows: int | None,
        skipped: list[dict[str, str]],
        stratum: str | None,
        stratum_at: int | None,
    ) -> None:
        self.tagged, self.names, self.width = tagged, names, width
        self.chunk_rows, self.skipped = chunk_rows, skipped
        self.stratum, self.stratum_at = stratum, stratum_at


def ndf_input(
    f: NdfFile | NdfDataset, path: str, columns: object, chunk_rows: int | None, stratum: object
) -> Input:
    """``f``: an open NdfFile or NdfDataset, read in blocks of ``chunk_rows`` rows."""
    from exactbatch.sources.blocks import ndf_blocks

    # Before anything is made per row or per column: a 28-byte header may claim 2**63 - 1
    # rows of no values, or 2**31 - 1 columns of no rows.
    if f.d + f.l == 0:
        raise CliError(f"{path}: no columns to examine (d = l = 0)")
    if f.n == 0:
        raise CliError(f"{path}: no rows")
    names = [*f.features, *f.labels]  # the names sidecar's (or manifest's), else x0.., y0..
    cols = resolve_columns(columns, names, path, "--columns")
    chosen = names[:MAX_COLUMNS] if cols is None else [names[j] for j in cols]
    strat = _stratum(stratum, names, list(f.labels), path)
    read, at = _read_columns(names, chosen, strat)
    rows = chunk_rows or 65536
    blocks = ndf_blocks(f, rows)

    def read_chunk(i: int, a: int, b: int) -> np.ndarray:
        x, y = blocks.read_chunk(i)
        return np.concatenate((x, y), axis=1)[:, read]

    skipped = _skipped(names, chosen, columns)
    tagged = Tagged(blocks.chunk_rows, read_chunk)
    return Input(tagged, chosen, f.d + f.l, rows, skipped, strat, at)


def parquet_input(path: str, columns: object, chunk_rows: int | None, stratum: object) -> Input:
    from exactbatch.sources.parquet import parquet_source

    if chunk_rows:
        raise CliError(f"{path}: Parquet is read by row group; --chunk-rows is for .ndf files")
    pq = need("pyarrow.parquet", by="reading Parquet", package="pyarrow", error=CliError)

    from exactbatch.sources.parquet import is_numeric_type, recorded_labels
    from exactbatch.tools.common import parquet_columns, parquet_files

    # the loader's columns, in its order: a Hive folder's partition keys last
    names, types, _ = parquet_columns(path)
    numeric = [c for c in names if is_numeric_type(types[c])]
    cols = resolve_columns(columns, names, path, "--columns")
    chosen = numeric[:MAX_COLUMNS] if cols is None else [names[j] for j in cols]
    if not chosen:
        raise CliError(f"{path}: no numeric columns to examine")
    schema = pq.ParquetFile(parquet_files(path)[0]).schema_arrow
    labels = [c for c in recorded_labels(schema) or [] if c in numeric]
    strat = _stratum(stratum, names, labels, path)
    if strat is not None and strat not in numeric:
        kind = types[strat]
        raise CliError(f"{path}: --stratum {strat} is {kind}; mixing reads numeric columns")
    read, at = _read_columns(names, chosen, strat)
    src = parquet_source(path, features=[names[j] for j in read], labels=())
    skipped = [
        {"name": c, "reason": f"non-numeric: {types[c]}"}
        for c in names
        if c not in numeric and c not in chosen
    ] + _skipped(numeric, chosen, columns)
    tagged = Tagged(src.chunk_rows, lambda i, a, b: src.read_chunk(i)[0])
    return Input(tagged, chosen, len(numeric), None, skipped, strat, at)


def _stratum(spec: object, names: list[str], labels: list[str], path: str) -> str | None:
    """The stratum column: ``spec`` (one name or position), else the one label column."""
    if spec is None:
        return labels[0] if len(labels) == 1 else None
    cols = resolve_columns(spec, names, path, "--stratum") or []
    if len(cols) != 1:
        raise CliError(f"{path}: --stratum takes one column; got {spec!r}")
    return names[cols[0]]


def _read_columns(
    names: list[str], chosen: list[str], stratum: str | None
) -> tuple[list[int], int | None]:
    """The columns to read (the chosen, then the stratum if not among them) and
    where the stratum is among them."""
    read = [names.index(c) for c in chosen]
    if stratum is None:
        return read, None
    if stratum in chosen:
        return read, chosen.index(stratum)
    return [*read, names.index(stratum)], len(read)


def _skipped(names: list[str], chosen: list[str], columns: object) -> list[dict[str, str]]:
    """The columns of ``names`` not examined, and why."""
    why = (
        "not in --columns"
        if columns is not None
        else (f"over the {MAX_COLUMNS} examined without --columns")
    )
    return [{"name": c, "reason": why} for c in names if c not in chosen]
