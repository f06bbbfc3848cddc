"""Cold ``ndf_blocks`` against the disk's own ceiling for the same requests.

Every case reads the same cold ``.ndf`` file (its pages dropped before each
read with fsync + ``posix_fadvise(POSIX_FADV_DONTNEED)``, which needs no root;
the share still cached is printed): a sequential read (8 MiB positional reads),
then the very requests ``ndf_blocks`` makes, outside the loader: each block's
rows (``block_rows`` rows from byte 28 + row * 136: unaligned) in the loader's
shuffled block order for that epoch,

* buffered, one at a time, with no hint, and with the next 16 blocks announced
  (``POSIX_FADV_WILLNEED``, as the loader's buffered reads are);
* with ``O_DIRECT``: each block widened to 4 KiB boundaries, read into an
  aligned buffer, one at a time and ``--threads`` at a time;

and the loader's epoch, ``DataLoader(ndf_blocks(f), b, buffer_size=64 blocks)``
and with the default buffer, as it reads by default (buffered, the next 16
blocks announced), and with 64 blocks and ``O_DIRECT`` on
(:mod:`exactbatch.ndf.direct`: cold blocks read past the cache, several at
once where the loader reads ahead). Each round runs every case once, in the
order of the table or its reverse, every other round; a figure is the median
over the rounds of its ratio to the sequential read of its own round, with
its GB/s.

    .venv/bin/python bench/cold_reads.py                 # the compare.py file (4M rows)
    .venv/bin/python bench/cold_reads.py --rows 2000000 --rounds 3 --batch 4096

The loader's lines are the very figure ``compare.py`` gives for its cold block
cases (``eb_ndf_cold_blocks``, ``eb_ndf_cold_blocks_default`` over ``seq_cold``):
the same file (``compare.make_data``, same ``--rows``), the same eviction
(``compare.evict``, the share left cached printed), the same batches, the same
reads (``--reads``: each case read twice in a row, each after an eviction, the
faster kept, as compare.py keeps the best of a run's 2 epochs), and the same
estimator, the median over rounds of each round's ratio to that round's
sequential read (the two read within minutes of each other: this disk's speed
drifts by 1.5x between runs, and a 2-core machine's CPU with its load).
"""

from __future__ import annotations

import argparse
import mmap
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

import compare  # noqa: E402  (bench/ is this script's folder)
from bench_blocks import device_reads, print_table, sequential  # noqa: E402

from exactbatch import DataLoader, ndf_blocks, open_ndf  # noqa: E402
from exactbatch.ndf import direct  # noqa: E402
from exactbatch.ndf.format import HEADER_SIZE  # noqa: E402
from exactbatch.order import chunk_order  # noqa: E402

ALIGN = 4096
AHEAD = 16


def requests(src, epoch: int) -> list[tuple[int, int]]:
    """``(offset, length)`` of each block read of ``src``'s shuffled epoch ``epoch``
    (seed 0, one shard), in the order the loader reads them."""
    rb = 8 * (src.d + src.l)
    order = chunk_order(len(src.chunk_rows), seed=0, epoch=epoch).tolist()
    return [
        (HEADER_SIZE + int(src.chunk_starts[i]) * rb, int(src.chunk_rows[i]) * rb) for i in order
    ]


def buffered(path: str, reqs, ahead: int) -> None:
    buf = bytearray(max(n for _, n in reqs))
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        for k, (off, n) in enumerate(reqs):
            if ahead:
                for o, m in reqs[k + (ahead if k else 0) : k + ahead + 1]:
                    os.posix_fadvise(fd, o, m, os.POSIX_FADV_WILLNEED)
            os.preadv(fd, [view[:n]], off)
    finally:
        os.close(fd)


def direct_reads(path: str, reqs, threads: int) -> None:
    """The requests widened to ``ALIGN``, read with O_DIRECT by ``threads`` threads,
    each into an aligned buffer of its own, taking the requests in order."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECT", 0))
    todo, lock = iter(reqs), threading.Lock()
    most = max(n for _, n in reqs) + 2 * ALIGN

    def work():
        buf = mmap.mmap(-1, most)  # page-aligned
        view = memoryview(buf)
        while True:
            with lock:
                req = next(todo, None)
            if req is None:
                return
            off, n = req
            a, z = off - off % ALIGN, -(-(off + n) // ALIGN) * ALIGN
            got = 0
            while got < z - a:
                k = os.preadv(fd, [view[got : z - a]], a + got)
                if k == 0 or k % ALIGN:
                    break
                got += k

    try:
        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        for t in pool:
            t.join()
    finally:
        os.close(fd)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--batch",
        type=int,
        nargs="+",
        default=[64, 4096],
        help="the loader's batch sizes (compare.py's cold block cases run at 64 and 4096)",
    )
    ap.add_argument("--threads", type=int, default=4, help="O_DIRECT reads at once")
    ap.add_argument(
        "--reads",
        type=int,
        default=2,
        help="reads of each case a round, back to back, each after an eviction; the "
        "fastest counts (compare.py's cold cases: 2 epochs a run, the best kept)",
    )
    ap.add_argument("--cache", default=str(compare.ROOT / ".cache" / "compare"))
    a = ap.parse_args()
    path = compare.make_data(Path(a.cache), a.rows)["ndf"]
    f = open_ndf(path)
    src = ndf_blocks(f)
    loaders = {}
    for b in a.batch:
        loaders[f"batch {b}, 64 blocks"] = DataLoader(
            src, b, seed=0, buffer_size=64 * src.block_rows
        )
        loaders[f"batch {b}, default buffer"] = DataLoader(src, b, seed=0)
    # The same loader with O_DIRECT on (off by default: exactbatch.ndf.direct), over a
    # file of its own (direct reads are opened per open file, at its first block read),
    # at the largest batch.
    direct.ENABLED = True
    g = open_ndf(path)
    on = f"batch {max(a.batch)}, 64 blocks, O_DIRECT on"
    loaders[on] = DataLoader(ndf_blocks(g), max(a.batch), seed=0, buffer_size=64 * src.block_rows)
    direct.ENABLED = False

    def through(loader):
        def run(e):
            direct.ENABLED = loader is loaders[on]
            loader.set_epoch(e)
            for _ in loader:
                pass
            direct.ENABLED = False

        return run

    cases = {
        "sequential read (8 MiB at a time)": lambda e: sequential(path),
        "the loader's block requests, buffered": lambda e: buffered(path, requests(src, e), 0),
        f"the same, next {AHEAD} announced (WILLNEED)": lambda e: buffered(
            path, requests(src, e), AHEAD
        ),
        "the same, O_DIRECT (4 KiB aligned), one at a time": lambda e: direct_reads(
            path, requests(src, e), 1
        ),
        f"the same, O_DIRECT, {a.threads} at a time": lambda e: direct_reads(
            path, requests(src, e), a.threads
        ),
        **{f"DataLoader(ndf_blocks(f)), {k}": through(loader) for k, loader in loaders.items()},
    }
    times: dict[str, list] = {name: [] for name in cases}
    disk: dict[str, list] = {name: [] for name in cases}
    cached = []
    try:
        for r in range(a.rounds):
            names = list(cases) if r % 2 == 0 else list(cases)[::-1]  # no case always first
            for name in names:
                run, best = cases[name], None
                for k in range(a.reads):  # as compare.py: each read evicted, the best kept
                    cached.append(compare.evict(path))
                    before = device_reads(path)
                    t0 = time.perf_counter()
                    run(a.reads * r + k)
                    took = time.perf_counter() - t0
                    after = device_reads(path)
                    best = took if best is None else min(best, took)
                if before and after:
                    disk[name].append((after[0] - before[0], (after[1] - before[1]) * 512))
                times[name].append(best)
    finally:
        for loader in loaders.values():
            loader.close()
        f.close()
        g.close()
    gb = os.path.getsize(path) / 1e9
    print(
        f"{a.rows:,} rows ({gb:.2f} GB), blocks of {src.block_rows:,} rows "
        f"({src.block_rows * 8 * (src.d + src.l) / 2**20:.1f} MiB); {a.rounds} rounds; "
        f"cached before a read: at most {max(cached):.1%}; loader's block reads: "
        f"{'O_DIRECT' if direct.ENABLED else 'buffered'} by default; {os.cpu_count()} CPUs, "
        f"load average {compare.loadavg()}"
    )
    print_table(times, disk, gb)


if __name__ == "__main__":
    main()
