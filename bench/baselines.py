"""The bare gather the benchmarks measure the loader against (NumPy only).

``bare_gather(x, y, b)`` returns ``gather(perm) -> rows``: one epoch of
``np.take`` of x and y over ``perm`` into preallocated buffers, batch by
batch, the partial last batch included. It is handed its order: whoever
times it decides whether drawing the order counts (the NumPy epoch in
``compare.py`` draws ``rng.permutation(n)`` inside the timed epoch; the bare
gathers draw it outside). Used by ``bench_core.py`` and ``compare.py``, whose
pymc-extras runs import it under a Python without exactbatch.
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
