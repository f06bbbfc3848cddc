"""Where a streamed Parquet epoch's CPU time goes (issue 42, item 2): in order,
shuffled through the buffer, or elastic at one rank.

One Parquet file of ``--rows`` rows (16 float64 features and a float64 label,
row groups of 65,536 rows; ``bench/arrow_sources.py``'s table) is read by a
loader whose epochs are timed after one untimed warm-up; each line is the
median epoch of ``--rounds``: the process's CPU time (every thread's: pyarrow
decodes row groups on threads of its own), the consumer thread's, and the CPU
time of each part, on whatever thread ran it (a part called inside another is
counted in both):

* ``decode``: a row group read and checked (``ParquetSource._columns``; the
  decoding itself runs on pyarrow's threads, counted only in the process's);
* ``fill``: a decoded row group copied into a shuffle buffer's rows;
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


def epochs(
    path: str, mode: str, batch: int, buffer: int, rounds: int, spent, dtype: str = "float64"
) -> tuple:
    """``(process ms, consumer ms, {part: ms})`` of the median epoch (by process time)."""
    opts = {"shuffle": mode != "in order", "buffer_size": buffer, "elastic": mode == "elastic"}
    opts["dtype"] = dtype
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loader = DataLoader(exactbatch.parquet_source(path, labels="y"), batch, seed=1, **opts)
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
    p.add_argument("--buffer", type=int, default=131_072, help="shuffle buffer (rows)")
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

    spent: collections.Counter = collections.Counter()
    instrument(spent)
    print(
        f"{a.rows:,} rows, {a.dtype} batches, buffer {a.buffer:,}, median of {a.rounds} epochs, "
        "CPU ms an epoch, "
        f"backend {exactbatch.backend()}, {threading.active_count()} thread(s) at start"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.parquet")
        pq.write_table(make_table(a.rows), path, row_group_size=65536)
        for mode in a.modes:
            for batch in a.batches:
                proc, main_ms, parts = epochs(path, mode, batch, a.buffer, a.rounds, spent, a.dtype)
                shown = ", ".join(f"{k} {v:.1f}" for k, v in sorted(parts.items()))
                print(
                    f"{mode:<9} b={batch:<5} process {proc:6.1f}  consumer {main_ms:6.1f}  "
                    f"({shown})"
                )


if __name__ == "__main__":
    main()
