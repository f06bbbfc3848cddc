"""Rows/s against the threads that gather one batch: the loader, and the compiled
gather's limit at the same thread count.

For each batch size (64, 1024, 4096) and each thread count from 1 to the cores
this process may run on, times shuffled in-memory epochs of

* the C gather limit: ``exactbatch._core`` rows' ``read(order[i:i+b], bx, by,
  None, threads)`` over the epoch's order into preallocated buffers (no
  loader, no claim, no ledger: what one call of the kernel can do);
* the loader: ``for xb, yb in DataLoader((x, y), b, threads=t)`` (small
  batches are read 16 at a time, so batch 64's groups are what is split).

Every figure is the best of ``--repeats`` epochs, measured in rounds that
alternate all cases, and each is printed as a ratio to a baseline of the
same run: the loader against the C gather on the same threads, and both
against the C gather on one thread. ``next_into`` against ``iter()`` at batch
64 (one thread, issue 32's item 4) comes last, as paired epochs (CPU time of
the calling thread, median of the per-round ratios, and the ratio of the
best epochs). The output names the machine's cores; on a shared machine the
figures are noisy (every ratio comes from one run: compare runs, not rows).

    python bench/scaling.py                 # n = 2,000,000 rows of 16 + 1 float64
    python bench/scaling.py --rows 4000000 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import time

import numpy as np

from exactbatch import DataLoader, kernels
from exactbatch.order import epoch_rows

D, L = 16, 1
BATCHES = (64, 1024, 4096)
SEED = 0


def machine() -> str:
    """The cores this process may use, of how many, and the CPU's model name."""
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{usable} usable cores of {os.cpu_count()} ({model})"


def c_epoch(rows, order: np.ndarray, b: int, threads: int):
    bx, by = np.empty((b, D)), np.empty((b, L))
    n = len(order)
    full = n - n % b
    read = rows.read

    def run() -> None:
        for i in range(0, full, b):
            read(order[i : i + b], bx, by, None, threads)
        if full < n:
            read(order[full:], bx[: n - full], by[: n - full], None, threads)

    return run


def loader_epoch(loader: DataLoader):
    def run() -> None:
        for _xb, _yb in loader:  # each iter() is the next epoch
            pass

    return run


def timed(run) -> float:
    t0 = time.perf_counter()
    run()
    return time.perf_counter() - t0


def next_into_against_iter(x, y, rounds: int) -> None:
    """Batch 64, one thread: paired epochs of ``iter()`` and ``next_into``, timed in CPU
    time of this thread (less sensitive to other processes than wall time)."""
    b = 64
    loader = DataLoader((x, y), b, seed=SEED, threads=1)
    bx, by = np.empty((b, D)), np.empty((b, L))
    it, ni, ratios = [], [], []
    for _ in range(rounds + 1):
        t0 = time.thread_time()
        for _xb, _yb in loader:
            pass
        a = time.thread_time() - t0
        loader.reset()
        t0 = time.thread_time()
        while loader.next_into(bx, by):
            pass
        c = time.thread_time() - t0
        it.append(a)
        ni.append(c)
        ratios.append(a / c)
    it, ni, ratios = it[1:], ni[1:], ratios[1:]  # (the first: the order's thread warming up)
    print(
        f"\nnext_into / iter() at batch {b}, {rounds} paired epochs (CPU time of the "
        f"calling thread): median {float(np.median(ratios)):.2f}x, best epochs "
        f"{min(it) / min(ni):.2f}x ({len(x) / min(ni) / 1e6:.1f} M rows/s against "
        f"{len(x) / min(it) / 1e6:.1f} M)"
    )
    loader.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--repeats", type=int, default=5, help="epochs per figure; the best counts")
    ap.add_argument("--max-threads", type=int, default=None, help="default: the usable cores")
    args = ap.parse_args()
    n, repeats = args.rows, args.repeats
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    counts = list(range(1, (args.max_threads or cores or 1) + 1))
    if kernels.core() is None:
        raise SystemExit("the compiled core is not in use (EXACTBATCH_PURE, or not built)")
    t_start = time.perf_counter()
    rng = np.random.default_rng(SEED)
    x, y = rng.standard_normal((n, D)), rng.standard_normal((n, L))
    rows = kernels.memory_rows(x, y)
    order = epoch_rows(n, seed=SEED, epoch=0).astype(np.int32)
    print(f"machine: {machine()}")
    print(
        f"n = {n:,} rows, d = {D}, l = {L} (float64, {8 * (D + L)} bytes a row), in memory; "
        f"best of {repeats} shuffled epochs per figure, all cases alternated\n"
    )
    cases = {}  # (batch, threads, what) -> epoch function
    loaders = []
    for b in BATCHES:
        for t in counts:
            cases[b, t, "C gather"] = c_epoch(rows, order, b, t)
            loader = DataLoader((x, y), b, seed=SEED, threads=t)
            loaders.append(loader)
            cases[b, t, "loader"] = loader_epoch(loader)
    for run in cases.values():  # warm up: the loaders' orders, the pool's threads
        run()
    best = dict.fromkeys(cases, float("inf"))
    for _ in range(repeats):
        for key, run in cases.items():
            best[key] = min(best[key], timed(run))
    rate = {key: n / secs for key, secs in best.items()}

    print(
        "| batch | threads | C gather rows/s | × C on 1 thread | loader rows/s "
        "| × C on 1 thread | loader / C, same threads |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for b in BATCHES:
        base = rate[b, 1, "C gather"]
        for t in counts:
            c, lo = rate[b, t, "C gather"], rate[b, t, "loader"]
            print(
                f"| {b} | {t} | {c / 1e6:.1f} M | {c / base:.2f}× | {lo / 1e6:.1f} M "
                f"| {lo / base:.2f}× | {lo / c:.2f}× |"
            )
    for loader in loaders:
        loader.close()
    next_into_against_iter(x, y, max(5, 2 * repeats))
    print(f"\ntotal bench time {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
