"""total_size and the ledger: N, the row count a minibatch likelihood is
rescaled by, and the checks that every epoch hands out the rows it promised.

* N of a random-access source is exact; of a stream, ``"auto"`` takes the
  source's ``n_rows`` or counts the rows in one pass (:func:`count_total`,
  with a ``UserWarning`` naming the count), and a declared int is audited
  after every pass (:func:`audit_pass`: a :class:`TotalSizeWarning`, once,
  when the rows seen cannot be right).
* The ledger: :func:`check_ledger` raises :class:`ExactnessError` when the
  rows handed out in an epoch are not the rows it promised.

Warnings point at the first line outside exactbatch (the user's).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterator
from types import FrameType
from typing import TYPE_CHECKING

from exactbatch.checks import check_int
from exactbatch.errors import ExactnessError, TotalSizeWarning
from exactbatch.sources.chunks import Stream, close_iterator, normalize_chunk

if TYPE_CHECKING:  # (the order imports nothing of this module; no cycle at run time)
    from exactbatch.order.digest import Tally
    from exactbatch.order.shards import Shard

__all__ = [
    "audit_pass",
    "check_ledger",
    "check_total_size_kind",
    "count_total",
    "outside_window",
    "resolve_random_access_total",
    "resolve_stream_total",
]

# Frames of files under these prefixes are skipped by the warnings here as the package's
# own, so that a warning points at the user's line (Python 3.12's skip_file_prefixes).
# A tool that wraps the package's functions in code of its own adds its files' prefix.
SKIP_FILE_PREFIXES: tuple[str, ...] = (os.path.dirname(os.path.abspath(__file__)) + os.sep,)


def _warn(warning: Warning) -> None:
    """``warnings.warn(warning)`` pointing at the first frame outside the package (the
    first not under :data:`SKIP_FILE_PREFIXES`)."""
    frame: FrameType | None = sys._getframe(0)
    level = 1  # level 1: this frame, which calls warnings.warn
    while frame is not None and frame.f_code.co_filename.startswith(SKIP_FILE_PREFIXES):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)


def check_total_size_kind(total_size: object) -> None:
    """``total_size`` must be ``"auto"``, None or an int >= 0."""
    if total_size is None or (isinstance(total_size, str) and total_size == "auto"):
        return
    try:
        check_int("total_size", total_size, 0)
    except TypeError:
        raise TypeError(f'total_size must be "auto", None or an int; got {total_size!r}') from None


def resolve_random_access_total(total_size: object, n: int) -> int:
    """N for a random-access source of ``n`` rows: exact, whatever is declared.

    ``"auto"`` and ``None`` give ``n``; an int must equal ``n`` (the whole
    dataset's rows, not one shard's), else ``ValueError``.
    """
    check_total_size_kind(total_size)
    if isinstance(total_size, int) and total_size != n:
        raise ValueError(
            f"total_size={total_size} disagrees with the source, which has n={n} rows; "
            "pass total_size=\"auto\" (or the whole dataset's row count, not a shard's)"
        )
    return n


def resolve_stream_total(
    total_size: int | str | None, n_rows: int | None, count: Callable[[], int]
) -> int | None:
    """N for a stream whose source has ``n_rows`` rows (None: it does not say).

    ``"auto"`` gives ``n_rows``, or ``count()`` (a counting pass:
    :func:`count_total`); None stays None (unknown); an int is trusted (and
    audited after every pass) unless it disagrees with ``n_rows``: then
    ``ValueError``.
    """
    check_total_size_kind(total_size)
    if isinstance(total_size, str):  # "auto"
        return n_rows if n_rows is not None else count()
    if total_size is not None and n_rows is not None and total_size != n_rows:
        raise ValueError(
            f"total_size={total_size} disagrees with the source, which knows it has "
            f'n_rows={n_rows} rows (from its metadata); pass total_size="auto" '
            "(or the whole dataset's row count, not a shard's)"
        )
    return total_size


def count_total(stream: Stream) -> tuple[int, tuple[int, int] | None]:
    """``total_size="auto"`` on a stream without ``n_rows``: count its rows in one
    full pass, with a warning naming the count, and check that the stream
    restarts. ``(rows, (d, l))``, the widths None when no chunk came.
    No rows at all is a ``ValueError`` (declare ``total_size=0`` if right)."""
    rows, width = 0, None
    it = stream.open()
    try:
        for i, chunk in enumerate(it):
            x, y = normalize_chunk(chunk, i, width)
            width = (x.shape[1], y.shape[1])
            rows += x.shape[0]
    finally:
        close_iterator(it)
    _warn(
        UserWarning(
            f'total_size="auto": the source has no n_rows, so exactbatch counted its rows '
            f"with one full pass ({rows} rows). Pass total_size={rows} to skip the counting "
            "pass."
        )
    )
    if rows == 0:
        raise ValueError(
            "the source yielded no rows while counting: if it is really empty pass "
            "total_size=0; if it is a factory, check it returns a fresh iterator per call"
        )
    _probe_restart(stream, it, rows)
    return rows, width


def _probe_restart(stream: Stream, first: Iterator[object], first_pass_rows: int) -> None:
    """Check that ``stream`` yields a fresh pass with rows after the pass ``first``
    (rows, not values: a chunk of rows with no columns counts)."""
    second = stream.open()
    try:
        if second is first:
            raise ValueError(
                "the source returned the same iterator twice, so the counting pass used up "
                "the only pass it has: pass a zero-argument function that builds a fresh "
                "iterator on every call (or declare total_size=N to skip counting)"
            )
        for i, chunk in enumerate(second):
            x, _ = normalize_chunk(chunk, i, None)  # (y has as many rows as x)
            if x.shape[0]:
                return
        raise ValueError(
            f"the source yielded {first_pass_rows} rows while counting, then came back empty: "
            "it cannot restart, and every epoch must. Pass a zero-argument function that "
            "returns a fresh iterator on every call (or a re-iterable such as a list)"
        )
    finally:
        close_iterator(second)


def outside_window(expected: int, seen: int, batch_size: int) -> bool:
    """True when ``expected`` rows cannot be right after ``seen`` rows in full batches.

    A correct count satisfies seen <= N < seen + batch_size; with 10% slack
    either way, in exact integer arithmetic.
    """
    return 10 * expected < 9 * seen or 10 * expected >= 11 * (seen + batch_size)


def audit_pass(total_size: int, n: int, seen: int, batch_size: int, shard: Shard) -> bool:
    """After a full pass of a stream handed out ``seen`` rows in full batches: warn
    (:class:`TotalSizeWarning`) if ``n``, this ``shard``'s share of the declared
    ``total_size``, cannot be right. Whether it warned."""
    if not outside_window(n, seen, batch_size):
        return False
    share = (
        f"total_size={total_size}"
        if shard.count == 1
        else f"shard {shard.index}'s share of total_size={total_size} ({n} rows)"
    )
    _warn(
        TotalSizeWarning(
            f"{share} disagrees with the stream: a full pass handed out {seen} rows in "
            f"full batches of {batch_size} (a correct N satisfies seen <= N < seen + "
            f"batch_size). A likelihood rescaled by the wrong N is biased: pass the true "
            f'row count, or total_size="auto".'
        )
    )
    return True


def check_ledger(
    handed: Tally, promised: Tally, *, epoch: int, shard_index: int, num_shards: int
) -> None:
    """Raise :class:`ExactnessError` unless the rows ``handed`` out in an epoch (a
    :class:`~exactbatch.order.digest.Tally`) are the rows it ``promised``."""
    if handed == promised:
        return
    what = (
        "the same number of rows but not the same rows"
        if handed.rows == promised.rows
        else (f"{handed.rows - promised.rows:+d} rows")
    )
    raise ExactnessError(
        f"epoch {epoch} of shard {shard_index} of {num_shards}: handed out {handed.rows} rows "
        f"(digest {handed.digest:#018x}) but the epoch promised {promised.rows} rows "
        f"(digest {promised.digest:#018x}): {what}. Rows were skipped or repeated: a state "
        "from another run or forged, a source that changed during the epoch, or a bug "
        "(please report it)"
    )
