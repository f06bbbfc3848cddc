"""Streaming benchmark: a Parquet folder of 1M and of 8M rows (d=16, l=1).

Prints, for each size, rows/s of a streamed epoch (unshuffled, and shuffled
through a fixed buffer) as a ratio to reading the same files row group by
row group with pyarrow into NumPy in the same run, and each run's peak RSS,
measured in a fresh subprocess so the peaks do not mix. The memory claim is
that peak RSS stays flat (within 10%) from 1M to 8M rows.

    .venv/bin/python bench/bench_stream.py [--sizes 1000000 8000000] [--batch 4096]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
D, L = 16, 1
FILE_ROWS = 1_000_000
GROUP_ROWS = 65_536


def make_folder(rows: int, cache: Path) -> Path:
    """A folder of Parquet files of FILE_ROWS rows each (reused when present)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = cache / f"stream_{rows}"
    done = folder / "_complete"
    if done.exists():
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    names = [f"f{j}" for j in range(D)]
    for k, start in enumerate(range(0, rows, FILE_ROWS)):
        m = min(FILE_ROWS, rows - start)
        x = rng.standard_normal((m, D))
        cols = {name: x[:, j] for j, name in enumerate(names)}
        cols["y"] = (rng.random(m) < 0.5).astype(np.float64)
        pq.write_table(pa.table(cols), folder / f"part-{k:04d}.parquet", row_group_size=GROUP_ROWS)
    done.touch()
    return folder


def run_one(mode: str, folder: str, batch: int, buffer: int) -> dict:
    """One measurement in this process: rows/s and peak RSS."""
    import pyarrow.parquet as pq

    from exactbatch import DataLoader, parquet_source

    t0 = time.perf_counter()
    rows = 0
    if mode == "pyarrow":
        for f in sorted(Path(folder).glob("*.parquet")):
            pf = pq.ParquetFile(f)
            for g in range(pf.metadata.num_row_groups):
                t = pf.read_row_group(g)
                x = np.empty((t.num_rows, D))
                for j in range(D):
                    x[:, j] = t.column(j).to_numpy()
                y = t.column(D).to_numpy().reshape(-1, 1)
                rows += len(x) + 0 * len(y)
    else:
        src = parquet_source(folder, labels="y")
        loader = DataLoader(src, batch, shuffle=(mode == "shuffled"), buffer_size=buffer, seed=1)
        for xb, _ in loader:
            rows += len(xb)
    dt = time.perf_counter() - t0
    return {"rows": rows, "seconds": dt, "rows_per_s": rows / dt, "peak_rss": peak_rss()}


def peak_rss() -> int:
    """This process's peak RSS in bytes: VmHWM, which starts afresh at exec.

    (getrusage's ru_maxrss is carried over from the parent across exec on
    Linux, so a child would report the parent's peak.)
    """
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc/self/status")


# Peak RSS is measured in runs of its own with allocators that give freed
# memory back at once (pyarrow's system pool; glibc with a fixed mmap
# threshold): with their defaults, allocators keep freed blocks cached and
# peak RSS grows with the number of row groups read, for pyarrow alone too.
# Those settings slow allocation, so speed is measured with the defaults.
MEMORY_ENV = {"ARROW_DEFAULT_MEMORY_POOL": "system", "MALLOC_MMAP_THRESHOLD_": "131072"}


def _run(mode, folder, batch, buffer, env) -> dict:
    out = subprocess.run(
        [sys.executable, __file__, "--one", mode, str(folder), str(batch), str(buffer)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, **env},
    ).stdout
    return json.loads(out)


def measure(mode, folder, batch, buffer, repeat) -> dict:
    """Best speed of `repeat` fresh subprocesses (the machine is shared and
    noisy), and peak RSS from one more run with MEMORY_ENV."""
    best = max(
        (_run(mode, folder, batch, buffer, {}) for _ in range(repeat)),
        key=lambda r: r["rows_per_s"],
    )
    best["peak_rss"] = _run(mode, folder, batch, buffer, MEMORY_ENV)["peak_rss"]
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 8_000_000])
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--buffer", type=int, default=262_144, help="shuffle buffer, rows")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--cache", type=Path, default=ROOT / ".cache" / "bench")
    p.add_argument("--one", nargs=4, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.one:
        mode, folder, batch, buffer = a.one
        print(json.dumps(run_one(mode, folder, int(batch), int(buffer))))
        return

    print(
        f"batch={a.batch}, buffer={a.buffer} rows, d={D}, l={L}, "
        f"row groups of {GROUP_ROWS} rows, best of {a.repeat}\n"
    )
    print("| rows | reader | rows/s | ratio to pyarrow | peak RSS (MiB) |")
    print("|---:|---|---:|---:|---:|")
    peaks = {}
    for rows in a.sizes:
        folder = make_folder(rows, a.cache)
        base = measure("pyarrow", folder, a.batch, a.buffer, a.repeat)
        for mode in ("pyarrow", "unshuffled", "shuffled"):
            r = base if mode == "pyarrow" else measure(mode, folder, a.batch, a.buffer, a.repeat)
            assert r["rows"] == rows, (mode, r["rows"], rows)
            peaks.setdefault(mode, []).append(r["peak_rss"])
            print(
                f"| {rows:,} | {mode} | {r['rows_per_s'] / 1e6:.2f}M | "
                f"{r['rows_per_s'] / base['rows_per_s']:.2f}x | {r['peak_rss'] / 2**20:.0f} |"
            )
    if len(a.sizes) > 1:
        print()
        for mode, ps in peaks.items():
            print(f"peak RSS {mode}: largest/smallest = {max(ps) / min(ps):.2f}x")


if __name__ == "__main__":
    main()
