"""exactbatch.torch's checkpoints under torchrun: a run of 2 gloo ranks killed with kill -9
mid-save, resumed on 1 rank by ``load_checkpoint``, ends at ``certify_folder``; no glue
but the documented calls (tests/adapters/scripts/checkpoint_train.py). About 20 s."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("torch")

import helpers  # noqa: E402

from exactbatch.torch import certify_folder  # noqa: E402

SCRIPT = Path(__file__).parent / "scripts" / "checkpoint_train.py"
N, EPOCHS, KILL_AT = 240, 2, 20  # 15 steps an epoch at 2 ranks: killed in epoch 1


def test_killed_mid_save_resumed_at_one_rank_and_certified_from_the_folder(tmp_path):
    killed = helpers.torchrun(SCRIPT, 2, tmp_path, EPOCHS, KILL_AT)
    assert killed.returncode != 0, "the killed run exited cleanly"
    ckpt = tmp_path / "ckpt"
    # the step the last rank died in: its state missing, so load_checkpoint passes it over
    assert not (ckpt / f"step-{KILL_AT + 1:09d}" / "loader-1.json").exists()
    assert (ckpt / f"step-{KILL_AT:09d}" / "loader-1.json").exists()
    with pytest.raises(ValueError, match=r"step-000000021: .*loader-1\.json missing"):
        certify_folder(ckpt)  # the run's last checkpoint is incomplete: not its end
    run = helpers.torchrun(SCRIPT, 1, tmp_path, EPOCHS, 0)
    assert run.returncode == 0, run.stderr[-3000:]

    cert = certify_folder(ckpt)
    assert cert, str(cert)
    assert [(e.epoch, e.handed) for e in cert.epochs] == [(0, N), (1, N)]
    # The logs agree: the 2-rank run up to the step resumed from, then the 1-rank run.
    ids: Counter = Counter()
    for name, upto in (("log-2-rank0", KILL_AT), ("log-2-rank1", KILL_AT), ("log-1-rank0", None)):
        for line in (tmp_path / f"{name}.jsonl").read_text().splitlines():
            rec = json.loads(line)
            if upto is None or rec["step"] <= upto:
                ids.update(rec["ids"])
    assert sorted(ids) == list(range(EPOCHS * N)) and set(ids.values()) == {1}
