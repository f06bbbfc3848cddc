"""Arrow columns into NumPy float64 arrays, without pandas.

``pyarrow``'s ``to_numpy()`` and ``pa.array(ndarray)`` import pandas on first
use: slow, and the import discards a Ctrl-C that arrives during it (a
training loop or a conversion would go on). Reading the Arrow buffers
directly avoids both.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fill_float64"]


def fill_float64(col, out: np.ndarray) -> None:
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
