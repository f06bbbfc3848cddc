"""A sharded dataset against one file: is a loader over the parts as fast as over one .ndf?

Writes the same rows (d=16, l=1: 136 bytes a row) as one .ndf and as a
sharded dataset of --parts uneven parts (each count in turn), reads both once (warm page cache),
then times epochs of ``DataLoader(source, 4096, shuffle=...)`` over each,
alternating in the same run. Printed: rows/s of each and the ratio
dataset / file (the median over --rounds of each round's ratio), shuffled
and in file order, and for 2 shards (shard 0) where a rank opens only its
parts.

With --url, also the per-rank figures of docs/scale.md: the dataset is
uploaded to a local S3 server (moto's, on 127.0.0.1, as the tests use) and
the first --url-batches batches of an epoch of a loader over the URL are
timed (after as many to warm up), counting the ranged GETs and
the bytes they carry: shuffled at batch 4096 (rows close enough to share
ranges), shuffled at --sparse-batch (rows mostly farther apart than the 64
KiB that merges them: about one GET a row, as at scale), and in file order.

    .venv/bin/python bench/bench_dataset.py [--rows 2000000] [--parts 4,16] [--rounds 5] [--url]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from bench_remote_check import epoch_seconds  # noqa: E402  (bench/ is this script's folder)

from exactbatch import (  # noqa: E402
    DataLoader,
    open_ndf,
    open_ndf_dataset,
    save_ndf,
    save_ndf_dataset,
)

BATCH = 4096
D, L = 16, 1


def part_sizes(n: int, parts: int, rng) -> list[int]:
    """Uneven sizes (between half and one and a half of the mean) adding up to n."""
    w = rng.uniform(0.5, 1.5, parts)
    cuts = np.round(np.cumsum(w) / w.sum() * n).astype(int)
    return np.diff(np.concatenate([[0], cuts])).tolist()


def local(a, tmp: str, parts: int) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((a.rows, D)), rng.standard_normal((a.rows, L))
    one = os.path.join(tmp, "one.ndf")
    save_ndf(one, (x, y))
    sizes = part_sizes(a.rows, parts, rng)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    folder = os.path.join(tmp, "ds")
    save_ndf_dataset(
        folder, ((x[p:q], y[p:q]) for p, q in zip(bounds[:-1], bounds[1:], strict=True))
    )
    del x, y
    print(
        f"n={a.rows:,} rows of d={D}, l={L} ({8 * (D + L)} bytes a row), batch {BATCH}; "
        f"dataset: {parts} parts of {min(sizes):,}..{max(sizes):,} rows\n"
    )
    print("| epoch | one file, rows/s | dataset, rows/s | dataset / file |")
    print("|---|---:|---:|---:|")
    for name, kw in (
        ("shuffled", dict(shuffle=True)),
        ("file order", dict(shuffle=False)),
        ("shuffled, shard 0 of 2", dict(shuffle=True, num_shards=2, shard_index=0)),
    ):
        f, ds = open_ndf(one), open_ndf_dataset(folder)
        lf = DataLoader(f, BATCH, seed=1, **kw)
        ld = DataLoader(ds, BATCH, seed=1, **kw)
        rows = lf.total_size // kw.get("num_shards", 1)
        epoch_seconds(lf), epoch_seconds(ld)  # warm: page cache, orders, threads
        ratios, tf, td = [], [], []
        for _ in range(a.rounds):
            sf, sd = epoch_seconds(lf), epoch_seconds(ld)
            tf.append(sf)
            td.append(sd)
            ratios.append(sf / sd)
        print(
            f"| {name} | {rows / statistics.median(tf):,.0f} | "
            f"{rows / statistics.median(td):,.0f} | {statistics.median(ratios):.2f}x |"
        )
        lf.close(), ld.close(), f.close(), ds.close()


def first_batches(loader, k: int) -> tuple[float, int, int]:
    """(seconds, batches, rows) of the first ``k`` batches of a new epoch."""
    t, batches, rows = time.perf_counter(), 0, 0
    for xb, _ in loader:
        batches, rows = batches + 1, rows + len(xb)
        if batches == k:
            break
    return time.perf_counter() - t, batches, rows


def remote(a) -> None:
    """Per-rank rows/s from a URL (the local S3 server), with requests and bytes counted."""
    from bench_remote_check import local_s3

    with local_s3("bench") as (fs, so):
        rng = np.random.default_rng(0)
        n, parts = a.url_rows, a.parts[-1]
        url = "s3://bench/ds"
        save_ndf_dataset(
            url,
            (
                (rng.standard_normal((s, D)), rng.standard_normal((s, L)))
                for s in part_sizes(n, parts, rng)
            ),
            storage_options=so,
        )
        log = {"gets": 0, "bytes": 0}
        real = fs._call_s3

        async def counting(method, *args, **kwargs):
            if method == "get_object" and "Range" in kwargs:  # a ranged read of rows
                first, last = kwargs["Range"].removeprefix("bytes=").split("-")
                log["gets"] += 1
                log["bytes"] += int(last) + 1 - int(first)
            return await real(method, *args, **kwargs)

        fs._call_s3 = counting
        print(f"\nURL (moto's S3 server on 127.0.0.1): n={n:,}, {parts} parts, one rank\n")
        print("| epoch | rows/s | GETs / batch | bytes / GET | GETs/s | MB/s |")
        print("|---|---:|---:|---:|---:|---:|")
        for name, batch, shuffle in (
            (f"shuffled, batch {BATCH}", BATCH, True),
            (f"shuffled, batch {a.sparse_batch} (rows far apart)", a.sparse_batch, True),
            (f"file order, batch {BATCH}", BATCH, False),
        ):
            with open_ndf_dataset(url, storage_options=so) as ds:
                loader = DataLoader(ds, batch, shuffle=shuffle, seed=1)
                first_batches(loader, a.url_batches)  # parts opened, connections made
                log.update(gets=0, bytes=0)
                secs, batches, rows = first_batches(loader, a.url_batches)
                loader.close()
            print(
                f"| {name} | {rows / secs:,.0f} | {log['gets'] / batches:.1f} | "
                f"{log['bytes'] / max(1, log['gets']):,.0f} | {log['gets'] / secs:,.0f} | "
                f"{log['bytes'] / secs / 1e6:.1f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--parts", type=lambda t: [int(v) for v in t.split(",")], default=[4, 16])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--url", action="store_true", help="also time a loader over a URL")
    ap.add_argument("--url-rows", type=int, default=400_000)
    ap.add_argument("--sparse-batch", type=int, default=128)
    ap.add_argument("--url-batches", type=int, default=40, help="batches timed per URL case")
    a = ap.parse_args()
    for parts in a.parts:
        with tempfile.TemporaryDirectory() as tmp:
            local(a, tmp, parts)
    if a.url:
        remote(a)


if __name__ == "__main__":
    main()
