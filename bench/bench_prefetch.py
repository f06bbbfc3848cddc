"""Prefetch: does an epoch take max(compute, load) rather than their sum?

A consumer that "computes" for a fixed time per batch (sleeping, which
releases the GIL as a GPU step or a BLAS call would) reads a shuffled epoch
from an .ndf file, without and with prefetch. Printed: the load-only epoch,
the compute-only time, their sum and max, and both measured epochs.

    .venv/bin/python bench/bench_prefetch.py [--rows 2000000] [--batch 32768]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from exactbatch import DataLoader, open_ndf, save_ndf


def epoch_seconds(loader, compute: float) -> float:
    t = time.perf_counter()
    for _ in loader:
        if compute:
            time.sleep(compute)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--batch", type=int, default=32_768)
    ap.add_argument("--depth", type=int, default=2)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "p.ndf")
        save_ndf(path, (rng.standard_normal((a.rows, 16)), rng.standard_normal(a.rows)))
        f = open_ndf(path)
        plain = DataLoader(f, a.batch, prefetch=0, seed=1)
        epoch_seconds(plain, 0)  # warm the page cache and the order
        load = min(epoch_seconds(plain, 0) for _ in range(3))
        per_batch = load / len(plain)
        compute = per_batch * len(plain)
        rows = []
        for name, depth in (("no prefetch", 0), (f"prefetch={a.depth}", a.depth)):
            loader = DataLoader(f, a.batch, prefetch=depth, seed=1)
            rows.append((name, min(epoch_seconds(loader, per_batch) for _ in range(3))))
    print(
        f"n={a.rows:,}, batch={a.batch}, {len(plain)} batches; compute per batch = "
        f"load per batch = {per_batch * 1e6:.0f} us\n"
    )
    print("| epoch | seconds | / max(load, compute) |")
    print("|---|---:|---:|")
    print(f"| load only | {load:.3f} | {load / max(load, compute):.2f} |")
    print(f"| compute only | {compute:.3f} | {compute / max(load, compute):.2f} |")
    print(f"| sum | {load + compute:.3f} | {(load + compute) / max(load, compute):.2f} |")
    for name, secs in rows:
        print(f"| {name} | {secs:.3f} | {secs / max(load, compute):.2f} |")


if __name__ == "__main__":
    main()
