"""Arrow columns into NumPy float64 arrays, without pandas.

``pyarrow``'s ``to_numpy()`` and ``pa.array(ndarray)`` import pandas on first
use: slow, and the import discards a Ctrl-C that arrives during it (a
training loop or a conversion would go on). Reading the Arrow buffers
directly avoids both.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from exactbatch.arrays import check_out_array
from exactbatch.checks import check_int
from exactbatch.hints import Foreign
from exactbatch.sources.column_chunk import Columns

__all__ = ["ArrowRows", "column_chunk", "fill_columns", "fill_float64"]


def fill_float64(col: Foreign, out: np.ndarray) -> None:
    """``out[:] = col`` (an Arrow array or chunked array of numbers) as float64,
    nulls as NaN."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray):
        at = 0
        for chunk in col.chunks:
            fill_float64(chunk, out[at : at + len(chunk)])
            at += len(chunk)
        return
    if col.type != pa.float64():
        col = col.cast(pa.float64())
    n, nulls = len(col), col.null_count
    if nulls == n:  # all null, or empty; a cast null-type array may have no data buffer
        out[:] = np.nan
        return
    validity, data = col.buffers()
    out[:] = np.frombuffer(data, dtype=np.float64, count=n, offset=8 * col.offset)
    if nulls:
        bits = np.frombuffer(validity, dtype=np.uint8)
        valid = np.unpackbits(bits, count=col.offset + n, bitorder="little")[col.offset :]
        out[valid == 0] = np.nan


def fill_columns(cols: Sequence[Foreign], out: np.ndarray) -> None:
    """``out[:, j] = cols[j]`` for every column (Arrow arrays or chunked arrays of
    numbers, ``len(out)`` values each) as float64, nulls as NaN; ``out`` float64 or
    float32 (cast as copied), each row's values side by side.

    Straight from the columns' buffers into the rows
    (:func:`exactbatch.kernels.columns_into`, a block of rows at a time)."""
    column_chunk(cols, out.shape[0]).into(out)


def column_chunk(cols: Iterable[Foreign], n: int) -> Columns:
    """``cols`` (Arrow arrays or chunked arrays of numbers, ``n`` values each) as a
    :class:`~exactbatch.sources.column_chunk.Columns`: views of their buffers where
    they are one chunk without nulls of float64, float32 or an integer of at most 32
    bits (cast as their rows are copied), else float64 copies (nulls as NaN)."""
    return Columns([_values(col, n) for col in cols], n)


# Arrow's types whose buffers a Columns holds as they are: every value exact as float64
# (a wider integer takes Arrow's checked cast to float64: fill_float64).
_VIEWED = {
    "double": np.float64,
    "float": np.float32,
    "int8": np.int8,
    "uint8": np.uint8,
    "int16": np.int16,
    "uint16": np.uint16,
    "int32": np.int32,
    "uint32": np.uint32,
}


def _values(col: Foreign, n: int) -> np.ndarray:
    """``col``'s ``n`` values as a 1-D array: a view of its Arrow buffer where it is one
    chunk (empty chunks aside) of a type in ``_VIEWED`` with no nulls, else a float64
    copy (see :func:`fill_float64`)."""
    import pyarrow as pa

    if isinstance(col, pa.ChunkedArray) and col.num_chunks > 1:
        # A polars LazyFrame's batches come as tables whose columns end in an empty
        # chunk ([65536, 0]): held as a copy, that cost a second copy of every row.
        full = [c for c in col.chunks if len(c)]
        if len(full) == 1:
            col = full[0]
    if isinstance(col, pa.ChunkedArray) and col.num_chunks == 1:
        col = col.chunk(0)
    dtype = None if isinstance(col, pa.ChunkedArray) else _VIEWED.get(str(col.type))
    if dtype is not None and n and not col.null_count:
        size = np.dtype(dtype).itemsize
        return np.frombuffer(col.buffers()[1], dtype=dtype, count=n, offset=size * col.offset)
    v = np.empty(n, dtype=np.float64)
    fill_float64(col, v)
    return v


class ArrowRows:
    """Rows ``first ..`` of a source, as Arrow columns (one chunk: features then labels),
    copied into whole rows on demand: ``read_rows_into(row, out)`` writes rows ``row ..
    row + len(out) - 1`` (numbered as the source's, within this chunk) into ``out``, a
    (k, d + l) float64 array, x then y a row, as ``NdfBlocks.read_rows_into`` does (or
    a float32 one, each value narrowed from its float64 once: ``narrows``).
    Another ``out`` is a ``TypeError`` or ``ValueError`` naming it; rows outside the
    chunk an ``IndexError``."""

    __slots__ = ("columns", "first", "rows")
    narrows = True  # read_rows_into casts into a float32 out (a float32 shuffle buffer)

    def __init__(self, columns: list[Foreign], first: int, rows: int):
        self.columns, self.first, self.rows = columns, first, rows

    def read_rows_into(self, row: int, out: np.ndarray) -> None:
        k = out.shape[0] if isinstance(out, np.ndarray) and out.ndim == 2 else 0
        f32 = isinstance(out, np.ndarray) and out.dtype == np.float32
        check_out_array(out, (k, len(self.columns)), "out", np.float32 if f32 else np.float64)
        a = check_int("row", row, 0) - self.first
        if a < 0 or a + k > self.rows:
            raise IndexError(
                f"rows {row}..{row + k - 1} are outside this chunk's rows "
                f"{self.first}..{self.first + self.rows - 1}"
            )
        fill_columns([col.slice(a, k) for col in self.columns], out)
