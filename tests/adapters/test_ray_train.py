"""exactbatch under Ray Train: an elastic run that loses a node resumes at another
worker count, and every epoch is exact.

The run (tests/adapters/scripts/ray_train.py, in a subprocess of its own): a
local two-node Ray cluster on this machine, a TorchTrainer of 1 to 2 CPU workers
(gloo, DDP), ``DataLoader(open_ndf_dataset(path), ..., num_shards="auto",
shard_index="auto", elastic=True)``, its state saved and restored by
``exactbatch.ray.report_with_loader`` and ``restore_loader``; a node is removed
mid-epoch and Ray Train restarts from the last checkpoint with one worker; the
run ends at ``exactbatch.ray.certify_run``. Slow (a Ray cluster starts,
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
        # a placement group for the workers of a node gone is not waited for long (the
        # wait is for the placement group alone, ready at once when the resources are
        # there; a start timed out is retried by the controller without limit)
        "RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S": "3",
        # a worker's report returns once the controller's poll has collected it: polled
        # every 2 s by default, the run's 12 checkpoints waited about 2 s each
        "RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.5",
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
        found = json.load(f)
    saved = found["checkpoints"]

    # The checkpoint resumed from: the last one of the two-worker run, one state per rank.
    first = [c for c in saved if {i["world"] for i in c["ids"].values()} == {2}]
    at = first[-1]
    assert sorted(at["states"]) == ["0", "1"]
    assert {s["global_batches_done"] for s in at["states"].values()} == {10}  # 5 steps of 2
    # The run it restarted as: one worker, from that checkpoint, to the end.
    final = saved[-1]
    assert final["ids"]["0"]["world"] == 1 and sorted(final["states"]) == ["0"]
    state = final["states"]["0"]
    assert (state["epoch"], state["global_batches_done"]) == (EPOCHS, 0)
    assert state["parent"] == at["states"]["0"]["id"]  # restore_loader loaded that checkpoint

    # Every (epoch, row) handed out exactly once: by the two ranks up to the checkpoint,
    # then by the one worker (the batches of the lost run after it were rolled back).
    ids = Counter(i for c in (at, final) for rec in c["ids"].values() for i in rec["ids"])
    assert sorted(ids) == list(range(EPOCHS * N))
    assert set(ids.values()) == {1}

    # The run certificate, by certify_run alone (of the Result, and of the run's folder),
    # from every checkpoint Ray Train registered.
    for cert in (found["certificate"], found["from_path"]):
        assert cert["certified"], cert
        assert [(e["epoch"], e["handed"]) for e in cert["epochs"]] == [(0, N), (1, N)]
