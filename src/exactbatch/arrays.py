"""Checks and conversions of the arrays users hand in."""

from __future__ import annotations

import numpy as np

__all__ = ["as_float64_2d", "check_out_array"]


def as_float64_2d(a, name: str, *, allow_1d: bool = False) -> np.ndarray:
    """Return ``a`` as a float64 C-contiguous 2-D array, copying only when needed.

    Bool, integer and float inputs are converted; anything else is a
    ``TypeError`` naming ``name``. A 1-D input becomes one column when
    ``allow_1d`` (labels), else it is a ``ValueError``.
    """
    arr = np.asarray(a)
    if arr.dtype.kind not in "biuf":
        raise TypeError(
            f"{name} must hold real numbers (bool, int or float); got dtype {arr.dtype}"
        )
    if arr.ndim == 1 and allow_1d:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        want = "2-D (n, l) or 1-D (n,)" if allow_1d else "2-D (n, d)"
        raise ValueError(f"{name} must be {want}; got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def check_out_array(out, shape: tuple[int, ...], name: str) -> np.ndarray:
    """``out`` if it is a writeable float64 C-contiguous array of ``shape``.

    None gets a new array. A wrong kind or dtype is a ``TypeError``; a wrong
    shape or layout a ``ValueError``; both name ``name`` and the expected shape.
    """
    if out is None:
        return np.empty(shape, dtype=np.float64)
    if not isinstance(out, np.ndarray):
        raise TypeError(
            f"{name} must be a float64 NumPy array of shape {shape}; got {type(out).__name__}"
        )
    if out.dtype != np.float64:
        raise TypeError(f"{name} must have dtype float64 and shape {shape}; got dtype {out.dtype}")
    if out.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got {out.shape}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError(f"{name} must be a writeable C-contiguous array of shape {shape}")
    return out
