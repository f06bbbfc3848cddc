"""How fast can a cold file be read in shuffled blocks at all? The I/O ceiling of block mode.

Reads the same cold file (pages evicted before every read) sequentially, and in
blocks of 4 MiB in a shuffled order, with no hint and with the next 16 blocks
announced to the kernel (POSIX_FADV_WILLNEED, as ``ndf_blocks`` does), and
through ``DataLoader(ndf_blocks(f), b)`` at batch 4096 with a buffer of 64
blocks (half of the default file) and with the default buffer (64 MiB), and
at batch 64 with the default buffer. Each round
runs every case once, in the same order; the figures are medians over the
rounds of each case's ratio to the sequential read of its own round.

One more case measures what the disk gives shuffled blocks read in 2 MiB
folios (Linux with transparent huge pages): two threads populate each block
through a mapping marked MADV_HUGEPAGE and MADV_RANDOM (MADV_POPULATE_READ),
16 blocks ahead of the positional reads. Where the disk's device shows its
counters (/sys/dev/block/*/stat), the table also gives the read requests per
read and their mean size: WILLNEED reads 4 KiB pages, which a virtio disk
(254 segments a request) gets as requests of about 1 MiB; a sequential read
gets large folios, and 4 MiB requests.

    .venv/bin/python bench/bench_blocks.py [--rows 4000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import sys
import tempfile
import threading
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


def folio_blocks(path: str, seed: int) -> None:
    """4 MiB blocks in shuffled order, read into the page cache as 2 MiB folios by
    two threads (MADV_POPULATE_READ through a MADV_HUGEPAGE | MADV_RANDOM map)
    16 blocks ahead, then read with positional reads (page cache hits)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    size = os.path.getsize(path)
    order = np.random.default_rng(seed).permutation(-(-size // BLOCK)).tolist()
    fd = os.open(path, os.O_RDONLY)
    data = np.frombuffer(mmap.mmap(fd, size, access=mmap.ACCESS_READ), dtype=np.uint8)
    addr = data.ctypes.data
    for advice in (14, 1):  # MADV_HUGEPAGE, MADV_RANDOM
        libc.madvise(addr, size, advice)
    room, todo, lock = threading.Semaphore(16), iter(order), threading.Lock()

    def populate():
        while room.acquire():
            with lock:
                i = next(todo, None)
            if i is None:
                return
            a, b = i * BLOCK, min(size, (i + 1) * BLOCK)
            b = max(a, b - b % mmap.PAGESIZE)
            libc.madvise(addr + a, b - a, 22)  # MADV_POPULATE_READ
            libc.madvise(addr + a, b - a, 4)  # MADV_DONTNEED: unmapped, still cached

    threads = [threading.Thread(target=populate) for _ in range(2)]
    for t in threads:
        t.start()
    buf = np.empty(BLOCK, np.uint8)
    try:
        for i in order:
            os.preadv(fd, [buf], i * BLOCK)
            room.release()
    finally:
        for _ in threads:
            room.release()
        for t in threads:
            t.join()
        del data
        os.close(fd)


def device_reads(path: str) -> tuple[int, int] | None:
    """(read requests, sectors read) of the disk holding ``path``, or None."""
    st = os.stat(path)
    try:
        with open(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}/stat") as f:
            fields = f.read().split()
        return int(fields[0]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def print_table(times: dict, requests: dict, gb: float) -> None:
    """The markdown table of each read's GB/s and ratio to the sequential read (median of
    the rounds), and its disk requests (count, MiB each) where /proc said."""
    seq = np.array(times["sequential read (8 MiB at a time)"])
    print(
        "| read | GB/s (median) | × the sequential read (median of rounds, range) "
        "| disk requests (MiB each) |"
    )
    print("|---|---:|---:|---:|")
    for name, t in times.items():
        t = np.array(t)
        req = requests[name]
        if req:
            count, size = np.median([c for c, _ in req]), np.median([b for _, b in req])
            disk = f"{count:.0f} ({size / max(count, 1) / 2**20:.2f})"
        else:
            disk = "n/a"
        r = seq / t
        spread = f" ({r.min():.2f}-{r.max():.2f})" if len(r) > 1 else ""
        print(f"| {name} | {gb / np.median(t):.2f} | {np.median(r):.2f}×{spread} | {disk} |")


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
    # One loader a case, kept across rounds as in training: a buffer of 64 blocks
    # (half of the default file) and the default buffer (64 MiB: 16 blocks).
    loaders = {
        (b, blocks_): DataLoader(
            src, b, seed=0, buffer_size=None if blocks_ is None else blocks_ * src.block_rows
        )
        for b, blocks_ in ((4096, 64), (4096, None), (64, None))
    }

    def through_loader(key):
        def run(e):
            loader = loaders[key]
            loader.set_epoch(e)
            for _ in loader:
                pass

        return run

    cases = {
        "sequential read (8 MiB at a time)": lambda e: sequential(path),
        "4 MiB blocks, shuffled order": lambda e: blocks(path, 0, e),
        "4 MiB blocks, shuffled, next 16 announced": lambda e: blocks(path, 16, e),
        "DataLoader(ndf_blocks(f)), batch 4096, 64 blocks": through_loader((4096, 64)),
        "DataLoader(ndf_blocks(f)), batch 4096, default buffer": through_loader((4096, None)),
        "DataLoader(ndf_blocks(f)), batch 64, default buffer": through_loader((64, None)),
    }
    if sys.platform.startswith("linux") and os.path.exists(
        "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size"
    ):
        cases["4 MiB blocks, shuffled, read ahead into 2 MiB folios"] = lambda e: folio_blocks(
            path, e
        )
    times = {name: [] for name in cases}
    requests = {name: [] for name in cases}
    try:
        for r in range(a.rounds):
            for name, run in cases.items():
                evict(path)
                before = device_reads(path)
                t0 = time.perf_counter()
                run(r)
                times[name].append(time.perf_counter() - t0)
                after = device_reads(path)
                if before and after:
                    requests[name].append((after[0] - before[0], (after[1] - before[1]) * 512))
    finally:
        f.close()
        for loader in loaders.values():
            loader.close()
        os.unlink(path)
        os.rmdir(folder)
    gb = (28 + 8 * 17 * a.rows) / 1e9
    print(f"{a.rows:,} rows ({gb:.2f} GB), cold before every read; {a.rounds} rounds")
    print_table(times, requests, gb)


if __name__ == "__main__":
    main()
