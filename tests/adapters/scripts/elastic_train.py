"""Run by torchrun in tests/adapters/test_torchrun_elastic.py: elastic DDP training over
a stream, killed and resumed at another world size, and a padded evaluation pass.

    elastic_train.py OUT KIND PATH train PHASE EPOCHS KILL_AT [eval]
    elastic_train.py OUT KIND PATH eval

``train``: every rank reads the stream (a Parquet folder, or ``ndf_blocks`` of a
sharded .ndf dataset) with ``elastic=True`` and ``even_batches="pad"`` (every rank
steps the same number of times, padded rows masked out of the loss), resuming
from the last step every rank checkpointed (OUT/ckpt/STEP: each rank's loader
state, then DONE). Rank r loads the state of rank r % (the world that wrote it).
Each step's real row ids go to OUT/log-PHASE-rankR.jsonl before the step is
checkpointed. With KILL_AT > 0 the last rank kills itself (SIGKILL) at step
KILL_AT + 1, after taking its batch and before checkpointing it: torchrun then
ends the others.

``eval``: one unshuffled pass with ``even_batches="pad"``; the masked sum of
squared residuals of a fixed linear model and the row count, all-reduced, go to
OUT/eval.json (rank 0), with every rank's batch count. ``train ... eval`` makes that
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


def train(out: str, kind: str, path: str, phase: int, epochs: int, kill_at: int) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    ckpt = os.path.join(out, "ckpt")
    os.makedirs(ckpt, exist_ok=True)
    loader = DataLoader(
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
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1, dtype=torch.float64))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step = 0
    resume = last_step(ckpt)
    if resume is not None:
        meta = json.load(open(os.path.join(ckpt, str(resume), "meta.json")))
        with open(os.path.join(ckpt, str(resume), f"rank{rank % meta['world']}.json")) as f:
            loader.load_state_dict(json.load(f))
        model.module.load_state_dict({k: torch.tensor(v) for k, v in meta["model"].items()})
        step = resume
    log = open(os.path.join(out, f"log-{phase}-rank{rank}.jsonl"), "w")
    while loader.epoch < epochs:
        epoch = loader.epoch
        for xb, yb, mask in loader:
            step += 1
            x, y, m = torch.from_numpy(xb), torch.from_numpy(yb), torch.from_numpy(mask)
            residual = (model(x[:, :3]) - y)[:, 0] * m
            loss = (residual**2).sum() / max(1, int(m.sum()))
            opt.zero_grad()
            loss.backward()  # all-reduce: every rank steps the same number of times
            opt.step()
            ids = xb[mask, 3].astype(np.int64).tolist()  # column 3: the row id
            log.write(json.dumps({"step": step, "epoch": epoch, "ids": ids}) + "\n")
            log.flush()
            if kill_at and step == kill_at + 1 and rank == world - 1:
                os.kill(os.getpid(), signal.SIGKILL)  # kill -9: no clean-up of any kind
            here = os.path.join(ckpt, str(step))
            os.makedirs(here, exist_ok=True)
            save_json(os.path.join(here, f"rank{rank}.json"), loader.state_dict())
            dist.barrier()  # every rank's state written before the step counts as done
            if rank == 0:
                model_state = {k: v.tolist() for k, v in model.module.state_dict().items()}
                save_json(os.path.join(here, "meta.json"), {"world": world, "model": model_state})
                open(os.path.join(here, "DONE"), "w").close()
    log.close()
    save_json(os.path.join(out, f"final-{phase}-rank{rank}.json"), loader.state_dict())


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
    out, kind, path, mode = sys.argv[1:5]
    dist.init_process_group("gloo")
    if mode == "train":
        phase, epochs, kill_at = (int(a) for a in sys.argv[5:8])
        if sys.argv[8:] == ["eval"]:
            evaluate(out, kind, path)
            dist.barrier()  # eval.json written before any rank may be killed
        train(out, kind, path, phase, epochs, kill_at)
    else:
        evaluate(out, kind, path)
    dist.barrier()  # no rank tears the group down while another still uses it
    dist.destroy_process_group()
    os._exit(0)  # (gloo's threads can abort the interpreter's teardown: see ddp_train.py)


if __name__ == "__main__":
    main()
