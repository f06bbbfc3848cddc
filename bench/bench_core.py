"""Throughput of shuffled epochs: the DataLoader against a bare NumPy gather.

For each source (arrays in memory, a page-cache-warm .ndf file) and batch
size, times whole shuffled epochs through ``for xb, yb in loader`` and
through ``loader.next_into(bx, by)``, and divides by the rate of a bare
gather of x and y over the same epoch order into preallocated buffers::

    for i in range(0, n, b):
        np.take(x, perm[i:i+b], axis=0, out=bx); np.take(y, perm[i:i+b], axis=0, out=by)

Two baselines: ``mode="clip"`` (no bounds check or buffered copy of ``out``,
what the loader's in-memory reader uses; the stricter bar) and the default
``mode="raise"``. Each figure is the best of a few epochs, as the machine may
be noisy. The bare gathers are handed the epoch's order. So, in effect, is
the loader: it computes each epoch's keyed order on a helper thread, and the
next epoch's during the current one, so its best epochs pay for gathering
each batch (in memory, the same two takes) and its per-batch work, not for
the order (whose cost is timed on its own at the end). The .ndf file lives in a temporary folder,
deleted afterwards.

    python bench/bench_core.py              # n = 4,000,000, d = 16, l = 1
    python bench/bench_core.py --rows 500000
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from baselines import bare_gather  # bench/ is this script's folder

from exactbatch import DataLoader, open_ndf, save_ndf
from exactbatch.order import epoch_rows

D, L = 16, 1
BATCHES = (64, 4096)
SEED = 0


def best_seconds(run, repeats: int) -> float:
    """Fastest of ``repeats`` calls of ``run(r)``, r = 0, 1, ..."""
    times = []
    for r in range(repeats):
        t0 = time.perf_counter()
        run(r)
        times.append(time.perf_counter() - t0)
    return min(times)


def loader_iter(loader: DataLoader):
    def run(_: int) -> None:
        for _xb, _yb in loader:  # each iter() is the next epoch
            pass

    return run


def loader_next_into(loader: DataLoader):
    bx = np.empty((loader.batch_size, loader.d))
    by = np.empty((loader.batch_size, loader.l))

    def run(_: int) -> None:
        while loader.next_into(bx, by):
            pass
        loader.reset()  # on to the next epoch

    return run


def ledger_cost(x, y, b: int, repeats: int) -> None:
    """The epoch ledger's share of a shuffled in-memory epoch at batch ``b``: epochs
    with the ledger against epochs with its work stubbed out (per-batch digests
    zero, nothing added up, no end-of-epoch check), alternated so that both see
    the same machine. The stubs' own calls remain, so the figure is an upper bound."""
    from exactbatch.batching import random_access_epoch as indexed
    from exactbatch.loader import cursor as loader_module  # the cursor checks the ledger
    from exactbatch.order.digest import Tally

    real = (indexed.batch_digests, Tally.add, loader_module.check_ledger)
    stubs = (
        lambda rows, b: np.zeros(-(-len(rows) // b), dtype=np.uint64),
        lambda self, rows, digest: None,
        lambda *a, **k: None,
    )

    def patch(funcs) -> None:
        indexed.batch_digests, Tally.add, loader_module.check_ledger = funcs

    times = {"on": [], "off": []}
    try:
        for r in range(2 * repeats + 2):
            mode = "on" if r % 2 else "off"
            patch(real if mode == "on" else stubs)
            loader = DataLoader((x, y), b, shuffle=True, seed=SEED)
            for _ in loader:  # epoch 0 warms up (its order may not be ready at once)
                pass
            t0 = time.perf_counter()
            for _ in loader:
                pass
            times[mode].append(time.perf_counter() - t0)
            loader.close()
    finally:
        patch(real)
    on, off = min(times["on"]), min(times["off"])
    print(
        f"\nthe epoch ledger at batch {b} (in memory, best of {len(times['on'])} epochs each): "
        f"{on * 1e3:.1f} ms with it, {off * 1e3:.1f} ms without: "
        f"{(on - off) / on * 100:+.1f}% of an epoch"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--repeats", type=int, default=3, help="epochs per figure; the best counts")
    ap.add_argument("--ledger-batch", type=int, default=64, help="batch size of the ledger figure")
    args = ap.parse_args()
    n, repeats = args.rows, args.repeats
    t_start = time.perf_counter()

    rng = np.random.default_rng(SEED)
    x, y = rng.standard_normal((n, D)), rng.standard_normal((n, L))
    # The orders the loaders will use for epochs 0, 1, ... (seed SEED, shard 0).
    perms = [epoch_rows(n, seed=SEED, epoch=e) for e in range(repeats)]
    print(f"n = {n:,} rows, d = {D}, l = {L}; best of {repeats} shuffled epochs per figure\n")

    rows = []  # (source, batch, path, rows/s)
    with tempfile.TemporaryDirectory(prefix="exactbatch-bench-") as tmp:
        path = os.path.join(tmp, "bench.ndf")
        save_ndf(path, (x, y))
        with open(path, "rb") as f:  # warm the page cache
            while f.read(1 << 24):
                pass
        ndf = open_ndf(path)

        for b in BATCHES:
            for mode in ("clip", "raise"):
                gather = bare_gather(x, y, b, mode)
                secs = best_seconds(lambda r, gather=gather: gather(perms[r]), repeats)
                rows.append(("memory", b, f'bare np.take, mode="{mode}"', n / secs))
            for name, source in (("memory", (x, y)), (".ndf", ndf)):
                for pname, make in (
                    ("for xb, yb in loader", loader_iter),
                    ("loader.next_into(bx, by)", loader_next_into),
                ):
                    loader = DataLoader(source, b, shuffle=True, seed=SEED)
                    rows.append((name, b, pname, n / best_seconds(make(loader), repeats)))
                    loader.close()
        ndf.close()

    bare = {(b, p): r for s, b, p, r in rows if p.startswith("bare")}
    print("| source | batch | path | rows/s | × bare (clip) | × bare (raise) |")
    print("|---|---:|---|---:|---:|---:|")
    for source, b, p, rate in rows:
        clip, raise_ = bare[b, 'bare np.take, mode="clip"'], bare[b, 'bare np.take, mode="raise"']
        print(
            f"| {source} | {b} | `{p}` | {rate / 1e6:.2f} M | "
            f"{rate / clip:.2f}× | {rate / raise_:.2f}× |"
        )

    ledger_cost(x, y, args.ledger_batch, repeats)

    t_perm = best_seconds(lambda e: epoch_rows(n, seed=SEED, epoch=100 + e), repeats)
    t_rng = best_seconds(lambda _: np.random.default_rng(0).permutation(n), repeats)
    print(f"\none epoch's whole order for n = {n:,} (best of {repeats}):")
    print(f"  exactbatch.order.epoch_rows (keyed):  {t_perm * 1e3:7.1f} ms")
    print(f"  np.random.default_rng(0).permutation: {t_rng * 1e3:7.1f} ms")
    print(f"\ntotal bench time {time.perf_counter() - t_start:.0f} s")


if __name__ == "__main__":
    main()
