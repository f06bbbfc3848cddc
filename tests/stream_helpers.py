"""Builders for the streamed-source tests: chunk streams whose rows can be traced.

Row ``i`` of every stream built here is a known function of ``i``:

    x[i, 0] = i,  x[i, j] = i * (j + 1) + j / 4   (j >= 1)
    y[i, k] = -(i + 1) * (k + 1) - 1 / 8

so ``xb[:, 0]`` are a batch's row ids and :func:`check_rows` proves every
value of a batch (features and labels) belongs to those very rows. Values
are exact in float64 for the sizes used here.
"""

from __future__ import annotations

import os
import warnings

import numpy as np

from exactbatch import DataLoader

__all__ = [
    "chunk_bounds",
    "chunks_of",
    "check_rows",
    "collect",
    "ids",
    "make_x",
    "make_y",
    "next_into_ids",
    "quiet_loader",
    "write_parquet",
]


def make_x(row_ids, d: int) -> np.ndarray:
    """Features of rows ``row_ids``: shape (len(row_ids), d), float64, column 0 the id."""
    i = np.asarray(row_ids, dtype=np.float64).reshape(-1, 1)
    j = np.arange(d, dtype=np.float64).reshape(1, -1)
    return np.ascontiguousarray(i * (j + 1) + j / 4)


def make_y(row_ids, l: int) -> np.ndarray:  # noqa: E741
    """Labels of rows ``row_ids``: shape (len(row_ids), l), float64."""
    i = np.asarray(row_ids, dtype=np.float64).reshape(-1, 1)
    k = np.arange(l, dtype=np.float64).reshape(1, -1)
    return np.ascontiguousarray(-(i + 1) * (k + 1) - 0.125)


def chunk_bounds(sizes) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: the row ids of each chunk when chunks hold ``sizes`` rows."""
    out, lo = [], 0
    for s in sizes:
        out.append((lo, lo + int(s)))
        lo += int(s)
    return out


def chunks_of(sizes, d: int = 3, l: int = 1) -> list:  # noqa: E741
    """A list of ``(x, y)`` chunks of ``sizes`` rows (``x`` alone when l == 0)."""
    out = []
    for lo, hi in chunk_bounds(sizes):
        r = np.arange(lo, hi)
        out.append(make_x(r, d) if l == 0 else (make_x(r, d), make_y(r, l)))
    return out


def ids(xb: np.ndarray) -> list[int]:
    """Row ids of one batch (column 0 holds the row number)."""
    return xb[:, 0].astype(np.int64).tolist()


def check_rows(xb, yb, d: int, l: int) -> None:  # noqa: E741
    """Assert a batch is float64 (rows, d) / (rows, l) and every row is an intact source row."""
    assert isinstance(xb, np.ndarray) and isinstance(yb, np.ndarray)
    assert xb.dtype == np.float64 and yb.dtype == np.float64
    assert xb.ndim == 2 and yb.ndim == 2
    assert xb.shape[1] == d and yb.shape[1] == l
    assert xb.shape[0] == yb.shape[0]
    r = ids(xb)
    np.testing.assert_array_equal(xb, make_x(r, d))
    np.testing.assert_array_equal(yb, make_y(r, l))


def collect(loader, d: int | None = None, l: int | None = None) -> list[list[int]]:  # noqa: E741
    """Row ids of each batch of one epoch through ``iter(loader)``, checking every row."""
    out = []
    for xb, yb in loader:
        check_rows(xb, yb, xb.shape[1] if d is None else d, yb.shape[1] if l is None else l)
        out.append(ids(xb))
    return out


def next_into_ids(loader, d: int, l: int, limit: int | None = None) -> list[list[int]]:  # noqa: E741
    """Row ids of the batches ``next_into`` writes until it returns 0 (or ``limit``)."""
    bx = np.full((loader.batch_size, d), np.nan)
    by = np.full((loader.batch_size, l), np.nan)
    out = []
    while limit is None or len(out) < limit:
        got = loader.next_into(bx, by)
        if got == 0:
            break
        check_rows(bx[:got], by[:got], d, l)
        out.append(ids(bx[:got]))
    return out


def quiet_loader(source, batch_size, **kw) -> DataLoader:
    """A DataLoader built with warnings silenced (for sources that need a counting pass)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return DataLoader(source, batch_size, **kw)


def write_parquet(
    path,
    group_sizes,
    first_id: int = 0,
    *,
    d: int = 3,
    l: int = 1,  # noqa: E741
    order=None,
    id_type=None,
) -> list[tuple[int, int]]:
    """Write rows ``first_id, first_id+1, ...`` to ``path``, one row group per size.

    Columns ``x0..x{d-1}`` (``x0`` the row id) and labels ``y0..y{l-1}``;
    ``order`` optionally permutes the column order in the file. Returns the
    (lo, hi) row ids of each row group.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [f"x{j}" for j in range(d)] + [f"y{k}" for k in range(l)]
    if order is not None:
        names = [names[i] for i in order]
    fields = []
    for name in names:
        t = id_type if (name == "x0" and id_type is not None) else pa.float64()
        fields.append((name, t))
    schema = pa.schema(fields)
    bounds = []
    lo = first_id
    with pq.ParquetWriter(os.fspath(path), schema) as w:
        for s in group_sizes:
            r = np.arange(lo, lo + s)
            x, y = make_x(r, d), make_y(r, l)
            cols = {f"x{j}": x[:, j] for j in range(d)}
            cols.update({f"y{k}": y[:, k] for k in range(l)})
            if id_type is not None:
                cols["x0"] = pa.array(r, type=pa.int64()).cast(id_type)
            w.write_table(pa.table({name: cols[name] for name in names}, schema=schema))
            bounds.append((lo, lo + s))
            lo += s
    return bounds
