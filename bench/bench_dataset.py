"""A sharded dataset against one file: is a loader over the parts as fast as over one .ndf?

Writes the same rows (d=16, l=1: 136 bytes a row) as one .ndf and as a
sharded dataset of --parts uneven parts, reads both once (warm page cache),
then times epochs of ``DataLoader(source, 4096, shuffle=...)`` over each,
alternating in the same run. Printed: rows/s of each and the ratio
dataset / file (the median over --rounds of each round's ratio), shuffled
and in file order, and for 2 shards (shard 0) where a rank opens only its
parts.

With --url, also the per-rank figures of docs/scale.md: the dataset is
uploaded to a local S3 server (moto's, on 127.0.0.1, as the tests use) and
one epoch of a loader over the URL is timed, shuffled and not, counting
the ranged GETs and the bytes they carry.

    .venv/bin/python bench/bench_dataset.py [--rows 2000000] [--parts 16] [--rounds 5] [--url]
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


def epoch(loader) -> float:
    t = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t


def local(a, tmp: str) -> None:
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((a.rows, D)), rng.standard_normal((a.rows, L))
    one = os.path.join(tmp, "one.ndf")
    save_ndf(one, (x, y))
    sizes = part_sizes(a.rows, a.parts, rng)
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    folder = os.path.join(tmp, "ds")
    save_ndf_dataset(folder, ((x[p:q], y[p:q]) for p, q in zip(bounds[:-1], bounds[1:])))
    del x, y
    print(f"n={a.rows:,} rows of d={D}, l={L} ({8 * (D + L)} bytes a row), batch {BATCH}; "
          f"dataset: {a.parts} parts of {min(sizes):,}..{max(sizes):,} rows\n")
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
        epoch(lf), epoch(ld)  # warm: page cache, orders, threads
        ratios, tf, td = [], [], []
        for _ in range(a.rounds):
            sf, sd = epoch(lf), epoch(ld)
            tf.append(sf)
            td.append(sd)
            ratios.append(sf / sd)
        print(f"| {name} | {rows / statistics.median(tf):,.0f} | "
              f"{rows / statistics.median(td):,.0f} | {statistics.median(ratios):.2f}x |")
        lf.close(), ld.close(), f.close(), ds.close()


def remote(a, tmp: str) -> None:
    """Per-rank rows/s from a URL (the local S3 server), with requests and bytes counted."""
    import logging

    from moto.server import ThreadedMotoServer

    from exactbatch import urls

    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
    }.items():
        os.environ[k] = v
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        so = {"key": "testing", "secret": "testing",
              "client_kwargs": {"endpoint_url": f"http://{host}:{port}"}}
        fs, _ = urls.url_to_fs("s3://bench", so)
        fs.mkdir("bench")
        rng = np.random.default_rng(0)
        n = a.url_rows
        sizes = part_sizes(n, a.parts, rng)
        url = "s3://bench/ds"
        save_ndf_dataset(
            url, ((rng.standard_normal((s, D)), rng.standard_normal((s, L))) for s in sizes),
            storage_options=so,
        )
        log = {"gets": 0, "bytes": 0}
        real = fs._call_s3

        async def counting(method, *args, **kwargs):
            out = await real(method, *args, **kwargs)
            if method == "get_object":
                a_, b_ = kwargs["Range"].removeprefix("bytes=").split("-")
                log["gets"] += 1
                log["bytes"] += int(b_) + 1 - int(a_)
            return out

        fs._call_s3 = counting
        print(f"\nURL (moto's S3 server on 127.0.0.1): n={n:,}, {a.parts} parts, batch {BATCH}\n")
        print("| epoch | rows/s | GETs / batch | bytes / GET | MB/s |")
        print("|---|---:|---:|---:|---:|")
        for name, shuffle in (("shuffled", True), ("file order", False)):
            with open_ndf_dataset(url, storage_options=so) as ds:
                loader = DataLoader(ds, BATCH, shuffle=shuffle, seed=1)
                epoch(loader)  # parts opened, connections made
                log.update(gets=0, bytes=0)
                secs = epoch(loader)
                batches = len(loader)
                loader.close()
            print(f"| {name} | {n / secs:,.0f} | {log['gets'] / batches:.1f} | "
                  f"{log['bytes'] / max(1, log['gets']):,.0f} | {log['bytes'] / secs / 1e6:.1f} |")
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--parts", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--url", action="store_true", help="also time a loader over a URL")
    ap.add_argument("--url-rows", type=int, default=400_000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        local(a, tmp)
        if a.url:
            remote(a, tmp)


if __name__ == "__main__":
    main()
