"""Reliability long runs: faults, bad input and load, with figures for the README.

Each part reuses the checks of the fast tests (tests/reliability/)
at a larger scale, in child processes where a crash or a hang must be seen:

    fuzz     30,000 fuzzed .ndf files and 30,000 fuzzed Parquet files (hypothesis,
             in child processes with a timeout: a crash or hang is counted, not fatal)
    validate 100,000 fuzzed manifests, names sidecars and .ndf headers (hypothesis) at
             open_ndf_dataset, the sidecar reader, open_ndf and info, in child processes
             watched for progress: a crash or a hang is counted with the case in hand;
             anything but NdfError/OSError, or a failed check, is counted as "other"
    crash    200 SIGKILLs of save_ndf writing a 61 MB file over an older version
    changes  a reader over an .ndf truncated at a random instant by another process:
             outcomes (NdfError, SIGBUS, garbage) per read path (the compiled core's
             guarded gather, with and without prefetch; on the pure NumPy path: the map
             under its read lease, with and without prefetch; the map unguarded, as
             before the lease; positional reads only; runs in file order; the truncation
             made by a process holding the file open for writing, so that no lease is
             given and positional reads race it, with and without prefetch); 100 trials each
    guard    1,000 truncations during copies from the map, in a tight loop: a thread
             copies 4,096-row batches while the main thread truncates the file at a
             random instant; NdfErrors (and how many the fault guard caught inside a
             copy) and crashes; then 1,000 more with faulthandler enabled after each
             open (a SIGBUS handler installed after the guard's, which the guard must
             put itself back in front of)
    cost     rows/s of shuffled reads: the compiled core's guarded gather; on the pure
             NumPy path the map under its lease, the map unguarded, positional reads
             only; and NumPy in memory
    load     1,000 loaders and 100 epochs (threads, descriptors, RSS), then 8 threads
             x 50 epochs over 1M rows (every row exactly once per epoch)
    resume   a training process SIGKILLed 50 times at random batches, resumed each time
    interrupt  200 SIGINTs at random instants of dataset writes over an older dataset
             (exactbatch convert --part-rows --force and save_ndf_dataset, alternately):
             the old dataset kept byte for byte or the new one whole, leftovers counted
    writers  100 pairs of writers of one dataset folder at once: one writer's dataset
             each time (mixed ones counted), and what the races left, removed later

    .venv/bin/python bench/reliability.py [parts...] [--quick] [--json out.json]

With no part named, all run (about 11 minutes on a 2-core machine);
``--quick`` shrinks every part to a smoke test.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "reliability"))  # the checks of the fast tests


def log(*args) -> None:
    print(*args, flush=True)


# -- fuzz -----------------------------------------------------------------------------

FUZZ_WORKER = textwrap.dedent(
    """
    import json, sys, tempfile, pathlib
    sys.path.insert(0, sys.argv[4])
    import numpy as np
    from hypothesis import HealthCheck, given, seed, settings
    import test_files as t

    kind, cases, hseed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="fuzz-"))
    every = settings(max_examples=cases, deadline=None, database=None,
                     suppress_health_check=list(HealthCheck))
    if kind == "ndf":
        @seed(hseed)
        @every
        @given(case=t.ndf_cases())
        def run(case):
            data, s = case
            t.OUTCOMES[t.check_ndf_bytes(tmp / "f.ndf", data, np.random.default_rng(s))] += 1
    else:
        @seed(hseed)
        @every
        @given(case=t.parquet_cases())
        def run(case):
            mutations, shuffle = case
            data, rows = t.parquet_base()
            mutated = t.mutate_parquet(data, mutations)
            t.OUTCOMES[t.check_parquet_bytes(tmp / "f.parquet", mutated, rows, shuffle)] += 1
    run()
    print(json.dumps(dict(t.OUTCOMES)))
    """
)


def fuzz(cases: int, workers: int, timeout: float) -> dict:
    """``cases`` fuzzed files of each kind, split over ``workers`` child processes each."""
    out = {}
    for kind in ("ndf", "parquet"):
        per = -(-cases // workers)
        totals = collections.Counter()
        failures = []
        t0 = time.perf_counter()
        procs = []
        for w in range(workers):  # two at a time: one per core
            cmd = [
                sys.executable,
                "-c",
                FUZZ_WORKER,
                kind,
                str(per),
                str(1000 + w),
                str(ROOT / "tests" / "reliability"),
            ]
            procs.append(
                (
                    w,
                    subprocess.Popen(
                        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
                    ),
                )
            )
            if len(procs) == 2 or w == workers - 1:
                for wid, p in procs:
                    try:
                        so, se = p.communicate(timeout=timeout)
                    except subprocess.TimeoutExpired:
                        p.kill()
                        so, se = p.communicate()
                        failures.append(f"worker {wid}: HANG (over {timeout:.0f} s)")
                        continue
                    if p.returncode == 0:
                        totals.update(json.loads(so.strip().splitlines()[-1]))
                    elif p.returncode < 0:
                        failures.append(f"worker {wid}: CRASH signal {-p.returncode}")
                    else:
                        failures.append(f"worker {wid}: FAILED\n{se[-3000:]}")
                procs = []
        secs = time.perf_counter() - t0
        out[kind] = {
            "cases": sum(totals.values()),
            **totals,
            "failures": failures,
            "seconds": round(secs, 1),
        }
        log(f"fuzz {kind}: {out[kind]}")
    return out


# -- validate -------------------------------------------------------------------------

VALIDATE_WORKER = textwrap.dedent(
    """
    import json, os, shutil, sys, tempfile
    sys.path.insert(0, sys.argv[4])
    from hypothesis import HealthCheck, Phase, given, seed, settings
    import test_documents as t

    cases, hseed, status = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    root = tempfile.mkdtemp(prefix="validate-", dir=os.path.dirname(status))
    fixture = t.make_fixture(root)
    others, done = [], [0]

    @seed(hseed)
    @settings(max_examples=cases, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.generate])
    @given(case=t.any_case)
    def run(case):
        kind, raw = case
        with open(status, "wb") as f:  # the case in hand, for a crash or a hang
            f.write(f"{done[0]} {kind}\\n".encode() + raw)
        try:
            t.OUTCOMES[kind + " " + t.check_case(fixture, kind, raw)] += 1
        except Exception as e:  # anything but NdfError/OSError, or a failed check
            t.OUTCOMES[kind + " other"] += 1
            if len(others) < 20:
                others.append({"kind": kind, "error": f"{type(e).__name__}: {e}"[:300],
                               "case": raw[:300].decode("latin-1")})
        done[0] += 1

    run()
    shutil.rmtree(root, ignore_errors=True)
    print(json.dumps({"outcomes": dict(t.OUTCOMES), "others": others}))
    """
)


def _validate_worker(quota: int, wid: int, timeout: float, status_dir: str) -> dict:
    """Run ``quota`` cases in child processes, one at a time; a child that crashes or
    stops making progress for ``timeout`` seconds is counted (with the case in hand,
    saved next to the status file) and replaced by one with another seed."""
    totals, failures, others, lost = collections.Counter(), [], [], 0
    status = os.path.join(status_dir, f"worker-{wid}.case")
    attempt = 0
    while quota > 0:
        cmd = [
            sys.executable,
            "-c",
            VALIDATE_WORKER,
            str(quota),
            str(7000 + 100 * wid + attempt),
            status,
            str(ROOT / "tests" / "reliability"),
        ]
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen = (None, time.monotonic())
        hung = False
        while p.poll() is None:
            time.sleep(0.5)
            try:
                mark = os.stat(status).st_mtime_ns
            except FileNotFoundError:
                mark = None
            if mark != seen[0]:
                seen = (mark, time.monotonic())
            elif time.monotonic() - seen[1] > timeout:
                p.kill()
                hung = True
        so, se = p.communicate()
        if p.returncode == 0 and not hung:
            out = json.loads(so.strip().splitlines()[-1])
            totals.update(out["outcomes"])
            others += out["others"]
            break
        # the case in hand: the status file's first line is "cases done, kind"
        with open(status, "rb") as f:
            head, _, raw = f.read().partition(b"\n")
        done, kind = head.decode().split()
        keep = os.path.join(status_dir, f"worker-{wid}-{attempt}.{kind}")
        shutil.copyfile(status, keep)
        what = (
            f"HANG (no progress for {timeout:.0f} s)"
            if hung
            else (f"CRASH signal {-p.returncode}" if p.returncode < 0 else f"FAILED\n{se[-2000:]}")
        )
        failures.append(f"worker {wid}: {what} on a {kind} case (saved as {keep})")
        lost += int(done)  # cases run before it, their outcomes not reported
        quota -= int(done) + 1
        attempt += 1
    return {"totals": totals, "failures": failures, "others": others, "lost": lost}


def validate(cases: int, workers: int, timeout: float) -> dict:
    """``cases`` fuzzed manifests, names sidecars and headers (tests/reliability/
    test_documents.py) over ``workers`` threads, each driving child processes."""
    from concurrent.futures import ThreadPoolExecutor

    shm = "/dev/shm" if os.path.isdir("/dev/shm") else None  # a rewrite costs ms on a disk
    status_dir = tempfile.mkdtemp(prefix="exactbatch-validate-", dir=shm)
    per = -(-cases // workers)
    t0 = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        runs = list(
            pool.map(lambda w: _validate_worker(per, w, timeout, status_dir), range(workers))
        )
    secs = time.perf_counter() - t0
    totals = collections.Counter()
    for r in runs:
        totals.update(r["totals"])
    failures = [f for r in runs for f in r["failures"]]
    out = {
        "cases": sum(totals.values()) + sum(r["lost"] for r in runs) + len(failures),
        **{k: totals[k] for k in sorted(totals)},
        "other": sum(v for k, v in totals.items() if k.endswith(" other")),
        "hangs": sum("HANG" in f for f in failures),
        "crashes": sum("HANG" not in f for f in failures),
        "failures": failures,
        "others": [o for r in runs for o in r["others"]][:20],
        "seconds": round(secs, 1),
    }
    if not failures:
        shutil.rmtree(status_dir, ignore_errors=True)
    log(f"validate: {out}")
    return out


# -- crash ----------------------------------------------------------------------------


def crash(kills: int, rows: int, d: int) -> dict:
    import test_crash as t

    folder = tempfile.mkdtemp(prefix="crash-", dir=os.environ.get("RELIABILITY_DIR"))
    t0 = time.perf_counter()
    try:

        def progress(k, stats):
            if (k + 1) % 25 == 0:
                log(f"  crash: {k + 1} kills, {stats}")

        stats = t.kill_loop(folder, kills=kills, n=rows, d=d, seed=7, log=progress)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    stats["file_mb"] = round((28 + 8 * rows * (d + 1)) / 2**20, 1)
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    log(f"crash: {stats}")
    return stats


# -- the file changes underneath: the SIGBUS race, and what closing it costs ----------------

RACER = textwrap.dedent(
    """
    import sys
    import numpy as np
    import exactbatch.ndf.local as ndf
    import exactbatch.ndf.guard as guard
    from exactbatch import DataLoader, NdfError, backend, open_ndf
    path, mode, batch = sys.argv[1], sys.argv[2], int(sys.argv[3])
    assert backend() == ("compiled" if mode.startswith("compiled") else "numpy"), backend()
    if mode == "pread":  # gather scattered rows with one positional read per run, never the map
        ndf._FEW_RUNS = ndf._SORT_ROWS = 1 << 62
    if mode.startswith("unguarded"):  # copy from the map without the read lease
        guard.Lease.acquire = lambda self: False
    f = open_ndf(path)
    d = f.d
    prefetch = 2 if mode.endswith("+prefetch") else 0
    loader = DataLoader(f, batch_size=batch, shuffle=(mode != "runs"), seed=1, prefetch=prefetch)
    print("ready", flush=True)
    batches = 0
    try:
        while True:
            for xb, yb in loader:  # every value is checked: x[i] = (i, 2i, ...), y[i] = -i
                i = xb[:, 0]
                if not (np.array_equal(xb, i[:, None] * np.arange(1, d + 1)) and
                        np.array_equal(yb[:, 0], -i)):
                    print("garbage", batches, flush=True)
                    sys.exit(3)
                batches += 1
    except NdfError as e:
        assert path in str(e)
        print("ndferror", batches, flush=True)
    """
)


def _racer_file(path: str, n: int, d: int) -> None:
    from exactbatch import save_ndf

    i = np.arange(n, dtype=np.float64)[:, None]
    save_ndf(path, (i * np.arange(1, d + 1), -i[:, 0]))


CHANGE_MODES = (
    "compiled",
    "compiled+prefetch",
    "map",
    "map+prefetch",
    "unguarded",
    "unguarded+prefetch",
    "pread",
    "runs",
    "writer",
    "writer+prefetch",
)


def _truncate(path: str, size: int, mode: str, rng) -> None:
    """Truncate ``path`` to ``size``; the writer modes first open it for writing (which
    waits for a copy under the lease, and then denies the lease: the reader falls back
    to positional reads, which the truncation then races)."""
    if not mode.startswith("writer"):
        os.truncate(path, size)
        return
    fd = os.open(path, os.O_WRONLY)
    try:
        time.sleep(float(rng.uniform(0.0, 0.005)))
        os.ftruncate(fd, size)
    finally:
        os.close(fd)


def changes(trials: int, n: int, d: int, batch: int, modes=CHANGE_MODES) -> dict:
    """Truncate the file at a random instant while a child reads it, ``trials`` times per mode."""
    folder = tempfile.mkdtemp(prefix="race-", dir=os.environ.get("RELIABILITY_DIR"))
    pristine = os.path.join(folder, "pristine.ndf")
    _racer_file(pristine, n, d)
    size = os.path.getsize(pristine)
    rng = np.random.default_rng(3)
    out = {}
    try:
        for mode in modes:
            pure = "0" if mode.startswith("compiled") else "1"
            counts = collections.Counter()
            t0 = time.perf_counter()
            for _ in range(trials):
                path = os.path.join(folder, "live.ndf")
                shutil.copyfile(pristine, path)
                p = subprocess.Popen(
                    [sys.executable, "-c", RACER, path, mode, str(batch)],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env={**os.environ, "EXACTBATCH_PURE": pure},
                )
                assert p.stdout.readline().strip() == "ready"
                time.sleep(float(rng.uniform(0.0, 0.05)))
                _truncate(path, int(rng.integers(28, size)), mode, rng)
                try:
                    so, se = p.communicate(timeout=60)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.communicate()
                    counts["hang"] += 1
                    continue
                if p.returncode == -signal.SIGBUS:
                    counts["SIGBUS"] += 1
                elif p.returncode == 0 and so.startswith("ndferror"):
                    counts["NdfError"] += 1
                elif p.returncode == 3:
                    counts["garbage"] += 1
                else:
                    counts[f"other rc={p.returncode}: {se.strip()[-200:]}"] += 1
            out[mode] = {**counts, "seconds": round(time.perf_counter() - t0, 1)}
            log(f"changes {mode}: {out[mode]}")
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def guard(truncations: int, n: int, d: int, batch: int) -> dict:
    """``truncations`` truncations during copies (the compiled core's fault guard), in
    child processes, as they are and with faulthandler enabled after each open: a
    crashed child is counted and a new one goes on."""
    from exactbatch import backend

    if backend() != "compiled":
        log("guard: skipped, the compiled core is not built")
        return {"skipped": "the compiled core is not built"}
    return {
        after_open: _guard_runs(truncations, n, d, batch, after_open)
        for after_open in ("nothing", "faulthandler")
    }


def _guard_runs(truncations: int, n: int, d: int, batch: int, after_open: str) -> dict:
    from test_files import GUARD_LOOP

    from exactbatch import save_ndf

    folder = tempfile.mkdtemp(prefix="guard-", dir=os.environ.get("RELIABILITY_DIR"))
    pristine, live = os.path.join(folder, "pristine.ndf"), os.path.join(folder, "live.ndf")
    rng = np.random.default_rng(5)
    save_ndf(pristine, (rng.standard_normal((n, d)), rng.standard_normal(n)))
    counts = collections.Counter()
    t0 = time.perf_counter()
    try:
        done = 0
        while done < truncations:
            p = subprocess.run(
                [
                    sys.executable,
                    "-c",
                    GUARD_LOOP,
                    pristine,
                    live,
                    str(truncations - done),
                    str(batch),
                    str(done),
                    after_open,
                ],
                capture_output=True,
                text=True,
                timeout=600,
                env={**os.environ, "EXACTBATCH_PURE": "0"},
            )
            lines = p.stdout.split()
            counts.update(f"NdfError ({w})" for w in lines)
            done += len(lines)
            if p.returncode != 0:  # a crash (or an error): counted, and a new child goes on
                counts[f"crash rc={p.returncode}: {p.stderr.strip()[-200:]}"] += 1
                done += 1
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    errors = sum(v for k, v in counts.items() if k.startswith("NdfError"))
    crashes = sum(v for k, v in counts.items() if k.startswith("crash"))
    out = {"truncations": truncations, "NdfError": errors, "crashes": crashes, **counts}
    out["seconds"] = round(time.perf_counter() - t0, 1)
    log(
        f"guard ({after_open} after open): {truncations} truncations during copies: "
        f"{errors} NdfErrors, {crashes} crashes"
    )
    log(f"guard ({after_open} after open): {dict(counts)}")
    return out


def gather_cost(n: int, d: int, batches=(64, 1024, 4096), seconds: float = 1.0) -> dict:
    """rows/s of shuffled read_rows: the compiled core's guarded gather; on the pure
    NumPy path the map under its lease, the map unguarded, positional reads only; and
    memory (np.take)."""
    import exactbatch.ndf.file as ndf
    from exactbatch import kernels, open_ndf, save_ndf

    folder = tempfile.mkdtemp(prefix="cost-", dir=os.environ.get("RELIABILITY_DIR"))
    path = os.path.join(folder, "cost.ndf")
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((n, d)), rng.standard_normal((n, 1))
    save_ndf(path, (x, y))
    out = {}
    saved = ndf._FEW_RUNS, ndf._SORT_ROWS
    compiled = kernels.backend() == "compiled"
    try:
        before = kernels.use_backend("numpy")
        pure = open_ndf(path)  # read on the pure NumPy path (its lease, or preads)
        kernels.use_backend(before)
        with open_ndf(path) as native, pure:
            pure.read_rows(np.arange(n))  # into the page cache
            for b in batches:
                bx, by = np.empty((b, d)), np.empty((b, 1))
                row = {}
                modes = ("compiled",) * compiled + ("map", "unguarded", "pread", "memory")
                for mode in modes:
                    if mode == "pread":
                        ndf._FEW_RUNS = ndf._SORT_ROWS = 1 << 62
                    else:
                        ndf._FEW_RUNS, ndf._SORT_ROWS = saved
                    f = native if mode == "compiled" else pure
                    if mode != "compiled":
                        f._handle().lease.works = mode != "unguarded"
                    best = 0.0
                    for _ in range(3):  # best of 3 rounds of about `seconds / 3`
                        perm = rng.permutation(n)
                        rows, t0 = 0, time.perf_counter()
                        while time.perf_counter() - t0 < seconds / 3:
                            idx = perm[rows % (n - b) : rows % (n - b) + b]
                            if mode == "memory":
                                np.take(x, idx, axis=0, out=bx)
                                np.take(y, idx, axis=0, out=by)
                            else:
                                f.read_rows(idx, bx, by)
                            rows += b
                        best = max(best, rows / (time.perf_counter() - t0))
                    row[mode] = round(best / 1e6, 2)
                row["map/unguarded"] = round(row["map"] / row["unguarded"], 2)
                row["pread/map"] = round(row["pread"] / row["map"], 2)
                if compiled:
                    row["compiled/map"] = round(row["compiled"] / row["map"], 2)
                out[b] = row
                log(f"gather cost, batch {b}: M rows/s {row}")
    finally:
        ndf._FEW_RUNS, ndf._SORT_ROWS = saved
        shutil.rmtree(folder, ignore_errors=True)
    return out


# -- load -----------------------------------------------------------------------------


def leak_check(rows: int, loaders: int, long_epochs: int) -> dict:
    """Threads, descriptors and RSS across ``loaders`` loaders and ``long_epochs`` epochs;
    and the bytes NumPy and Python still hold after the loaders (tracemalloc)."""
    import tracemalloc

    import test_load as t

    from exactbatch import DataLoader, open_ndf, save_ndf

    folder = tempfile.mkdtemp(prefix="leak-", dir=os.environ.get("RELIABILITY_DIR"))
    path = os.path.join(folder, "load.ndf")
    save_ndf(path, t.make_data(rows))
    out = {}
    try:
        t.churn_loaders(path, 100, rows)  # warm up
        before = t.resources()
        t0 = time.perf_counter()
        t.churn_loaders(path, loaders, rows, seed=1)
        after = t.resources()
        secs = time.perf_counter() - t0
        tracemalloc.start()  # then exactly: what 200 more loaders leave allocated
        t.churn_loaders(path, 200, rows, seed=2)
        t.settle()
        held = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        out["loaders"] = {
            "count": loaders,
            "before": before,
            "after": after,
            "traced_bytes_held_after_200_more": held,
            "seconds": round(secs, 1),
        }
        marks = {}
        with open_ndf(path) as f:
            loader = DataLoader(f, batch_size=4096, seed=5)
            bx, by = np.empty((4096, 3)), np.empty((4096, 1))
            for e in range(long_epochs):
                if e % 2:
                    for _ in loader:
                        pass
                else:
                    while loader.next_into(bx, by):
                        pass
                    loader.reset()
                if e + 1 in (1, 10, long_epochs // 2, long_epochs):
                    marks[e + 1] = t.resources()
            loader.close()
        out["epochs"] = marks
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


LEAK_CHILD = textwrap.dedent(
    """
    import json, sys
    sys.path.insert(0, sys.argv[1])
    import reliability
    print(json.dumps(reliability.leak_check(*(int(v) for v in sys.argv[2:5]))))
    """
)


def load(rows: int, epochs: int, threads: int, loaders: int, long_epochs: int) -> dict:
    """Leaks in fresh processes (glibc's default arenas, and MALLOC_ARENA_MAX=1), then
    8 threads sharing a loader for many epochs."""
    import test_load as t

    from exactbatch import DataLoader, open_ndf, save_ndf

    out = {}
    for label, env in (("default malloc", {}), ("MALLOC_ARENA_MAX=1", {"MALLOC_ARENA_MAX": "1"})):
        args = [str(Path(__file__).parent), str(rows), str(loaders), str(long_epochs)]
        proc = subprocess.run(
            [sys.executable, "-c", LEAK_CHILD, *args],
            capture_output=True,
            text=True,
            env={**os.environ, **env},
            timeout=600,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        out[f"leaks, {label}"] = json.loads(proc.stdout.strip().splitlines()[-1])
        log(f"load leaks, {label}: {out[f'leaks, {label}']}")
    folder = tempfile.mkdtemp(prefix="load-", dir=os.environ.get("RELIABILITY_DIR"))
    path = os.path.join(folder, "load.ndf")
    save_ndf(path, t.make_data(rows))
    try:
        for kind in ("memory", "ndf"):
            with open_ndf(path) as f:
                source = f if kind == "ndf" else t.make_data(rows)
                loader = DataLoader(source, batch_size=1024, seed=9)
                t0 = time.perf_counter()
                per_epoch = t.threaded_epochs(loader, epochs, threads)
                secs = time.perf_counter() - t0
                for batches in per_epoch:
                    t.check_exactly_once(batches, rows)
                    assert len(batches) == len(loader)
            out[f"threads_{kind}"] = {
                "epochs": epochs,
                "rows": rows,
                "threads": threads,
                "exactly_once": True,
                "seconds": round(secs, 1),
                "M_rows_per_s": round(epochs * rows / secs / 1e6, 2),
            }
            log(f"load {kind}: {out[f'threads_{kind}']}")
            del per_epoch
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


# -- resume ---------------------------------------------------------------------------


def resume(kills: int, rows: int, every: int) -> dict:
    import test_crash as t

    folder = tempfile.mkdtemp(prefix="resume-", dir=os.environ.get("RELIABILITY_DIR"))
    t0 = time.perf_counter()
    try:
        stats = t.resume_loop(
            folder, n=rows, batch=64, epochs=3, every=every, seed=11, max_kills=kills, pause=0.001
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    log(f"resume: {stats}")
    return stats


# -- dataset writes: interrupted, and two at once ---------------------------------------------


def _dataset_campaign(name: str, run, parts: int) -> dict:
    """``run(folder, progress)`` on a dataset folder in a scratch directory, timed."""
    folder = tempfile.mkdtemp(prefix=f"{name}-", dir=os.environ.get("RELIABILITY_DIR"))
    t0 = time.perf_counter()
    try:

        def progress(k, stats):
            if (k + 1) % 25 == 0:
                log(f"  {name}: {k + 1} trials, {stats}")

        stats = run(os.path.join(folder, "ds"), progress)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    stats["parts"] = parts
    stats["seconds"] = round(time.perf_counter() - t0, 1)
    log(f"{name}: {stats}")
    return stats


def interrupt(trials: int, rows: int, part_rows: int) -> dict:
    import test_dataset_writes as t

    def run(path, progress):
        return t.interrupt_loop(path, trials, n=rows, part_rows=part_rows, seed=13, log=progress)

    stats = _dataset_campaign("interrupt", run, -(-rows // part_rows))
    stats["dataset_mb"] = round(8 * rows * (t.D + 1) / 2**20, 1)
    return stats


def writers(pairs: int, rows: int, part_rows: int) -> dict:
    import test_dataset_writes as t

    def run(path, progress):
        return t.writer_pairs(path, pairs, n=rows, part_rows=part_rows, seed=17, log=progress)

    return _dataset_campaign("writers", run, -(-rows // part_rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parts = [
        "fuzz",
        "validate",
        "crash",
        "changes",
        "guard",
        "cost",
        "load",
        "resume",
        "interrupt",
        "writers",
    ]
    parser.add_argument("parts", nargs="*", help=f"any of {parts} (default: all)")
    parser.add_argument("--quick", action="store_true", help="a smoke test of every part")
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    todo = args.parts or parts
    unknown = set(todo) - set(parts)
    if unknown:
        parser.error(f"unknown part(s) {sorted(unknown)}; choose from {parts}")
    q = args.quick
    log(f"python {platform.python_version()}, {os.cpu_count()} cores, {platform.platform()}")
    results = {}
    if "fuzz" in todo:
        results["fuzz"] = fuzz(cases=200 if q else 30_000, workers=2 if q else 6, timeout=600)
    if "validate" in todo:
        results["validate"] = validate(
            cases=300 if q else 100_000, workers=2, timeout=10 if q else 60
        )
    if "crash" in todo:
        results["crash"] = crash(kills=5 if q else 200, rows=200_000 if q else 1_000_000, d=7)
    if "changes" in todo:
        results["changes"] = changes(trials=5 if q else 100, n=200_000, d=16, batch=4096)
    if "guard" in todo:
        results["guard"] = guard(truncations=50 if q else 1000, n=20_000, d=16, batch=4096)
    if "cost" in todo:
        results["cost"] = gather_cost(
            n=200_000 if q else 1_000_000, d=16, seconds=0.3 if q else 1.5
        )
    if "load" in todo:
        results["load"] = load(
            rows=100_000 if q else 1_000_000,
            epochs=3 if q else 50,
            threads=8,
            loaders=100 if q else 1000,
            long_epochs=10 if q else 100,
        )
    if "resume" in todo:
        results["resume"] = resume(
            kills=3 if q else 50, rows=3000 if q else 20_000, every=5 if q else 10
        )
    if "interrupt" in todo:
        results["interrupt"] = interrupt(
            trials=6 if q else 200, rows=20_000 if q else 200_000, part_rows=2_000 if q else 20_000
        )
    if "writers" in todo:
        results["writers"] = writers(
            pairs=3 if q else 100, rows=20_000 if q else 200_000, part_rows=2_000 if q else 20_000
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    log(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
