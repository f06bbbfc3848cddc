"""Subsets of a random-access source: the row ids a loader serves (``rows=``).

A subset is a 1-D array of distinct row ids of a source of ``n`` rows, in the
order the loader treats as the subset's own (position ``p`` of the subset is
source row ``ids[p]``). :func:`check_subset` validates one once, and keeps a
private read-only copy of it (the caller's array may change later: the
loader's orders must not). What it costs: one sort of the ids (for the
duplicate check) and 4 or 8 bytes a row for the copy; the data itself is
never copied - batches gather the source's rows through the map.
"""

from __future__ import annotations

import hashlib

import numpy as np

__all__ = ["check_subset", "subset_digest"]


def check_subset(rows: object, n: int, name: str = "rows") -> np.ndarray:
    """``rows`` as a read-only int array (int32 when ``n`` < 2**31, else int64) of
    distinct ids in ``[0, n)``.

    A non-integer dtype (floats, bools: pass ``np.flatnonzero(mask)``) is a
    ``TypeError``; an array that is not 1-D, or an id given twice, a
    ``ValueError``; an id below 0 or at least ``n`` an ``IndexError``. Each
    names ``name`` and the offending value.
    """
    try:
        ids = np.asarray(rows)
    except (TypeError, ValueError) as e:
        raise TypeError(f"{name} must be a 1-D array of integer row ids; {e}") from None
    if ids.size == 0 and ids.dtype.kind == "f":  # np.asarray([]) is float64: no ids at all
        ids = ids.astype(np.int64)
    if ids.dtype.kind not in "iu":
        hint = " (for a boolean mask, pass np.flatnonzero(mask))" if ids.dtype.kind == "b" else ""
        raise TypeError(f"{name} must be integer row ids; got dtype {ids.dtype}{hint}")
    if ids.ndim != 1:
        raise ValueError(f"{name} must be a 1-D array of row ids; got shape {ids.shape}")
    if ids.size:
        lo, hi = int(ids.min()), int(ids.max())
        if lo < 0 or hi >= n:
            bad = lo if lo < 0 else hi
            at = int(np.flatnonzero(ids == bad)[0])
            raise IndexError(
                f"{name}[{at}] = {bad} is out of range for a source of n={n} rows "
                f"(row ids are 0 .. {n - 1})"
            )
    dtype = np.int32 if n < 2**31 else np.int64
    out = np.array(ids, dtype=dtype)  # a copy of our own, whatever the caller does later
    if out.size > 1:
        ordered = np.sort(out)
        same = np.flatnonzero(ordered[1:] == ordered[:-1])
        if same.size:
            twice = ordered[same[:5]].tolist()
            raise ValueError(
                f"{name} must hold each row id once; {same.size} id(s) appear more than "
                f"once, e.g. {twice}"
            )
    out.flags.writeable = False
    return out


def subset_digest(ids: np.ndarray) -> str:
    """A hex digest of the subset: its ids, in order (the order is the subset's own:
    it fixes which rows the loader's positions map to)."""
    return hashlib.blake2b(
        np.ascontiguousarray(ids, dtype="<i8").tobytes(), digest_size=16
    ).hexdigest()
