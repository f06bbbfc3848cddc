"""Dataset: n examples of d float64 features and l float64 labels, in memory."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from exactbatch.arrays import as_float64_2d

__all__ = ["Dataset"]


class Dataset:
    """n examples in memory: features ``x`` (n, d) and labels ``y`` (n, l).

    ``x`` must be 2-D; ``y`` 2-D, or 1-D meaning one label per row (l = 1),
    or None (l = 0, ``y`` has shape (n, 0)). Each may be any array-like that
    NumPy reads - a torch tensor, a pandas or polars DataFrame or Series -
    converted as :mod:`exactbatch.arrays` says. Both are stored as float64
    C-contiguous arrays; an input that already is one is used without a copy,
    so later writes to it show through.
    """

    __slots__ = ("x", "y")

    def __init__(self, x: ArrayLike, y: ArrayLike | None = None) -> None:
        x = as_float64_2d(x, "x")
        if y is None:
            y = np.empty((x.shape[0], 0), dtype=np.float64)
        else:
            y = as_float64_2d(y, "y", allow_1d=True)
        if y.shape[0] != x.shape[0]:
            raise ValueError(
                f"x and y must have the same number of rows; got x {x.shape} and y {y.shape}"
            )
        self.x = x
        self.y = y

    @property
    def n(self) -> int:
        return int(self.x.shape[0])

    @property
    def d(self) -> int:
        return int(self.x.shape[1])

    @property
    def l(self) -> int:  # noqa: E743 - the contract's name for the label width
        return int(self.y.shape[1])

    def __len__(self) -> int:
        return self.n

    def __repr__(self) -> str:
        return f"Dataset(n={self.n}, d={self.d}, l={self.l})"
