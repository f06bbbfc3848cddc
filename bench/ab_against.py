"""The loader as it is against itself at an earlier commit, in one process.

The earlier commit's package is checked out into a scratch folder (a git
worktree), its compiled core built there, and imported under another name
(``exactbatch_then``), so both run side by side: each round times one
shuffled epoch of each in turn (thread CPU time; wall time with prefetch,
whose work is on another thread), alternating which goes first, and the
median and the best of ``--rounds`` are printed as ratios now/then (above 1:
faster now). In-process and interleaved, because this machine's speed drifts
by up to 2x between processes. Each round also times the limit: one core running
exactbatch's compiled gather (``kernels.memory_rows(x, y).read``) over a held
permutation into reused buffers (compare.py's ``c_limit``), so the table gives
each loader's microseconds per batch, their overhead above the limit's, and
the fraction of the limit reached (best of the rounds).

    .venv/bin/python bench/ab_against.py 606698f [--rows 1000000] [--batch 64 256 1024]
    .venv/bin/python bench/ab_against.py 376bbad --batch 64 4096 --via iter next_into
    .venv/bin/python bench/ab_against.py 1d288cc --then-src ../main/src --source ndf --rows 600000

``--then-src FOLDER`` takes the earlier package from a folder holding ``exactbatch``
(its compiled core built) instead of a git worktree of ``rev`` (which then only names
it); ``--clock process`` times each epoch in process CPU time, every thread's (the
order's background thread counted, as compare.py's ``--clock cpu``) instead of the
calling thread's.

What the limit leaves out: it gathers over an order drawn once, outside its timed
epochs, while a shuffled loader computes each epoch's order (and its batches' ledger
digests) on its order thread, the next epoch's during this one: under ``--clock
process`` that thread's work is in the loader's epoch. ``--limit-order keyed`` charges
the limit the same work: each of its epochs computes the loader's own order of the
epoch inside its timed epoch (the keyed bijection's whole order and its batches'
digests, ``EpochBijection.whole_into``, int32, on the calling thread), so that the two
epochs do the same work; ``numpy`` draws ``rng.permutation`` instead (slower than the
keyed order: it overcharges the limit). The table then says ``C limit+order``.
Without it, the overhead a batch above the limit includes the order's cost a batch
(its epoch's share: tens of us a batch at 4096 rows).

``--source ndf`` writes the rows to an .ndf file in the scratch folder (warm in the page
cache) and each loader reads it through its own ``open_ndf``; the limit is then the
compiled gather from the file's mapping (``NdfFile.kernel_rows().read``: the guarded
copy and its ``fstat``). ``--source dataset``: a sharded .ndf dataset of four equal
parts each loader opens with ``open_ndf_dataset``; the limit the dataset's own
``read_rows_into`` (its compiled gather over the parts' mappings, behind two Python
calls). ``--source stream``: the rows as a list of ``(x, y)`` chunks of ``--chunk-rows``
rows, a stream each loader re-batches, shuffled through its buffer (the default
``buffer_size``); ``stream-ordered``: the same, unshuffled (re-batched in order, a batch
at a time). The limit stays the compiled gather from memory: a reference, not what a
stream could reach.

    PYTHONPATH=src .venv/bin/python bench/ab_against.py main --then-src ../main/src \
        --source stream stream-ordered --batch 64 500 --via iter next_into
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
from baselines import LIMIT_ORDERS, order_draw  # bench/ is this script's folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
THEN = "exactbatch_then"


def import_then(rev: str, scratch: str, src: str | None = None):
    """``exactbatch`` at ``rev``, built in ``scratch`` and imported as ``exactbatch_then``
    (``src``: a folder holding that package, built, copied instead)."""
    if src is not None:
        shutil.copytree(os.path.join(src, "exactbatch"), os.path.join(scratch, THEN))
        return _renamed(scratch)
    tree = os.path.join(scratch, "tree")
    subprocess.run(["git", "-C", ROOT, "worktree", "add", "-q", "--detach", tree, rev], check=True)
    try:
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace"],
            cwd=tree,
            check=True,
            capture_output=True,
        )
        shutil.copytree(os.path.join(tree, "src", "exactbatch"), os.path.join(scratch, THEN))
    finally:
        subprocess.run(["git", "-C", ROOT, "worktree", "remove", "--force", tree], check=True)
    return _renamed(scratch)


def _renamed(scratch: str):
    """The package copied into ``scratch``, its imports renamed, imported."""
    for folder, _, files in os.walk(os.path.join(scratch, THEN)):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                with open(path) as f:
                    text = f.read()
                text = re.sub(r"\b(from|import) exactbatch\b", rf"\1 {THEN}", text)
                with open(path, "w") as f:
                    f.write(text)
    sys.path.insert(0, scratch)
    return importlib.import_module(THEN)


CPU = time.thread_time  # --clock: the calling thread's CPU, or the process's


def epoch(loader, via: str, b: int, d: int) -> float:
    clock = time.perf_counter if via == "prefetch" else CPU
    t = clock()
    if via == "next_into":
        bx, by = np.empty((b, d), dtype=loader.dtype), np.empty((b, 1), dtype=loader.dtype)
        while loader.next_into(bx, by):
            pass
        loader.reset()
    else:
        for _ in loader:
            pass
    return clock() - t


def limit_epoch(read, perm: np.ndarray, b: int, d: int, draw=None) -> float:
    """One epoch of the bare compiled gather over ``perm`` (thread CPU seconds); with
    ``draw``, over the order it draws inside the timed epoch."""
    bx, by = np.empty((b, d)), np.empty((b, 1))
    n, t = len(perm), CPU()
    if draw is not None:
        perm = draw()
    full = n - n % b
    for i in range(0, full, b):
        read(perm[i : i + b], bx, by)
    if full < n:
        read(perm[full:], bx[: n - full], by[: n - full])
    return CPU() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", help="the earlier commit")
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--cols", type=int, default=16)
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 256, 1024])
    parser.add_argument("--via", nargs="+", default=["iter", "next_into", "prefetch"])
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--then-src", help="a folder holding the earlier exactbatch, built")
    parser.add_argument("--clock", choices=["thread", "process"], default="thread")
    parser.add_argument(
        "--source",
        choices=["memory", "ndf", "dataset", "stream", "stream-ordered"],
        default=["memory"],
        nargs="+",
        help="the rows in memory, in an .ndf file, in a dataset of 4 parts each loader opens, "
        "or a list of chunks streamed (shuffled through the buffer, or in order); several: "
        "each in turn",
    )
    parser.add_argument("--chunk-rows", type=int, default=10_000, help="a stream's chunks")
    parser.add_argument(
        "--limit-order",
        choices=LIMIT_ORDERS,
        default="none",
        help="the limit computes each epoch's order inside its timed epoch: the loader's "
        "keyed one (with its digests), or numpy's permutation",
    )
    args = parser.parse_args()
    global CPU
    CPU = time.process_time if args.clock == "process" else time.thread_time
    import exactbatch as now

    scratch = tempfile.mkdtemp(prefix="ab-")
    try:
        then = import_then(args.rev, scratch, args.then_src)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((args.rows, args.cols))
        y = rng.standard_normal((args.rows, 1))
        for kind in args.source:
            run_source(args, kind, now, then, scratch, x, y, rng)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_source(args, kind: str, now, then, scratch: str, x, y, rng) -> None:
    """The table of one ``--source``."""
    where = {
        "memory": "in memory",
        "ndf": "in an .ndf file",
        "dataset": "in 4 parts",
        "stream": f"as a stream of {args.chunk_rows:,}-row chunks, shuffled through the buffer",
        "stream-ordered": f"as a stream of {args.chunk_rows:,}-row chunks, in order",
    }[kind]
    print(f"{args.rows:,} rows of {args.cols}+1 float64 {where}, {os.cpu_count()} cores; now/then")
    shuffle = kind != "stream-ordered"
    if kind == "ndf":
        path = os.path.join(scratch, "rows.ndf")
        now.save_ndf(path, (x, y))
        held = now.open_ndf(path)  # the limit's (and kept open: the file's mapping)
        read = held.kernel_rows().read
        source = lambda m: m.open_ndf(path)  # noqa: E731 (each loader's own)
    elif kind == "dataset":
        path = os.path.join(scratch, "rows")
        q = -(-args.rows // 4)
        now.save_ndf_dataset(path, [(x[a : a + q], y[a : a + q]) for a in range(0, len(x), q)])
        held = now.open_ndf_dataset(path)
        read = held.read_rows_into
        source = lambda m: m.open_ndf_dataset(path)  # noqa: E731
    elif kind in ("stream", "stream-ordered"):
        read = now.kernels.memory_rows(x, y).read
        c = args.chunk_rows
        chunks = [(x[a : a + c], y[a : a + c]) for a in range(0, len(x), c)]
        source = lambda m: chunks  # noqa: E731 (a list of chunks: a stream)
    else:
        read = now.kernels.memory_rows(x, y).read
        source = lambda m: (x, y)  # noqa: E731
    perm = rng.permutation(args.rows).astype(np.int32)  # (as the loader's orders are)
    for b in args.batch:
        for via in args.via:
            pf = 2 if via == "prefetch" else 0
            draw = order_draw(args.limit_order, args.rows, b, rng, now, seed=1)
            loaders = [
                m.DataLoader(source(m), b, seed=1, prefetch=pf, shuffle=shuffle)
                for m in (now, then)
            ]
            for loader in loaders:  # warm: the whole orders computed, pages touched
                epoch(loader, via, b, args.cols)
            times: tuple[list, list, list] = ([], [], [])
            for r in range(args.rounds):
                for k in (0, 1, 2) if r % 2 else (2, 1, 0):
                    if k == 2:
                        times[k].append(limit_epoch(read, perm, b, args.cols, draw))
                    else:
                        times[k].append(epoch(loaders[k], via, b, args.cols))
            med = statistics.median(times[1]) / statistics.median(times[0])
            best = min(times[1]) / min(times[0])
            rate = args.rows / statistics.median(times[0]) / 1e6
            per = [min(t) / -(-args.rows // b) * 1e6 for t in times]  # us a batch
            limit = "C limit" if args.limit_order == "none" else "C limit+order"
            print(
                f"batch {b:5d}  {via:9s}  now {rate:6.2f} M rows/s  "
                f"median {med:.2f}x  best {best:.2f}x  |  us/batch: {limit} {per[2]:.2f}, "
                f"then {per[1]:.2f} (+{per[1] - per[2]:.2f}, {per[2] / per[1]:.2f}x C), "
                f"now {per[0]:.2f} (+{per[0] - per[2]:.2f}, {per[2] / per[0]:.2f}x C)",
                flush=True,
            )
            for loader in loaders:
                loader.close()


if __name__ == "__main__":
    main()
