"""Run by torchrun in tests/adapters/test_torchrun_checkpoint.py: DDP training whose
checkpoints are exactbatch.torch's, killed mid-run and resumed at another world size.

    checkpoint_train.py OUT EPOCHS KILL_AT

Every rank resumes with ``load_checkpoint(OUT/ckpt, ...)`` and saves with
``save_checkpoint(OUT/ckpt, step, ...)`` after every step and once after the last
epoch: the documented calls, no other glue. Each step's row ids go to
OUT/log-WORLD-rankR.jsonl before the step is saved. With KILL_AT > 0 the last rank
kills itself (SIGKILL) at step KILL_AT + 1, after the other ranks may have saved
it: that step's checkpoint is left incomplete.
"""

import json
import os
import signal
import sys

import numpy as np
import torch
import torch.distributed as dist

from exactbatch import DataLoader
from exactbatch.torch import load_checkpoint, save_checkpoint

N, BATCH = 240, 8


def main() -> None:
    out, epochs, kill_at = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = np.random.default_rng(0).standard_normal((N, 3))
    x[:, 0] = np.arange(N)  # the row id rides along
    y = x[:, 1:2] - 0.5 * x[:, 2:3]
    loader = DataLoader((x, y), BATCH, num_shards="auto", shard_index="auto", elastic=True, seed=4)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 1, dtype=torch.float64))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    ckpt = os.path.join(out, "ckpt")
    step = load_checkpoint(ckpt, loader=loader, model=model, optimizer=opt) or 0
    log = open(os.path.join(out, f"log-{world}-rank{rank}.jsonl"), "a")
    while loader.epoch < epochs:
        epoch = loader.epoch
        for xb, yb in loader:
            step += 1
            loss = torch.nn.functional.mse_loss(
                model(torch.from_numpy(xb[:, 1:])), torch.from_numpy(yb)
            )
            opt.zero_grad()
            loss.backward()  # all-reduce: the ranks step together
            opt.step()
            ids = [epoch * N + int(v) for v in xb[:, 0]]
            log.write(json.dumps({"step": step, "ids": ids}) + "\n")
            log.flush()
            if kill_at and step == kill_at + 1 and rank == world - 1:
                os.kill(os.getpid(), signal.SIGKILL)  # kill -9: no clean-up of any kind
            save_checkpoint(ckpt, step, loader=loader, model=model, optimizer=opt)
    save_checkpoint(ckpt, step, loader=loader, model=model, optimizer=opt)  # the run's end
    log.close()
    dist.barrier()
    dist.destroy_process_group()
    os._exit(0)  # (gloo's threads can abort the interpreter's teardown: see ddp_train.py)


if __name__ == "__main__":
    main()
