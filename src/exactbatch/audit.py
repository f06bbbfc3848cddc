"""total_size: resolving N, the row count a minibatch likelihood is rescaled by."""

from __future__ import annotations

__all__ = ["resolve_random_access_total"]


def _check_total_size_kind(total_size) -> None:
    if total_size is None or total_size == "auto" and isinstance(total_size, str):
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
    _check_total_size_kind(total_size)
    if isinstance(total_size, int) and total_size != n:
        raise ValueError(
            f"total_size={total_size} disagrees with the source, which has n={n} rows; "
            'pass total_size="auto" (or the whole dataset\'s row count, not a shard\'s)'
        )
    return n
