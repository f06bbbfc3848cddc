"""``next_into``'s checks of the caller's buffers, in full, with the messages that name them.

:meth:`DataLoader.next_into` makes them on its first call, and on every call
whose buffers are not plain (the loader's dtype, no row ids); after one
passes, plain buffers take one check in C (``kernels.pair_check``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from exactbatch.arrays import check_out_array
from exactbatch.feeds.base import Feed
from exactbatch.kernels import pair_check

__all__ = ["IntoChecks", "Settings", "check_brows", "check_into"]

Plain = tuple[int, int, int, int]  # (b, d, l, itemsize): what the one check in C takes
Fits = Callable[[object, object, int, int, int, int], bool]  # kernels.pair_check's


class Settings(Protocol):
    """The loader's settings the checks read (a :class:`~exactbatch.DataLoader`)."""

    @property
    def dtype(self) -> np.dtype: ...

    @property
    def label_dtype(self) -> np.dtype: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def with_rows(self) -> bool: ...


class IntoChecks:
    """A loader's ``next_into`` checks: :meth:`full` until plain buffers pass it, then
    ``fits(bx, by, *plain)``, one check in C (``plain``: the ``(b, d, l, itemsize)``
    it takes once the widths are known, when batches are plain; else None)."""

    __slots__ = ("fits", "plain")

    def __init__(self) -> None:
        self.fits = pair_check()  # made once
        self.plain: Plain | None = None

    def full(
        self,
        feed: Feed,
        peek: Callable[[], None],
        bx: np.ndarray | None,
        by: np.ndarray | None,
        brows: np.ndarray | None,
        loader: Settings,
    ) -> np.ndarray | None:
        """:func:`check_into` with ``loader``'s settings: ``by``, or None when a stream
        has no chunk at all; once plain buffers passed, the next calls' one check is set."""
        by, plain = check_into(
            feed, peek, bx, by, brows, loader.dtype, loader.label_dtype, loader.batch_size,
            self.fits, loader.with_rows,
        )  # fmt: skip
        if plain is not None:
            self.plain = plain
        return by


def check_into(
    feed: Feed,
    peek: Callable[[], None],
    bx: np.ndarray | None,
    by: np.ndarray | None,
    brows: np.ndarray | None,
    dt: np.dtype,
    yt: np.dtype,
    b: int,
    fits: Fits,
    with_rows: bool,
) -> tuple[np.ndarray | None, Plain | None]:
    """``(by, plain)``: ``by`` (made when None and l = 0), or None when a stream has no
    chunk at all (``peek()`` reads ahead to learn a stream's widths); ``plain`` the
    ``(b, d, l, itemsize)`` the next calls' one check takes, or None. Each buffer that
    does not fit is a ``TypeError`` naming it; a loader of ``even_batches="pad"`` a
    ``ValueError`` (next_into cannot hand out its padding)."""
    if feed.spec.pad:
        raise ValueError(
            "next_into cannot hand out the padding batches of even_batches='pad' (it "
            "returns the rows written, and 0 means the end of the epoch): iterate with "
            "iter(loader), whose batches are (xb, yb, mask)"
        )
    d, l = feed.d, feed.l  # noqa: E741
    if d is None or l is None:  # a stream not read yet: read ahead to learn its widths
        peek()
        d, l = feed.d, feed.l  # noqa: E741
        if d is None or l is None:  # no chunk at all: the epoch is over before it began
            return None, None
    if bx is None or by is None:
        if bx is None or l:
            raise TypeError(
                f"next_into needs buffers bx ({dt}) of shape {(b, d)} and by ({yt}) of "
                f"shape {(b, l)} (by may be None only when l = 0)"
            )
        by = np.empty((b, 0), dtype=yt)
    if yt is not dt:  # class labels: by of label_dtype
        check_out_array(bx, (b, d), "bx", dt)
        check_out_array(by, (b, l), "by", yt)
    elif not fits(bx, by, b, d, l, dt.itemsize):
        check_out_array(bx, (b, d), "bx", dt)  # says what is wrong
        check_out_array(by, (b, l), "by", dt)
    if brows is not None or with_rows:
        check_brows(brows, with_rows, b)
        return by, None
    return by, ((b, d, l, dt.itemsize) if yt is dt else None)


def check_brows(brows: np.ndarray | None, with_rows: bool, b: int) -> None:
    """``next_into``'s third buffer: required with ``with_rows``, refused without."""
    shape = (b,)
    if not with_rows:
        raise TypeError(
            f"next_into got brows, but this DataLoader was built with with_rows=False: "
            f"build it with with_rows=True to have row ids written into an int64 array "
            f"of shape {shape}"
        )
    if brows is None:
        raise TypeError(
            f"next_into of a DataLoader with with_rows=True needs brows, an int64 array "
            f"of shape {shape} for the rows' ids: next_into(bx, by, brows)"
        )
    check_out_array(brows, shape, "brows", np.int64)
