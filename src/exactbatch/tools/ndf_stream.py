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
from collections.abc import Callable, Iterable, Iterator, Sequence
from io import FileIO
from typing import NamedTuple

import numpy as np

from exactbatch.arrays import byte_view
from exactbatch.hints import PathLike
from exactbatch.ndf.regular import regular_file

__all__ = [
    "SLAB_BYTES",
    "NdfRegions",
    "ndf_regions",
    "read_blocks",
    "read_into",
    "read_regions_into",
    "region_blocks",
    "row_dtype",
]

SLAB_BYTES = 8 << 20  # default read/write slab

# a run of rows in a file: (path, byte offset, rows)
Region = tuple[str, int, int]


def row_dtype(row_bytes: int) -> np.dtype:
    """One whole row as a single opaque item (alignment 1: any offset works)."""
    return np.dtype((np.void, max(1, row_bytes)))


def _fill(f: FileIO, view: memoryview, path: PathLike, offset: int) -> None:
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


def read_into(path: PathLike, offset: int, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` (a C-contiguous array) with the bytes at ``offset`` of ``path``."""
    view = byte_view(out)
    if len(view):
        with regular_file(path, buffering=0) as f:
            f.seek(offset)
            _fill(f, view, path, offset)
    return out


def read_regions_into(regions: Iterable[Region], row_bytes: int, out: np.ndarray) -> np.ndarray:
    """Fill ``out`` with the rows of ``regions`` (``[(path, offset, rows), ...]``), in turn."""
    view, at = byte_view(out), 0
    for path, offset, rows in regions:
        size = rows * row_bytes
        if size:
            with regular_file(path, buffering=0) as f:
                f.seek(offset)
                _fill(f, view[at : at + size], path, offset)
        at += size
    return out


def read_blocks(
    path: str, offset: int, rows: int, row_bytes: int, block_rows: int
) -> Iterator[np.ndarray]:
    """Yield the ``rows`` rows at ``offset`` of ``path`` as (r,) void arrays, front to back.

    One buffer of ``block_rows`` rows is reused: each yielded array is only
    valid until the next one is requested. A file shorter than promised is
    an ``OSError`` naming it.
    """
    return region_blocks([(path, offset, rows)], row_bytes, block_rows)


def region_blocks(
    regions: Sequence[Region], row_bytes: int, block_rows: int
) -> Iterator[np.ndarray]:
    """Yield the rows of ``regions`` (``[(path, offset, rows), ...]``) in turn, as (r,)
    void arrays of ``block_rows`` rows (the last one shorter): a block may hold rows of
    several regions, so the blocks are those of one file holding them all.

    One buffer is reused, as in :func:`read_blocks`.
    """
    total = sum(rows for _, _, rows in regions)
    if total == 0 or row_bytes == 0:
        return
    block_rows = max(1, min(block_rows, total))
    buf = np.empty(block_rows, dtype=row_dtype(row_bytes))
    raw = byte_view(buf)
    full = 0  # rows of the buffer filled so far
    for path, offset, rows in regions:
        if rows == 0:
            continue
        with regular_file(path, buffering=0) as f:
            f.seek(offset)
            done = 0
            while done < rows:
                r = min(block_rows - full, rows - done)
                where = raw[full * row_bytes : (full + r) * row_bytes]
                _fill(f, where, path, offset + done * row_bytes)
                done += r
                full += r
                if full == block_rows:
                    yield buf
                    full = 0
    if full:
        yield buf[:full]


class NdfRegions(NamedTuple):
    """The rows of an ``.ndf`` file or a sharded dataset as file regions: ``regions``
    (``[(path, offset, rows), ...]``, in order), ``n``, ``d``, ``l``, and the column
    names a dataset's manifest or a file's names sidecar keeps (``features``,
    ``labels``; None if none)."""

    regions: list[Region]
    n: int
    d: int
    l: int  # noqa: E741
    features: Sequence[str] | None = None
    labels: Sequence[str] | None = None


def ndf_regions(path: PathLike, check: Callable[[int], object] | None = None) -> NdfRegions:
    """The regions of the ``.ndf`` file or the local sharded dataset at ``path``.

    Every part of a dataset is checked against the manifest first (an
    ``NdfError`` naming the part otherwise); ``check(k)``, if given, is
    called after each (a progress bar).
    """
    from exactbatch.ndf import HEADER_SIZE, open_ndf, open_ndf_dataset
    from exactbatch.ndf.names import read_sidecar

    where = os.fspath(path)
    if not os.path.isdir(where):
        with open_ndf(where) as f:
            names = read_sidecar(where, f.n, f.d, f.l) or (None, None)  # only names stored
            return NdfRegions([(where, HEADER_SIZE, f.n)], f.n, f.d, f.l, *names)
    with open_ndf_dataset(where) as ds:
        regions: list[Region] = []
        for k, p in enumerate(ds.parts):
            ds.check_part(k)
            regions.append((os.path.join(where, p.name), HEADER_SIZE, p.n))
            if check is not None:
                check(k)
        return NdfRegions(regions, ds.n, ds.d, ds.l, ds.manifest.features, ds.manifest.labels)
