"""What a new pair of arrays a batch costs the gather, with no loader and no Python step.

One core, the compiled gather over a held permutation (compare.py's C limit), batch by
batch, four ways: into one pair of buffers reused (``next_into``'s case, and the limit's);
into two pairs in turn (no allocation: the cache footprint of two live batches); a new
pair a batch (``take_run``) dropped before the next (the allocator hands the same memory
back); and a new pair a batch with the last one kept while the next is read, which is
what ``for xb, yb in loader`` does (its loop variables hold the batch until the next
one is assigned). Each epoch is timed in thread CPU time; best and median of the rounds,
in microseconds a batch.

    PYTHONPATH=src .venv/bin/python bench/fresh_pairs.py [--rows 600000] [--batch 64 4096]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import exactbatch as eb


def held(rows, perm: np.ndarray, b: int, d: int) -> None:
    """Into one pair of buffers, reused."""
    bx, by = np.empty((b, d)), np.empty((b, 1))
    for i in range(0, len(perm) - len(perm) % b, b):
        rows.read_run(perm, i, b, bx, by)


def two_held(rows, perm: np.ndarray, b: int, d: int) -> None:
    """Into two pairs in turn."""
    pairs = [(np.empty((b, d)), np.empty((b, 1))) for _ in range(2)]
    for k, i in enumerate(range(0, len(perm) - len(perm) % b, b)):
        rows.read_run(perm, i, b, *pairs[k & 1])


def new_dropped(rows, perm: np.ndarray, b: int, d: int) -> None:
    """A new pair a batch, dropped before the next."""
    for i in range(0, len(perm) - len(perm) % b, b):
        rows.take_run(perm, i, b, F64, None)


def new_kept(rows, perm: np.ndarray, b: int, d: int) -> None:
    """A new pair a batch, the last one kept while the next is read (a loop's)."""
    last = None
    for i in range(0, len(perm) - len(perm) % b, b):
        last = rows.take_run(perm, i, b, F64, None)  # noqa: F841 (kept, as a loop's)


F64 = np.dtype(np.float64)
WAYS = {
    "one pair reused": held,
    "two pairs in turn": two_held,
    "new pair, dropped": new_dropped,
    "new pair, last kept": new_kept,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=600_000)
    parser.add_argument("--cols", type=int, default=16)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 4096])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if eb.kernels.core() is None:
        raise SystemExit("the compiled core is not in use (not built, or EXACTBATCH_PURE=1)")
    n, d = args.rows, args.cols
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((n, d)), rng.standard_normal((n, 1))
    rows = eb.kernels.memory_rows(x, y)
    perm = rng.permutation(n).astype(np.int32)
    for b in args.batch:
        batches = n // b
        times: dict[str, list[float]] = {k: [] for k in WAYS}
        for f in WAYS.values():
            f(rows, perm, b, d)  # (warm: pages touched)
        for _ in range(args.rounds):
            for name, f in WAYS.items():
                t = time.thread_time()
                f(rows, perm, b, d)
                times[name].append((time.thread_time() - t) / batches * 1e6)
        base = min(times["one pair reused"])
        for name, t in times.items():
            print(
                f"batch {b:5d}  {name:20s}  best {min(t):8.2f} us  median "
                f"{statistics.median(t):8.2f} us  (+{min(t) - base:.2f} us a batch)",
                flush=True,
            )


if __name__ == "__main__":
    main()
