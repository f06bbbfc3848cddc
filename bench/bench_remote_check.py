"""What checking a remote .ndf object's identity on every read costs, per batch.

A loader reads an .ndf object from a local S3 server (moto's, on 127.0.0.1;
no network) in file order and shuffled. Timed per batch (best of --repeat
epochs), three ways:

- unchecked: the bare ranged reads (``fs.cat_ranges``), as before the check;
- ETag on each GET (now, on S3): ``If-Match`` and the response's ETag;
- a metadata request after each read: what other protocols pay, measured
  here on the same S3 server by taking the non-S3 path.

The server is moto's Python one, so absolute figures are moto's; the
difference between rows is what the check adds.

    .venv/bin/python bench/bench_remote_check.py [--rows 20000] [--batch 512]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import tempfile
import time

import numpy as np

from exactbatch import DataLoader, open_ndf, save_ndf, urls
from exactbatch.ndf import remote


def bare_fetch(self, starts, ends):
    """The read without any identity check (the unchecked baseline)."""
    fs = self.fs.get()
    return fs.cat_ranges([self.key] * len(starts), list(starts), list(ends), **self.pin)


@contextlib.contextmanager
def local_s3(bucket: str):
    """``(fs, storage_options)`` of moto's S3 server on 127.0.0.1, with ``bucket`` made;
    the server stops at the end of the block."""
    for k, v in {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "NO_PROXY": "127.0.0.1",
    }.items():
        os.environ[k] = v
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()  # binds port 0 itself; the port it got is read back
    try:
        host, port = server.get_host_and_port()
        so = {
            "key": "bench",
            "secret": "bench",
            "client_kwargs": {"endpoint_url": f"http://{host}:{port}"},
        }
        fs, _ = urls.url_to_fs(f"s3://{bucket}", so)
        fs.mkdir(bucket)
        yield fs, so
    finally:
        server.stop()


def epoch_seconds(loader) -> float:
    t = time.perf_counter()
    for _ in loader:
        pass
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with local_s3("bench") as (fs, so):
        rng = np.random.default_rng(0)
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "b.ndf")
            save_ndf(path, (rng.standard_normal((a.rows, 16)), rng.standard_normal(a.rows)))
            fs.put_file(path, "bench/b.ndf")
        f = open_ndf("s3://bench/b.ndf", storage_options=so)
        checked, is_s3 = remote.RemoteHandle.fetch, remote._is_s3
        ways = {
            "unchecked (before)": lambda: setattr(remote.RemoteHandle, "fetch", bare_fetch),
            "ETag on each GET (now, S3)": lambda: None,
            "metadata request after each read": lambda: setattr(remote, "_is_s3", lambda fs: 0),
        }
        orders = (False, True)
        best = {(w, s): float("inf") for w in ways for s in orders}
        for _ in range(a.repeat):  # the ways take turns, so that drift hits them alike
            for name, setup in ways.items():
                setup()
                try:
                    for s in orders:
                        loader = DataLoader(f, a.batch, shuffle=s, seed=1)
                        secs = epoch_seconds(loader) / len(loader)
                        best[name, s] = min(best[name, s], secs)
                finally:
                    remote.RemoteHandle.fetch, remote._is_s3 = checked, is_s3
        print(f"n={a.rows:,}, d=16, l=1, batch={a.batch}, best of {a.repeat} epochs, moto\n")
        print("| read | file order, us/batch | shuffled, us/batch |")
        print("|---|---:|---:|")
        first = next(iter(ways))
        for name in ways:
            cells = " | ".join(
                f"{best[name, s] * 1e6:.0f} ({best[name, s] / best[first, s]:.2f}x)" for s in orders
            )
            print(f"| {name} | {cells} |")


if __name__ == "__main__":
    main()
