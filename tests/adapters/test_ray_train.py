"""exactbatch under Ray Train: an elastic run that loses a node resumes at another
worker count, and every epoch is exact.

The run (tests/adapters/scripts/ray_train.py, in a subprocess of its own): a
local two-node Ray cluster on this machine, a TorchTrainer of 1 to 2 CPU workers
(gloo, DDP), ``DataLoader(open_ndf_dataset(path), ..., num_shards="auto",
shard_index="auto", elastic=True)``; a node is removed mid-epoch and Ray Train
restarts from the last checkpoint with one worker. Slow (a Ray cluster starts,
and torch in each worker: a minute or more on a loaded 2-core machine), in a
file of its own so that ``--deselect tests/adapters/test_ray_train.py`` (or
``-k "not ray_train"``) leaves it out.
"""

import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

import exactbatch

pytest.importorskip("torch")
pytest.importorskip("ray.train")
SCRIPT = Path(__file__).parent / "scripts" / "ray_train.py"
N, EPOCHS = 240, 2  # as in the script


def test_a_node_lost_mid_epoch_resumes_at_one_worker_and_every_epoch_is_exact(tmp_path):
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        # a placement group for the workers of a node gone is not waited for long
        "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "10",
        # this exactbatch, in the driver and in Ray's workers (they inherit it)
        "PYTHONPATH": os.pathsep.join(
            p
            for p in (str(Path(exactbatch.__file__).parents[1]), os.environ.get("PYTHONPATH"))
            if p
        ),
    }
    run = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path)],
        timeout=1200,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    with open(tmp_path / "result.json") as f:
        saved = json.load(f)["segments"]

    # The checkpoint resumed from: the last one of the two-worker run, one state per rank.
    first = [s for s in saved if s["world"] == 2]
    resumed_from = max(s["checkpoint"] for s in first)
    at = sorted((s for s in first if s["checkpoint"] == resumed_from), key=lambda s: s["file"])
    assert [s["file"] for s in at] == ["loader-0.json", "loader-1.json"]
    assert {s["state"]["global_batches_done"] for s in at} == {10}  # 5 steps of 2 ranks
    # The run it restarted as: one worker, from that checkpoint, to the end.
    (final,) = [s for s in saved if s["file"].startswith("final-")]
    assert final["world"] == 1
    assert (final["state"]["epoch"], final["state"]["global_batches_done"]) == (EPOCHS, 0)

    # Every (epoch, row) handed out exactly once: by the two ranks up to the checkpoint,
    # then by the one worker (the batches of the lost run after it were rolled back).
    ids = Counter(i for s in [*at, final] for i in s["ids"])
    assert sorted(ids) == list(range(EPOCHS * N))
    assert set(ids.values()) == {1}

    certify = getattr(exactbatch, "certify", None)
    if certify is not None:  # the run certificate, from the states alone
        cert = certify([s["state"] for s in [*at, final]])
        assert cert, str(cert)
        assert len(cert.epochs) == EPOCHS
