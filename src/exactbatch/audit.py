"""total_size: resolving N, the row count a minibatch likelihood is rescaled by."""

from __future__ import annotations

from exactbatch.errors import ExactnessError
from exactbatch.sources.chunks import close_iterator

__all__ = [
    "check_ledger",
    "check_total_size_kind",
    "count_rows",
    "outside_window",
    "probe_restart",
    "resolve_random_access_total",
]


def check_total_size_kind(total_size) -> None:
    if total_size is None or (isinstance(total_size, str) and total_size == "auto"):
        return
    if isinstance(total_size, bool) or not isinstance(total_size, int):
        raise TypeError(f'total_size must be "auto", None or an int; got {total_size!r}')
    if total_size < 0:
        raise ValueError(f"total_size must be >= 0; got total_size={total_size}")


def resolve_random_access_total(total_size, n: int) -> int:
    """N for a random-access source of ``n`` rows: exact, whatever is declared.

    ``"auto"`` and ``None`` give ``n``; an int must equal ``n`` (the whole
    dataset's rows, not one shard's), else ``ValueError``.
    """
    check_total_size_kind(total_size)
    if isinstance(total_size, int) and total_size != n:
        raise ValueError(
            f"total_size={total_size} disagrees with the source, which has n={n} rows; "
            'pass total_size="auto" (or the whole dataset\'s row count, not a shard\'s)'
        )
    return n


def count_rows(stream, normalize):
    """One full pass over ``stream``: (rows, (d, l) or None, the iterator read)."""
    rows, width = 0, None
    it = stream.open()
    try:
        for i, chunk in enumerate(it):
            x, y = normalize(chunk, i, width)
            width = (x.shape[1], y.shape[1])
            rows += x.shape[0]
    finally:
        close_iterator(it)
    return rows, width, it


def probe_restart(stream, first, first_pass_rows: int, normalize) -> None:
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
            if normalize(chunk, i, None)[0].shape[0]:
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


def check_ledger(handed, promised, *, epoch: int, shard_index: int, num_shards: int) -> None:
    """Raise :class:`ExactnessError` unless the rows ``handed`` out in an epoch (a
    :class:`~exactbatch.order.digest.Tally`) are the rows it ``promised``."""
    if handed == promised:
        return
    what = "the same number of rows but not the same rows" if handed.rows == promised.rows else (
        f"{handed.rows - promised.rows:+d} rows"
    )
    raise ExactnessError(
        f"epoch {epoch} of shard {shard_index} of {num_shards}: handed out {handed.rows} rows "
        f"(digest {handed.digest:#018x}) but the epoch promised {promised.rows} rows "
        f"(digest {promised.digest:#018x}): {what}. Rows were skipped or repeated: a state "
        "from another run or forged, a source that changed during the epoch, or a bug "
        "(please report it)"
    )
