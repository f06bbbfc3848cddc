"""The bare gather the benchmarks measure the loader against (NumPy only).

``bare_gather(x, y, b)`` returns ``gather(perm) -> rows``: one epoch of
``np.take`` of x and y over ``perm`` into preallocated buffers, batch by
batch, the partial last batch included. It is handed its order: whoever
times it decides whether drawing the order counts (the NumPy epoch in
``compare.py`` draws ``rng.permutation(n)`` inside the timed epoch; the bare
gathers draw it outside). Used by ``bench_core.py`` and ``compare.py``, whose
pymc-extras runs import it under a Python without exactbatch.

``order_draw(kind, ...)`` is the order a limit computes inside its timed epoch
(``--limit-order`` of ``ab_against.py`` and ``compare.py``): none (the order is
held, drawn outside), the loader's own keyed order with its batches' digests,
or NumPy's permutation.
"""

from __future__ import annotations

import numpy as np


def bare_gather(x: np.ndarray, y: np.ndarray, b: int, mode: str = "clip"):
    """``gather(perm) -> rows``: an epoch of batches of ``b`` rows over ``perm``.

    ``mode="clip"`` skips the bounds check and the buffered copy of ``out``,
    as the loader's in-memory reader does; ``"raise"`` is NumPy's default.
    """
    bx, by = np.empty((b, x.shape[1])), np.empty((b, y.shape[1]))

    def gather(perm: np.ndarray) -> int:
        n = len(perm)
        full = n - n % b
        for i in range(0, full, b):
            idx = perm[i : i + b]
            np.take(x, idx, axis=0, out=bx, mode=mode)
            np.take(y, idx, axis=0, out=by, mode=mode)
        if full < n:  # the partial last batch
            idx = perm[full:]
            np.take(x, idx, axis=0, out=bx[: n - full], mode=mode)
            np.take(y, idx, axis=0, out=by[: n - full], mode=mode)
        return n

    return gather


LIMIT_ORDERS = ("none", "keyed", "numpy")


def order_draw(kind: str, n: int, b: int, rng: np.random.Generator, eb=None, seed: int = 0):
    """``draw() -> perm`` (int32, as the loader's orders are for n < 2**31) that a limit
    calls inside its timed epoch, or None for ``kind="none"`` (the order held, drawn
    outside the timed epoch).

    ``"keyed"`` computes what a shuffled loader's order thread computes for an epoch:
    the keyed bijection's whole order and its batches' ledger digests
    (``eb.order.EpochBijection(n, seed, epoch).whole_into``; ``eb``: the exactbatch
    module), another epoch's each call; ``"numpy"`` draws ``rng.permutation(n)``
    (slower than the keyed order: it overcharges the limit).
    """
    if kind == "none":
        return None
    if kind == "numpy":
        return lambda: rng.permutation(n).astype(np.int32)
    if kind != "keyed":
        raise ValueError(f"order_draw: kind must be one of {LIMIT_ORDERS}, got {kind!r}")
    if eb is None:
        raise ValueError("order_draw: kind='keyed' needs eb, the exactbatch module")
    drawn = [0]

    def draw() -> np.ndarray:
        drawn[0] += 1  # (another epoch's order each time)
        order = eb.order.EpochBijection(n, seed=seed, epoch=drawn[0])
        out = np.empty(n, dtype=np.int32)
        if order.whole_into(out, b) is None:  # (the pure path: no digests)
            out[:] = order.rows(0, n)
        return out

    return draw
