"""The grid's table from ``bench/fit_statistics.py --grid --jsonl FILE`` runs.

One row per cell (N, B, steps) and library: the seeds, the range of the largest
distance of a returned posterior mean from the L-BFGS reference (in its sds), the
range of the sd ratios (smallest and largest over the latents and seeds), warned of
all, silently wrong (more than 0.5 sd off or an sd off by more than 1.5x, no warning),
false alarms (warned, yet within 0.2 sd and 0.8-1.25x), within the targets (0.2 sd,
0.8-1.25x) of all, and the verdicts' reasons (``too-short``: too few epochs to judge
the means; ``drift``, ``shift``, ``error``, ``sd-error``; ``converged``). Then the
totals, and the sds' band: over the quiet fits, the mean and sd of the log of the
sd ratios against the verdict's floor of an sd's error.

    PYTHONPATH=src .venv/bin/python bench/fit_grid_table.py /tmp/grid49/*.jsonl \
        [--markdown] [--merge]
"""

from __future__ import annotations

import argparse
import collections
import json
import math

import numpy as np


def load(paths: list[str]) -> list[dict]:
    """Every fit of the files, the last record of a (lib, N, B, steps, seed) kept."""
    fits: dict[tuple, dict] = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                r = json.loads(line)
                fits[(r["lib"], r["n"], r["batch"], r["steps"], r["seed"])] = r
    return list(fits.values())


def judged(r: dict) -> tuple[float, float, float, bool, bool]:
    """off, the sds' smallest and largest ratio, within the targets, silently wrong."""
    off, ratio = max(r["off"]), np.asarray(r["ratio"])
    good = off <= 0.2 and ratio.min() >= 0.8 and ratio.max() <= 1.25
    return off, float(ratio.min()), float(ratio.max()), good, r["mark"] == "SILENT"


def _ranges(rs: list[dict]) -> tuple[str, str]:
    """The fits' range of the largest distance, and of the sd ratios."""
    js = [judged(r) for r in rs]
    offs = [j[0] for j in js]
    lo, hi = min(j[1] for j in js), max(j[2] for j in js)
    return f"{min(offs):.2f}-{max(offs):.2f}", f"{lo:.2f}-{hi:.2f}x"


def table(fits: list[dict], markdown: bool, merge: bool = False) -> None:
    cells: dict[tuple, list[dict]] = collections.defaultdict(list)
    for r in fits:
        cells[(r["n"], r["batch"], r["steps"], "both" if merge else r["lib"])].append(r)
    head = ("cell", "library", "seeds", "off (sd)", "sds", "warned", "silent", "false alarms",
            "within targets", "verdicts")  # fmt: skip
    if markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "---|" * len(head))
    total = warned = silent = alarms = good_n = 0
    for key in sorted(cells):
        n, b, steps, lib = key
        rs = sorted(cells[key], key=lambda r: r["seed"])
        js = [judged(r) for r in rs]
        off, sds = _ranges(rs)
        if merge:  # NumPyro's range, then PyMC's
            by = [[r for r in rs if r["lib"] == lib] for lib in ("numpyro", "pymc")]
            off, sds = (" / ".join(_ranges(x)[k] for x in by if x) for k in (0, 1))
        w = sum(r["warned"] for r in rs)
        s = sum(j[4] for j in js)
        a = sum(r["mark"] == "ALARM" for r in rs)
        g = sum(j[3] for j in js)
        why = collections.Counter(r["why"] for r in rs)
        seeds = f"{rs[0]['seed']}-{rs[-1]['seed']}" if len(rs) > 1 else str(rs[0]["seed"])
        name = {"numpyro": "NumPyro", "pymc": "PyMC"}.get(lib, "NumPyro / PyMC")
        row = (f"N = {n // 1000}k, B = {b}, {steps} steps", name, seeds, off, sds,
               f"{w} of {len(rs)}", str(s), str(a), f"{g} of {len(rs)}",
               ", ".join(f"{k} {v}" for k, v in sorted(why.items())))  # fmt: skip
        print(("| " + " | ".join(row) + " |") if markdown else "  ".join(row))
        total, warned, silent, alarms, good_n = (total + len(rs), warned + w, silent + s,
                                                 alarms + a, good_n + g)  # fmt: skip
    within = sum(judged(r)[3] for r in fits)
    short = sum(r["mark"] == "ALARM" and r["why"] == "too-short" for r in fits)
    print(f"\n{total} fits, {warned} warned, {silent} silently wrong, {alarms} false alarms "
          f"({alarms} of {within} fits within the targets warned; {alarms / max(1, total):.1%} "
          f"of all fits; {short} of them too few epochs to judge, a warning every fit of "
          f"that length gives), {good_n} within the targets")  # fmt: skip
    quiet = [r for r in fits if not r["warned"]]
    if quiet:
        logs = np.concatenate([np.log(r["ratio"]) for r in quiet])
        floors = [r["sd_floor"] for r in quiet]
        out = [r for r in quiet if min(r["ratio"]) < 0.8 or max(r["ratio"]) > 1.25]
        offs = [max(r["off"]) for r in quiet]
        lo, hi = min(min(r["ratio"]) for r in quiet), max(max(r["ratio"]) for r in quiet)
        print(f"quiet fits: {sum(o <= 0.2 for o in offs)} of {len(quiet)} within 0.2 sd (off "
              f"{min(offs):.2f}-{max(offs):.2f}), sds {lo:.2f}-{hi:.2f}x")  # fmt: skip
        print(f"quiet fits: {len(quiet)}; their {logs.size} sds' log ratio: mean {logs.mean():+.3f}"
              f" (standard error {logs.std(ddof=1) / math.sqrt(logs.size):.3f}), sd "
              f"{logs.std(ddof=1):.3f}; the verdict's sd floor {min(floors):.3f}-{max(floors):.3f}"
              f"; {len(out)} quiet fits with an sd outside 0.8-1.25x: "
              + ", ".join(f"{r['lib']} N={r['n']} B={r['batch']} {r['steps']} seed "
                          f"{r['seed']} {min(r['ratio']):.2f}-{max(r['ratio']):.2f}x"
                          for r in out))  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("jsonl", nargs="+", help="files written by fit_statistics.py --jsonl")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--merge", action="store_true", help="one row a cell, both libraries")
    args = ap.parse_args()
    table(load(args.jsonl), args.markdown, args.merge)


if __name__ == "__main__":
    main()
