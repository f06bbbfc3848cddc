"""Elastic streams under torchrun: 4 gloo ranks killed with kill -9 mid-epoch, resumed at 3,
killed again (in epoch 1), resumed at 2, over a Parquet folder and over ndf_blocks of a
sharded .ndf dataset, each read through a shuffle buffer smaller than the data; and a
padded evaluation pass over 3 ranks (issue 31, item 4), made by the ranks of the run at
3 before they train (torch started once for both). Scaled small (1,200 rows: 38
global batches an epoch); the larger run is bench/elastic_reads.py's.

The two kinds share their three launches (``launch``, in one test): each
launch trains both in lockstep, each kind with its own loader, model, logs and
checkpoints under a folder of its own, so each kind's run is the one a launch of its
own made (the same steps, killed after the same checkpoint), and the test checks
each kind's folder in turn. Was three launches a kind: 81 s for the two on
2026-12-07 (--junitxml), most of it torch and gloo starting on every rank."""

from __future__ import annotations

import json
import os
import subprocess
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("pyarrow")

import helpers  # noqa: E402

import exactbatch  # noqa: E402
from exactbatch import DataLoader  # noqa: E402

SCRIPT = Path(__file__).parent / "scripts" / "elastic_train.py"
N, GROUP, EPOCHS = 1200, 100, 2  # 12 row groups (or blocks of 50): the buffer holds 300 rows
# (world size, the step after which its last rank is killed; 0: runs to the end): at 4
# ranks 10 steps an epoch, killed in epoch 0; at 3, epoch 0's rest is steps 6-11, killed
# in epoch 1 (steps 12-24)
PHASES = [(4, 5), (3, 16), (2, 0)]
EVAL_PHASE = 1  # the phase at 3 ranks: the padded evaluation pass first


def rows(n: int):
    x = np.random.default_rng(1).standard_normal((n, 4))
    x[:, 3] = np.arange(n)  # the row id rides along as a fourth feature
    y = x[:, :3] @ np.array([0.4, -1.1, 2.0]) + 0.1
    return x, y


KINDS = ["parquet", "ndf_blocks"]


def write(tmp_path: Path, kind: str) -> str:
    import pyarrow as pa
    import pyarrow.parquet as pq

    x, y = rows(N)
    if kind == "parquet":
        folder = tmp_path / "data"
        folder.mkdir()
        for k, (a, b) in enumerate([(0, 550), (550, N)]):  # two files, uneven
            cols = {f"x{j}": x[a:b, j] for j in range(4)} | {"y0": y[a:b]}
            pq.write_table(pa.table(cols), folder / f"part{k}.parquet", row_group_size=GROUP)
        return os.fspath(folder)
    parts = [(x[a:b], y[a:b]) for a, b in [(0, 350), (350, 750), (750, N)]]
    exactbatch.save_ndf_dataset(tmp_path / "data", parts)
    return os.fspath(tmp_path / "data")


def torchrun(world: int, *args) -> subprocess.CompletedProcess:
    return helpers.torchrun(SCRIPT, world, *args)


def launch(root: Path) -> list:
    """The three phases' launches, both kinds in each (each kind's files under
    root/KIND): for each phase its CompletedProcess and, as that launch left them, each
    kind's checkpoints marked DONE (the next phase adds its own)."""
    specs = []
    for kind in KINDS:
        (root / "input" / kind).mkdir(parents=True)
        specs.append(f"{kind}:{write(root / 'input' / kind, kind)}")
    runs = []
    for phase, (world, kill_at) in enumerate(PHASES):
        also = ["eval"] if phase == EVAL_PHASE else []
        run = torchrun(world, root, ",".join(specs), "train", phase, EPOCHS, kill_at, *also)
        done = {kind: {p.parent.name for p in (root / kind).glob("ckpt/*/DONE")} for kind in KINDS}
        runs.append((run, done))
    return runs


def test_killed_at_4_resumed_at_3_killed_again_resumed_at_2_every_epoch_exactly_once(
    tmp_path,
):
    """For each kind: the rows each phase handed out up to the checkpoint the next phase
    resumed from, and all the last phase's, are every row exactly once in each epoch;
    certify on the last states (and the states no later rank resumed from) proves both
    epochs; the padded evaluation over 3 ranks sums to the one-process metric. (One
    test for both kinds, so that xdist's workers never launch them twice.)"""
    runs = launch(tmp_path)
    for kind in KINDS:
        try:
            check(tmp_path, runs, kind)
        except AssertionError as e:
            raise AssertionError(f"{kind}: {e}") from e


def check(root: Path, runs: list, kind: str) -> None:
    out = root / kind
    resumed_from = []
    for (run, done), (_, kill_at) in zip(runs, PHASES, strict=True):
        if kill_at:
            assert run.returncode != 0, "the killed run exited cleanly"
            assert str(kill_at) in done[kind], run.stderr[-3000:]
            assert str(kill_at + 1) not in done[kind]
            resumed_from.append(kill_at)
        else:
            assert run.returncode == 0, run.stderr[-3000:]
    # Each kill fell inside an epoch (the first in epoch 0, the second in epoch 1): the
    # killed rank, the last, logged the step it died at.
    for phase, step in enumerate(resumed_from):
        last = PHASES[phase][0] - 1
        log = (out / f"log-{phase}-rank{last}.jsonl").read_text().splitlines()
        at = {json.loads(line)["step"]: json.loads(line)["epoch"] for line in log}
        assert at[step] == at[step + 1] == phase, (phase, step, at)
    # Each phase counts up to the step the next one resumed from: the batches taken
    # after it (by the killed rank, and any the others took) are taken again.
    epochs = defaultdict(list)
    for phase, (world, _) in enumerate(PHASES):
        upto = resumed_from[phase] if phase < len(resumed_from) else None
        for r in range(world):
            for line in (out / f"log-{phase}-rank{r}.jsonl").read_text().splitlines():
                rec = json.loads(line)
                if upto is None or rec["step"] <= upto:
                    epochs[rec["epoch"]] += rec["ids"]
    assert sorted(epochs) == list(range(EPOCHS))
    for e, ids in epochs.items():
        assert sorted(ids) == list(range(N)), f"epoch {e}: rows lost or repeated"
    # The certificate: the last phase's final states and, of each checkpoint resumed
    # from, the states of ranks that no rank of the next world loaded.
    states = [json.loads((out / f"final-2-rank{r}.json").read_text()) for r in range(2)]
    for (world, _), (after, _), step in zip(PHASES[:-1], PHASES[1:], resumed_from, strict=True):
        for r in range(after, world):
            states.append(json.loads((out / "ckpt" / str(step) / f"rank{r}.json").read_text()))
    cert = exactbatch.certify(states)
    assert cert, str(cert)
    assert [(ep.epoch, ep.handed) for ep in cert.epochs] == [(e, N) for e in range(EPOCHS)]
    assert not exactbatch.certify(states[1:]), "certified without one rank's state"
    # Evaluation over 3 ranks, padded (the phase at 3, before it trained): the same
    # metric as one process, every row once.
    assert PHASES[EVAL_PHASE][0] == 3
    got = json.loads((out / "eval.json").read_text())
    assert got["rows"] == N and len(set(got["batches"])) == 1
    want = 0.0
    for xb, yb in DataLoader(rows(N), 32, shuffle=False):
        want += float(((xb[:, :3] @ np.array([0.5, -1.0, 2.0]) - yb[:, 0]) ** 2).sum())
    assert got["sum"] == pytest.approx(want, rel=1e-12)
