"""Where a streamed epoch's CPU time goes (issue 42, item 2): in order,
shuffled through the buffer, or elastic at one rank.

One Parquet file of ``--rows`` rows (16 float64 features and a float64 label,
row groups of 65,536 rows; ``bench/arrow_sources.py``'s table), or the same
table as an Arrow-family stream (``--source``: a RecordBatchReader made per
pass, a polars LazyFrame, a DuckDB relation; record batches of 65,536 rows,
the loader's default buffer unless ``--buffer``; in order and shuffled only),
is read by a loader whose epochs are timed after one untimed warm-up; each line is the
median epoch of ``--rounds``: the process's CPU time (every thread's: pyarrow
decodes row groups on threads of its own), the consumer thread's, and the CPU
time of each part, on whatever thread ran it (a part called inside another is
counted in both):

* ``decode``: a row group read and checked (``ParquetSource._columns``; the
  decoding itself runs on pyarrow's threads, counted only in the process's);
* ``fill``: a decoded row group copied into a shuffle buffer's rows;
* ``buffer fill``: any chunk copied into a shuffle buffer's rows (a stream's
  columns; a Parquet row group's ``fill`` is inside it);
* ``permutation``: a fill's permutation drawn (on a thread of its own, while
  the fill is read: ``gather.Drawn``);
* ``gather``: a buffer's rows gathered into batches (``shaped_gather``);
* ``digests``: the batches' ledger digests;
* ``cache read``: an elastic read (``ChunkCacheReader.read``: its gather, and
  any chunk it waits on), ``cache hold``: its decisions of what is held (and
  the chunks read there), ``chunk read``: a chunk read and laid out as rows;
* ``order``: the windowed order mapped (``WindowedOrder``, every caller).

The rest of the consumer thread's time is Python around them: the hand-out
of each batch above all (about 5 us a batch here).

    PYTHONPATH=src .venv/bin/python bench/stream_costs.py
    PYTHONPATH=src .venv/bin/python bench/stream_costs.py --rows 1000000 --modes elastic
    PYTHONPATH=src .venv/bin/python bench/stream_costs.py --modes shuffled --dtype float32
    PYTHONPATH=src .venv/bin/python bench/stream_costs.py --source arrow_stream --rows 600000 \
        --modes "in order" shuffled
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import tempfile
import threading
import time
import warnings

from arrow_sources import make_table  # bench/ is this folder

import exactbatch
import exactbatch.batching.buffer_halves as buffer_halves
import exactbatch.batching.buffer_whole as buffer_whole
import exactbatch.batching.gather as gather
import exactbatch.order.windows as windows
import exactbatch.sources.arrow as arrow
import exactbatch.sources.chunk_cache as chunk_cache
import exactbatch.sources.parquet as parquet
from exactbatch import DataLoader

# (owner, attribute, label): the parts timed, where the code has them
PARTS = [
    (parquet.ParquetSource, "_columns", "decode"),
    (arrow.ArrowRows, "read_rows_into", "fill"),
    (gather, "fill_rows", "buffer fill"),
    (gather.Drawn, "_draw", "permutation"),
    (gather, "shaped_gather", "gather"),
    (gather, "batch_digests", "digests"),
    (chunk_cache.ChunkCacheReader, "read", "cache read"),
    (chunk_cache.ChunkCacheReader, "_hold", "cache hold"),
    (chunk_cache.ChunkCacheReader, "_read", "chunk read"),
    (windows.WindowedOrder, "__call__", "order"),
]


def instrument(spent: collections.Counter) -> None:
    """Wrap each part so that its thread's CPU time adds to ``spent[label]``."""
    for owner, name, label in PARTS:
        f = getattr(owner, name, None)
        if f is None:
            continue

        def timed(*args, _f=f, _label=label, **kwargs):
            t = time.thread_time()
            try:
                return _f(*args, **kwargs)
            finally:
                spent[_label] += time.thread_time() - t

        setattr(owner, name, functools.wraps(f)(timed))
    buffer_whole.fill_rows = buffer_halves.fill_rows = gather.fill_rows  # (imported by name)


SOURCES = ("parquet", "arrow_stream", "lazyframe", "duckdb")


def make_source(kind: str, path: str, table, rows: int):
    """The loader's source of the rows: the Parquet file, or ``table`` as a stream."""
    names = table.column_names
    spec = {"features": names[:-1], "labels": names[-1]}
    if kind == "parquet":
        return exactbatch.parquet_source(path, labels="y")
    if kind == "arrow_stream":
        import pyarrow as pa

        batches = table.to_batches()
        return exactbatch.arrow_source(
            lambda: pa.RecordBatchReader.from_batches(table.schema, batches), **spec
        )
    if kind == "lazyframe":
        import polars as pl

        lf = pl.from_arrow(table).lazy()
        return exactbatch.polars_source(lf, batch_rows=65536, n_rows=rows, **spec)
    import duckdb

    con = duckdb.connect()
    con.register("rows", table)
    con.execute("CREATE TABLE t AS SELECT * FROM rows")
    return exactbatch.duckdb_source(con.table("t"), batch_rows=65536, **spec)


def epochs(
    source, mode: str, batch: int, buffer, rounds: int, spent, dtype: str = "float64", rows=None
) -> tuple:
    """``(process ms, consumer ms, {part: ms})`` of the median epoch (by process time)."""
    opts = {"shuffle": mode != "in order", "buffer_size": buffer, "elastic": mode == "elastic"}
    opts["dtype"] = dtype
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(source, batch, seed=1, **opts, **({"total_size": rows} if rows else {}))
    for _ in loader:  # warm-up: the first epoch reads what the next ones may keep
        pass
    out = []
    for _ in range(rounds):
        spent.clear()
        p, t = time.process_time(), time.thread_time()
        for _ in loader:
            pass
        out.append((time.process_time() - p, time.thread_time() - t, dict(spent)))
    out.sort(key=lambda r: r[0])
    proc, main, parts = out[len(out) // 2]
    return proc * 1e3, main * 1e3, {k: v * 1e3 for k, v in parts.items()}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=400_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", type=int, nargs="+", default=[64, 4096])
    p.add_argument(
        "--buffer", type=int,
        help="shuffle buffer (rows; default 131,072 for Parquet, else the loader's default)",
    )  # fmt: skip
    p.add_argument("--source", default="parquet", choices=SOURCES)
    p.add_argument(
        "--modes", nargs="+", default=["in order", "shuffled", "elastic"],
        choices=["in order", "shuffled", "elastic"],
    )  # fmt: skip
    p.add_argument(
        "--dtype", default="float64", choices=["float64", "float32"],
        help="the batches' dtype (float32: a shuffle buffer of float32 rows)",
    )  # fmt: skip
    a = p.parse_args(argv)
    import pyarrow.parquet as pq

    if a.buffer is None and a.source == "parquet":
        a.buffer = 131_072
    if a.source != "parquet" and "elastic" in a.modes:
        p.error("--modes elastic: Parquet only (a stream read front to back)")

    spent: collections.Counter = collections.Counter()
    instrument(spent)
    print(
        f"{a.source}, {a.rows:,} rows, {a.dtype} batches, buffer "
        f"{'the default' if a.buffer is None else f'{a.buffer:,}'}, median of {a.rounds} epochs, "
        "CPU ms an epoch, "
        f"backend {exactbatch.backend()}, {threading.active_count()} thread(s) at start"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.parquet")
        table = make_table(a.rows)
        pq.write_table(table, path, row_group_size=65536)
        for mode in a.modes:
            for batch in a.batches:
                source = make_source(a.source, path, table, a.rows)
                rows = None if a.source == "parquet" else a.rows  # (a file knows its own)
                proc, main_ms, parts = epochs(
                    source, mode, batch, a.buffer, a.rounds, spent, a.dtype, rows
                )
                shown = ", ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items()))
                print(
                    f"{mode:<9} b={batch:<5} process {proc:6.1f}  consumer {main_ms:6.1f}  "
                    f"({shown})"
                )


if __name__ == "__main__":
    main()
