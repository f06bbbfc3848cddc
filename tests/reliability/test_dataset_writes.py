"""Reliability, 5: dataset writes are atomic - SIGINT at random instants, concurrent writers.

A dataset write (``exactbatch convert SRC DIR --part-rows R --force``, or
``save_ndf_dataset``) over an existing dataset, in a child process, gets a
SIGINT at a random instant: when its k-th new part has appeared (k random),
or after a random delay (around the manifest's rename and the exit too).
After each, the folder must hold either the old dataset exactly as it was
(every file's bytes, nothing more) or the new one, whole, and nothing else:
no part or temporary file of either write left over.

Two writers of one folder started at once (each writing its own version)
must end as one writer's dataset, never a mix of their parts, and the
loser's parts removed (by whichever finishes last; a later write removes
anything left).

:func:`interrupt_loop` and :func:`writer_pairs` are shared with
``bench/reliability.py interrupt writers`` (200 signals, 100 pairs); the fast
tests here run a few of each.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from exactbatch import open_ndf_dataset, save_ndf, save_ndf_dataset

pytestmark = pytest.mark.skipif(os.name != "posix", reason="signals and pids are POSIX")

D = 8  # features; one label

# The writer: version `gen` of the data into `folder`, by the command or by the library.
# Says "ready" once imported; with "wait", writes only after a line on stdin.
WRITER = textwrap.dedent(
    """
    import signal, sys
    import numpy as np
    mode, folder, gen, n, d, part_rows, src, wait = sys.argv[1:9]
    gen, n, d, part_rows = int(gen), int(n), int(d), int(part_rows)
    if mode == "convert":
        from exactbatch.cli import main
        import exactbatch.tools.convert  # imported before "ready", as the library is
    else:
        from exactbatch import save_ndf_dataset
        x = np.arange(n * d, dtype=np.float64).reshape(n, d) + gen / 8
        y = np.full((n, 1), float(gen))
        parts = [(x[a : a + part_rows], y[a : a + part_rows]) for a in range(0, n, part_rows)]
    print("ready", flush=True)
    if wait == "wait":
        sys.stdin.readline()
    try:
        if mode == "convert":
            rc = main(["convert", src, folder, "--part-rows", str(part_rows), "--force", "-q"])
        else:
            save_ndf_dataset(folder, parts)
            rc = 0
    except KeyboardInterrupt:  # the library's way: the caller decides
        rc = 130
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a late one: the write is over
    sys.exit(rc)
    """
)


def version(gen: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    x = np.arange(n * D, dtype=np.float64).reshape(n, D) + gen / 8
    return x, np.full((n, 1), float(gen))


def start(mode, folder, gen, n, part_rows, src="-", wait=False) -> subprocess.Popen:
    args = [mode, folder, gen, n, D, part_rows, src, "wait" if wait else "go"]
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, *map(str, args)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a test run in the background inherits SIGINT ignored: give the child the default
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    line = proc.stdout.readline()
    assert line.strip() == "ready", (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc


def snapshot(folder) -> dict:
    """Every file in ``folder`` and the sha256 of its bytes."""
    out = {}
    for name in sorted(os.listdir(folder)):
        with open(os.path.join(folder, name), "rb") as f:
            out[name] = hashlib.sha256(f.read()).hexdigest()
    return out


def dataset_version(folder, n: int) -> int | None:
    """Which version the dataset at ``folder`` holds, whole; None if it holds no whole one."""
    try:
        with open_ndf_dataset(folder) as ds:
            if (ds.n, ds.d, ds.l) != (n, D, 1):
                return None
            x, y = ds.read_rows(np.arange(n))
    except (ValueError, OSError):
        return None
    gen = int(y[0, 0])
    want = version(gen, n)
    return gen if np.array_equal(x, want[0]) and np.array_equal(y, want[1]) else None


def unlisted(folder) -> list[str]:
    """Files in the dataset folder that are neither the manifest nor a part it lists."""
    with open(os.path.join(folder, "manifest.json")) as f:
        listed = {p["name"] for p in json.load(f)["parts"]}
    return sorted(set(os.listdir(folder)) - listed - {"manifest.json"})


def new_parts(folder, before: dict) -> int:
    """Part files (not temporary ones) in ``folder`` that were not there ``before``."""
    try:
        names = os.listdir(folder)
    except FileNotFoundError:
        return 0
    return sum(1 for e in names if e.startswith("part-") and e not in before)


def interrupt_loop(
    folder, trials: int, n: int, part_rows: int, seed: int, calibrate: int = 2, log=None
) -> dict:
    """``trials`` writes of a new version over the dataset at ``folder``, each sent SIGINT
    at a random instant; the law checked after each (see the module docstring).

    Writers alternate: ``exactbatch convert SRC DIR --part-rows R --force`` and
    ``save_ndf_dataset``. Half the signals strike when the k-th new part file has
    appeared (k uniform over the parts), half after a delay uniform over 1.25 times
    the uncontested write (the median of ``calibrate`` writes by each, made first),
    which reaches past the manifest's rename.
    """
    rng = np.random.default_rng(seed)
    folder = os.fspath(folder)
    src = folder + ".in.ndf"  # convert's input: the version to write
    cuts = range(0, n, part_rows)
    x, y = version(0, n)
    save_ndf_dataset(folder, [(x[a : a + part_rows], y[a : a + part_rows]) for a in cuts])
    times = {"convert": [], "save": []}
    gen = 0
    for mode in ("convert", "save") * calibrate:  # uncontested writes: how long one takes
        gen += 1
        save_ndf(src, version(gen, n))
        proc = start(mode, folder, gen, n, part_rows, src)
        t0 = time.perf_counter()
        out, err = proc.communicate(timeout=300)
        times[mode].append(time.perf_counter() - t0)
        assert proc.returncode == 0, err
        assert dataset_version(folder, n) == gen and unlisted(folder) == []
        current = gen
    write_s = {m: float(np.median(t)) for m, t in times.items()}
    stats = {"signals": 0, "old_kept": 0, "new_whole": 0, "leftovers": 0, "broken": 0}
    stats.update(exit_130=0, exit_0=0, new_whole_exit_130=0, write_s=write_s)
    for k in range(trials):
        mode = "convert" if k % 2 == 0 else "save"
        gen += 1
        if mode == "convert":
            save_ndf(src, version(gen, n))
        before = snapshot(folder)
        proc = start(mode, folder, gen, n, part_rows, src)
        if rng.random() < 0.5:  # when the k-th new part has been renamed into place
            kth = int(rng.integers(1, len(cuts) + 1))
            while proc.poll() is None and new_parts(folder, before) < kth:
                time.sleep(0.0005)
        else:  # or after a random delay: also around the manifest, the clean-up, the exit
            time.sleep(float(rng.uniform(0.0, 1.25 * write_s[mode])))
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=300)
        assert proc.returncode in (0, 130), (proc.returncode, err)
        assert "Traceback" not in err, err
        stats["signals"] += 1
        stats["exit_130" if proc.returncode else "exit_0"] += 1
        found = dataset_version(folder, n)
        if found == current:
            stats["old_kept"] += 1
            extra = sorted(set(os.listdir(folder)) - set(before))
            changed = snapshot(folder) != before
            stats["leftovers"] += len(extra)
            assert not changed and not extra, f"signal {k}: old dataset kept, but {extra}"
        elif found == gen:
            stats["new_whole"] += 1
            stats["new_whole_exit_130"] += proc.returncode == 130  # signalled past the commit
            left = unlisted(folder)
            stats["leftovers"] += len(left)
            assert not left, f"signal {k}: the new dataset is whole, but {left} are left"
            current = gen
        else:
            stats["broken"] += 1
            pytest.fail(f"signal {k}: {folder} holds neither the old dataset nor the new one")
        if log is not None:
            log(k, stats)
    os.unlink(src)
    return stats


def writer_pairs(folder, pairs: int, n: int, part_rows: int, seed: int, log=None) -> dict:
    """``pairs`` times, two writers of versions a and b into ``folder`` released at once
    (the second after a random stagger of up to a quarter of a write, so that their
    steps interleave, and either may finish last); the dataset must then be one
    writer's whole, never a mix."""
    rng = np.random.default_rng(seed)
    folder = os.fspath(folder)
    srcs = [folder + f".in{j}.ndf" for j in range(2)]
    stats = {"pairs": 0, "first_released_won": 0, "second_released_won": 0}
    stats.update(mixed=0, broken=0)
    stats.update(unlisted_after_pair=0, max_unlisted=0)
    gen, write_s = 0, None
    for k in range(pairs):
        modes = [("save", "save"), ("convert", "save"), ("convert", "convert")][k % 3]
        gens = (gen + 1, gen + 2)
        gen += 2
        for src, mode, g in zip(srcs, modes, gens, strict=True):
            if mode == "convert":
                save_ndf(src, version(g, n))
        procs = [
            start(m, folder, g, n, part_rows, src, wait=True)
            for m, g, src in zip(modes, gens, srcs, strict=True)
        ]
        stagger = float(rng.uniform(0.0, write_s / 4)) if write_s else 0.0
        order = [0, 1] if rng.random() < 0.5 else [1, 0]
        t0 = time.perf_counter()
        procs[order[0]].stdin.write("go\n")
        procs[order[0]].stdin.flush()
        time.sleep(stagger)
        procs[order[1]].stdin.write("go\n")
        procs[order[1]].stdin.flush()
        for p in procs:
            _, err = p.communicate(timeout=300)
            assert p.returncode == 0, err
        took = time.perf_counter() - t0
        write_s = took / 2 if write_s is None else min(write_s, took / 2)
        stats["pairs"] += 1
        found = dataset_version(folder, n)
        if found is None:
            broken = False
            try:
                with open_ndf_dataset(folder) as ds:
                    _, y = ds.read_rows(np.arange(ds.n))
                broken = len(np.unique(y)) < 2
            except (ValueError, OSError):
                broken = True
            stats["broken" if broken else "mixed"] += 1
            pytest.fail(f"pair {k}: {folder} is not one writer's dataset ({found})")
        first = found == gens[order[0]]
        stats["first_released_won" if first else "second_released_won"] += 1
        left = len(unlisted(folder))  # the loser's parts, when it renamed its manifest late
        stats["unlisted_after_pair"] += left
        stats["max_unlisted"] = max(stats["max_unlisted"], left)
        if log is not None:
            log(k, stats)
    # A later write (both writers gone) removes whatever the races left unlisted.
    save_ndf_dataset(folder, [version(0, 3)])
    stats["unlisted_after_a_later_write"] = len(unlisted(folder))
    assert stats["unlisted_after_a_later_write"] == 0, unlisted(folder)
    for src in srcs:
        if os.path.exists(src):
            os.unlink(src)
    return stats


def test_sigint_during_dataset_writes_leaves_the_old_dataset_or_the_new_one(tmp_path):
    """Two dataset writes, one by the command and one by the library, sent SIGINT at a
    random (seeded) instant: the old dataset as it was, or the new one whole; never a
    part or temporary file left over."""
    stats = interrupt_loop(
        tmp_path / "ds", trials=2, n=20_000, part_rows=2_000, seed=3, calibrate=1
    )
    assert stats["signals"] == 2 and stats["leftovers"] == stats["broken"] == 0


def test_two_writers_at_once_end_as_one_writers_dataset(tmp_path):
    """Two pairs of writers of one folder at once: one writer's whole dataset each time,
    and no file of the other left."""
    stats = writer_pairs(tmp_path / "ds", pairs=2, n=20_000, part_rows=2_000, seed=5)
    assert stats["pairs"] == 2 and stats["mixed"] == stats["broken"] == 0
    assert stats["unlisted_after_pair"] == 0  # the last to finish removed the loser's parts
