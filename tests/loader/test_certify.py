"""The run certificate (``exactbatch.certify``, ``exactbatch certify``): every rank's
states merged say whether each epoch handed out every row exactly once; a lost,
forged or repeated batch, a missing rank or a misconfigured shard is caught.

The law matrix certifies every epoch-law and resume run (tests/laws.py,
``check_certified``); these are the cases where the answer must be no, and the
elastic chain of changes of the shard count.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import make_x
from laws import roundtrip

from exactbatch import Certificate, DataLoader, certify
from exactbatch.cli import main
from exactbatch.loader.compaction import KEEP

N = 1000


def x_of(n: int) -> np.ndarray:
    return make_x(np.arange(n), 1)


def _run(num_shards: int, epochs: int = 1, **kw) -> list[dict]:
    """Every shard's state after ``epochs`` whole epochs."""
    states = []
    for s in range(num_shards):
        loader = DataLoader(x_of(N), 64, num_shards=num_shards, shard_index=s, seed=1, **kw)
        for _ in range(epochs):
            for _ in loader:
                pass
        states.append(roundtrip(loader.state_dict()))
    return states


@pytest.mark.parametrize("kw", [{}, {"drop_last": True}, {"even_batches": True}])
def test_an_honest_run_of_every_shard_is_certified_epoch_by_epoch(kw):
    cert = certify(_run(3, epochs=2, **kw))
    assert isinstance(cert, Certificate) and cert
    assert [e.epoch for e in cert.epochs] == [0, 1]
    assert all(e.exact and e.missing == 0 and e.repeated == 0 for e in cert.epochs)
    if not kw:
        assert [e.handed for e in cert.epochs] == [N, N]
    assert str(cert).startswith("certified: 2 epochs")


def test_a_rank_whose_states_are_missing_leaves_its_rows_missing():
    cert = certify(_run(3)[:2])
    assert not cert
    (e,) = cert.failures
    assert e.missing == N - 2 * (N // 3) and e.repeated == 0
    assert "shard 2 of 3" in e.note


def test_an_epoch_cut_short_on_one_rank_is_not_certified():
    states = _run(2)[:1]
    loader = DataLoader(x_of(N), 64, num_shards=2, shard_index=1, seed=1)
    it = iter(loader)
    for _ in range(3):
        next(it)
    states.append(loader.state_dict())
    (e,) = certify(states).epochs
    assert not e.exact and e.missing == N - N // 2 - 3 * 64
    assert "cut short" in e.note


def test_two_ranks_given_the_same_shard_index_are_caught():
    """A misconfigured RANK: both hand out shard 0, nobody shard 1. Each rank's own
    ledger passes; only the merge of the ranks can see it."""
    states = _run(2)
    states[1] = states[0]
    (e,) = certify(states).epochs
    assert not e.exact and e.missing == N // 2


def test_a_forged_record_is_caught():
    states = _run(2)
    record = states[1]["history"][0]
    record["digest"] = f"{int(record['digest'], 16) ^ 1:016x}"  # same count, other rows
    (e,) = certify(states).epochs
    assert not e.exact and "not the same rows" in e.note
    states = _run(2)
    states[0]["history"][0]["rows"] -= 64  # a lost batch
    (e,) = certify(states).epochs
    assert not e.exact and e.missing == 64


def test_a_later_state_of_a_rank_supersedes_its_earlier_ones():
    """A checkpoint mid-epoch and the final state of the same rank, given together,
    count once; a rank restarted from a checkpoint (the work after it lost with the
    model's) is certified from its final state."""
    loader = DataLoader(x_of(N), 64, seed=2)
    it = iter(loader)
    for _ in range(5):
        next(it)
    checkpoint = roundtrip(loader.state_dict())
    for _ in range(3):
        next(it)
    lost = roundtrip(loader.state_dict())
    resumed = DataLoader(x_of(N), 64, seed=2)
    resumed.load_state_dict(checkpoint)
    for _ in resumed:
        pass
    final = resumed.state_dict()
    assert certify([checkpoint, lost, final])
    assert certify([final])
    assert not certify([checkpoint, lost])


def _elastic_segment(states_in, shards, steps):
    """Loaders at ``shards`` elastic shards, each resumed from ``states_in[s]`` (or fresh),
    stepped ``steps`` batches in lockstep (None: to the end): their states."""
    loaders = [
        DataLoader(x_of(N), 32, num_shards=shards, shard_index=s, elastic=True, seed=5)
        for s in range(shards)
    ]
    for s, loader in enumerate(loaders):
        if states_in:
            loader.load_state_dict(states_in[s % len(states_in)])
    its = [iter(ld) for ld in loaders]
    k = 0
    while steps is None or k < steps:
        got = [next(it, None) for it in its]
        if all(b is None for b in got):
            break
        k += 1
    return [roundtrip(ld.state_dict()) for ld in loaders]


def test_an_elastic_run_across_changes_of_the_shard_count_is_certified():
    """4 ranks, a checkpoint, 3 ranks resume from it, another, 2 ranks finish: every
    rank's last state of each segment together certify the epoch. A state carries the
    records of the state it resumed from, so only states no later rank resumed from
    (the 4th rank's of the first segment, the 3rd's of the second, and the last two)
    cannot be left out."""
    first = _elastic_segment(None, 4, 3)
    second = _elastic_segment(first, 3, 4)  # rank s resumes from first[s]
    third = _elastic_segment(second, 2, None)
    cert = certify(first + second + third)
    assert cert and [e.handed for e in cert.epochs] == [N]
    assert certify(third + [first[3], second[2]])
    for left_out in range(4):
        kept = [*third, first[3], second[2]]
        del kept[left_out]
        assert not certify(kept), f"certified without state {left_out}"


def test_states_of_loaders_built_and_stepped_alike_are_equal():
    assert _run(2) == _run(2)


@pytest.mark.parametrize(
    ("states", "error", "match"),
    [
        ({"version": 2}, TypeError, "a list of states"),
        ([3], TypeError, r"states\[0\] must be a dict"),
        ([{"version": 2}], ValueError, r"states\[0\] has no 'history'"),
        ([{"history": [{"epoch": "0"}]}], ValueError, r"states\[0\]\['history'\]\[0\]\['epoch'\]"),
    ],
)
def test_what_is_not_a_state_is_refused_naming_it(states, error, match):
    with pytest.raises(error, match=match):
        certify(states)


def test_no_epoch_is_no_certificate():
    cert = certify([DataLoader(x_of(N), 64).state_dict()])
    assert not cert and cert.epochs == () and "hold no epoch" in str(cert)


def test_the_command_prints_the_certificate_and_exits_1_when_not(tmp_path, capsys):
    states = _run(2)
    whole, part = tmp_path / "all.json", tmp_path / "rank0.json"
    whole.write_text(json.dumps(states))
    part.write_text(json.dumps({"loader": states[0], "step": 7}))  # a checkpoint's layout
    assert main(["certify", str(whole)]) == 0
    assert capsys.readouterr().out.startswith("certified: 1 epochs")
    assert main(["certify", str(part), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["certified"] is False and report["epochs"][0]["missing"] == N - N // 2
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"weights": [1, 2]}))
    assert main(["certify", str(bad)]) == 2
    assert "expected a DataLoader state" in capsys.readouterr().err


def test_the_last_epochs_records_cost_a_few_hundred_bytes_each_and_older_ones_are_folded():
    states = _run(1, epochs=10)
    assert len(states[0]["history"]) == KEEP  # epochs 6 .. 9 in full
    assert len(json.dumps(states[0]["history"])) < 300 * KEEP
    assert np.all([r["promised"] is not None for r in states[0]["history"]])
    (summary,) = states[0]["compacted"]  # epochs 0 .. 5, folded
    assert summary["epochs"] == [[0, 5, N]] and summary["shard"] == [0, 1]


def test_a_resume_mid_epoch_keeps_the_records_of_the_epochs_before():
    loader = DataLoader(x_of(N), 64, seed=4)
    for _ in loader:
        pass
    it = iter(loader)
    for _ in range(3):
        next(it)
    taken = roundtrip(loader.state_dict())
    assert [(r["epoch"], r["start"]) for r in taken["history"]] == [(0, 0), (1, 0)]
    resumed = DataLoader(x_of(N), 64, seed=4)
    resumed.load_state_dict(taken)
    for _ in resumed:
        pass
    final = resumed.state_dict()
    assert [(r["epoch"], r["start"]) for r in final["history"]] == [(0, 0), (1, 0)]
    cert = certify([final])
    assert cert and [e.handed for e in cert.epochs] == [N, N]


def test_an_elastic_run_with_even_batches_is_certified_through_a_change():
    """even_batches leaves out the global batches after the shards' equal shares of the
    last segment: the promise the certificate compares with is that segment's."""
    kw = {"elastic": True, "even_batches": True, "seed": 6}
    first = [DataLoader(x_of(N), 32, num_shards=3, shard_index=s, **kw) for s in range(3)]
    its = [iter(ld) for ld in first]
    for _ in range(5):  # 15 of the 32 global batches; 17 left for 2 ranks: 8 each
        for it in its:
            next(it)
    states = [roundtrip(ld.state_dict()) for ld in first]
    second = [DataLoader(x_of(N), 32, num_shards=2, shard_index=s, **kw) for s in range(2)]
    for s, ld in enumerate(second):
        ld.load_state_dict(states[s])
        for _ in ld:
            pass
    cert = certify(states + [roundtrip(ld.state_dict()) for ld in second])
    assert cert, str(cert)
    assert cert.epochs[0].handed == N - 8  # the last global batch (8 rows) left out
