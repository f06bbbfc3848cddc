"""Writing a sharded dataset with Dask against ``exactbatch convert`` in one process.

The same Parquet folder (``--files`` files of ``--rows`` rows in all, D float64
features and one boolean label, row groups of 65,536 rows) is written twice:

* baseline: ``exactbatch convert FOLDER out.ndf --labels y`` run in this
  process (the function the command calls, no progress bar): one reader,
  one writer, one file;
* Dask: ``to_ndf_dataset(dd.read_parquet(FOLDER), out/, labels="y")`` on a
  ``LocalCluster`` of ``--workers`` worker processes (one thread each): one
  part per partition (a partition per Parquet file), written by the
  workers in parallel, the manifest last. The cluster is started before
  the clock starts (its start-up, a few seconds, is not the write's).

Each is timed ``--repeats`` times after one untimed warm-up run of each
(the Parquet files are then in the page cache for both), and the best time
counts. Printed: rows/s and MB/s of .ndf written for each, and the ratio
Dask / convert (the issue's target: >= 0.5x). Then the two ranks of a
training job, read one after the other here: one shuffled epoch of
``DataLoader(open_ndf_dataset(out), 4096, num_shards=2, shard_index=r)``
for r = 0, 1 (the dataset just written, warm in the page cache), in rows/s. Outputs are written to a
temporary folder (``--dir`` to choose where), removed afterwards.

    python bench/bench_dask.py                  # 2,000,000 rows, 8 files, 2 workers
    python bench/bench_dask.py --rows 10000000 --files 16
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time

import numpy as np

D = 16


def write_parquet(folder: str, rows: int, files: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(seed)
    bounds = np.linspace(0, rows, files + 1).astype(np.int64)
    for k in range(files):
        r = int(bounds[k + 1] - bounds[k])
        cols = {f"f{j}": rng.standard_normal(r) for j in range(D)}
        cols["y"] = rng.random(r) < 0.3
        pq.write_table(
            pa.table(cols), os.path.join(folder, f"part-{k:03d}.parquet"), row_group_size=65536
        )


def best_seconds(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=2_000_000)
    p.add_argument("--files", type=int, default=8)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    a = p.parse_args()

    import dask.dataframe as dd
    from distributed import Client, LocalCluster

    from exactbatch import DataLoader, open_ndf_dataset
    from exactbatch.dask import to_ndf_dataset
    from exactbatch.tools.convert import convert

    root = tempfile.mkdtemp(prefix="bench-dask-", dir=a.dir)
    try:
        src = os.path.join(root, "parquet")
        os.mkdir(src)
        t0 = time.perf_counter()
        write_parquet(src, a.rows, a.files)
        print(
            f"data: {a.rows:,} rows x ({D} features + 1 label) in {a.files} Parquet files "
            f"({sum(os.path.getsize(os.path.join(src, f)) for f in os.listdir(src)) / 2**20:,.0f}"
            f" MiB), made in {time.perf_counter() - t0:.1f} s"
        )
        one = os.path.join(root, "one.ndf")
        sharded = os.path.join(root, "sharded")

        def run_convert():
            convert(src, one, labels="y", force=True, bar=False)

        with (
            LocalCluster(
                n_workers=a.workers, threads_per_worker=1, processes=True, dashboard_address=None
            ) as cluster,
            Client(cluster),
        ):

            def run_dask():
                to_ndf_dataset(dd.read_parquet(src), sharded, labels="y")

            run_convert()  # warm-ups: files in the page cache, code imported everywhere
            run_dask()
            t_convert = best_seconds(run_convert, a.repeats)
            t_dask = best_seconds(run_dask, a.repeats)
        with open_ndf_dataset(sharded) as ds:
            assert (ds.n, ds.d, ds.l) == (a.rows, D, 1), ds
            parts = len(ds.parts)
        ranks = []
        for rank in (0, 1):
            with open_ndf_dataset(sharded) as ds:
                loader = DataLoader(ds, 4096, num_shards=2, shard_index=rank, seed=0)
                t0 = time.perf_counter()
                rows = sum(len(xb) for xb, _ in loader)
                ranks.append((rows, time.perf_counter() - t0, ds.open_parts))
        nbytes = os.path.getsize(one)
        print(
            f"exactbatch convert, one process:    {t_convert:7.2f} s  "
            f"{a.rows / t_convert / 1e6:6.2f} M rows/s  {nbytes / t_convert / 2**20:6.0f} MiB/s"
        )
        print(
            f"to_ndf_dataset, {a.workers} worker processes: {t_dask:7.2f} s  "
            f"{a.rows / t_dask / 1e6:6.2f} M rows/s  {nbytes / t_dask / 2**20:6.0f} MiB/s  "
            f"({parts} parts)"
        )
        print(
            f"ratio to_ndf_dataset / convert: {t_convert / t_dask:.2f}x (target >= 0.5x); "
            f"{os.cpu_count()} CPUs"
        )
        for rank, (rows, secs, opened) in enumerate(ranks):
            print(
                f"rank {rank} of 2, one shuffled epoch at batch 4096: {rows:,} rows in "
                f"{secs:.2f} s, {rows / secs / 1e6:.2f} M rows/s; parts opened "
                f"{opened[0]}..{opened[-1]}"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
