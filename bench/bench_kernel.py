"""The compiled gather alone against ``np.take``, in one process, alternating.

Every case gathers the rows of one random permutation, batch by batch, into
reused buffers: exactbatch's kernel (``kernels.memory_rows(x, y).read``)
against two ``take(..., mode="clip")`` calls (x, then y), for x alone, y
alone (an 8-byte label), and both, in float64, from arrays of their own and
from whole rows (views of one array, y just after x: one pass a row; against
one ``take`` of the whole rows, not split into x and y); then the kernel's float32
output (cast as it copies) against its float64; and the keyed bijection of an
epoch's order (``EpochBijection.rows`` of 4096 positions at a time) in C
against the pure NumPy path. The cases alternate within
each round and the best of ``--rounds`` counts, so the spread between fresh
processes (up to 2x on the shared machines here) does not enter the ratios.

    .venv/bin/python bench/bench_kernel.py [--rows 2000000] [--batch 64 4096] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from exactbatch import backend, kernels
from exactbatch.order import EpochBijection


def epoch_rate(fn, perm: np.ndarray, b: int) -> float:
    """Rows/s of one pass of ``fn(rows)`` over ``perm`` in batches of ``b``."""
    n = len(perm) - len(perm) % b
    t = time.perf_counter()
    for a in range(0, n, b):
        fn(perm[a : a + b])
    return n / (time.perf_counter() - t)


def _cases(x: np.ndarray, y: np.ndarray, b: int) -> dict:
    """``{case: (kernel, reference)}``, each a function of a batch's rows."""
    n, d = x.shape
    none = np.empty((n, 0))
    ox, oy, o0 = np.empty((b, d)), np.empty((b, 1)), np.empty((b, 0))
    fx, fy = np.empty((b, d), np.float32), np.empty((b, 1), np.float32)
    rx, ry = kernels.memory_rows(x, none), kernels.memory_rows(none, y)
    rxy = kernels.memory_rows(x, y)
    # whole rows, y just after x (a shuffle buffer's, an .ndf file's): views of one array
    w = np.concatenate((x, y), axis=1)
    wx, wy = w[:, :d], w[:, d:]
    rw = kernels.memory_rows(wx, wy)

    def both(i):
        x.take(i, axis=0, out=ox, mode="clip")
        y.take(i, axis=0, out=oy, mode="clip")

    ow = np.empty((b, d + 1))

    def whole(i):  # NumPy's best for this layout: one take of whole rows, not split
        w.take(i, axis=0, out=ow, mode="clip")

    return {
        "x (16 values)": (
            lambda i: rx.read(i, ox, o0),
            lambda i: x.take(i, axis=0, out=ox, mode="clip"),
        ),
        "y (1 value)": (
            lambda i: ry.read(i, o0, oy),
            lambda i: y.take(i, axis=0, out=oy, mode="clip"),
        ),
        "x and y": (lambda i: rxy.read(i, ox, oy), both),
        "x and y, whole rows (one pass)": (lambda i: rw.read(i, ox, oy), whole),
        "x and y, float32 / float64 (both the kernel)": (
            lambda i: rxy.read(i, fx, fy),
            lambda i: rxy.read(i, ox, oy),
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 4096])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n, d = a.rows, 16
    x, y = rng.random((n, d)), rng.random((n, 1))
    perm = rng.permutation(n)
    print(f"backend {backend()}; n = {n:,} rows of {d} + 1 float64; best of {a.rounds} rounds")
    print("\n| batch | case | kernel, M rows/s | reference, M rows/s | kernel / reference |")
    print("|---:|---|---:|---:|---:|")
    for b in a.batch:
        cases = _cases(x, y, b)
        best = {k: [0.0, 0.0] for k in cases}
        for _ in range(a.rounds):
            for k, fns in cases.items():
                for j, fn in enumerate(fns):
                    best[k][j] = max(best[k][j], epoch_rate(fn, perm, b))
        for k, (kr, ref) in best.items():
            print(f"| {b} | {k} | {kr / 1e6:.1f} | {ref / 1e6:.1f} | {kr / ref:.2f}x |")
    c, pure = _bijections(n)
    best = [0.0, 0.0]
    for _ in range(a.rounds):
        for j, bij in enumerate((c, pure)):
            best[j] = max(best[j], _order_rate(bij, n))
    print(
        f"| 4096 | order: keyed bijection, positions/s (C / NumPy path) | "
        f"{best[0] / 1e6:.1f} | {best[1] / 1e6:.1f} | {best[0] / best[1]:.2f}x |"
    )


def _bijections(n: int):
    """Epoch 0's bijection of n rows on the compiled backend and on the NumPy path."""
    before = kernels.use_backend("numpy")
    pure = EpochBijection(n, seed=0, epoch=0)
    kernels.use_backend(before)
    return EpochBijection(n, seed=0, epoch=0), pure


def _order_rate(bij, n: int, block: int = 4096) -> float:
    """Positions/s of ``bij.rows`` over the first n positions, ``block`` at a time."""
    t = time.perf_counter()
    for a in range(0, n - block + 1, block):
        bij.rows(a, a + block)
    return (n - n % block) / (time.perf_counter() - t)


if __name__ == "__main__":
    main()
