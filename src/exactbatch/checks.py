"""Checks of the ints and flags users pass: one message for each kind of mistake."""

from __future__ import annotations

import numpy as np

__all__ = ["check_flag", "check_int"]


def check_int(name: str, value, minimum: int) -> int:
    """``value`` as an int if it is a Python or NumPy integer >= ``minimum``.

    Anything else (a bool, a float, a string) is a ``TypeError``, too small a
    ``ValueError``; both name ``name``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int; got {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {name}={value}")
    return int(value)


def check_flag(name: str, value) -> bool:
    """``value`` as a bool if it is a ``bool`` or ``np.bool_``; else ``TypeError``
    (``shuffle="False"`` would otherwise be true)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool (True or False); got {value!r}")
    return bool(value)
