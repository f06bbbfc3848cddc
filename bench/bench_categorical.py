"""What ``categorical=`` costs in ``parquet_source``: the first pass that learns a
vocabulary, and an epoch of row groups with a string column coded against the same
epoch with a numeric column in its place (interleaved rounds, the median printed: this
machine's speed drifts).

    .venv/bin/python bench/bench_categorical.py [--rows 1000000] [--values 1000] [--rounds 5]
        [--clock cpu]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from exactbatch import parquet_source

_CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter


def _epoch(src) -> float:
    t = _clock()
    for i in range(len(src)):
        src.read_chunk(i)
    return _clock() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--values", type=int, default=1000, help="distinct values of the column")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--clock",
        choices=sorted(_CLOCK),
        default="wall",
        help="time epochs by the wall clock, or by this process's CPU time (a shared machine)",
    )
    a = ap.parse_args()
    global _clock
    _clock = _CLOCK[a.clock]
    rng = np.random.default_rng(0)
    names = np.array([f"city{i:05d}" for i in range(a.values)])
    pick = rng.integers(0, a.values, a.rows)
    table = pa.table(
        {
            "a": rng.standard_normal(a.rows),
            "code": pick.astype(np.float64),
            "city": names[pick],
        }
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "t.parquet")
        pq.write_table(table, path, row_group_size=65536)
        learn, plain, coded = [], [], []
        for _ in range(a.rounds):
            t = _clock()
            src = parquet_source(path, features=["a", "city"], categorical=["city"])
            learn.append(_clock() - t)
            num = parquet_source(path, features=["a", "code"])
            plain.append(_epoch(num))
            coded.append(_epoch(src))
    m = np.median
    print(
        f"{a.rows:,} rows, {len(src)} row groups, {a.values} values: first pass "
        f"{m(learn):.3f} s; an epoch of row groups: numeric column {m(plain):.3f} s, "
        f"coded string column {m(coded):.3f} s ({m(coded) / m(plain):.2f}x numeric; the "
        f"first epoch {coded[0]:.3f} s, {coded[0] / plain[0]:.2f}x; "
        f"{a.rows / m(coded) / 1e6:.1f} M rows/s; {a.clock} clock)"
    )


if __name__ == "__main__":
    main()
