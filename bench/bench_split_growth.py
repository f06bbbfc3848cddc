"""How many old training rows keep their side when rows are appended: a split by seed
alone against a split by ``key=`` (issue 43's measure), and what a keyed split costs.

For n old rows (80,000) and 0.1% appended, prints for each way of splitting
``(0.8, 0.2)`` the fraction of the old training rows still in training after
the append: by seed (``split(n, f, seed=0)``), by groups (one customer per 5
rows), by ``key=`` row ids, by ``key=`` the customer column (a grouped split
that survives growth), and stratified by a 3-class label with ``key=`` too.
Then the time of a split by seed against one by ``key=`` (ratio, same run).

    .venv/bin/python bench/bench_split_growth.py [--rows 80000] [--grow 0.001]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import exactbatch


def _kept(before, after) -> float:
    old = before[0]
    return float(np.isin(old, after[0]).mean()) if len(old) else 1.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=80_000)
    ap.add_argument("--grow", type=float, default=0.001)
    a = ap.parse_args()
    n, m = a.rows, max(1, round(a.rows * a.grow))
    total = n + m
    ids = np.arange(total)
    customer = ids // 5
    label = np.random.default_rng(0).integers(0, 3, total)
    f = (0.8, 0.2)
    cases = {
        "seed only": lambda k: exactbatch.split(k, f, seed=0),
        "groups=customer": lambda k: exactbatch.split(k, f, seed=0, groups=customer[:k]),
        "key=row id": lambda k: exactbatch.split(k, f, seed=0, key=ids[:k]),
        "key=customer": lambda k: exactbatch.split(k, f, seed=0, key=customer[:k]),
        "key=row id, stratify=label": lambda k: exactbatch.split(
            k, f, seed=0, key=ids[:k], stratify=label[:k]
        ),
    }
    print(f"{n} old rows, {m} appended ({a.grow:.2%}); split (0.8, 0.2)")
    for name, run in cases.items():
        before, after = run(n), run(total)
        print(
            f"  {name:28s} old training rows kept: {_kept(before, after):.4%}"
            f"  (train {before.counts[0]}, expected {before.expected[0]:.0f})"
        )
    t0 = time.perf_counter()
    for _ in range(5):
        exactbatch.split(n, f, seed=0)
    t1 = time.perf_counter()
    for _ in range(5):
        exactbatch.split(n, f, seed=0, key=ids[:n])
    t2 = time.perf_counter()
    print(
        f"  time key=row id / seed only: {(t2 - t1) / (t1 - t0):.2f}x "
        f"({(t2 - t1) / 5 * 1e3:.1f} ms against {(t1 - t0) / 5 * 1e3:.1f} ms)"
    )


if __name__ == "__main__":
    main()
