"""What wide sources and big vocabularies cost (issue 39): the column checks as the
column count doubles (``parquet_source`` over one file of k columns, ``arrow_source``
over a table of k columns: construction only), and an epoch of row groups with a
categorical column of many distinct values against the same epoch with a numeric
column in its place (the ratio, median of interleaved rounds: this machine drifts),
and Parquet's own read of each column with no coding (a ``ParquetFile`` opened per
row group and ``read_row_group``, as the source reads: the float column, the string
column as ``read_dictionary`` hands it, dictionary-encoded, and as plain strings), the
floor under the coded epoch.

    .venv/bin/python bench/bench_columns.py [--columns 1000 2000 4000 8000]
        [--arrow-columns 16000] [--rows 1000000] [--values 1000000] [--groups 100] [--clock cpu]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

from exactbatch import arrow_source, parquet_source  # noqa: E402


def _seconds(f) -> float:
    t = _clock()
    f()
    return _clock() - t


def _wide(k: int) -> pa.Table:
    return pa.table({f"c{i}": np.zeros(4) for i in range(k)})


_CLOCK = {"wall": time.perf_counter, "cpu": time.process_time}
_clock = time.perf_counter


def _epoch(src) -> float:
    t = _clock()
    for i in range(len(src)):
        src.read_chunk(i)
    return _clock() - t


def _bare(path: str, column: str, groups: int, dictionary: bool) -> float:
    """Parquet's read of ``column``'s row groups alone: no checks, no coding."""
    meta = pq.ParquetFile(path).metadata
    t = _clock()
    for g in range(groups):
        pf = pq.ParquetFile(path, metadata=meta, read_dictionary=[column] if dictionary else None)
        pf.read_row_group(g, columns=[column])
    return _clock() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--columns", type=int, nargs="*", default=[1000, 2000, 4000, 8000])
    ap.add_argument("--arrow-columns", type=int, default=16000)
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--values", type=int, default=1_000_000, help="distinct categories")
    ap.add_argument("--groups", type=int, default=100, help="row groups")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--clock",
        choices=sorted(_CLOCK),
        default="wall",
        help="time epochs by the wall clock, or by this process's CPU time (a shared machine)",
    )
    a = ap.parse_args()
    global _clock
    _clock = _CLOCK[a.clock]
    m = np.median
    with tempfile.TemporaryDirectory() as tmp:
        for k in a.columns:
            path = os.path.join(tmp, f"w{k}.parquet")
            pq.write_table(_wide(k), path)
            s = _seconds(lambda path=path: parquet_source(path, labels=()))
            print(f"parquet_source, {k:6d} columns: {s:8.3f} s")
        if a.arrow_columns:
            table = _wide(a.arrow_columns)
            s = _seconds(lambda: arrow_source(table))
            print(f"arrow_source,   {a.arrow_columns:6d} columns: {s:8.3f} s")
        rng = np.random.default_rng(0)
        pick = rng.permutation(a.rows) % a.values
        table = pa.table(
            {"num": pick.astype(np.float64), "int": pick, "str": pa.array(pick.astype(str))}
        )
        path = os.path.join(tmp, "cats.parquet")
        pq.write_table(table, path, row_group_size=-(-a.rows // a.groups))
        num = parquet_source(path, features=["num"], labels=())
        t = _clock()
        ints = parquet_source(path, features=["int"], labels=(), categorical=["int"])
        learn_int = _clock() - t
        strs = parquet_source(path, features=["str"], labels=(), categorical=["str"])
        learn_str = _clock() - t - learn_int
        times: dict[str, list[float]] = {"numeric": [], "int codes": [], "str codes": []}
        bare: dict[str, list[float]] = {"float": [], "str, dictionary": [], "str, plain": []}
        reads = (("float", "num", False), ("str, dictionary", "str", True))
        reads += (("str, plain", "str", False),)
        for _ in range(a.rounds):
            for name, src in (("numeric", num), ("int codes", ints), ("str codes", strs)):
                times[name].append(_epoch(src))
            for name, col, dictionary in reads:
                bare[name].append(_bare(path, col, len(num), dictionary))
        base = m(times["numeric"])
        print(
            f"{a.rows:,} rows, {len(num)} row groups, {a.values:,} categories "
            f"(first passes: int {learn_int:.2f} s, str {learn_str:.2f} s); "
            f"an epoch of row groups ({a.clock} clock):"
        )
        for name, ts in times.items():
            print(
                f"  {name:10s} {m(ts):7.3f} s  ({m(ts) / base:5.2f}x numeric; the first "
                f"epoch {ts[0]:.3f} s, {ts[0] / times['numeric'][0]:5.2f}x)"
            )
        print("Parquet's read alone (read_row_group, no checks, no coding):")
        for name, ts in bare.items():
            print(f"  {name:16s} {m(ts):7.3f} s  ({m(ts) / base:5.2f}x the numeric epoch)")
        over = m(times["str codes"]) / m(bare["str, dictionary"])
        print(f"  str codes' epoch / the string column's read: {over:5.2f}x")


if __name__ == "__main__":
    main()
