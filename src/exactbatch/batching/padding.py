"""``even_batches="pad"``: padding batches, and batches made full with a mask.

Under ``"pad"`` every shard hands out the same number of batches, the
largest shard's, and every batch has exactly ``batch_size`` rows, so that
every rank runs the same steps on the same shapes (XLA, all-reduce). An
epoch that runs out of real batches hands out :class:`PadJob` s: jobs of no
rows, whose ledger digest is that of the empty set, so the ledger, a state,
prefetch, threads and resume treat them as any batch and count no row for
them. :func:`masked` makes what the loader hands out of any batch: its real
rows first, then zero rows up to ``batch_size``, and a bool ``mask`` of
``batch_size`` (True for real rows) as the last element; row ids (where
the batch carries them) are -1 for padded rows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import lru_cache
from typing import Any

import numpy as np

from exactbatch.arrays import batch_pair

__all__ = ["PAD", "PadJob", "check_even_batches", "masked", "masked_group"]

PAD = "pad"

# masked()'s shape(): (d, l, dtype, label dtype, with_rows), asked for a padding batch
Shape = Callable[[], tuple[int, int, Any, Any, bool]]


def check_even_batches(value: object) -> bool | str:
    """``even_batches`` as given: ``False``, ``True`` (a ``bool`` or ``np.bool_``) or
    ``"pad"``; another string a ``ValueError``, anything else a ``TypeError``, each
    naming ``even_batches`` and what it accepts."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    accepted = "False, True or 'pad'"
    if isinstance(value, str):
        if value == PAD:
            return PAD
        raise ValueError(f"even_batches must be {accepted}; got {value!r}")
    raise TypeError(f"even_batches must be {accepted}; got {value!r}")


class PadJob:
    """Batch ``k`` of an epoch that holds no row of the source: a padding batch."""

    __slots__ = ("k",)
    size = 0
    digest = 0  # the empty set's
    rows = None

    def __init__(self, k: int) -> None:
        self.k = k

    def fill(self, out_x: np.ndarray, out_y: np.ndarray) -> None:
        """Nothing to write: it has no rows."""

    def fill_rows(self, out: np.ndarray) -> None:
        """Nothing to write: it has no rows."""

    def take(self) -> None:
        """None: :func:`masked` makes the batch (the job knows no widths)."""
        return None


@lru_cache(maxsize=8)
def _ones(b: int) -> np.ndarray:
    """A mask of ``b`` ones, never handed out (read-only): copied for each full batch."""
    ones = np.ones(b, dtype=bool)
    ones.flags.writeable = False
    return ones


def masked_group(
    batches: Iterable[tuple[np.ndarray, ...] | None], batch_size: int, shape: Shape
) -> list[tuple[np.ndarray, ...]]:
    """:func:`masked` of each of ``batches`` (a group's, in order)."""
    ones = _ones(batch_size)
    out: list[tuple[np.ndarray, ...]] = []
    for batch in batches:
        if batch is not None and batch[0].shape[0] == batch_size:  # (masked's, inlined)
            out.append((*batch, ones.copy()))
        else:
            out.append(masked(batch, batch_size, shape))
    return out


def masked(
    batch: tuple[np.ndarray, ...] | None, batch_size: int, shape: Shape
) -> tuple[np.ndarray, ...]:
    """``batch`` (``(x, y)`` or ``(x, y, rows)`` of up to ``batch_size`` rows; None for
    a :class:`PadJob`'s) as ``batch_size`` rows, then its mask (bool, True for real
    rows). ``shape()``: ``(d, l, dtype, label dtype, with_rows)``, asked only for a
    padding batch. A full batch is handed out as it is, with a mask of ones; a short
    one is copied into new arrays, zeros below its rows (row ids -1)."""
    b = batch_size
    if batch is None:
        d, l, dtype, ydtype, with_rows = shape()  # noqa: E741
        x, y = batch_pair(b, d, l, dtype, ydtype)
        x[...] = 0
        y[...] = 0
        out = (x, y, np.full(b, -1, dtype=np.int64)) if with_rows else (x, y)
        return (*out, np.zeros(b, dtype=bool))
    rows = batch[0].shape[0]
    if rows == b:  # (a copy of a kept mask of ones: a fifth of np.ones' cost)
        return (*batch, _ones(b).copy())
    mask = np.zeros(b, dtype=bool)
    mask[:rows] = True
    x, y = batch[0], batch[1]
    px, py = batch_pair(b, x.shape[1], y.shape[1], x.dtype, y.dtype)
    for src, dst in ((x, px), (y, py)):
        dst[:rows] = src
        dst[rows:] = 0
    if len(batch) > 2:
        ids = np.full(b, -1, dtype=np.int64)
        ids[:rows] = batch[2]
        return px, py, ids, mask
    return px, py, mask
