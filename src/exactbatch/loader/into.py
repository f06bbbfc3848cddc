"""``next_into``'s checks of the caller's buffers, in full, with the messages that name them.

:meth:`DataLoader.next_into` makes them on its first call, and on every call
whose buffers are not plain (the loader's dtype, no row ids); after one
passes, plain buffers take one check in C (``kernels.pair_check``).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from exactbatch.arrays import check_out_array
from exactbatch.feeds.base import Feed
from exactbatch.kernels import pair_check

__all__ = ["IntoChecks", "check_brows"]

Plain = tuple[int, int, int, int]  # (b, d, l, itemsize): what the one check in C takes


class IntoChecks:
    """A loader's ``next_into`` checks of its buffers against its feed's spec (the
    batch size, the dtypes, ``with_rows``: read once, they never change): :meth:`full`
    until plain buffers pass it, then ``fits(bx, by, *plain)``, one check in C
    (``plain``: the ``(b, d, l, itemsize)`` it takes once the widths are known, when
    batches are plain; else None). ``peek()`` reads ahead to learn a stream's widths."""

    __slots__ = ("b", "dt", "feed", "fits", "peek", "plain", "with_rows", "yt")

    def __init__(self, feed: Feed, peek: Callable[[], None]) -> None:
        spec = feed.spec
        self.feed, self.peek = feed, peek
        self.b, self.dt, self.with_rows = spec.batch_size, spec.dtype, spec.with_rows
        # label_dtype (class labels), or the batches' dtype itself: `yt is dt` is plain
        self.yt = spec.dtype if spec.output is None else spec.output.ydtype
        self.fits = pair_check()  # made once
        self.plain: Plain | None = None

    def full(
        self, bx: np.ndarray | None, by: np.ndarray | None, brows: np.ndarray | None
    ) -> np.ndarray | None:
        """``by`` (made when None and l = 0), or None when a stream has no chunk at all;
        once plain buffers passed, the next calls' one check is set (:attr:`plain`).
        Each buffer that does not fit is a ``TypeError`` naming it; a loader of
        ``even_batches="pad"`` a ``ValueError`` (next_into cannot hand out its padding)."""
        feed = self.feed
        if feed.spec.pad:
            raise ValueError(
                "next_into cannot hand out the padding batches of even_batches='pad' (it "
                "returns the rows written, and 0 means the end of the epoch): iterate with "
                "iter(loader), whose batches are (xb, yb, mask)"
            )
        d, l = feed.d, feed.l  # noqa: E741
        if d is None or l is None:  # a stream not read yet: read ahead to learn its widths
            self.peek()
            d, l = feed.d, feed.l  # noqa: E741
            if d is None or l is None:  # no chunk at all: the epoch is over before it began
                return None
        b, dt, yt = self.b, self.dt, self.yt
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
        elif not self.fits(bx, by, b, d, l, dt.itemsize):
            check_out_array(bx, (b, d), "bx", dt)  # says what is wrong
            check_out_array(by, (b, l), "by", dt)
        if brows is not None or self.with_rows:
            check_brows(brows, self.with_rows, b)
        elif yt is dt:
            self.plain = (b, d, l, dt.itemsize)
        return by


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
