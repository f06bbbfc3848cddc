"""Ray Train, elastic, over a sharded dataset: run by tests/adapters/test_ray_train.py.

    python ray_train.py OUT

A local two-node Ray cluster on this machine (1 CPU each) runs a TorchTrainer
of 1 to 2 CPU workers (gloo, DDP) over a sharded ``.ndf`` dataset, through
``DataLoader(..., num_shards="auto", shard_index="auto", elastic=True)``,
saving every rank's loader state in each Ray Train checkpoint with
``exactbatch.ray.report_with_loader`` (and the row ids it handed out, the test's
own file), resuming with ``restore_loader`` and certifying with ``certify_run``.
At local step KILL_AT of the first run, once Ray Train has registered the
checkpoint of step CHECKPOINT_EVERY, the driver removes the
second node: its worker dies with it, and Ray Train restarts the run from
that checkpoint on the resources left, one worker (ScalingConfig's
num_workers=(1, 2)). OUT receives
``result.json``: the certificate ``certify_run`` gave (of the Result, and of the
run's folder), and of each registered checkpoint every rank's state and the
(epoch, row) ids handed out in the batches it counts, with the world size.
"""

import json
import os
import sys
import tempfile
import threading
import time

import numpy as np

T0 = time.time()
N, D, BATCH, EPOCHS = 240, 3, 8, 2  # 30 global batches an epoch: even, so DDP's ranks agree
CHECKPOINT_EVERY, KILL_AT = 5, 7  # local steps: the run resumes from local step 5


def train_fn(config):
    import ray.train
    import torch

    from exactbatch import DataLoader, open_ndf_dataset
    from exactbatch.distributed import _from_ray_train
    from exactbatch.ray import report_with_loader, restore_loader

    torch.manual_seed(0)
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    loader = DataLoader(
        open_ndf_dataset(config["data"]),
        BATCH,
        num_shards="auto",
        shard_index="auto",
        elastic=True,
        seed=5,
    )
    # the shard comes from Ray Train's context (torch.distributed agrees)
    assert _from_ray_train() == (world, rank) == (loader.num_shards, loader.shard_index)
    plain = torch.nn.Linear(D, 1)  # saved and loaded unwrapped: DDP's exists at 2 workers only
    model = ray.train.torch.prepare_model(plain)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ids: list[int] = []  # epoch * N + row, of the batches handed out in this run
    resumed = restore_loader(loader)  # the documented call: any rank's state, any count
    if resumed:
        with resumed.as_directory() as folder:
            plain.load_state_dict(torch.load(os.path.join(folder, "model.pt")))

    def save() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            # the test's own record (the rows handed out), beside the model
            with open(os.path.join(tmp, f"ids-{rank}.json"), "w") as f:
                json.dump({"ids": ids, "world": world}, f)
            if rank == 0:
                torch.save(plain.state_dict(), os.path.join(tmp, "model.pt"))
            report_with_loader({"world": world}, loader, checkpoint_dir=tmp)

    step = 0
    while loader.epoch < EPOCHS:
        epoch = loader.epoch
        for xb, yb in loader:
            ids.extend(epoch * N + int(v) for v in xb[:, 0])
            x, y = torch.from_numpy(xb).float(), torch.from_numpy(yb).float()
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            step += 1
            if step % CHECKPOINT_EVERY == 0:
                save()
            if step == KILL_AT and not os.path.exists(config["marker"]):
                open(config["marker"], "w").close()  # the driver removes a node now
                time.sleep(300)  # this run ends here, its node gone
    save()  # the run's end, on record


def _registered(out: str) -> bool:
    """Whether Ray Train's controller has registered a checkpoint of the run."""
    snapshot = os.path.join(out, "runs", "elastic", "checkpoint_manager_snapshot.json")
    try:
        with open(snapshot) as f:
            return bool(json.load(f).get("checkpoint_results"))
    except (OSError, ValueError):
        return False


def main(out: str) -> None:
    import ray
    from ray.cluster_utils import Cluster
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    from exactbatch import save_ndf_dataset

    rng = np.random.default_rng(0)
    x = np.column_stack([np.arange(N, dtype=float), rng.normal(size=(N, D - 1))])
    y = x[:, 1:2] - 0.5 * x[:, 2:3]
    data = os.path.join(out, "data")
    save_ndf_dataset(data, [(x[i : i + 60], y[i : i + 60]) for i in range(0, N, 60)])

    cluster = Cluster(
        initialize_head=True, head_node_args={"num_cpus": 1, "include_dashboard": False}
    )
    spare = cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        print(f"{time.time() - T0:.1f}s: a cluster of {ray.cluster_resources()}", flush=True)
        trainer = TorchTrainer(
            train_fn,
            train_loop_config={"data": data, "marker": os.path.join(out, "killed")},
            scaling_config=ScalingConfig(num_workers=(1, 2), use_gpu=False),
            run_config=RunConfig(
                storage_path=os.path.join(out, "runs"),
                name="elastic",
                failure_config=FailureConfig(max_failures=1),
                checkpoint_config=CheckpointConfig(num_to_keep=None),
            ),
        )
        done: dict = {}

        def run() -> None:
            try:
                done["result"] = trainer.fit()
            except BaseException as e:  # raised again below, in the main thread
                done["error"] = e

        fit = threading.Thread(target=run)
        fit.start()
        # The node goes once a worker has passed KILL_AT and the controller has
        # registered the checkpoint before it (a report it had not yet collected from
        # the workers would die with them, and the run restart from scratch).
        while fit.is_alive() and not (
            os.path.exists(os.path.join(out, "killed")) and _registered(out)
        ):
            time.sleep(0.2)
        print(f"{time.time() - T0:.1f}s: removing a node", flush=True)
        if fit.is_alive():
            cluster.remove_node(spare)  # a node lost, with the worker on it
        fit.join()
        print(f"{time.time() - T0:.1f}s: fit returned", flush=True)
        if "error" in done:
            raise done["error"]
        result = done["result"]
        assert result.error is None, result.error
        runs = os.path.join(out, "runs", "elastic")
        # The certificate through the documented call, from the Result and from storage.
        from exactbatch.ray import certify_run
        from exactbatch.tools.certify import public

        report: dict = {
            "certificate": public(certify_run(result)),
            "from_path": public(certify_run(runs)),
            "checkpoints": [],
        }
        for c in sorted(os.path.basename(ck.path) for ck, _ in result.best_checkpoints):
            saved: dict = {"checkpoint": c, "states": {}, "ids": {}}
            for name in sorted(os.listdir(os.path.join(runs, c))):
                kind = "states" if name.startswith("loader-") else "ids"
                if name.endswith(".json"):
                    with open(os.path.join(runs, c, name)) as f:
                        saved[kind][name.split("-")[1][: -len(".json")]] = json.load(f)
            report["checkpoints"].append(saved)
        with open(os.path.join(out, "result.json"), "w") as f:
            json.dump(report, f)
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main(sys.argv[1])
