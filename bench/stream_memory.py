"""NumPy memory a streaming loader holds, in batches, against DESIGN.md's promise.

The setting of ``tests/feeds/test_streamed.py``'s memory test (12,000 rows of 20
features and a label, made chunk by chunk by a generator; batch 500, buffer 1,000
rows): each line is the most NumPy memory held at any batch (``tracemalloc``, after a
collection), as batches of the loader's dtype, and the test's bound (the buffer, two
batches and two chunks, with its slack), for ``iter()`` and ``next_into``, in the first
epoch (a stream not read yet) and a later one (its widths known: claims take groups).
Issue 42: ``next_into`` held 13.4-20.9 batches here, ``iter()`` in a later epoch
7.4-12.7.

    PYTHONPATH=src .venv/bin/python bench/stream_memory.py [--prefetch 0]
    EXACTBATCH_PURE=1 PYTHONPATH=src .venv/bin/python bench/stream_memory.py
"""

from __future__ import annotations

import argparse
import gc
import tracemalloc

import numpy as np

from exactbatch import DataLoader, backend

D, B, BUFFER, ROWS = 20, 500, 1000, 12_000


def _numpy_bytes() -> int:
    snap = tracemalloc.take_snapshot()
    snap = snap.filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    return sum(t.size for t in snap.traces)


def held(chunk_rows: int, shuffle: bool, dtype, via: str, later: bool, prefetch: int):
    """(most batches held, the bound in batches)."""
    row_bytes, chunk_bytes = (D + 1) * np.dtype(dtype).itemsize, (D + 1) * 8
    sizes = [chunk_rows] * (ROWS // chunk_rows)

    def factory():
        def gen():
            a = 0
            for s in sizes:
                r = np.arange(a, a + s, dtype=np.float64)
                yield np.repeat(r[:, None], D, axis=1), r[:, None].copy()
                a += s

        return gen()

    bound = 2 * B * row_bytes + 2 * chunk_rows * chunk_bytes
    bound += BUFFER * (row_bytes + 8) if shuffle else 0
    bound += bound // 20 + 4096
    loader = DataLoader(
        factory, B, shuffle=shuffle, seed=0, total_size=sum(sizes), buffer_size=BUFFER,
        dtype=dtype, prefetch=prefetch,
    )  # fmt: skip
    bx, by = np.empty((B, D), dtype), np.empty((B, 1), dtype)
    if later:
        for _ in loader:
            pass
        loader.reset()
    worst = 0
    tracemalloc.start()
    try:
        if via == "iter":
            for xb, yb in loader:
                del xb, yb
                gc.collect()
                worst = max(worst, _numpy_bytes())
        else:
            while loader.next_into(bx, by):
                gc.collect()
                worst = max(worst, _numpy_bytes())
    finally:
        tracemalloc.stop()
    one = B * row_bytes
    return worst / one, bound / one


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--prefetch", type=int, default=0)
    args = parser.parse_args()
    print(f"backend {backend()}, prefetch {args.prefetch}: batches held (bound)")
    for via in ("iter", "next_into"):
        for later in (False, True):
            for shuffle in (False, True):
                for dtype in (np.float64, np.float32):
                    cells = []
                    for chunk_rows in (150, 500, 1300):
                        h, bound = held(chunk_rows, shuffle, dtype, via, later, args.prefetch)
                        cells.append(f"{h:5.1f} ({bound:4.1f}){' OVER' if h > bound else '     '}")
                    head = f"{via:9s} {'later' if later else 'first':5s} shuffle={shuffle!s:5s}"
                    print(f"{head} {np.dtype(dtype).name:7s} " + "  ".join(cells))
    print("(columns: chunks of 150, 500 and 1300 rows)")


if __name__ == "__main__":
    main()
