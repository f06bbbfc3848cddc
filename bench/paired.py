"""Issue 14's ratio targets, each tool's epochs interleaved with its baselines' in one process.

``compare.py`` runs every tool in a fresh subprocess, so that each has its own
peak RSS; but on a shared machine two processes a minute apart can run the
same gather at rates 2x apart, and a ratio of two such figures says more
about the processes than about the tools. Here, for each batch size, one
process builds every case (the same ``compare.build_case``, over one copy of
the arrays) and runs them round-robin: one epoch of each tool a round, the
order reversed every other round, so that a ratio compares epochs measured
side by side. A tool's figure is its median epoch (rows/s, wall clock), and
the spread (slowest / fastest epoch) is printed with it, and the process's
CPU time a row and cores busy (CPU time / wall clock, every thread's: for
Parquet, pyarrow's decoding threads too) in the median's epoch. No peak RSS here:
``compare.py`` measures that. The Parquet tools and the cold-file tools run in
processes of their own, apart from the in-memory ones: pyarrow's threads and
allocator slowed the gathers that shared a process with them by up to 20%.

    .venv/bin/python bench/paired.py                        # 4M rows, about 5 minutes
    .venv/bin/python bench/paired.py --rows 1000000 --rounds 5 --batches 64 256
    .venv/bin/python bench/paired.py --tools numpy bare_gather eb_mem_iter

Data: the arrays, ``.ndf`` and Parquet folder ``compare.py`` caches under
``.cache/compare/`` (made on first use). Cold-file tools (their pages evicted
before each epoch) and pymc-extras/torch are not among the defaults: the
first are I/O-bound and slow, the second need another venv or thread setup.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time

import compare  # bench/ is this script's folder
import numpy as np

# Tools measured in a process apart from the others (with their own baselines).
APART = [
    ("eb_pq_shuffled", "eb_pq_unshuffled", "pyarrow_raw", "pyarrow_raw_tiled"),
    ("eb_ndf_cold", "eb_ndf_cold_blocks", "eb_ndf_cold_blocks_default", "seq_cold"),
]
# By default, every tool issue 14's targets name but the cold-file ones.
_NAMED = {tool for target in compare.TARGETS for tool in target[:2]}
DEFAULT_TOOLS = [t for t in compare.TOOLS if t in _NAMED and t not in APART[1]]
ARRAY_TOOLS = {"numpy", "bare_gather", "c_limit", "eb_mem_iter", "eb_mem_next_into",
               "eb_mem_iter_f32"}  # fmt: skip


def run_batch(cfg: dict) -> dict:
    """In the child: every tool at one batch size, round-robin; {tool: [rows/s per round]}."""
    tools, b, rounds = cfg["tools"], cfg["batch"], cfg["rounds"]
    arrays = None
    if ARRAY_TOOLS & set(tools):
        arrays = np.load(cfg["paths"]["x"]), np.load(cfg["paths"]["y"])
    cases, backend = {}, None
    for tool in tools:
        c = {**cfg["paths"], "tool": tool, "batch": b, "rows": cfg["rows"], "buffer": cfg["buffer"],
             "epochs": rounds, "cap": None, "pymc_file": None, "torch_threads": 1}  # fmt: skip
        notes = {}
        cases[tool] = compare.build_case(c, compare._imports(tool, c), notes, arrays=arrays)
        backend = notes.get("backend", backend)
    rates = {tool: [] for tool in tools}
    cpu = {tool: [] for tool in tools}  # (CPU ns a row, cores busy) per round
    for rnd in range(rounds + 1):  # round 0 warms every case up (its whole order, its pages)
        order = tools if rnd % 2 == 0 else tools[::-1]
        for tool in order:
            case = cases[tool]
            if case.prepare:
                case.prepare(rnd)
            gc.collect()
            t0, c0 = time.perf_counter(), time.process_time()
            rows = case.run(rnd)
            secs, cpu_secs = time.perf_counter() - t0, time.process_time() - c0
            if case.cleanup:
                case.cleanup(rnd)
            if rnd:
                rates[tool].append(rows / secs)
                cpu[tool].append((cpu_secs / rows * 1e9, cpu_secs / secs))
    return {"rates": rates, "cpu": cpu, "backend": backend}


def summarise(per_batch: dict, batches, tools) -> list[str]:
    med = {(t, b): float(np.median(r)) for b in batches for t, r in per_batch[b]["rates"].items()}
    lines = [
        "| tool | batch | median rows/s | × NumPy epoch | × bare gather | × limit | spread "
        "| CPU ns a row | cores busy |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for b in batches:
        for t in tools:
            if (t, b) not in med:
                continue
            rs = per_batch[b]["rates"][t]
            ns, cores = per_batch[b]["cpu"][t][int(np.argsort(rs)[len(rs) // 2])]
            ratios = " | ".join(
                f"{med[(t, b)] / med[(base, b)]:.2f}×" if (base, b) in med else "—"
                for base in ("numpy", "bare_gather", "c_limit")
            )
            lines.append(
                f"| {compare.label(t, per_batch[b]['buffer'])} | {b} | "
                f"{compare.fmt_rate(med[(t, b)])} | {ratios} | {min(rs) / max(rs):.2f} | "
                f"{ns:.0f} | {cores:.2f} |"
            )
    lines += ["", "Targets (ratios of medians measured side by side):"]
    for tool, base, needs in compare.TARGETS:
        for b in batches:
            need = needs.get(b, needs.get(None))
            if need is None or (tool, b) not in med or (base, b) not in med:
                continue
            v = med[(tool, b)] / med[(base, b)]
            lines.append(
                f"{'PASS' if v >= need else 'FAIL'}  {tool} / {base} at batch {b}: "
                f"{v:.2f}× (target ≥ {need}×)"
            )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=4_000_000)
    ap.add_argument("--batches", type=int, nargs="+", default=[64, 256, 1024, 4096])
    ap.add_argument("--rounds", type=int, default=7, help="timed epochs of each tool")
    ap.add_argument("--buffer", type=int, default=262_144, help="the Parquet runs' buffer")
    ap.add_argument("--tools", nargs="+", default=DEFAULT_TOOLS, choices=list(compare.TOOLS))
    ap.add_argument("--cache", default=str(compare.ROOT / ".cache" / "compare"))
    ap.add_argument("--one", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(run_batch(json.loads(a.one))))
        return
    bad = [t for t in a.tools if t in compare.PYMC_TOOLS]
    if bad:
        ap.error(f"{', '.join(bad)} run under another venv: use compare.py for them")
    cache = compare.Path(a.cache)
    cache.mkdir(parents=True, exist_ok=True)
    paths = compare.make_data(cache, a.rows)
    print(
        f"n = {a.rows:,} rows of {compare.D} + {compare.L} float64; batches {a.batches}; "
        f"{a.rounds} rounds of one epoch a tool (after one to warm up), interleaved in one "
        f"process per batch size; load average at start: {compare.loadavg()} on "
        f"{os.cpu_count()} CPUs",
        flush=True,
    )
    apart = [t for group in APART for t in group]
    groups = [[t for t in a.tools if t not in apart]]
    groups += [[t for t in a.tools if t in group] for group in APART]
    per_batch = {}
    for b in a.batches:
        for tools in filter(None, groups):
            cfg = {"tools": tools, "batch": b, "rounds": a.rounds, "rows": a.rows,
                   "buffer": a.buffer, "paths": paths}  # fmt: skip
            t0 = time.perf_counter()
            r = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--one", json.dumps(cfg)],
                capture_output=True, text=True, cwd=compare.ROOT,
            )  # fmt: skip
            if r.returncode:
                print(f"  !! batch {b}, {' '.join(tools)} failed:\n{r.stderr[-2000:]}", flush=True)
                continue
            got = json.loads(r.stdout.strip().splitlines()[-1])
            mine = per_batch.setdefault(
                b, {"rates": {}, "cpu": {}, "backend": None, "buffer": a.buffer}
            )
            mine["rates"].update(got["rates"])
            mine["cpu"].update(got["cpu"])
            mine["backend"] = got["backend"] or mine["backend"]
            print(f"  batch {b}, {' '.join(tools)}: {time.perf_counter() - t0:.0f} s", flush=True)
    done = [b for b in a.batches if b in per_batch]
    print()
    print("\n".join(summarise(per_batch, done, a.tools)))
    if done:
        print(f"\nexactbatch backend: {per_batch[done[0]]['backend']}")


if __name__ == "__main__":
    main()
