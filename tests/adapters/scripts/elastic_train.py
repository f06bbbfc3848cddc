"""Run by torchrun in tests/adapters/test_torchrun_elastic.py: elastic DDP training over
a stream, killed and resumed at another world size, and a padded evaluation pass.

    elastic_train.py OUT KIND:PATH[,KIND:PATH...] train PHASE EPOCHS KILL_AT [eval]
    elastic_train.py OUT KIND:PATH[,KIND:PATH...] eval

Each KIND's files go to OUT/KIND; several kinds share one start of torch and
the process group, trained in lockstep (see ``train``).

``train``: every rank reads the stream (a Parquet folder, or ``ndf_blocks`` of a
sharded .ndf dataset) with ``elastic=True`` and ``even_batches="pad"`` (every rank
steps the same number of times, padded rows masked out of the loss), resuming
from the last step every rank checkpointed (OUT/KIND/ckpt/STEP: each rank's loader
state, then DONE). Rank r loads the state of rank r % (the world that wrote it).
Each step's real row ids go to OUT/KIND/log-PHASE-rankR.jsonl before the step is
checkpointed. With KILL_AT > 0 the last rank kills itself (SIGKILL) at step
KILL_AT + 1, after taking its batch and before checkpointing it: torchrun then
ends the others.

``eval``: one unshuffled pass with ``even_batches="pad"``; the masked sum of
squared residuals of a fixed linear model and the row count, all-reduced, go to
OUT/KIND/eval.json (rank 0), with every rank's batch count. ``train ... eval`` makes that
pass first, then trains (one start of torch on every rank for both).
"""

import json
import os
import signal
import sys

import numpy as np
import torch
import torch.distributed as dist

import exactbatch
from exactbatch import DataLoader

BATCH, BUFFER, BLOCK, SEED = 32, 300, 50, 7
W = np.array([0.5, -1.0, 2.0])


def open_source(kind: str, path: str):
    if kind == "parquet":
        return exactbatch.parquet_source(path, labels=["y0"])
    ds = exactbatch.open_ndf_dataset(path)
    try:
        return exactbatch.ndf_blocks(ds, BLOCK)
    finally:
        ds.close()


def save_json(path: str, obj) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)


def last_step(ckpt: str):
    done = [int(s) for s in os.listdir(ckpt) if os.path.exists(os.path.join(ckpt, s, "DONE"))]
    return max(done) if done else None


class Job:
    """One kind's training: its loader, model, optimiser, step, log and checkpoints, under
    OUT/KIND (its loader resumed from the last step every rank checkpointed there)."""

    def __init__(self, out: str, kind: str, path: str, phase: int) -> None:
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.ckpt = os.path.join(out, "ckpt")
        os.makedirs(self.ckpt, exist_ok=True)
        self.loader = DataLoader(
            open_source(kind, path),
            BATCH,
            num_shards="auto",
            shard_index="auto",
            elastic=True,
            even_batches="pad",
            buffer_size=BUFFER,
            seed=SEED,
        )
        torch.manual_seed(0)
        linear = torch.nn.Linear(3, 1, dtype=torch.float64)
        self.model = torch.nn.parallel.DistributedDataParallel(linear)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        self.step = 0
        resume = last_step(self.ckpt)
        if resume is not None:
            meta = json.load(open(os.path.join(self.ckpt, str(resume), "meta.json")))
            with open(
                os.path.join(self.ckpt, str(resume), f"rank{self.rank % meta['world']}.json")
            ) as f:
                self.loader.load_state_dict(json.load(f))
            self.model.module.load_state_dict(
                {k: torch.tensor(v) for k, v in meta["model"].items()}
            )
            self.step = resume
        self.log = open(os.path.join(out, f"log-{phase}-rank{self.rank}.jsonl"), "w")

    def take(self, epoch: int, batch) -> None:
        """Step on the batch and log its real row ids (not yet checkpointed)."""
        xb, yb, mask = batch
        self.step += 1
        x, y, m = torch.from_numpy(xb), torch.from_numpy(yb), torch.from_numpy(mask)
        residual = (self.model(x[:, :3]) - y)[:, 0] * m
        loss = (residual**2).sum() / max(1, int(m.sum()))
        self.opt.zero_grad()
        loss.backward()  # all-reduce: every rank steps the same number of times
        self.opt.step()
        ids = xb[mask, 3].astype(np.int64).tolist()  # column 3: the row id
        self.log.write(json.dumps({"step": self.step, "epoch": epoch, "ids": ids}) + "\n")
        self.log.flush()

    def checkpoint(self) -> None:
        here = os.path.join(self.ckpt, str(self.step))
        os.makedirs(here, exist_ok=True)
        save_json(os.path.join(here, f"rank{self.rank}.json"), self.loader.state_dict())
        dist.barrier()  # every rank's state written before the step counts as done
        if self.rank == 0:
            model = {k: v.tolist() for k, v in self.model.module.state_dict().items()}
            save_json(os.path.join(here, "meta.json"), {"world": self.world, "model": model})
            open(os.path.join(here, "DONE"), "w").close()


def train(runs, phase: int, epochs: int, kill_at: int) -> None:
    """Each (OUT, KIND, PATH) of ``runs`` trained in lockstep: step k of every kind, then
    the kill (if k is KILL_AT + 1), then every kind's checkpoint of step k. The kinds'
    loaders step alike (the same rows, batch and world), so one kill stops each kind
    after the same checkpoint, as a launch of its own would."""
    jobs = [Job(out, kind, path, phase) for out, kind, path in runs]
    rank, world = dist.get_rank(), dist.get_world_size()
    assert len({job.step for job in jobs}) == 1, [job.step for job in jobs]
    while jobs[0].loader.epoch < epochs:
        epoch = jobs[0].loader.epoch
        assert all(job.loader.epoch == epoch for job in jobs)
        for batches in zip(*(job.loader for job in jobs), strict=True):
            for job, batch in zip(jobs, batches, strict=True):
                job.take(epoch, batch)
            if kill_at and jobs[0].step == kill_at + 1 and rank == world - 1:
                os.kill(os.getpid(), signal.SIGKILL)  # kill -9: no clean-up of any kind
            for job in jobs:
                job.checkpoint()
    for (out, _, _), job in zip(runs, jobs, strict=True):
        job.log.close()
        save_json(os.path.join(out, f"final-{phase}-rank{rank}.json"), job.loader.state_dict())


def evaluate(out: str, kind: str, path: str) -> None:
    rank = dist.get_rank()
    loader = DataLoader(
        open_source(kind, path),
        BATCH,
        shuffle=False,
        num_shards="auto",
        shard_index="auto",
        even_batches="pad",
    )
    total = torch.zeros(2, dtype=torch.float64)
    batches = 0
    for xb, yb, mask in loader:
        residual = xb[:, :3] @ W - yb[:, 0]
        part = [float((residual[mask] ** 2).sum()), float(mask.sum())]
        total += torch.tensor(part, dtype=torch.float64)
        batches += 1
    counts = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(counts, torch.tensor([batches]))
    dist.all_reduce(total)
    if rank == 0:
        found = {"sum": total[0].item(), "rows": int(total[1].item())}
        found["batches"] = [int(c) for c in counts]
        save_json(os.path.join(out, "eval.json"), found)


def main() -> None:
    out, kinds, mode = sys.argv[1:4]
    runs = []  # (OUT/KIND, KIND, PATH) for each KIND:PATH of the comma-separated list
    for spec in kinds.split(","):
        kind, path = spec.split(":", 1)
        runs.append((os.path.join(out, kind), kind, path))
    dist.init_process_group("gloo")
    if mode == "train":
        phase, epochs, kill_at = (int(a) for a in sys.argv[4:7])
        if sys.argv[7:] == ["eval"]:
            for run in runs:
                evaluate(*run)
            dist.barrier()  # eval.json written before any rank may be killed
        train(runs, phase, epochs, kill_at)
    else:
        for run in runs:
            evaluate(*run)
    dist.barrier()  # no rank tears the group down while another still uses it
    dist.destroy_process_group()
    os._exit(0)  # (gloo's threads can abort the interpreter's teardown: see ddp_train.py)


if __name__ == "__main__":
    main()
