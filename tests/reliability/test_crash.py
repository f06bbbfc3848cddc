"""Reliability, 2: crash safety of save_ndf - SIGKILL at random moments, never a torn file.

A child process writes a dataset of tens of MB with ``save_ndf`` over a
path that already holds a previous version; the parent kills it with
SIGKILL after a random delay (from before the write starts to after it
ends). After every kill the path must hold either the complete previous
file or the complete new one, byte for byte - never a torn or partial
file - and every file there opens. Temporary files: a killed writer leaves
``.NAME.<host>.<pid>.<random>.tmp`` behind; the next ``save_ndf`` to that
path removes those whose writer process is gone, so after many killed
writes one successful save leaves the folder clean.

:func:`kill_loop` is shared with ``bench/reliability.py crash`` (200+ kills
of a larger file); the fast tests here run about ten.
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

from exactbatch import DataLoader, open_ndf, save_ndf
from exactbatch.ndf.temps import host_tag as _host_tag

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGKILL and pids are POSIX")

# The writer: builds version `gen` of the data, says "ready", writes it, says "done <seconds>".
WRITER = textwrap.dedent(
    """
    import sys, time
    import numpy as np
    from exactbatch import save_ndf
    path, gen, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    x = np.arange(n * d, dtype=np.float64).reshape(n, d)
    x += gen / 8
    y = np.full((n, 1), float(gen))
    print("ready", flush=True)
    t0 = time.perf_counter()
    save_ndf(path, (x, y))
    print("done", time.perf_counter() - t0, flush=True)
    """
)


def version_digest(gen: int, n: int, d: int) -> str:
    """sha256 of the complete .ndf file that WRITER writes for ``gen``."""
    x = np.arange(n * d, dtype=np.float64).reshape(n, d)
    x += gen / 8
    rows = np.hstack([x, np.full((n, 1), float(gen))]).astype("<f8")
    h = hashlib.sha256(b"NDF1" + np.array([n, d, 1], dtype="<u8").tobytes())
    h.update(rows.tobytes())
    return h.hexdigest()


def file_digest(path) -> str | None:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            while block := f.read(1 << 22):
                h.update(block)
    except FileNotFoundError:
        return None
    return h.hexdigest()


def temp_files(folder, name: str) -> list[str]:
    return sorted(e for e in os.listdir(folder) if e.startswith(f".{name}.") and e.endswith(".tmp"))


def start_writer(path, gen: int, n: int, d: int) -> subprocess.Popen:
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, os.fspath(path), str(gen), str(n), str(d)],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = proc.stdout.readline()
    assert line.strip() == "ready", line
    return proc


def wait_for_bytes(folder, proc: subprocess.Popen, target: float) -> None:
    """Return once ``proc``'s temp file holds ``target`` bytes, or ``proc`` has ended."""
    mark = f".{proc.pid}."
    while proc.poll() is None:
        for name in temp_files(folder, "data.ndf"):
            if mark in name:
                try:
                    if os.stat(os.path.join(folder, name)).st_size >= target:
                        return
                except FileNotFoundError:  # renamed (done) or removed
                    pass
        time.sleep(0.0002)


def kill_loop(folder, kills: int, n: int, d: int, seed: int, log=None) -> dict:
    """Kill ``kills`` writers of ``folder/data.ndf`` at random moments; check after each.

    Three kills in four strike when the writer's temp file holds a random share of its
    bytes, the others after a random delay (around the fsync, rename and exit too).
    Returns counts: how often the kill left the old version, the new one
    (the rename had happened), how often it struck mid-write (the writer's
    temp file was left), the most temp files seen at once, and the
    uncontested write time the delays were drawn around.
    """
    rng = np.random.default_rng(seed)
    path = os.path.join(os.fspath(folder), "data.ndf")
    # version 0, written to completion three times: the median calibrates a write's time
    times = []
    for _ in range(3):
        proc = start_writer(path, 0, n, d)
        out, _ = proc.communicate(timeout=300)
        assert proc.returncode == 0, out
        times.append(float(out.split()[1]))
    write_s = sorted(times)[1]
    current, gen = 0, 0
    size = 28 + 8 * n * (d + 1)
    assert file_digest(path) == version_digest(0, n, d)
    stats = {"kills": 0, "old": 0, "new": 0, "mid_write": 0, "max_temps": 0, "write_s": write_s}
    for k in range(kills):
        gen += 1
        proc = start_writer(path, gen, n, d)
        if rng.random() < 0.75:  # when its temp file holds a random share of the bytes
            wait_for_bytes(folder, proc, float(rng.uniform(0.0, 1.0)) * size)
        else:  # or after a random delay: also around the fsync, the rename, the exit
            time.sleep(float(rng.uniform(0.0, 1.5 * write_s)))
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=300)
        # killed, or (a late kill) finished first
        assert proc.returncode in (-signal.SIGKILL, 0), proc.returncode
        found = file_digest(path)
        if found == version_digest(current, n, d):
            stats["old"] += 1
        else:
            assert found == version_digest(gen, n, d), (
                f"kill {k}: {path} is neither the complete previous version {current} "
                f"nor the complete new one {gen}: a torn file"
            )
            stats["new"] += 1
            current = gen
        with open_ndf(path) as f:
            assert (f.n, f.d, f.l) == (n, d, 1)
        stats["kills"] += 1
        temps = temp_files(folder, "data.ndf")
        stats["mid_write"] += any(f".{proc.pid}." in t for t in temps)  # its temp file is left
        stats["max_temps"] = max(stats["max_temps"], len(temps))
        if log is not None:
            log(k, stats)
    stats["temps_before_save"] = len(temp_files(folder, "data.ndf"))
    # one successful save cleans up every temp file left by the killed writers
    x = np.arange(6.0).reshape(3, 2)
    save_ndf(path, x)
    stats["temps_after_save"] = len(temp_files(folder, "data.ndf"))
    assert stats["temps_after_save"] == 0, temp_files(folder, "data.ndf")
    with open_ndf(path) as f:
        np.testing.assert_array_equal(f.read_rows(range(3))[0], x)
    return stats


def test_sigkill_during_save_leaves_the_old_or_the_new_file_never_a_torn_one(tmp_path):
    """10 writers of a 51 MB file killed at random moments: old or new, byte for byte."""
    stats = kill_loop(tmp_path, kills=10, n=800_000, d=7, seed=1)
    assert stats["kills"] == 10
    assert stats["temps_after_save"] == 0


def test_stale_temp_files_of_dead_writers_are_removed_and_no_others(tmp_path):
    """Removed: this target's temp files whose writer pid is gone (on this host). Kept:
    a live writer's, another host's, another target's, and names save_ndf does not make."""
    host = _host_tag()
    other_host = "0" * 8 if host != "0" * 8 else "1" * 8
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid = int(dead.stdout)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        names = {
            f".data.ndf.{host}.{dead_pid}.0123456789ab.tmp": False,  # stale: removed
            f".data.ndf.{host}.{dead_pid}.ba9876543210.tmp": False,
            f".data.ndf.{host}.{live.pid}.0123456789ab.tmp": True,  # a writer still at work
            f".data.ndf.{host}.{os.getpid()}.0123456789ab.tmp": True,  # this process's
            f".data.ndf.{other_host}.{dead_pid}.0123456789ab.tmp": True,  # another host's
            f".other.ndf.{host}.{dead_pid}.0123456789ab.tmp": True,  # another target's
            ".data.ndf.0123456789ab.tmp": True,  # an older naming: left alone
            f".data.ndf.{host}.{dead_pid}.tmp": True,
            f".data.ndf.{host}.9999999999.0123456789ab.tmp": True,  # no such pid can exist
            "data.ndf.backup": True,
        }
        for name in names:
            (tmp_path / name).write_bytes(b"partial")
        save_ndf(tmp_path / "data.ndf", np.ones((2, 2)))
        left = set(os.listdir(tmp_path))
        for name, kept in names.items():
            assert (name in left) == kept, (name, kept)
        assert "data.ndf" in left
    finally:
        live.kill()
        live.wait()


CONCURRENT = textwrap.dedent(
    """
    import sys
    import numpy as np
    from exactbatch import save_ndf
    path, gen = sys.argv[1], int(sys.argv[2])
    for _ in range(5):
        save_ndf(path, np.full((200_000, 4), float(gen)))
    """
)


def test_concurrent_writers_of_one_path_never_remove_each_others_temp_files(tmp_path):
    """Three processes saving the same path at once all succeed (none deletes a live
    writer's temp file); the path ends as one complete version; no temp file is left."""
    path = tmp_path / "data.ndf"
    procs = [
        subprocess.Popen([sys.executable, "-c", CONCURRENT, os.fspath(path), str(g)])
        for g in (1, 2, 3)
    ]
    for p in procs:
        assert p.wait(timeout=300) == 0
    with open_ndf(path) as f:
        x, _ = f.read_rows(np.arange(f.n))
    assert x.shape == (200_000, 4) and x[0, 0] in (1.0, 2.0, 3.0)
    assert np.all(x == x[0, 0])
    assert temp_files(tmp_path, "data.ndf") == []


# -- 5. resume under faults -------------------------------------------------------------

# A training process: resumes from the checkpoint if there is one, logs every batch it is
# handed (before using it), and every K batches saves atomically {state, consumed}: the
# loader's state_dict and every batch consumed up to that state. SIGKILL may strike anywhere.
TRAINER = textwrap.dedent(
    """
    import json, os, sys, time
    import numpy as np
    from exactbatch import DataLoader, open_ndf
    data, ckpt, log_path = sys.argv[1], sys.argv[2], sys.argv[3]
    batch, epochs, every, seed = (int(v) for v in sys.argv[4:8])
    pause = float(sys.argv[8])
    loader = DataLoader(open_ndf(data), batch_size=batch, seed=seed)
    consumed = []
    if os.path.exists(ckpt):
        with open(ckpt) as f:
            saved = json.load(f)
        loader.load_state_dict(saved["state"])
        consumed = saved["consumed"]
    log = open(log_path, "a")
    log.write(f"S {len(consumed)}\\n")
    log.flush()

    def save():
        tmp = ckpt + ".tmp"
        with open(tmp, "w") as f:
            json.dump({"state": loader.state_dict(), "consumed": consumed}, f)
        os.replace(tmp, ckpt)  # atomic: a kill leaves the old checkpoint or the new one

    while loader.state_dict()["epoch"] < epochs:
        for xb, _ in loader:
            ids = xb[:, 0].astype(np.int64).tolist()
            log.write("B " + ",".join(map(str, ids)) + "\\n")
            log.flush()
            consumed.append(ids)  # "train" on the batch
            if len(consumed) % every == 0:
                save()
            time.sleep(pause)
    save()
    print("finished", flush=True)
    """
)


def read_runs(log_path) -> list[tuple[int, list[list[int]]]]:
    """The training log as runs: (checkpoint position it resumed from, batches it was handed)."""
    runs = []
    with open(log_path) as f:
        for line in f:
            if not line.endswith("\n"):  # a line cut by the kill: its batch was not used
                break
            tag, _, rest = line.rstrip("\n").partition(" ")
            if tag == "S":
                runs.append((int(rest), []))
            else:
                runs[-1][1].append([int(v) for v in rest.split(",")])
    return runs


def resume_loop(
    folder,
    n: int,
    batch: int,
    epochs: int,
    every: int,
    seed: int,
    max_kills: int,
    pause: float = 0.002,
    log=None,
) -> dict:
    """Train to the end, killing the trainer at random batches up to ``max_kills`` times.

    Checks what resume promises (see the test below) and returns counts.
    """
    folder = os.fspath(folder)
    data = os.path.join(folder, "train.ndf")
    ids = np.arange(n, dtype=np.float64)
    save_ndf(data, (np.column_stack([ids, ids * 3 + 0.5]), -ids))
    ckpt, log_path = os.path.join(folder, "ckpt.json"), os.path.join(folder, "log.txt")
    with open_ndf(data) as f:
        reference = []
        ref_loader = DataLoader(f, batch_size=batch, seed=seed)
        for _ in range(epochs):
            reference += [xb[:, 0].astype(np.int64).tolist() for xb, _ in ref_loader]
    per_epoch = len(reference) // epochs
    rng = np.random.default_rng(seed)
    kills = 0
    args = [str(v) for v in (batch, epochs, every, seed, pause)]
    while True:
        proc = subprocess.Popen(
            [sys.executable, "-c", TRAINER, data, ckpt, log_path, *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        if kills < max_kills:
            start = sum(len(b) for _, b in read_runs(log_path)) if os.path.exists(log_path) else 0
            target = start + int(rng.integers(1, 2 * every + 3))
            while proc.poll() is None:
                handed = (
                    sum(len(b) for _, b in read_runs(log_path)) if os.path.exists(log_path) else 0
                )
                if handed >= target:
                    proc.send_signal(signal.SIGKILL)
                    break
                time.sleep(0.001)
        out, _ = proc.communicate(timeout=300)
        if proc.returncode == -signal.SIGKILL:
            kills += 1
            continue
        assert proc.returncode == 0 and out.strip() == "finished", (proc.returncode, out)
        break

    with open(ckpt) as f:
        final = json.load(f)
    runs = read_runs(log_path)
    # (a) The checkpointed history - every batch consumed up to each save, chained across
    #     restarts - is exactly the uninterrupted run: the same batches in the same order.
    assert final["consumed"] == reference
    # (b) Hence each epoch hands out every row exactly once ...
    for e in range(epochs):
        rows = np.concatenate(reference[e * per_epoch : (e + 1) * per_epoch])
        assert np.array_equal(np.sort(rows), np.arange(n))
    # (c) ... and a restarted run begins exactly at its checkpoint: run r, resumed from
    #     position p (the batches consumed in that checkpoint), is handed reference[p], ...
    replayed = 0
    for r, (p, batches) in enumerate(runs):
        assert batches == reference[p : p + len(batches)], f"run {r} did not resume at {p}"
        # (d) the batches it was handed after its last save are handed out again, once,
        #     by the next run, which resumes from that save - and nothing else is repeated
        if r + 1 < len(runs):
            nxt = runs[r + 1][0]
            assert p <= nxt <= p + len(batches) and nxt % every == 0 or nxt == p
            replayed += p + len(batches) - nxt
    handed = sum(len(b) for _, b in runs)
    assert handed == len(reference) + replayed
    assert runs[0][0] == 0 and len(runs) == kills + 1
    return {"kills": kills, "batches": len(reference), "handed_out": handed, "replayed": replayed}


def test_training_killed_at_random_batches_resumes_exactly(tmp_path):
    """What resume promises, checked across ~8 SIGKILLs of a training process:

    A trainer saves, atomically and every K batches, ``state_dict()`` together with the
    batches it has consumed. Killed at any moment and restarted from its last save:

    (a) the chained history of consumed batches equals the batches of an uninterrupted
        run - same batches, same order - so each epoch hands out every row exactly once;
    (b) a restarted run is handed exactly the batches after its checkpoint;
    (c) the only rows handed out twice are those of the batches handed out after the last
        save before a kill (fewer than K batches, or the K-th while saving): they are
        handed out again, identically, by the next run.
    """
    stats = resume_loop(tmp_path, n=3000, batch=64, epochs=3, every=5, seed=4, max_kills=8)
    assert stats["kills"] == 8
