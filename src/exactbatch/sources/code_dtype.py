"""Which output dtype holds a categorical column's codes exactly (``categorical=``)."""

from __future__ import annotations

from collections.abc import Mapping, Sized
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (numpy is imported where it is used)
    from numpy.typing import DTypeLike

__all__ = ["check_code_dtype"]


def check_code_dtype(
    categories: Mapping[str, Sized], dtype: DTypeLike, where: str = "dtype"
) -> None:
    """Refuse (``ValueError`` naming ``where``, the column and its count) a floating
    ``dtype`` that cannot hold every code of ``categories`` (``{column: [values]}``)
    exactly: codes run to k - 1, and float32 holds every integer up to 2**24 only
    (float16: 2**11); past it two categories would share a code."""
    import numpy as np

    dt = np.dtype(dtype)
    if dt.kind != "f" or not categories:
        return
    exact = 2 ** (np.finfo(dt).nmant + 1)
    big = {c: len(v) for c, v in categories.items() if len(v) - 1 > exact}
    if big:
        c, k = next(iter(big.items()))
        raise ValueError(
            f"{where}={dt}: column {c!r} has {k:,} categories, whose codes up to {k - 1:,} "
            f"{dt} cannot hold exactly (integers up to 2**{exact.bit_length() - 1} only): "
            "two categories would get one code; load it with dtype=np.float64"
        )
