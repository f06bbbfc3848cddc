"""What the loader's telemetry (``stats()``, issue 43) costs a batch when nobody asks.

The loader before telemetry (``rev``: by default the merge base of HEAD and main)
is imported beside the one now (:func:`ab_against.import_then`), and one epoch of
batch-64 batches from memory of each is timed in turn, alternating which goes
first: ``iter``, ``next_into`` (thread CPU time) and ``iter`` with prefetch (wall
time), and ``next_into`` with ``step()`` after each batch (now only: the cost of
marking steps). Printed: each one's ns a batch (median of ``--rounds``), the
difference, and the ratio now/then (1.00: no cost; 1.03: 3% more a batch).

    .venv/bin/python bench/bench_telemetry.py [rev] [--rows 400000] [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from functools import partial

import numpy as np
from ab_against import ROOT, epoch, import_then  # bench/ is this script's folder


def stepped(loader, b: int, d: int) -> float:
    """One epoch of next_into with ``step()`` after each batch (thread CPU time)."""
    bx, by = np.empty((b, d)), np.empty((b, 1))
    t = time.thread_time()
    while loader.next_into(bx, by):
        loader.step()
    loader.reset()
    return time.thread_time() - t


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", nargs="?", help="the loader before (default: merge base)")
    parser.add_argument("--rows", type=int, default=400_000)
    parser.add_argument("--cols", type=int, default=16)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    rev = (
        args.rev
        or subprocess.run(
            ["git", "-C", ROOT, "merge-base", "HEAD", "main"], capture_output=True, text=True
        ).stdout.strip()
    )
    import exactbatch as now

    scratch = tempfile.mkdtemp(prefix="telemetry-")
    try:
        then = import_then(rev, scratch)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((args.rows, args.cols))
        y = rng.standard_normal((args.rows, 1))
        b = args.batch
        batches = -(-args.rows // b)
        print(f"{args.rows:,} rows of {args.cols}+1 float64, batch {b}; now against {rev[:10]}")
        cases = [("iter", "iter"), ("next_into", "next_into"), ("prefetch", "prefetch")]
        for name, via in [*cases, ("next_into+step", "step")]:
            pf = 2 if via == "prefetch" else 0
            loaders = [m.DataLoader((x, y), b, seed=1, prefetch=pf) for m in (now, then)]
            if via == "step":  # now with steps marked, against then without
                runs = [partial(stepped, loaders[0], b, args.cols)]
                runs.append(partial(epoch, loaders[1], "next_into", b, args.cols))
            else:
                runs = [partial(epoch, loaders[k], via, b, args.cols) for k in (0, 1)]
            for run in runs:  # warm: whole orders computed, pages touched
                run()
            times: tuple[list, list] = ([], [])
            for r in range(args.rounds):
                for k in (0, 1) if r % 2 else (1, 0):
                    times[k].append(runs[k]())
            t_now, t_then = (statistics.median(t) / batches * 1e9 for t in times)
            print(
                f"  {name:15s} now {t_now:8.0f} ns/batch  then {t_then:8.0f}  "
                f"+{t_now - t_then:6.0f} ns  ratio {t_now / t_then:.3f}",
                flush=True,
            )
            s = loaders[0].stats()["run"]
            assert s["rows"] == args.rows * (args.rounds + 1), s  # (every epoch counted)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        os.sync()


if __name__ == "__main__":
    main()
