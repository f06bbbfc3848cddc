"""How fast can a cold file be read in shuffled blocks at all? The I/O ceiling of block mode.

Reads the same cold file (pages evicted before every read) sequentially, and in
blocks of 4 MiB in a shuffled order, with no hint and with the next 16 blocks
announced to the kernel (POSIX_FADV_WILLNEED, as ``ndf_blocks`` does), and
through ``DataLoader(ndf_blocks(f), 4096, buffer_size=64 blocks)``. Each round
runs every case once, in the same order; the figures are medians over the
rounds of each case's ratio to the sequential read of its own round.

    .venv/bin/python bench/bench_blocks.py [--rows 4000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from compare import evict  # noqa: E402  (bench/ is this script's folder)

from exactbatch import DataLoader, ndf_blocks, open_ndf, save_ndf  # noqa: E402

BLOCK = 4 << 20
CHUNK = 8 << 20


def sequential(path: str) -> None:
    buf = np.empty(CHUNK, np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        while k := os.preadv(fd, [buf], got):
            got += k
    finally:
        os.close(fd)


def blocks(path: str, ahead: int, seed: int) -> None:
    size = os.path.getsize(path)
    order = np.random.default_rng(seed).permutation(-(-size // BLOCK))
    buf = np.empty(BLOCK, np.uint8)
    fd = os.open(path, os.O_RDONLY)
    try:
        for k in range(min(ahead, len(order))):
            os.posix_fadvise(fd, int(order[k]) * BLOCK, BLOCK, os.POSIX_FADV_WILLNEED)
        for k, i in enumerate(order):
            if ahead and k + ahead < len(order):
                nxt = int(order[k + ahead]) * BLOCK
                os.posix_fadvise(fd, nxt, BLOCK, os.POSIX_FADV_WILLNEED)
            os.preadv(fd, [buf], int(i) * BLOCK)
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="blocks-")
    path = os.path.join(folder, "data.ndf")
    rng = np.random.default_rng(0)
    save_ndf(path, (rng.standard_normal((a.rows, 16)), rng.standard_normal(a.rows)))
    f = open_ndf(path)
    src = ndf_blocks(f)
    loader = DataLoader(src, 4096, seed=0, buffer_size=64 * src.block_rows)

    def through_loader(e):
        loader.set_epoch(e)
        for _ in loader:
            pass

    cases = {
        "sequential read (8 MiB at a time)": lambda e: sequential(path),
        "4 MiB blocks, shuffled order": lambda e: blocks(path, 0, e),
        "4 MiB blocks, shuffled, next 16 announced": lambda e: blocks(path, 16, e),
        "DataLoader(ndf_blocks(f)), batch 4096": through_loader,
    }
    times = {name: [] for name in cases}
    try:
        for r in range(a.rounds):
            for name, run in cases.items():
                evict(path)
                t0 = time.perf_counter()
                run(r)
                times[name].append(time.perf_counter() - t0)
    finally:
        f.close()
        loader.close()
        os.unlink(path)
        os.rmdir(folder)
    seq = np.array(times["sequential read (8 MiB at a time)"])
    gb = (28 + 8 * 17 * a.rows) / 1e9
    print(f"{a.rows:,} rows ({gb:.2f} GB), cold before every read; {a.rounds} rounds")
    print("| read | GB/s (median) | × the sequential read (median of rounds) |")
    print("|---|---:|---:|")
    for name, t in times.items():
        t = np.array(t)
        print(f"| {name} | {gb / np.median(t):.2f} | {np.median(seq / t):.2f}× |")


if __name__ == "__main__":
    main()
