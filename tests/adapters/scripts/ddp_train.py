"""Run by torchrun in tests/adapters/test_torchrun.py: each rank loads its shard and trains DDP.

Writes, per rank, the row ids it was handed in each epoch and its batch
counts to OUT/rank<r>.npz, and the final loss.
"""

import os
import sys

import numpy as np
import torch
import torch.distributed as dist

from exactbatch import DataLoader


def main(out: str, n: int, batch: int) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 4))
    x[:, 0] = np.arange(n)  # the row id rides along in column 0
    w_true = np.array([0.0, 1.0, -2.0, 0.5])
    y = x[:, 1:] @ w_true[1:]
    loader = DataLoader(
        (x, y), batch, num_shards="auto", shard_index="auto", even_batches=True, seed=5
    )
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(3, 1, dtype=torch.float64))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen, counts, loss = [], [], None
    for _epoch in range(2):
        ids, count = [], 0
        for xb, yb in loader:
            xt, yt = torch.from_numpy(xb), torch.from_numpy(yb)
            loss = torch.nn.functional.mse_loss(model(xt[:, 1:]), yt)
            opt.zero_grad()
            loss.backward()  # all-reduce: a rank with one batch more would hang here
            opt.step()
            ids.append(xb[:, 0].astype(np.int64))
            count += 1
        seen.append(np.concatenate(ids))
        counts.append(count)
    np.savez(
        os.path.join(out, f"rank{rank}.npz"),
        epoch0=seen[0],
        epoch1=seen[1],
        counts=np.array(counts),
        len=len(loader),
        loss=loss.item(),
        shards=np.array([loader.num_shards, loader.shard_index]),
    )
    dist.barrier()  # no rank tears the group down while another still uses it
    dist.destroy_process_group()
    # Gloo's worker threads can abort the interpreter's teardown ("terminate called
    # without an active exception", a known torch issue): the results are written,
    # so leave without it.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
