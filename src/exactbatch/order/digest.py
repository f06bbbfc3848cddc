"""Ledger digests: an order-independent fingerprint of a set of row ids.

A row id i hashes to h(i) = (K1*i + K2)**2 mod 2**64, and a set of rows to the
sum of its hashes mod 2**64: order-independent, and a difference of two
digests is the digest of the difference, so what a pass promised less what it
left out can be compared with what it handed out. h is a quadratic, so the
digest of a run of consecutive rows has a closed form (no pass over the rows);
a batch of scattered rows costs three passes (the sums of its ids and
of their squares).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "RangeDigests",
    "Tally",
    "batch_digests",
    "digest_terms",
    "range_batch_digests",
    "range_digest",
    "row_hashes",
    "rows_digest",
]

_MASK = (1 << 64) - 1
_K1 = 0x9E3779B97F4A7C15
_K2 = 0xD1B54A32D192ED03
_A, _B, _C = _K1 * _K1 & _MASK, 2 * _K1 * _K2 & _MASK, _K2 * _K2 & _MASK


def _prefix(m: int) -> int:
    """The digest of rows 0 .. m-1."""
    s1 = m * (m - 1) // 2
    s2 = (m - 1) * m * (2 * m - 1) // 6
    return (_A * s2 + _B * s1 + _C * m) & _MASK


def range_digest(start: int, stop: int) -> int:
    """The digest of rows ``start .. stop-1`` (0 for an empty range)."""
    return (_prefix(stop) - _prefix(start)) & _MASK if stop > start else 0


def digest_terms() -> tuple[int, int, int]:
    """``(a, b, c)``: a row id i hashes to a*i**2 + b*i + c (mod 2**64), so a batch's
    digest is a*sum(i**2) + b*sum(i) + c*count (what the compiled core's one-pass
    orders compute, :meth:`exactbatch.order.EpochBijection.whole_into`)."""
    return _A, _B, _C


def row_hashes(rows: np.ndarray | slice | list[int]) -> np.ndarray:
    """Each row id's hash, as uint64 (a new array)."""
    v = np.asarray(rows).astype(np.uint64)
    v *= np.uint64(_K1)
    v += np.uint64(_K2)
    v *= v
    return v


def rows_digest(rows: np.ndarray | slice | list[int]) -> int:
    """The digest of the row ids ``rows`` (an integer array or a slice of ids)."""
    if isinstance(rows, slice):
        return range_digest(rows.start, rows.stop)
    return int(row_hashes(rows).sum(dtype=np.uint64))


def batch_digests(rows: np.ndarray, batch_size: int) -> np.ndarray:
    """The digest of each batch of ``batch_size`` consecutive entries of ``rows``
    (the last may be shorter), as uint64."""
    n = len(rows)
    if not n:
        return np.zeros(0, dtype=np.uint64)
    # h(i) = A*i**2 + B*i + C (mod 2**64): a batch's digest from its sums of i and
    # i**2, three passes over the rows instead of a hash of each.
    u = rows if rows.dtype == np.uint64 else rows.astype(np.uint64)
    starts = np.arange(0, n, batch_size)
    s1 = np.add.reduceat(u, starts)
    s2 = np.add.reduceat(u * u, starts)
    count = np.diff(np.append(starts, n)).astype(np.uint64)
    out: np.ndarray = s2 * np.uint64(_A) + s1 * np.uint64(_B) + count * np.uint64(_C)
    return out


def range_batch_digests(start: int, n: int, batch_size: int) -> np.ndarray:
    """The digests of the batches of ``batch_size`` consecutive rows of ``start ..
    start + n - 1`` (the last may be shorter), as uint64: :class:`RangeDigests`'
    closed form, one array pass (the same values as :func:`batch_digests` of the
    rows)."""
    full, b = n // batch_size, batch_size
    out = np.empty(-(-n // b), dtype=np.uint64)
    one = RangeDigests(b)
    m = np.arange(full, dtype=np.uint64)
    m *= np.uint64(b)
    m += np.uint64(start)  # each full batch's first row (mod 2**64, as the digests)
    out[:full] = (np.uint64(one.a) * m + np.uint64(one.b)) * m + np.uint64(one.c)
    if full < len(out):
        out[full] = range_digest(start + full * b, start + n)
    return out


class RangeDigests:
    """Digests of runs of consecutive rows, fast for runs of one length: a full
    run of ``size`` rows from row m has the digest ((a*m + b)*m + c) mod 2**64."""

    __slots__ = ("a", "b", "c", "size")

    def __init__(self, size: int):
        s1, s2 = size * (size - 1) // 2, (size - 1) * size * (2 * size - 1) // 6
        self.size = size
        self.a = _A * size & _MASK
        self.b = (_A * size * (size - 1) + _B * size) & _MASK
        self.c = (_A * s2 + _B * s1 + _C * size) & _MASK

    def __call__(self, start: int, stop: int) -> int:
        if stop - start == self.size:
            return ((self.a * start + self.b) * start + self.c) & _MASK
        return range_digest(start, stop)


class Tally:
    """Rows and digest of a set of row ids: what a pass fed, dropped or left out,
    or what a loader handed out. The sum is reduced mod 2**64 when read, so
    adding a batch costs two integer additions."""

    __slots__ = ("_sum", "rows")

    def __init__(self, rows: int = 0, digest: int = 0):
        self.rows, self._sum = rows, digest

    @property
    def digest(self) -> int:
        return self._sum & _MASK

    def add(self, rows: int, digest: int) -> None:
        self.rows += rows
        self._sum += digest

    def add_range(self, start: int, stop: int) -> None:
        self.add(stop - start, range_digest(start, stop))

    def minus(self, other: Tally) -> Tally:
        return Tally(self.rows - other.rows, (self._sum - other._sum) & _MASK)

    def copy(self) -> Tally:
        """A copy that later additions to this one leave as it is."""
        return Tally(self.rows, self._sum)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Tally) and (self.rows, self.digest) == (other.rows, other.digest)

    def __repr__(self) -> str:
        return f"Tally(rows={self.rows}, digest={self.digest:#018x})"
