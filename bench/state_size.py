"""The size of a loader's state (JSON, as the docs save it) after 1, 200 and 10,000
epochs, and whether the run is still certified: old clean epochs are folded into one
summary per shard (:mod:`exactbatch.loader.compaction`), so the size stays bounded.

    PYTHONPATH=src python bench/state_size.py [--shards S]
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from exactbatch import DataLoader, certify

MARKS = (1, 200, 10_000)


def sizes(shards: int = 1, n: int = 8, batch: int = 4) -> list[tuple[int, int, bool]]:
    """``(epochs, bytes of rank 0's state, certified)`` at each mark, the ranks in lockstep."""
    x = np.arange(n, dtype=np.float64).reshape(n, 1)
    loaders = [
        DataLoader(x, batch, num_shards=shards, shard_index=s, seed=1) for s in range(shards)
    ]
    out = []
    for e in range(1, MARKS[-1] + 1):
        for ld in loaders:
            for _ in ld:
                pass
        if e in MARKS:
            states = [json.loads(json.dumps(ld.state_dict())) for ld in loaders]
            out.append((e, len(json.dumps(states[0])), bool(certify(states))))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=1)
    args = parser.parse_args()
    for epochs, size, certified in sizes(args.shards):
        print(f"after {epochs:>6} epochs: state {size:>7} bytes, certified: {certified}")


if __name__ == "__main__":
    main()
