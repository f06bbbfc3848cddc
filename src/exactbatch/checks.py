"""Checks of the int, flag and dtype arguments of the public surface, with one wording.

* An int argument takes a Python or NumPy integer; a bool (an ``int`` to
  Python, but never meant as a count), a float (even ``3.0``) or a string is
  a ``TypeError``; one below its minimum a ``ValueError``, and so is one
  above its maximum: unless told, :data:`INT_MAX` (2**63 - 1), since every
  count and size is an int64 (a seed takes any size).
* A flag takes ``bool`` or ``np.bool_`` only: ``shuffle="False"`` would be
  true to ``bool()``, and ``0``/``1`` hide a swapped argument, so anything
  else is a ``TypeError``.
* A dtype (of the batches) is float64 or float32 (:data:`DTYPES`): another
  dtype is a ``ValueError``, what is no dtype at all a ``TypeError``.

Each names the argument and shows the value.
"""

from __future__ import annotations

from typing import Any, Literal, overload

import numpy as np
from numpy.typing import DTypeLike

__all__ = ["DTYPES", "INT_MAX", "check_dtype", "check_flag", "check_int"]

INT_MAX = 2**63 - 1  # the largest int argument (counts and sizes are int64s) unless told

DTYPES = (np.dtype(np.float64), np.dtype(np.float32))  # the dtypes a loader's batches may have


@overload
def check_int(
    name: str,
    value: Any,
    minimum: int | None = None,
    *,
    optional: Literal[False] = False,
    maximum: int | None = INT_MAX,
) -> int: ...
@overload
def check_int(
    name: str,
    value: Any,
    minimum: int | None = None,
    *,
    optional: bool,
    maximum: int | None = INT_MAX,
) -> int | None: ...
def check_int(
    name: str,
    value: Any,
    minimum: int | None = None,
    *,
    optional: bool = False,
    maximum: int | None = INT_MAX,
) -> int | None:
    """``value`` as a Python int if it is an integer (not a bool) ``>= minimum`` and
    ``<= maximum``.

    ``minimum=None`` checks the kind only (and ``maximum=None`` sets no ceiling: a
    seed); ``optional=True`` lets None through.
    """
    if optional and value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int; got {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {name}={value}")
    if maximum is not None and value > maximum:
        limit = "2**63 - 1" if maximum == INT_MAX else str(maximum)
        raise ValueError(f"{name} must be <= {limit}; got {name}={value}")
    return int(value)


def check_flag(name: str, value: object) -> bool:
    """``value`` as a Python bool if it is a ``bool`` or ``np.bool_``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool; got {value!r}")
    return bool(value)


def check_dtype(dtype: DTypeLike) -> np.dtype:
    """``dtype`` as a NumPy dtype if it is float64 or float32, else a ``ValueError``
    naming the argument (a ``TypeError`` for what is no dtype at all)."""
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"dtype must be np.float64 or np.float32; got {dtype!r}") from e
    if dt not in DTYPES:
        raise ValueError(f"dtype must be np.float64 or np.float32; got {dt}")
    return dt
