"""exactbatch under torchrun: two CPU ranks (gloo) shard one dataset and train DDP."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
SCRIPT = Path(__file__).parent / "scripts" / "ddp_train.py"


@pytest.mark.parametrize(
    "n,batch,count,dropped",
    [(1000, 32, 16, 0), (1001, 20, 25, 1)],
    ids=["equal-shards", "uneven-shards"],
)
def test_two_ranks_partition_the_data_and_train(tmp_path, n, batch, count, dropped):
    """Under torchrun --nproc_per_node=2 with num_shards/shard_index="auto": the ranks'
    rows are disjoint and together the whole dataset, both ranks run the same number
    of batches (even_batches: with shards of 500 and 501 rows and batch 20 the second
    would need a 26th batch of one row, which DDP would wait for forever; that row is
    left out instead), and two DDP epochs complete with a small loss."""
    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    cmd = [torchrun] if torchrun else [sys.executable, "-m", "torch.distributed.run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    run = subprocess.run(
        [
            *cmd,
            "--standalone",
            "--nproc_per_node=2",
            str(SCRIPT),
            str(tmp_path),
            str(n),
            str(batch),
        ],
        timeout=300,
        env=env,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    ranks = [np.load(tmp_path / f"rank{r}.npz") for r in range(2)]
    assert [tuple(r["shards"]) for r in ranks] == [(2, 0), (2, 1)]
    for epoch in ("epoch0", "epoch1"):
        a, b = ranks[0][epoch], ranks[1][epoch]
        both = np.concatenate([a, b])
        assert len(np.unique(both)) == len(both) == n - dropped
        assert set(both.tolist()) <= set(range(n))
    assert ranks[0]["counts"].tolist() == ranks[1]["counts"].tolist() == [count, count]
    assert int(ranks[0]["len"]) == int(ranks[1]["len"]) == count
    assert max(float(r["loss"]) for r in ranks) < 0.5
