"""The Arrow-native sources against their libraries' own fastest batch iteration.

One table of ``--rows`` rows (D = 16 float64 features and a float64 label,
record batches of 65,536 rows) is handed to each kind, and each is read
whole in batches of ``--batch`` rows as NumPy (b, 17) float64 arrays, the
form a training step takes; every time is the best of ``--repeats`` after
one untimed warm-up, all measured in this run:

* random access (an Arrow IPC file, memory-mapped; a pyarrow Table; a polars
  DataFrame; a Hugging Face Dataset): the library's own shuffled gather
  (``Table.take``, ``DataFrame[idx]``, ``Dataset[idx]`` in numpy format, a
  batch of a random permutation at a time; ``Dataset[idx]``, seconds a
  batch, on its first 8 batches, the time scaled to the epoch) against
  ``DataLoader(source, shuffle=True)``, and its own sequential batches (``Table.to_batches``,
  ``DataFrame.iter_slices``, ``Dataset.iter(batch_size)`` in numpy format)
  against ``shuffle=False``;
* streams (a RecordBatchReader made per pass, a polars LazyFrame, a DuckDB
  relation): the library's own batches (the reader's record batches, and
  ``to_arrow_reader``'s, cut into batches of ``--batch`` rows;
  ``collect_batches(chunk_size=batch)``), each turned into the NumPy array,
  against the loader's unshuffled and shuffled epochs (its default buffer).

Printed: rows/s of each, and each loader's ratio to its baseline (above 1:
faster than the library's own).

    python bench/arrow_sources.py                    # 1,000,000 rows, batch 4096
    python bench/arrow_sources.py --rows 4000000 --repeats 5
    python bench/arrow_sources.py --clock cpu        # CPU time: a loaded machine
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
import warnings

import numpy as np

import exactbatch
from exactbatch import DataLoader

D = 16
NAMES = [f"f{j}" for j in range(D)]
COLS = {"features": NAMES, "labels": "y"}


def make_table(rows: int, seed: int = 0):
    import pyarrow as pa

    rng = np.random.default_rng(seed)
    cols = {name: rng.standard_normal(rows) for name in NAMES}
    cols["y"] = rng.random(rows)
    return pa.Table.from_batches(pa.table(cols).to_batches(max_chunksize=65536))


def as_batch(columns) -> np.ndarray:
    """A library's batch (its columns as NumPy arrays) as one (b, D + 1) float64 array."""
    out = np.empty((len(columns[0]), len(columns)))
    for j, c in enumerate(columns):
        out[:, j] = c
    return out


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


# Dataset[idx] takes seconds a batch: its shuffled baseline times this many batches and
# scales the time to the whole epoch (a run may return such a factor).
HF_TAKE_BATCHES = 8


def best(run, repeats: int) -> float:
    run()  # warm-up: page cache, imports, lazy compilation
    times = []
    for _ in range(repeats):
        t0 = clock()
        scale = run() or 1
        times.append((clock() - t0) * scale)
    return min(times)


def epoch(source, batch: int, shuffle: bool):
    def run():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a counting pass of a stream
            loader = DataLoader(source, batch, shuffle=shuffle, seed=1)
        for _ in loader:
            pass
        loader.close()

    return run


def shuffled_ids(rows: int, batch: int):
    perm = np.random.default_rng(1).permutation(rows)
    return [perm[a : a + batch] for a in range(0, rows, batch)]


def random_access(table, path, batch: int):
    """(name, baseline shuffled, baseline sequential, source) per random-access kind."""
    import pyarrow as pa

    ids = shuffled_ids(table.num_rows, batch)
    names = [*NAMES, "y"]
    mapped = pa.ipc.open_file(pa.memory_map(path, "r")).read_all()

    def take(t):
        def run():
            for idx in ids:
                got = t.take(idx)
                as_batch([got.column(c).to_numpy() for c in names])

        return run

    def batches(t):
        def run():
            for b in t.to_batches(max_chunksize=batch):
                as_batch([b.column(c).to_numpy() for c in names])

        return run

    out = [
        ("arrow_file", take(mapped), batches(mapped), exactbatch.arrow_file(path, **COLS)),
        ("arrow_table", take(table), batches(table), exactbatch.arrow_source(table, **COLS)),
    ]
    try:
        import polars as pl
    except ImportError:
        pl = None
    if pl is not None:
        frame = pl.from_arrow(table)

        def pl_take():
            for idx in ids:
                frame[idx].to_numpy()

        def pl_slices():
            for df in frame.iter_slices(batch):
                df.to_numpy()

        out.append(("polars", pl_take, pl_slices, exactbatch.polars_source(frame, **COLS)))
    try:
        import datasets
    except ImportError:
        datasets = None
    if datasets is not None:
        ds = datasets.Dataset(table).with_format("numpy")

        few = ids[:HF_TAKE_BATCHES]
        scale = len(ids) / max(1, len(few))

        def hf_take():  # the first batches only (seconds each), timed as if all
            for idx in few:
                got = ds[idx]
                as_batch([got[c] for c in names])
            return scale

        def hf_iter():
            for got in ds.iter(batch_size=batch):
                as_batch([got[c] for c in names])

        out.append(("hf", hf_take, hf_iter, exactbatch.hf_source(ds, **COLS)))
    return out


def streams(table, batch: int):
    """(name, baseline, source) per stream kind."""
    import pyarrow as pa

    names = [*NAMES, "y"]
    record_batches = table.to_batches(max_chunksize=65536)

    def reader():
        return pa.RecordBatchReader.from_batches(table.schema, record_batches)

    def read_all(make):
        def run():  # each record batch cut into batches of `batch` rows
            for b in make():
                for a in range(0, b.num_rows, batch):
                    piece = b.slice(a, batch)
                    as_batch([piece.column(c).to_numpy() for c in names])

        return run

    out = [("arrow_stream", read_all(reader), exactbatch.arrow_source(reader, **COLS))]
    try:
        import polars as pl
    except ImportError:
        pl = None
    if pl is not None:
        lf = pl.from_arrow(table).lazy()

        def pl_batches():
            for df in lf.collect_batches(chunk_size=batch):
                df.to_numpy()

        source = exactbatch.polars_source(lf, batch_rows=65536, n_rows=table.num_rows, **COLS)
        out.append(("lazyframe", pl_batches, source))
    try:
        import duckdb
    except ImportError:
        duckdb = None
    if duckdb is not None:
        con = duckdb.connect()
        con.register("rows", table)
        con.execute("CREATE TABLE t AS SELECT * FROM rows")
        rel = con.table("t")
        run = read_all(lambda: rel.to_arrow_reader(65536))
        out.append(("duckdb", run, exactbatch.duckdb_source(rel, batch_rows=65536, **COLS)))
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--batch", type=int, default=4096)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed time; cpu: this process's CPU time, all its threads (steadier "
        "on a loaded machine, but it charges a library's parallel threads in full)",
    )
    a = p.parse_args(argv)
    global clock
    clock = CLOCKS[a.clock]
    import pyarrow as pa

    table = make_table(a.rows)
    rate = lambda s: f"{a.rows / s / 1e6:6.2f}M"  # noqa: E731
    print(f"{a.rows:,} rows, d = {D}, l = 1, batch {a.batch}, best of {a.repeats}, {a.clock} time")
    print(f"{'kind':<13}{'way':<12}{'library rows/s':>15}{'exactbatch':>12}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.arrow")
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        for name, take, seq, source in random_access(table, path, a.batch):
            for way, base, shuffle in (("shuffled", take, True), ("sequential", seq, False)):
                b, e = best(base, a.repeats), best(epoch(source, a.batch, shuffle), a.repeats)
                print(f"{name:<13}{way:<12}{rate(b):>15}{rate(e):>12}{b / e:>7.2f}x")
        for name, base, source in streams(table, a.batch):
            b = best(base, a.repeats)
            for way, shuffle in (("sequential", False), ("shuffled", True)):
                e = best(epoch(source, a.batch, shuffle), a.repeats)
                print(f"{name:<13}{way:<12}{rate(b):>15}{rate(e):>12}{b / e:>7.2f}x")


if __name__ == "__main__":
    main()
