"""Sequential reads of file regions, for files larger than memory (convert, shuffle).

:func:`read_blocks` reads a file region front to back into one reused
buffer, so reading costs one slab of memory whatever the file's size. The
writers are :mod:`exactbatch.ndf.write`'s (the command passes
:func:`~exactbatch.tools.common.check_interrupt` as their ``before_rename``,
so a Ctrl-C some library swallowed still stops a file from replacing
another).
"""

from __future__ import annotations

import errno
import os

import numpy as np

__all__ = ["SLAB_BYTES", "read_blocks", "read_into", "row_dtype"]

SLAB_BYTES = 8 << 20  # default read/write slab


def row_dtype(row_bytes: int) -> np.dtype:
    """One whole row as a single opaque item (alignment 1: any offset works)."""
    return np.dtype((np.void, max(1, row_bytes)))


def _bytes_view(buf) -> memoryview:
    view = memoryview(buf)
    return view.cast("B") if view.nbytes else memoryview(b"")


def _fill(f, view: memoryview, path, offset: int) -> None:
    got = 0
    while got < len(view):
        k = f.readinto(view[got:])
        if not k:
            raise OSError(
                errno.EIO,
                f"file ended early: expected {len(view)} bytes at offset {offset}",
                os.fspath(path),
            )
        got += k


def read_into(path, offset: int, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` (a C-contiguous array) with the bytes at ``offset`` of ``path``."""
    view = _bytes_view(out)
    if len(view):
        with open(path, "rb", buffering=0) as f:
            f.seek(offset)
            _fill(f, view, path, offset)
    return out


def read_blocks(path, offset: int, rows: int, row_bytes: int, block_rows: int):
    """Yield the ``rows`` rows at ``offset`` of ``path`` as (r,) void arrays, front to back.

    One buffer of ``block_rows`` rows is reused: each yielded array is only
    valid until the next one is requested. A file shorter than promised is
    an ``OSError`` naming it.
    """
    if rows == 0 or row_bytes == 0:
        return
    block_rows = max(1, min(block_rows, rows))
    buf = np.empty(block_rows, dtype=row_dtype(row_bytes))
    raw = memoryview(buf).cast("B")
    with open(path, "rb", buffering=0) as f:
        f.seek(offset)
        done = 0
        while done < rows:
            r = min(block_rows, rows - done)
            _fill(f, raw[: r * row_bytes], path, offset + done * row_bytes)
            yield buf[:r]
            done += r
