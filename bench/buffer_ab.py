"""A shuffled Parquet epoch with and without one of the shuffle buffer's two cuts of
docs/benchmarks.md's Round 6, in one process (issue 42, item 2).

One Parquet file of ``--rows`` rows (``bench/arrow_sources.py``'s table: 16 float64
features and a float64 label, row groups of 65,536) is read by two shuffled loaders
(buffer 131,072 rows, one piece), "before" and "after", their epochs alternated round
by round (the order reversed every other round) after one untimed warm-up each; each
figure is the median of ``--rounds`` epochs, CPU ms: the process's (every thread's,
pyarrow's decoding too) and the consumer thread's. Each loader keeps its own buffer
from one epoch to the next, as a loader does.

* ``--what f32``: float32 batches from a float64 buffer whose gather narrows them
  (``gather.NARROW = False``: the path before) against a buffer holding float32 rows;
* ``--what draw``: each fill's permutation drawn after the fill, on the consumer
  thread (``buffer_whole.DRAW_AHEAD_ROWS`` past any fill) against drawn while the fill
  is read, on a thread of its own; at ``--dtype``.

    PYTHONPATH=src .venv/bin/python bench/buffer_ab.py --what f32
    PYTHONPATH=src .venv/bin/python bench/buffer_ab.py --what draw --dtype float64
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
import warnings

import numpy as np
from arrow_sources import make_table  # bench/ is this folder

import exactbatch
import exactbatch.batching.buffer_whole as buffer_whole
import exactbatch.batching.gather as gather
from exactbatch import DataLoader

DRAW_AHEAD = buffer_whole.DRAW_AHEAD_ROWS


def switch(what: str, after: bool) -> None:
    """The knob of ``what``, as before or after."""
    if what == "f32":
        gather.NARROW = after
    else:
        buffer_whole.DRAW_AHEAD_ROWS = DRAW_AHEAD if after else 1 << 62


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--what", choices=["f32", "draw"], default="f32")
    p.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    p.add_argument("--batches", type=int, nargs="+", default=[64, 4096])
    a = p.parse_args(argv)
    import pyarrow.parquet as pq

    dtype = np.float32 if a.what == "f32" else np.dtype(a.dtype)
    print(
        f"{a.rows:,} rows, buffer 131,072, --what {a.what}, {np.dtype(dtype)} batches, median "
        f"of {a.rounds} alternated epochs, CPU ms (process / consumer), "
        f"backend {exactbatch.backend()}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "rows.parquet")
        pq.write_table(make_table(a.rows), path, row_group_size=65536)
        for b in a.batches:
            loaders = {}
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for after in (False, True):
                    source = exactbatch.parquet_source(path, labels="y")
                    loaders[after] = DataLoader(
                        source, b, seed=1, shuffle=True, buffer_size=131072, dtype=dtype
                    )
                    switch(a.what, after)
                    for _ in loaders[after]:  # warm-up
                        pass
            spent: dict[bool, list[tuple[float, float]]] = {False: [], True: []}
            for r in range(a.rounds):
                for after in (False, True)[:: 1 if r % 2 == 0 else -1]:
                    switch(a.what, after)
                    p0, t0 = time.process_time(), time.thread_time()
                    for _ in loaders[after]:
                        pass
                    spent[after].append((time.process_time() - p0, time.thread_time() - t0))
            med = {}
            for k, v in spent.items():
                med[k] = (
                    1e3 * statistics.median(x for x, _ in v),
                    1e3 * statistics.median(c for _, c in v),
                )
            (pb, cb), (pa, ca) = med[False], med[True]
            print(
                f"b={b:<5} before {pb:6.1f} / {cb:6.1f}  after {pa:6.1f} / {ca:6.1f}  "
                f"after/before: process {pa / pb:.2f}x, consumer {ca / cb:.2f}x",
                flush=True,
            )
    switch(a.what, True)


if __name__ == "__main__":
    main()
