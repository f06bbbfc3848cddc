"""The fused transform (``Standardize`` and a NaN fill, in the gather) against the plain gather.

Issue 30's target: a loader with ``transform=Standardize(stats, nan_fill=0.0)``
hands out at least 0.9x the rows/s of the same loader without it, at batch
4096. Two levels, each case against a baseline measured in the same process,
the cases alternating within each round and the best of ``--rounds``
counting (the spread between fresh processes on a shared machine is up to
2x, so only ratios of side-by-side figures say anything):

* kernel: one gather of a shuffled batch into reused buffers
  (``kernels.memory_rows(x, y).read``), with the transform kernel against
  without; and, for scale, the plain gather followed by the NumPy a user
  would write per step (``np.nan_to_num((xb - mean) / sd)``) against it;
* loader: epochs of ``DataLoader((x, y), b, transform=...)`` against
  ``DataLoader((x, y), b)``, float64 and float32, with ``nan="error"``
  (the NaN check alone) too.

The data: ``--rows`` rows of 20 float64 features (1% NaN) and a class label,
as in the issue's retail example.

    .venv/bin/python bench/bench_transform.py [--rows 1000000] [--batch 64 4096] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_kernel import epoch_rate  # bench/ is this script's folder

from exactbatch import DataLoader, Standardize, backend, kernels


def loader_rate(make) -> float:
    """Rows/s of one epoch of a fresh loader ``make()``."""
    loader = make()
    t = time.perf_counter()
    rows = sum(len(xb) for xb, _ in loader)
    return rows / (time.perf_counter() - t)


def _kernel_cases(x, y, st: Standardize, b: int) -> dict:
    """``{case: (measured, baseline)}``, each a function of a batch's rows."""
    d = x.shape[1]
    rows = kernels.memory_rows(x, y)
    kern = st.kernel(d)
    ox, oy = np.empty((b, d)), np.empty((b, 1))
    fx, fy = np.empty((b, d), np.float32), np.empty((b, 1), np.float32)
    mean, sd = st.mean, st.sd

    def by_hand(i):  # the plain gather, then what the user wrote in every step
        rows.read(i, ox, oy)
        np.nan_to_num((ox - mean) / sd, copy=False)

    return {
        "kernel, float64: transform in the gather / plain gather": (
            lambda i: rows.read(i, ox, oy, kern),
            lambda i: rows.read(i, ox, oy),
        ),
        "kernel, float32: transform in the gather / plain gather": (
            lambda i: rows.read(i, fx, fy, kern),
            lambda i: rows.read(i, fx, fy),
        ),
        "kernel, float64: gather then NumPy by hand / plain gather": (
            by_hand,
            lambda i: rows.read(i, ox, oy),
        ),
    }


def _loader_cases(x, y, st: Standardize, b: int) -> dict:
    """``{case: (measured, baseline)}``, each a function making a loader."""

    def make(**kw):
        return lambda: DataLoader((x, y), b, seed=1, **kw)

    f32 = {"dtype": np.float32}
    return {
        "loader, float64: transform= / plain": (make(transform=st), make()),
        "loader, float32: transform= / plain": (make(transform=st, **f32), make(**f32)),
        "loader, float32 + label_dtype=int64 + transform= / plain": (
            make(transform=st, label_dtype=np.int64, **f32),
            make(**f32),
        ),
        "loader, float64: nan='error' (no NaN) / plain": (
            make(nan="error"),
            make(),
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 4096])
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    n, d = a.rows, 20
    x = rng.normal(3.0, 2.0, (n, d))
    x[rng.random(x.shape) < 0.01] = np.nan
    y = rng.integers(0, 2, (n, 1)).astype(np.float64)
    clean = np.nan_to_num(x)  # for nan="error": no NaN to refuse
    st = Standardize((np.nanmean(x, axis=0), np.nanstd(x, axis=0)), nan_fill=0.0)
    perm = rng.permutation(n)
    print(
        f"backend {backend()}; n = {n:,} rows of {d} float64 (1% NaN) + 1 label; "
        f"best of {a.rounds} rounds, cases alternating"
    )
    print("\n| batch | case | measured, M rows/s | baseline, M rows/s | ratio |")
    print("|---:|---|---:|---:|---:|")
    for b in a.batch:
        kcases = _kernel_cases(x, y, st, b)
        lcases = _loader_cases(x, y, st, b)
        lcases["loader, float64: nan='error' (no NaN) / plain"] = _loader_cases(clean, y, st, b)[
            "loader, float64: nan='error' (no NaN) / plain"
        ]
        best = {k: [0.0, 0.0] for k in (*kcases, *lcases)}
        for r in range(a.rounds):
            for k, fns in kcases.items():
                for j in (0, 1) if r % 2 == 0 else (1, 0):
                    best[k][j] = max(best[k][j], epoch_rate(fns[j], perm, b))
            for k, fns in lcases.items():
                for j in (0, 1) if r % 2 == 0 else (1, 0):
                    best[k][j] = max(best[k][j], loader_rate(fns[j]))
        for k, (m, base) in best.items():
            print(f"| {b} | {k} | {m / 1e6:.1f} | {base / 1e6:.1f} | {m / base:.2f}x |")


if __name__ == "__main__":
    main()
