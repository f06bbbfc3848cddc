"""Checks and conversions of the arrays users hand in, and the arrays batches are made in.

Array-likes are read as NumPy sees them (``np.asarray``), found by duck
typing so that NumPy stays the only dependency: torch, pandas and polars
are never imported here. Two kinds get care of their own:

* a torch tensor that requires grad is detached (a loader's batches are new
  arrays, so no gradient could flow through them anyway); one on another
  device than the CPU is a ``TypeError`` asking for ``.cpu()``, since rows
  are read from host memory;
* a pandas or polars DataFrame is read column by column into one float64
  array, so columns of mixed bool, int and float types convert as NumPy
  converts each (``np.asarray`` of a mixed pandas frame gives ``object``);
  non-numeric columns are a ``TypeError`` naming them.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from numpy.typing import DTypeLike

__all__ = [
    "ALIGN",
    "as_float64_2d",
    "as_numpy",
    "batch_pair",
    "byte_view",
    "check_out_array",
    "is_array_like",
]

_REAL = "biuf"  # dtype kinds of real numbers: bool, signed, unsigned, float

# Bytes: a cache line, and the alignment at which XLA's CPU client aliases host
# memory instead of copying it (NumPy aligns only to 16).
ALIGN = 64


def batch_pair(
    rows: int,
    d: int,
    l: int,  # noqa: E741
    dtype: DTypeLike,
    ydtype: DTypeLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """New uninitialised C-contiguous ``(rows, d)`` and ``(rows, l)`` arrays of
    ``dtype`` (y of ``ydtype`` when given: class labels), each starting on an
    ``ALIGN``-byte boundary (one allocation holds both), so that ``jax.device_put``
    on a CPU aliases a batch rather than copy it."""
    dt = np.dtype(dtype)
    yt = dt if ydtype is None else np.dtype(ydtype)
    x_bytes = rows * d * dt.itemsize
    at_y = -(-x_bytes // ALIGN) * ALIGN  # x padded to whole lines
    raw = np.empty(at_y + rows * l * yt.itemsize + ALIGN, dtype=np.uint8)
    at = -ctypes.addressof(ctypes.c_char.from_buffer(raw.data)) % ALIGN  # cheaper than .ctypes
    return (
        np.ndarray((rows, d), dt, raw, at),
        np.ndarray((rows, l), yt, raw, at + at_y),
    )


def byte_view(a: Any) -> memoryview:  # (NumPy's arrays are no Buffer to mypy for 3.10)
    """The bytes of ``a`` (a C-contiguous array, or any buffer) as a flat memoryview, for
    ``readinto``/``write``; an empty one when it holds no bytes (a cast refuses those)."""
    view = memoryview(a)
    return view.cast("B") if view.nbytes else memoryview(b"")


def is_array_like(a: object) -> bool:
    """Whether NumPy views ``a`` as an array: an ndarray, or an object with
    ``__array__`` or the array interface (a torch tensor, a DataFrame, ...).

    A list is not one: a list of arrays is a sequence of chunks."""
    return isinstance(a, np.ndarray) or any(
        hasattr(a, attr) for attr in ("__array__", "__array_interface__", "__array_struct__")
    )


def _library(a: object) -> str | None:
    """``"pandas"`` or ``"polars"`` for their DataFrames (or subclasses), ``"torch"`` for
    a tensor, else None; from the class's module, without importing anything."""
    for cls in type(a).__mro__:
        root = cls.__module__.partition(".")[0]
        if cls.__name__ == "DataFrame" and root in ("pandas", "polars"):
            return root
        if cls.__name__ == "Tensor" and root == "torch":
            return root
    return None


def _frame_to_float64(df: Any, kind: str, name: str) -> np.ndarray:  # (untyped libraries)
    """A DataFrame's columns, each as NumPy converts it, in one float64 (n, k) array."""
    # polars: get_columns(); pandas: items() (also when a column name repeats)
    named = [(s.name, s) for s in df.get_columns()] if kind == "polars" else list(df.items())
    arrays = [np.asarray(col) for _, col in named]
    bad = [
        f"{label!r} ({getattr(col, 'dtype', arr.dtype)})"
        for (label, col), arr in zip(named, arrays, strict=True)
        if arr.dtype.kind not in _REAL
    ]
    if bad:
        raise TypeError(
            f"{name} is a DataFrame with non-numeric column(s) {', '.join(bad)}; every "
            "column must hold real numbers (bool, int or float): select or encode them first"
        )
    out = np.empty((df.shape[0], len(arrays)), dtype=np.float64)
    for j, arr in enumerate(arrays):
        out[:, j] = arr
    return out


def as_numpy(a: Any, name: str) -> np.ndarray:  # (a tensor, a frame: untyped libraries)
    """``a`` as ``np.asarray`` views it, with the care the module docstring describes.

    What cannot be read as an array at all is a ``TypeError`` naming ``name``; a
    ragged sequence (rows of different lengths) is a ``ValueError`` naming it.
    """
    if isinstance(a, np.ndarray):
        return a
    kind = _library(a)
    if kind in ("pandas", "polars"):
        return _frame_to_float64(a, kind, name)
    if kind == "torch":
        if a.requires_grad:
            a = a.detach()
        if a.device.type != "cpu":
            raise TypeError(
                f"{name} is a torch tensor on {a.device}; exactbatch reads rows from host "
                f"memory: pass {name}.cpu()"
            )
    try:
        return np.asarray(a)
    except (TypeError, RuntimeError) as e:  # e.g. a bfloat16 tensor, a CuPy array
        raise TypeError(f"{name} cannot be read as a NumPy array: {e}") from e
    except ValueError as e:  # ragged: sequences of different lengths or shapes
        hint = ""
        if isinstance(a, (tuple, list)) and any(
            isinstance(v, tuple) or getattr(v, "ndim", 0) >= 2 for v in a
        ):  # chunks, not rows
            hint = (
                " (a source that is a tuple of two is an (x, y) pair: pass a sequence of "
                "(x, y) chunks as a list)"
            )
        raise ValueError(
            f"{name} must be a rectangular array of numbers, but its rows differ in length "
            f"or shape: {e}{hint}"
        ) from e


def as_float64_2d(a: object, name: str, *, allow_1d: bool = False) -> np.ndarray:
    """Return ``a`` as a float64 C-contiguous 2-D array, copying only when needed.

    ``a`` is any array-like (see :func:`as_numpy`). Bool, integer and float
    inputs are converted; anything else is a ``TypeError`` naming ``name``.
    A 1-D input becomes one column when ``allow_1d`` (labels), else it is a
    ``ValueError``.
    """
    arr = as_numpy(a, name)
    if arr.dtype.kind not in _REAL:
        raise TypeError(
            f"{name} must hold real numbers (bool, int or float); got dtype {arr.dtype}"
        )
    if arr.ndim == 1 and allow_1d:
        arr = arr.reshape(-1, 1)
    if arr.ndim != 2:
        want = "2-D (n, l) or 1-D (n,)" if allow_1d else "2-D (n, d)"
        raise ValueError(f"{name} must be {want}; got shape {arr.shape}")
    return np.ascontiguousarray(arr, dtype=np.float64)


def check_out_array(
    out: object, shape: tuple[int, ...], name: str, dtype: DTypeLike = np.float64
) -> np.ndarray:
    """``out`` if it is a writeable C-contiguous array of ``shape`` and ``dtype``
    (float64 unless told).

    None gets a new array. A wrong kind or dtype is a ``TypeError``; a wrong
    shape or layout a ``ValueError``; both name ``name`` and the expected shape.
    """
    dt = np.dtype(dtype)
    if out is None:
        return np.empty(shape, dtype=dt)
    if not isinstance(out, np.ndarray):
        raise TypeError(
            f"{name} must be a {dt} NumPy array of shape {shape}; got {type(out).__name__}"
        )
    if out.dtype != dt:
        raise TypeError(f"{name} must have dtype {dt} and shape {shape}; got dtype {out.dtype}")
    if out.shape != shape:
        raise ValueError(f"{name} must have shape {shape}; got {out.shape}")
    if not (out.flags.c_contiguous and out.flags.writeable):
        raise ValueError(f"{name} must be a writeable C-contiguous array of shape {shape}")
    return out
