"""The data ``exactbatch mixing`` examines: its chunks, each row's file position
appended, and the columns chosen (and those skipped, with the reason)."""

from __future__ import annotations

import numpy as np

from exactbatch.tools.common import CliError, resolve_columns

__all__ = ["MAX_COLUMNS", "Tagged", "ndf_input", "parquet_input"]

MAX_COLUMNS = 8  # columns examined when none are chosen


class Tagged:
    """The data's chunks as a chunk-indexed source, each row's file position appended."""

    def __init__(self, chunk_rows, read):
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


def ndf_input(path, columns, chunk_rows):
    from exactbatch.ndf import open_ndf

    f = open_ndf(path)
    # Before anything is made per row or per column: a 28-byte header may claim 2**63 - 1
    # rows of no values, or 2**31 - 1 columns of no rows.
    if f.d + f.l == 0:
        raise CliError(f"{path}: no columns to examine (d = l = 0)")
    if f.n == 0:
        raise CliError(f"{path}: no rows")
    names = [*f.features, *f.labels]  # the names sidecar's, else x0.., y0..
    cols = resolve_columns(columns, names, path, "--columns")
    chosen = names[:MAX_COLUMNS] if cols is None else [names[j] for j in cols]
    cols = [names.index(c) for c in chosen]
    chunk_rows = chunk_rows or 65536
    sizes = [min(chunk_rows, f.n - a) for a in range(0, f.n, chunk_rows)]

    def read(i, a, b):
        x, y = f.read_rows(np.arange(a, b))
        return np.concatenate((x, y), axis=1)[:, cols]

    skipped = _skipped(names, chosen, columns)
    return Tagged(sizes, read), chosen, f.d + f.l, chunk_rows, skipped


def parquet_input(path, columns, chunk_rows):
    from exactbatch.sources.parquet import parquet_source

    if chunk_rows:
        raise CliError(f"{path}: Parquet is read by row group; --chunk-rows is for .ndf files")
    try:
        import pyarrow.parquet as pq
    except ImportError as e:
        raise CliError("reading Parquet needs pyarrow: pip install pyarrow") from e

    from exactbatch.sources.parquet import is_numeric_type
    from exactbatch.tools.common import parquet_files

    schema = pq.ParquetFile(parquet_files(path)[0]).schema_arrow
    numeric = [f.name for f in schema if is_numeric_type(f.type)]
    cols = resolve_columns(columns, schema.names, path, "--columns")
    chosen = numeric[:MAX_COLUMNS] if cols is None else [schema.names[j] for j in cols]
    if not chosen:
        raise CliError(f"{path}: no numeric columns to examine")
    src = parquet_source(path, features=chosen, labels=())
    skipped = [
        {"name": f.name, "reason": f"non-numeric: {f.type}"}
        for f in schema
        if f.name not in numeric and f.name not in chosen
    ] + _skipped(numeric, chosen, columns)
    tagged = Tagged(src.chunk_rows, lambda i, a, b: src.read_chunk(i)[0])
    return tagged, chosen, len(numeric), None, skipped


def _skipped(names, chosen, columns) -> list[dict]:
    """The columns of ``names`` not examined, and why."""
    why = "not in --columns" if columns is not None else (
        f"over the {MAX_COLUMNS} examined without --columns"
    )
    return [{"name": c, "reason": why} for c in names if c not in chosen]
