"""Epoch orders computed position by position: a keyed bijection, nothing stored.

The trade-off: instead of paying 8n bytes and O(n) time up front for a stored
permutation, each position's row is computed when it
is asked for - O(1) memory and construction (about 20 us, whatever n is), at
a per-position cost: about 35 us per 4096 positions on the 2-core test
machine, against 80-100 us per 4096 rows amortized for
``np.random.default_rng(0).permutation(4_000_000)``. A loader over
n = 10**10 rows is ready at once and holds a few hundred bytes of keys. Each
call has a fixed cost of about 14 us (some 35 NumPy calls) and blocks past
~8192 positions fall out of cache, so ask for a few thousand positions at a
time and slice batches out of them.

What it promises:

* An exact bijection of ``range(n)`` for every 0 <= n < 2**63: position i
  maps to exactly one row and every row is hit once.
* A pure function of ``(n, seed, epoch, shard)``: nothing depends on history,
  the order in which positions are asked for, or how they are split into
  calls (``rows(0, n)`` equals any concatenation of ``rows(a, b)``).
* Not exactly uniform over all n! orders (no O(1)-memory construction is),
  but statistically close, as measured: for each position, every row equally
  likely (chi-square over 3000 keys, every n in 2..64); pairs of positions
  uniform over pairs of rows; all orders of n <= 6 equally likely; odd and
  even permutations equally likely; consecutive epochs, seeds and
  neighbouring shards uncorrelated (|r| ~ 1/sqrt(n)); in one epoch, the gaps
  between the rows of positions p and p + lag repeat as often as for a
  uniformly random permutation (n = 2**18 .. 2**62).

How: the domain is a rectangle of ``p * q >= n`` cells, q close to sqrt(n),
chosen among up to 1024 candidates to leave the fewest cells past n (often
none; in a sample of 3000 sizes at most 1.2e-4 of them for n >= 2**16, 8e-6
for n >= 2**20). A position x is the pair ``(x // q, x % q)``; a Feistel
network on the pair alternately adds, modulo p or q, a keyed hash of the
other half. Each round is invertible whatever the hash, so the whole is a
bijection of the rectangle; cycle walking (re-apply until the value falls
below n, only for the few still out of range) restricts it to ``range(n)``.
A power-of-two domain would leave up to half its cells past n, and walking a
batch's stragglers home takes a dozen passes: 220-270 us per 4096 positions.
The round hash squares a keyed odd multiple of its input mod 2**64 and keeps
the top bits: a quadratic, so no lattice structure, which a linear
multiply-shift hash leaves behind (gaps between neighbouring rows repeating
hundreds of times too often at n = 10**10, even with six rounds). Four rounds suffice when
both halves have at least 256 values; small domains need more rounds to mix
(8, or 16 when a half has under 4 values), which costs nothing there. One key
bit swaps positions 0 and 1 first, so that odd permutations are reached also
when p and q are both odd (a round modulo an odd number is always an even
permutation). All arithmetic is vectorised uint64 NumPy, seven in-place
operations per round. With the compiled core (:mod:`exactbatch.kernels`) the
same arithmetic runs position by position in C, the divisions by invariant
divisors done as NumPy does them (a multiply and shifts): exactly the same rows.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from exactbatch import kernels
from exactbatch.order.digest import digest_terms
from exactbatch.order.keys import check_key

__all__ = ["EpochBijection", "epoch_rows"]

_TAG_BIJECTION = 0x65786665  # keyed bijections of random-access epochs
_MAX_N = (1 << 63) - 1  # positions and rows are int64
_WINDOW = 1024  # candidate widths q tried just below sqrt(n)
_MAX_ROUNDS = 16
_U64 = np.uint64


def _rectangle(n: int) -> tuple[int, int]:
    """``(p, q)`` with ``p * q >= n``, q <= p, q near sqrt(n), fewest cells past n."""
    if n <= 2:
        return max(n, 1), 1
    root = math.isqrt(n)
    hi = max(root, 2)  # n = 3: a 2 x 2 domain, so that both halves mix
    lo = max(2, root - _WINDOW + 1, (root + 1) // 2)  # keep the halves within 2x
    q = np.arange(lo, hi + 1, dtype=np.uint64)
    spare = (q - _U64(n) % q) % q  # p*q - n for p = ceil(n/q)
    best = len(q) - 1 - int(np.argmin(spare[::-1]))  # ties: the most balanced
    q_best = int(q[best])
    return -(-n // q_best), q_best


def _rounds_for(p: int, q: int) -> int:
    half = min(p, q)
    return 4 if half >= 256 else 8 if half >= 4 else _MAX_ROUNDS


def _compiled(n: int, q: int, swap01: bool, plan: Sequence[tuple[Any, ...]]) -> Any:
    """The same bijection in the compiled core, when it is the backend in use
    (:func:`exactbatch.kernels.core`), else None: ``plan`` is the rounds'
    ``(into_high, key, mult, mod, divisor)``; ``rows(start, out)`` fills a 1-D int64
    ``out`` with the rows of positions ``start ..``, ``map(positions)`` maps a 1-D 64-bit
    array in place, with the GIL released."""
    core = kernels.core()
    if core is None:
        return None
    return core.bijection(n, q, swap01, [tuple(int(v) for v in step) for step in plan])


class EpochBijection:
    """The row at each position of epoch ``epoch`` of shard ``shard``: a keyed bijection.

    ``bij(positions)`` maps an integer array of positions in ``[0, n)`` to
    their rows (int64, same shape); ``bij.rows(start, stop)`` gives the rows
    of positions ``start..stop-1``. Immutable and thread-safe: no buffers are
    shared between calls. See the module docstring for what it promises.
    """

    __slots__ = ("n", "seed", "epoch", "shard", "p", "q", "rounds", "_swap01", "_plan", "_c")

    def __init__(self, n: int, *, seed: int, epoch: int, shard: int = 0) -> None:
        check_key(n=n)
        if n > _MAX_N:
            raise ValueError(f"n must be < 2**63 (positions are int64); got n={n}")
        check_key(seed=seed, epoch=epoch, shard=shard)
        self.n, self.seed, self.epoch, self.shard = int(n), int(seed), int(epoch), int(shard)
        self.p, self.q = _rectangle(self.n)
        self.rounds = _rounds_for(self.p, self.q)
        ss = np.random.SeedSequence([_TAG_BIJECTION, self.seed, self.epoch, self.shard])
        words = ss.generate_state(2 * _MAX_ROUNDS + 1, dtype=np.uint64)
        self._swap01 = self.n >= 2 and bool(words[-1] & _U64(1))
        plan = []
        for i in range(self.rounds):
            into_high = i % 2 == 0  # even rounds add into x // q (mod p), odd into x % q
            mod = self.p if into_high else self.q
            if mod == 1:
                continue  # a half with one value never changes
            divisor = -(-(1 << 64) // mod)  # h // divisor is in [0, mod) for every u64 h
            plan.append(
                (into_high, words[2 * i], words[2 * i + 1] | _U64(1), _U64(mod), _U64(divisor))
            )
        self._plan = tuple(plan)
        self._c = _compiled(self.n, self.q, self._swap01, plan) if self.n else None

    def __repr__(self) -> str:
        return (
            f"EpochBijection(n={self.n}, seed={self.seed}, epoch={self.epoch}, shard={self.shard})"
        )

    def __call__(self, positions: np.ndarray | int | list[int]) -> np.ndarray:
        """Rows (int64, the shape of ``positions``) at ``positions``, each in ``[0, n)``."""
        pos = np.asarray(positions)
        if pos.dtype.kind not in "iu":
            raise TypeError(f"positions must be integers; got an array of dtype {pos.dtype}")
        flat = pos.reshape(-1)
        x = flat.astype(np.uint64)  # a copy: the caller's array is never written
        if x.size and x.max() >= _U64(self.n):  # negatives wrap to huge values
            bad = flat[(flat < 0) | (x >= _U64(self.n))][0]
            raise IndexError(f"position {bad} is out of range [0, n) = [0, {self.n})")
        if self._c is not None:
            self._c.map(x)
            return x.view(np.int64).reshape(pos.shape)
        if self._swap01:
            np.bitwise_xor(x, x < 2, out=x)
        return self._walk(self._permute(x)).view(np.int64).reshape(pos.shape)

    def rows(self, start: int, stop: int) -> np.ndarray:
        """Rows (int64) of positions ``start..stop-1``; ``0 <= start <= stop <= n``."""
        check_key(start=start, stop=stop)
        if start > stop:
            raise ValueError(f"start must be <= stop; got start={start}, stop={stop}")
        if stop > self.n:
            raise IndexError(f"stop={stop} is past the last position; n={self.n}")
        if self._c is not None:
            out = np.empty(stop - start, dtype=np.int64)
            self._c.rows(start, out)
            return out
        x = np.arange(start, stop, dtype=np.uint64)
        if self._swap01 and start < 2:
            x[: 2 - start] ^= _U64(1)
        return self._walk(self._permute(x)).view(np.int64)

    def whole_into(self, out: np.ndarray, batch_size: int, offset: int = 0) -> np.ndarray | None:
        """``out`` (int32 or int64, r <= n values) set to ``offset`` + the rows of
        positions 0 .. r-1, and the ledger digests of its batches of ``batch_size``
        (:func:`exactbatch.order.digest.batch_digests` of ``out``), computed in one pass
        in the compiled core; None (``out`` untouched) where it is not in use: the
        caller then maps and digests block by block, the same values."""
        if self._c is None or not len(out):
            return None
        digests = np.empty(-(-len(out) // batch_size), dtype=np.uint64)
        self._c.whole(out, digests, batch_size, offset, *digest_terms())
        return digests

    def _permute(self, x: np.ndarray) -> np.ndarray:
        """The keyed bijection of the rectangle ``[0, p*q)``; ``x`` is left as it was."""
        q = _U64(self.q)
        high: np.ndarray = np.floor_divide(x, q)  # in [0, p)
        t = np.multiply(high, q)
        low = np.subtract(x, t)  # in [0, q)
        for into_high, key, mult, mod, divisor in self._plan:
            src, dst = (low, high) if into_high else (high, low)
            np.bitwise_xor(src, key, out=t)
            np.multiply(t, mult, out=t)
            np.multiply(t, t, out=t)  # keyed quadratic: its top bits are the hash
            np.floor_divide(t, divisor, out=t)  # F in [0, mod)
            np.add(t, dst, out=t)  # dst + F in [0, 2 mod)
            np.subtract(t, mod, out=dst)  # wraps to a huge value where t < mod
            np.minimum(t, dst, out=dst)  # (dst + F) mod `mod`
        np.multiply(high, q, out=high)
        np.add(high, low, out=high)
        return high

    def _walk(self, y: np.ndarray) -> np.ndarray:
        """Cycle walking: re-apply the bijection where a value is still >= n."""
        n = _U64(self.n)
        if self.p * self.q == self.n or not y.size or y.max() < n:
            return y
        todo = np.flatnonzero(y >= n)
        while todo.size:
            z = self._permute(y[todo])
            y[todo] = z
            todo = todo[z >= n]
        return y


def epoch_rows(
    n: int, *, seed: int, epoch: int, shard: int = 0, start: int = 0, stop: int | None = None
) -> np.ndarray:
    """Rows (int64) of positions ``start..stop-1`` of the epoch's keyed bijection.

    ``stop=None`` means n. ``epoch_rows(n, seed=s, epoch=e)`` is a full
    permutation of ``range(n)``, a pure function of ``(n, seed, epoch, shard)``.
    """
    bij = EpochBijection(n, seed=seed, epoch=epoch, shard=shard)
    return bij.rows(start, bij.n if stop is None else stop)
