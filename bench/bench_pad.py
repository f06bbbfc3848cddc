"""even_batches="pad" against the same loader without it, epochs interleaved in one process.

For each batch size, each round times one shuffled epoch of each case in turn
(so that the machine's drift hits every case alike) and the best of
``--rounds`` counts; printed as rows/s and the ratio to ``plain``:

* ``plain``: ``for xb, yb in DataLoader((x, y), b, num_shards=S, shard_index=0)``;
* ``pad``: the same with ``even_batches="pad"``: ``(xb, yb, mask)``, a mask made
  a batch, the partial last batch copied into a full one, and shard 0 (the
  smallest) ending in a padding batch where the shards' counts differ;
* ``pad, with_rows``: the same handing out row ids too (padded with -1).

The rows per shard are chosen so that shard 0 of ``S`` has a partial last batch.

    .venv/bin/python bench/bench_pad.py [--rows 2000000] [--batch 64 1024] [--shards 4]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import exactbatch


def _epoch(loader) -> None:
    for _ in loader:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--d", type=int, default=16)
    ap.add_argument("--batch", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    n = args.rows + 1  # not a multiple of the batch or the shards
    x, y = rng.standard_normal((n, args.d)), rng.standard_normal((n, 1))
    S = args.shards
    print(f"{n} rows x {args.d} features, shard 0 of {S}, best of {args.rounds} epochs")
    print(f"{'batch':>6} {'case':>16} {'rows/s':>12} {'ratio':>7}")
    for b in args.batch:

        def make(b=b, **kw):
            return exactbatch.DataLoader((x, y), b, num_shards=S, shard_index=0, seed=1, **kw)

        loaders = {
            "plain": make(),
            "pad": make(even_batches="pad"),
            "pad, with_rows": make(even_batches="pad", with_rows=True),
        }
        best = dict.fromkeys(loaders, float("inf"))
        for _ in range(args.rounds):
            for name, loader in loaders.items():
                t = time.perf_counter()
                _epoch(loader)
                best[name] = min(best[name], time.perf_counter() - t)
        rows = loaders["plain"].n
        for name, t in best.items():
            print(f"{b:>6} {name:>16} {rows / t:>12,.0f} {best['plain'] / t:>7.2f}")


if __name__ == "__main__":
    main()
