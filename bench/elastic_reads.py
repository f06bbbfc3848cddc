"""Read amplification and speed of elastic streams, against the same stream sharded by chunks.

An elastic streamed epoch (``elastic=True`` on Parquet or ``ndf_blocks``) deals
one global order's batches to the S ranks in turn, so each rank reads every
window its batches touch; a plain S-rank run reads only its own chunks, and so
does ``elastic="ranges"`` (contiguous shares of each segment's rows). For S
in 1..4 this prints, per source kind, the rows of chunks all S ranks read in
one epoch as a multiple of N (the read amplification: 1.0 reads every row
once), for plain, elastic and ranges, and the epoch's rows/s of rank 0 against plain
rank 0 measured in the same run.

    .venv/bin/python bench/elastic_reads.py [--rows 400000] [--batch 1024]

Counting is by a wrapper on the chunk source (rows of every chunk read,
decoded or read into a buffer), so both paths are counted the same way.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import exactbatch
from exactbatch import DataLoader


class Counted:
    """A chunk source that counts the rows of every chunk read, however it is read."""

    def __init__(self, inner):
        self.inner, self.rows = inner, 0
        if hasattr(inner, "read_rows_into"):
            self.read_rows_into = self._read_rows_into
        if hasattr(inner, "open_chunk"):
            self.open_chunk = self._open_chunk
        if hasattr(inner, "read_columns"):  # (Parquet: how an elastic stream reads it)
            self.read_columns = self._read_columns

    def __getattr__(self, name):
        if name in ("read_rows_into", "open_chunk", "read_columns"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def _read_columns(self, i):
        self.rows += int(self.inner.chunk_rows[i])
        return self.inner.read_columns(i)

    def read_chunk(self, i):
        self.rows += int(self.inner.chunk_rows[i])
        return self.inner.read_chunk(i)

    def _open_chunk(self, i):
        self.rows += int(self.inner.chunk_rows[i])
        return self.inner.open_chunk(i)

    def _read_rows_into(self, row, out):
        self.rows += len(out)
        self.inner.read_rows_into(row, out)


def write_sources(folder: str, n: int, d: int, groups: int):
    """A Parquet file of ``groups`` row groups and an .ndf file, both of n rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    x = np.random.default_rng(0).standard_normal((n, d))
    table = pa.table({f"x{j}": x[:, j] for j in range(d)} | {"y": x[:, 0]})
    pq.write_table(table, os.path.join(folder, "a.parquet"), row_group_size=n // groups)
    exactbatch.save_ndf(os.path.join(folder, "a.ndf"), (x, x[:, :1]))


def make_source(folder: str, kind: str, block_rows: int):
    if kind == "parquet":
        return exactbatch.parquet_source(os.path.join(folder, "a.parquet"), labels=["y"])
    f = exactbatch.open_ndf(os.path.join(folder, "a.ndf"))
    try:
        return exactbatch.ndf_blocks(f, block_rows)
    finally:
        f.close()


def epoch(folder, kind, block_rows, shards, rank, elastic, batch, buffer):
    """Rows read by rank ``rank`` in one epoch, and its rows/s."""
    src = Counted(make_source(folder, kind, block_rows))
    loader = DataLoader(
        src, batch, num_shards=shards, shard_index=rank, elastic=elastic, buffer_size=buffer
    )
    start, rows = time.perf_counter(), 0
    for xb, _ in loader:
        rows += len(xb)
    rate = rows / (time.perf_counter() - start)
    loader.close()
    return src.rows, rate


def resumed(folder, kind, block_rows, batch, buffer, shards=4, steps=40, after=3):
    """Rows all ranks read in one epoch of ``elastic="ranges"``: ``shards`` ranks for
    ``steps`` lockstep steps, then ``after`` ranks resumed from their states, to the end."""
    read, states = 0, []
    for r in range(shards):
        src = Counted(make_source(folder, kind, block_rows))
        loader = DataLoader(
            src, batch, num_shards=shards, shard_index=r, elastic="ranges", buffer_size=buffer
        )
        it = iter(loader)
        for _ in range(steps):
            next(it, None)
        states.append(loader.state_dict())
        loader.close()
        read += src.rows
    for r in range(after):
        src = Counted(make_source(folder, kind, block_rows))
        loader = DataLoader(
            src, batch, num_shards=after, shard_index=r, elastic="ranges", buffer_size=buffer
        )
        loader.load_state_dict(states[r])
        for _ in loader:
            pass
        loader.close()
        read += src.rows
    return read


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=400_000)
    ap.add_argument("--features", type=int, default=16)
    ap.add_argument("--groups", type=int, default=40, help="row groups / blocks in the file")
    ap.add_argument("--batch", type=int, default=1024)
    ap.add_argument("--buffer", type=int, default=40_000, help="buffer_size (the window)")
    args = ap.parse_args()
    n = args.rows
    with tempfile.TemporaryDirectory() as folder:
        write_sources(folder, n, args.features, args.groups)
        print(
            f"{n} rows x {args.features}+1, {args.groups} chunks of {n // args.groups} rows, "
            f"batch {args.batch}, buffer/window {args.buffer} rows ({os.cpu_count()} cores)"
        )
        head = f"{'plain reads':>12} {'elastic reads':>14} {'ranges reads':>13} {'rank 0 rate':>12}"
        print(f"{'source':10} {'S':>2} {head} {'ranges rate':>12}")
        for kind in ("parquet", "ndf_blocks"):
            for shards in (1, 2, 3, 4):
                totals, rates = {}, {}
                for elastic in (False, True, "ranges"):
                    block = n // args.groups
                    got = [
                        epoch(folder, kind, block, shards, r, elastic, args.batch, args.buffer)
                        for r in range(shards)
                    ]
                    totals[elastic] = sum(g[0] for g in got) / n
                    rates[elastic] = got[0][1]
                print(
                    f"{kind:10} {shards:>2} {totals[False]:>11.2f}x {totals[True]:>13.2f}x "
                    f"{totals['ranges']:>12.2f}x {rates[True] / rates[False]:>11.2f}x "
                    f"{rates['ranges'] / rates[False]:>11.2f}x"
                )
        for kind in ("parquet", "ndf_blocks"):
            got = resumed(folder, kind, n // args.groups, args.batch, args.buffer) / n
            print(f'{kind}: elastic="ranges" at S=4 for 40 steps, then S\'=3: reads {got:.2f}x')
        print(
            "reads: rows of chunks read by all S ranks in an epoch / N (elastic=True, and "
            'elastic="ranges"); rank 0 rate: its rows/s / plain rows/s (one run; noisy on a '
            "shared machine)"
        )


if __name__ == "__main__":
    main()
