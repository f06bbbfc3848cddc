"""What row ids cost: ``for batch in loader`` with and without ``with_rows=True``.

For each batch size, one process runs shuffled epochs of every case round-robin
(the order reversed every other round, so that a ratio compares epochs measured
side by side on a shared machine): a bare NumPy gather of the same epoch order
(the run's baseline, ``bench/baselines.py``), then loaders over arrays in memory
and over a stream (a list of chunks through the shuffle buffer), each without
and with ``with_rows``. A figure is the median epoch's rows/s (wall clock), and
its ratio to the bare gather's median in the same run; and the same ratio of the
process's CPU time (every thread's), steadier on a busy machine, where another
process's load stretches the wall clock but not the CPU time an epoch takes.
Run it on this checkout and on another (``PYTHONPATH=/other/src``) to compare
the ``with_rows=False`` rows: a checkout without ``with_rows`` runs only those.

    PYTHONPATH=src python bench/bench_rows.py              # 1,000,000 rows, 7 rounds
    PYTHONPATH=src python bench/bench_rows.py --rows 200000 --rounds 5 --batches 64
"""

from __future__ import annotations

import argparse
import inspect
import time
import warnings

import numpy as np
from baselines import bare_gather  # bench/ is this script's folder

import exactbatch
from exactbatch import DataLoader
from exactbatch.order import epoch_rows

D, L, SEED = 16, 1, 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=7, help="epochs of each case; the median counts")
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 4096])
    ap.add_argument("--chunk", type=int, default=10_000, help="rows per chunk of the stream")
    args = ap.parse_args()
    n = args.rows
    has_rows = "with_rows" in inspect.signature(DataLoader).parameters
    rng = np.random.default_rng(SEED)
    x, y = rng.standard_normal((n, D)), rng.standard_normal((n, L))
    chunks = [(x[a : a + args.chunk], y[a : a + args.chunk]) for a in range(0, n, args.chunk)]
    print(
        f"exactbatch from {exactbatch.__file__}, backend {exactbatch.backend()}; n = {n:,}, "
        f"d = {D}, l = {L}; median of {args.rounds} shuffled epochs a case\n"
    )
    print("| batch | case | rows/s | × bare gather | spread | × bare (CPU time) |")
    print("|---:|---|---:|---:|---:|---:|")
    for b in args.batches:
        perms = [epoch_rows(n, seed=SEED, epoch=e) for e in range(args.rounds)]
        gather = bare_gather(x, y, b)
        cases = {"bare np.take": lambda r, gather=gather, perms=perms: gather(perms[r])}
        for ids in (False, True) if has_rows else (False,):
            kw = {"with_rows": True} if ids else {}
            tag = "with_rows=True" if ids else "with_rows=False"
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                memory = DataLoader((x, y), b, seed=SEED, **kw)
                stream = DataLoader(chunks, b, seed=SEED, buffer_size=1 << 18, total_size=n, **kw)
            cases[f"memory, {tag}"] = _epochs(memory)
            cases[f"stream, {tag}"] = _epochs(stream)
        times: dict[str, list[float]] = {name: [] for name in cases}
        cpu: dict[str, list[float]] = {name: [] for name in cases}
        for r in range(args.rounds):
            order = list(cases) if r % 2 == 0 else list(cases)[::-1]
            for name in order:
                t0, c0 = time.perf_counter(), time.process_time()
                cases[name](r)
                times[name].append(time.perf_counter() - t0)
                cpu[name].append(time.process_time() - c0)
        bare, bare_cpu = np.median(times["bare np.take"]), np.median(cpu["bare np.take"])
        for name, ts in times.items():
            print(
                f"| {b} | {name} | {n / np.median(ts) / 1e6:.2f} M | "
                f"{bare / np.median(ts):.2f}× | {max(ts) / min(ts):.2f} | "
                f"{bare_cpu / np.median(cpu[name]):.2f}× |"
            )


def _epochs(loader):
    def run(_: int) -> None:
        for _batch in loader:  # each iter() is the next epoch
            pass

    for _ in loader:  # a first epoch warms up (its order may not be ready at once)
        pass
    return run


if __name__ == "__main__":
    main()
