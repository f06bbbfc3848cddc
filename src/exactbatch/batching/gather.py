"""What both shuffle-buffer algorithms share: buffers, row ids, and batches
gathered out of a permuted buffer.

Batches are gathered several at a time (up to about 8 MiB, 1/8 of the
rows; one call of :func:`exactbatch.kernels.gather`, which casts to the
loader's dtype as it copies), each batch a view of its group, so a batch
is never a view of the buffer itself, which the next fill overwrites. Each row's id rides beside
it (8 bytes a row) and is summed into its batch's ledger digest
(:mod:`exactbatch.order.digest`).

Filling the buffer stays a NumPy slice assignment (contiguous rows: already
one memcpy), and the digests stay :func:`~exactbatch.order.digest.batch_digests`
(three vectorised passes a group, a small share of the gather): neither
would gain from the compiled core.
"""

from __future__ import annotations

import numpy as np

from exactbatch.kernels import gather
from exactbatch.order.digest import batch_digests, rows_digest

__all__ = ["buffer_arrays", "drain", "gathered", "row_ids"]

_GROUP_BYTES = 8 << 20  # batches are gathered from the buffer up to this much at a time


def gathered(bx, by, bh, rows, b, dtype=np.float64):
    """Batches of ``b`` of buffered ``rows`` (a whole number of batches), as ``dtype``:
    gathered several at a time (up to about 8 MiB, 1/8 of the rows), each batch a view."""
    group = max(1, min(_GROUP_BYTES // (8 * max(1, bx.shape[1] + by.shape[1])), len(rows) // 8))
    group = max(b, group // b * b)
    for a in range(0, len(rows), group):
        idx = rows[a : a + group]
        gx, gy = gather(bx, by, idx, dtype)
        digests = batch_digests(bh.take(idx), b).tolist()
        for j, c in enumerate(range(0, gx.shape[0], b)):
            yield gx[c : c + b], gy[c : c + b], digests[j]
        del gx, gy


def drain(vx, vy, vh, perm, b, final, drop_last, dropped, dtype=np.float64):
    """Yield the full batches of the buffered rows ``vx``/``vy`` (ids ``vh``)
    in the order ``perm`` (a permutation of their row numbers), as ``dtype``;
    if ``final``, the rows left (fewer than a batch) are the last batch (none
    with ``drop_last``: counted in ``dropped``), else their row numbers are
    returned to keep."""
    full = vx.shape[0] // b * b
    yield from gathered(vx, vy, vh, perm[:full], b, dtype)
    rest = perm[full:]
    if not final:
        return rest
    if len(rest):
        digest = rows_digest(vh.take(rest))
        if not drop_last:
            yield *gather(vx, vy, rest, dtype), digest
        elif dropped is not None:
            dropped.add(len(rest), digest)
    return rest[:0]


def buffer_arrays(spare, rows: int, d: int, l: int):  # noqa: E741
    """``(bx, by, bh)`` of ``rows`` rows: the one in ``spare`` (emptied) if it fits."""
    if spare:
        bx, by, bh = spare.pop()
        if bx.shape[0] >= rows and bx.shape[1] == d and by.shape[1] == l:
            return bx, by, bh
    return (
        np.empty((rows, d), dtype=np.float64),
        np.empty((rows, l), dtype=np.float64),
        np.empty(rows, dtype=np.uint64),
    )


def row_ids(id0: int, pos: int, take: int) -> np.ndarray:
    """The ids of rows ``pos .. pos + take - 1`` of a chunk whose first row is ``id0``."""
    return np.arange(id0 + pos, id0 + pos + take, dtype=np.uint64)
