"""Columns gathered straight from Arrow buffers (issue 42, item 2): each stream against
its library's own reading, at batch 64 and 4096, all measured in this run.

One table of ``--rows`` rows (D = 16 float64 features and a float64 label, record
batches and Parquet row groups of 65,536 rows; ``bench/arrow_sources.py``'s) is
read whole by each pair below, a loader's epoch against its baseline, the two
interleaved round by round (the order reversed every other round), each figure
the median of ``--rounds`` epochs after one untimed warm-up; the ratio is the
baseline's time over the loader's (above 1: the loader is faster):

* ``reader``: a ``pyarrow.RecordBatchReader`` made per pass, unshuffled, against
  iterating the reader's own record batches, each cut into batches turned into
  (b, 17) float64 NumPy arrays (``arrow_sources.streams``'s baseline);
* ``parquet in order``: ``parquet_source`` of one file, unshuffled, against a tiled
  raw pyarrow read of the same row groups (below);
* ``parquet shuffled``: ``parquet_source`` of one file, shuffled (buffer
  ``--buffer`` rows), against a tiled raw pyarrow read of the same row groups
  (``read_row_group``, its columns filled into rows a tile at a time:
  ``compare.py``'s ``pyarrow_raw_tiled``);
* ``parquet shuffled f32``: the same with float32 batches (``dtype=np.float32``: the
  buffer holds float32 rows), against the same read filling float32 rows;
* ``parquet elastic``: the same, ``elastic=True`` at one rank, against the same
  tiled raw read (its ratio to the line above: elastic against a plain stream);
* ``polars DataFrame`` read in order, against ``DataFrame.iter_slices(b).to_numpy()``;
* ``duckdb relation``, unshuffled, against its ``to_arrow_reader`` batches cut into
  batches (as for the reader).

Polars and DuckDB are skipped, with a line saying so, where they are not installed.

    PYTHONPATH=src .venv/bin/python bench/bench_gather.py               # 400,000 rows
    PYTHONPATH=src .venv/bin/python bench/bench_gather.py --rows 2000000 --rounds 7
    PYTHONPATH=src .venv/bin/python bench/bench_gather.py --clock cpu   # a loaded machine
    PYTHONPATH=src .venv/bin/python bench/bench_gather.py --features-type int32  # cast fused
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import numpy as np
from arrow_sources import COLS, NAMES, D, as_batch, make_table  # bench/ is this folder

import exactbatch
from exactbatch import DataLoader
from exactbatch.sources.arrow import fill_columns

ROW_GROUP = 65536
SEED = 1


def loader_epoch(make_source, batch: int, **options):
    """One epoch of a loader over ``make_source()`` (``shuffle=False`` unless told), the
    loader made once, at the first (untimed) epoch: a stream's counting pass is not an
    epoch's cost."""
    made: list = []

    def run():
        if not made:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a counting pass of a stream
                made.append(
                    DataLoader(make_source(), batch, seed=SEED, **{"shuffle": False, **options})
                )
        for _ in made[0]:
            pass

    return run


def cut_batches(make_reader, batch: int):
    """A reader's own record batches, cut into batches of ``batch`` rows as NumPy arrays."""
    names = [*NAMES, "y"]

    def run():
        for b in make_reader():
            for a in range(0, b.num_rows, batch):
                piece = b.slice(a, batch)
                as_batch([piece.column(c).to_numpy() for c in names])

    return run


def tiled_raw(path: str, dtype=np.float64):
    """Every row group of ``path`` read and filled into rows (of ``dtype``) a tile at a
    time."""
    import pyarrow.parquet as pq

    def run():
        pf = pq.ParquetFile(path)
        for g in range(pf.metadata.num_row_groups):
            t = pf.read_row_group(g)
            xr = np.empty((t.num_rows, D), dtype=dtype)
            fill_columns(t.columns[:D], xr)
            t.column(D).to_numpy().reshape(-1, 1)

    return run


def cases(table, path: str, batch: int, buffer: int):
    """``(name, baseline, loader epoch)`` of each pair, and lines for those skipped."""
    import pyarrow as pa

    batches = table.to_batches(max_chunksize=ROW_GROUP)

    def reader():
        return pa.RecordBatchReader.from_batches(table.schema, batches)

    source = lambda: exactbatch.arrow_source(reader, **COLS)  # noqa: E731
    out = [("reader", cut_batches(reader, batch), loader_epoch(source, batch))]
    parquet = lambda: exactbatch.parquet_source(path, labels="y")  # noqa: E731
    raw = tiled_raw(path)
    out.append(("parquet in order", raw, loader_epoch(parquet, batch)))
    out.append(
        ("parquet shuffled", raw, loader_epoch(parquet, batch, shuffle=True, buffer_size=buffer))
    )
    shuffled32 = loader_epoch(
        parquet, batch, shuffle=True, buffer_size=buffer, dtype=np.float32
    )  # (its buffer holds float32 rows)
    out.append(("parquet shuffled f32", tiled_raw(path, np.float32), shuffled32))
    elastic = loader_epoch(parquet, batch, shuffle=True, buffer_size=buffer, elastic=True)
    out.append(("parquet elastic", raw, elastic))
    skipped = []
    try:
        import polars as pl
    except ImportError:
        skipped.append("polars DataFrame: skipped (polars is not installed)")
    else:
        frame = pl.from_arrow(table)

        def slices():
            for df in frame.iter_slices(batch):
                df.to_numpy()

        source = lambda: exactbatch.polars_source(frame, **COLS)  # noqa: E731
        out.append(("polars DataFrame", slices, loader_epoch(source, batch)))
    try:
        import duckdb
    except ImportError:
        skipped.append("duckdb relation: skipped (duckdb is not installed)")
    else:
        con = duckdb.connect()
        con.register("rows", table)
        con.execute("CREATE TABLE t AS SELECT * FROM rows")
        rel = con.table("t")
        base = cut_batches(lambda: rel.to_arrow_reader(ROW_GROUP), batch)
        source = lambda: exactbatch.duckdb_source(rel, batch_rows=ROW_GROUP, **COLS)  # noqa: E731
        out.append(("duckdb relation", base, loader_epoch(source, batch)))
    return out, skipped


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def narrowed(table, kind: str):
    """``table`` with its feature columns as ``kind`` (float64: as it is)."""
    import pyarrow as pa

    if kind == "float64":
        return table
    cols = {}
    for name in table.column_names:
        v = table.column(name).to_numpy()
        if name in NAMES:
            v = v.astype(np.float32) if kind == "float32" else np.round(v * 1000).astype(np.int32)
        cols[name] = v
    return pa.Table.from_batches(pa.table(cols).to_batches(max_chunksize=ROW_GROUP))


def paired(base, mine, rounds: int, clock=time.perf_counter) -> tuple[float, float, float]:
    """``(baseline s, loader s, ratio)``: medians of ``rounds`` interleaved epochs (the
    ratio the median of each round's)."""
    base(), mine()  # warm-up: page cache, imports, buffers
    tb, tm = [], []
    for r in range(rounds):
        for run, times in ((base, tb), (mine, tm))[:: 1 if r % 2 == 0 else -1]:
            t0 = clock()
            run()
            times.append(clock() - t0)
    b, m = statistics.median(tb), statistics.median(tm)
    ratios = sorted(x / y for x, y in zip(tb, tm, strict=True))
    return b, m, statistics.median(ratios)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batches", type=int, nargs="+", default=[64, 4096])
    p.add_argument("--buffer", type=int, default=131_072, help="shuffle buffer (rows)")
    p.add_argument("--only", nargs="*", default=None, help="run only these pairs (names)")
    p.add_argument(
        "--features-type",
        choices=["float64", "float32", "int32"],
        default="float64",
        help="the 16 feature columns' Arrow type (float32 and int32 are cast as they are "
        "copied: int32 holds round(1000 x))",
    )
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed time; cpu: this process's CPU time, all its threads (steadier "
        "on a loaded machine, but it charges a library's parallel threads in full)",
    )
    a = p.parse_args(argv)
    import pyarrow.parquet as pq

    table = narrowed(make_table(a.rows), a.features_type)
    rate = lambda s: f"{a.rows / s / 1e6:6.2f}M"  # noqa: E731
    print(
        f"{a.rows:,} rows, d = {D} ({a.features_type}), l = 1, row groups of {ROW_GROUP:,}, "
        f"buffer {a.buffer:,}, "
        f"median of {a.rounds} interleaved rounds, {a.clock} time, backend {exactbatch.backend()}"
    )
    print(f"{'pair':<22}{'batch':>6}{'baseline rows/s':>17}{'loader rows/s':>15}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.parquet")
        pq.write_table(table, path, row_group_size=ROW_GROUP)
        for batch in a.batches:
            pairs, skipped = cases(table, path, batch, a.buffer)
            for name, base, mine in pairs:
                if a.only and name not in a.only:
                    continue
                b, m, ratio = paired(base, mine, a.rounds, CLOCKS[a.clock])
                print(f"{name:<22}{batch:>6}{rate(b):>17}{rate(m):>15}{ratio:>7.2f}x")
            for line in skipped:
                print(line)


if __name__ == "__main__":
    main()
