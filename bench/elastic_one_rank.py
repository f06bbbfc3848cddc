"""Elastic at one rank against the same stream read plainly (issue 42): the cost elastic adds.

One source of ``--rows`` rows (16 float64 features and a float64 label,
chunks of 65,536 rows: a Parquet file of that many row groups, or a list of
NumPy chunks, ``--source list``) is read by two shuffled loaders at one
rank, ``elastic=False`` (the shuffle buffer, ``--buffer`` rows) and
``elastic=True`` (the windowed order over the chunk cache, the same
``buffer_size``), at each batch size; their epochs are interleaved round
by round (the order reversed every other round), after one untimed warm-up
epoch each, and each figure is the median epoch of ``--rounds``. The ratio
is the plain epoch's time over the elastic one's (above 1: elastic is
faster). ``--clock cpu`` (the default) times the process's CPU (every
thread's: the read-ahead and pyarrow's decoding too), which a loaded machine
disturbs less than the wall clock.

At 1M rows the elastic chunk cache (two windows and four chunks) cannot hold
the stream, so each epoch reads every chunk, as the plain stream does; at
400,000 rows it holds it whole and reads nothing after the first epoch.

    PYTHONPATH=src .venv/bin/python bench/elastic_one_rank.py                # 1M rows
    PYTHONPATH=src .venv/bin/python bench/elastic_one_rank.py --source list --rows 400000
    PYTHONPATH=src .venv/bin/python bench/elastic_one_rank.py --ledger   # the promise alone

``--ledger`` prints instead the CPU time of the ledger's promise at an epoch's end
(``RandomAccessEpoch.promise``, once the epoch's whole order is computed; thread
CPU, min of 5) on a list of ``--rows`` rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

from arrow_sources import make_table  # bench/ is this folder

import exactbatch
from exactbatch import DataLoader

CHUNK = 65536


def ledger(rows: int) -> None:
    """The CPU time of an elastic epoch's promise at one rank (module docs)."""
    import numpy as np

    x = np.random.default_rng(0).standard_normal((rows, 4))
    chunks = [x[a : a + CHUNK] for a in range(0, rows, CHUNK)]
    loader = DataLoader(chunks, 64, seed=1, buffer_size=131_072, elastic=True, total_size=rows)
    epoch = loader._feed.rows.open_epoch(1, 0, 0)
    while epoch.order is not None and epoch.order.whole is None:  # (its background thread)
        time.sleep(0.01)
    spent = []
    for _ in range(5):
        t = time.thread_time()
        epoch.promise()
        spent.append(time.thread_time() - t)
    print(f"{rows:,} rows, batch 64: the promise {min(spent) * 1e3:.2f} ms (thread CPU, min of 5)")


def make_source(kind: str, folder: str, rows: int):
    """A zero-argument maker of the source (each loader its own)."""
    table = make_table(rows)
    if kind == "parquet":
        import pyarrow.parquet as pq

        path = os.path.join(folder, "rows.parquet")
        pq.write_table(table, path, row_group_size=CHUNK)
        return lambda: exactbatch.parquet_source(path, labels="y")
    import numpy as np

    x = np.column_stack([table.column(j).to_numpy() for j in range(table.num_columns - 1)])
    y = table.column("y").to_numpy()
    chunks = [(x[a : a + CHUNK], y[a : a + CHUNK]) for a in range(0, rows, CHUNK)]
    return lambda: list(chunks)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--batches", type=int, nargs="+", default=[64, 4096])
    p.add_argument("--buffer", type=int, default=131_072, help="buffer_size (rows)")
    p.add_argument("--source", choices=["parquet", "list"], default="parquet")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--drop-last", action="store_true")
    p.add_argument("--ledger", action="store_true", help="time the ledger's promise only")
    a = p.parse_args(argv)
    if a.ledger:
        ledger(a.rows)
        return
    clock = time.process_time if a.clock == "cpu" else time.perf_counter
    print(
        f"{a.source}, {a.rows:,} rows, buffer {a.buffer:,}, median of {a.rounds} epochs "
        f"({a.clock} ms an epoch), backend {exactbatch.backend()}, drop_last={a.drop_last}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        make = make_source(a.source, tmp, a.rows)
        for batch in a.batches:
            loaders = {}
            for elastic in (False, True):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a list's counting pass
                    loaders[elastic] = DataLoader(
                        make(), batch, seed=1, shuffle=True, buffer_size=a.buffer,
                        elastic=elastic, drop_last=a.drop_last,
                    )  # fmt: skip
                for _ in loaders[elastic]:  # warm-up
                    pass
            times: dict[bool, list[float]] = {False: [], True: []}
            for r in range(a.rounds):
                for elastic in (False, True) if r % 2 == 0 else (True, False):
                    t = clock()
                    for _ in loaders[elastic]:
                        pass
                    times[elastic].append(clock() - t)
            plain, el = statistics.median(times[False]), statistics.median(times[True])
            print(
                f"b={batch:<5} plain {plain * 1e3:7.1f}  elastic {el * 1e3:7.1f}  "
                f"plain/elastic {plain / el:5.2f}x"
            )
            for loader in loaders.values():
                loader.close()


if __name__ == "__main__":
    main()
