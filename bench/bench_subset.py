"""A subset (``DataLoader(rows=)``) against the whole source: what the map through the
ids costs, epochs interleaved in one process.

For each batch size, each round times one epoch of each case in turn (so that
the machine's drift hits every case alike) and the best of ``--rounds``
counts, as rows/s:

* ``whole``: ``DataLoader((x, y), b, shuffle=...)`` over every row;
* ``rows=all``: the same rows as a subset, ``rows=`` a permutation of all ids
  (the same n: the same order's cost, plus the map through the ids);
* ``rows=half``: every other row (``rows=np.arange(0, n, 2)``), per row.

Also the time of ``exactbatch.split`` by rows and by groups (one label per
``--group-rows`` rows) over n rows.

    .venv/bin/python bench/bench_subset.py [--rows 1000000] [--batch 256 4096] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import exactbatch


def _epoch(loader) -> float:
    t = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--d", type=int, default=16)
    p.add_argument("--batch", type=int, nargs="+", default=[256, 4096])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--group-rows", type=int, default=10)
    a = p.parse_args()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(a.rows, a.d))
    y = rng.normal(size=(a.rows, 1))
    cases = {
        "whole": None,
        "rows=all": rng.permutation(a.rows),
        "rows=half": np.arange(0, a.rows, 2),
    }
    print(f"n={a.rows}, d={a.d}, in memory; best of {a.rounds} epochs, rows/s")
    for shuffle in (True, False):
        for b in a.batch:
            best: dict[str, float] = {}
            loaders = {
                k: exactbatch.DataLoader((x, y), b, shuffle=shuffle, rows=r)
                for k, r in cases.items()
            }
            for _ in range(a.rounds):
                for k, loader in loaders.items():
                    rate = loader.n / _epoch(loader)
                    best[k] = max(best.get(k, 0.0), rate)
            base = best["whole"]
            cells = ", ".join(f"{k} {v / 1e6:.1f}M ({v / base:.2f}x)" for k, v in best.items())
            print(f"{'shuffled' if shuffle else 'file order'}, batch {b}: {cells}")
    t = time.perf_counter()
    exactbatch.split(a.rows, (0.8, 0.1, 0.1), seed=0)
    by_rows = time.perf_counter() - t
    groups = np.arange(a.rows) // a.group_rows
    t = time.perf_counter()
    exactbatch.split(a.rows, (0.8, 0.1, 0.1), seed=0, groups=groups)
    by_groups = time.perf_counter() - t
    print(
        f"split of {a.rows} rows: {by_rows:.3f} s by rows, {by_groups:.3f} s by "
        f"{a.rows // a.group_rows} groups"
    )


if __name__ == "__main__":
    main()
