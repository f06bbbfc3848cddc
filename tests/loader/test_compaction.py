"""A state stays small: old clean records are folded into one summary per shard
(exactbatch.loader.compaction), and certify is as sure of them as of the records.
(The lineage law across folds: tests/test_law_matrix.py.)"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import make_x
from laws import roundtrip

from exactbatch import DataLoader, certify
from exactbatch.loader import compaction
from exactbatch.loader.lineage import state_id
from exactbatch.loader.state import STATE_VERSION

N = 40


def _epochs(loaders, count: int) -> list[dict]:
    for _ in range(count):
        for ld in loaders:
            for _ in ld:
                pass
    return [roundtrip(ld.state_dict()) for ld in loaders]


def _loaders(shards: int = 1, **kw) -> list[DataLoader]:
    return [
        DataLoader(make_x(np.arange(N), 1), 8, num_shards=shards, shard_index=s, seed=2, **kw)
        for s in range(shards)
    ]


def test_a_state_after_10000_epochs_stays_under_8_kb_and_is_certified():
    """The bound (bench/state_size.py prints the sizes): before folding, 2.3 MB."""
    loader = DataLoader(np.arange(8.0).reshape(8, 1), 4, shuffle=False)
    (state,) = _epochs([loader], 10_000)
    assert len(json.dumps(state)) < 8 * 1024
    cert = certify([state])
    assert cert and len(cert.epochs) == 10_000 and cert.epochs[-1].handed == 8


def test_a_version_2_state_with_every_record_in_full_still_loads_and_is_folded(monkeypatch):
    monkeypatch.setattr(compaction, "KEEP", 10**9)  # (as version 2 wrote it: no fold)
    (old,) = _epochs(_loaders(), 20)
    old["version"] = 2
    del old["compacted"]
    assert len(old["history"]) == 20
    monkeypatch.setattr(compaction, "KEEP", 4)
    (loader,) = _loaders()
    loader.load_state_dict(old)
    (new,) = _epochs([loader], 3)
    assert new["version"] == STATE_VERSION and len(new["history"]) == 4
    assert new["compacted"][0]["epochs"] == [[0, 18, N]] and new["parent"] == state_id(old)
    assert certify([old]) and len(certify([old]).epochs) == 20
    cert = certify([old, new])
    assert cert and [e.epoch for e in cert.epochs] == list(range(23))


@pytest.mark.parametrize("elastic", [False, True])
def test_every_rank_folds_alike_and_certify_needs_every_rank(elastic):
    loaders = _loaders(3, elastic=elastic)
    early = _epochs(loaders, 2)  # nothing folded yet
    final = _epochs(loaders, 10)
    assert all(s["compacted"][0]["epochs"][0][:2] == [0, 7] for s in final)
    assert certify(final) and certify([*early, *final])
    assert len(certify(final).epochs) == 12
    assert not certify(final[:2])  # a rank's states missing
    assert not certify([early[2], *final[:2]])  # a rank's last states missing


def test_a_replay_of_a_folded_epoch_is_never_certified():
    (loader,) = _loaders()
    _epochs([loader], 10)  # epochs 0 .. 5 folded
    loader.set_epoch(2)
    (state,) = _epochs([loader], 1)  # epoch 2 again
    assert [e for e, _ in compaction.expand(state["compacted"][0])] == list(range(6))
    cert = certify([state])
    assert not cert
    (bad,) = cert.failures
    assert (bad.epoch, bad.handed, bad.repeated) == (2, 2 * N, N)


@pytest.mark.parametrize("elastic", [False, True])
def test_a_forged_summary_is_not_certified(elastic):
    states = _epochs(_loaders(2, elastic=elastic), 8)
    forged = json.loads(json.dumps(states))
    forged[1]["compacted"][0]["digest"] = "1234"
    cert = certify(forged)
    assert not cert and {e.epoch for e in cert.failures} == {0, 1, 2, 3}
    assert "folded epochs" in cert.failures[0].note
    forged = json.loads(json.dumps(states))
    forged[0]["compacted"][0]["epochs"] = [[0, 3, N // 2 + 1]]
    assert not certify(forged)


@pytest.mark.parametrize(
    "kw", [{"drop_last": True}, {"even_batches": True}, {"drop_last": True, "even_batches": True}]
)
def test_an_elastic_run_that_drops_rows_is_folded_each_epoch_by_its_own_promise(kw):
    """Under elastic, drop_last and even_batches=True leave out rows that differ epoch by
    epoch: the ranks' summaries sum each epoch's own promise, and certify checks the
    folded epochs against them as surely as against the dataset."""
    x = make_x(np.arange(45), 1)
    loaders = [
        DataLoader(x, 4, num_shards=3, shard_index=s, seed=2, elastic=True, **kw) for s in range(3)
    ]
    early = _epochs(loaders, 2)
    states = _epochs(loaders, 198)
    assert all(len(json.dumps(s)) < 2048 for s in states)  # (was 46 KB each)
    assert len({json.dumps(s["compacted"][0]["promised"]) for s in states}) == 1
    cert = certify(states)
    assert cert and len(cert.epochs) == 200 and certify([*early, *states])
    assert not certify(states[:2])  # a rank's states missing
    forged = json.loads(json.dumps(states))
    forged[1]["compacted"][0]["promised"]["digest"] = "1234"
    assert not certify(forged)
    for ld in loaders:  # a folded epoch again: never certified
        ld.set_epoch(2)
    replay = certify(_epochs(loaders, 1))
    assert not replay and next(e for e in replay.epochs if e.epoch == 2).repeated > 0


def test_a_loader_that_folds_on_leaves_the_state_it_loaded_as_it_was():
    """The summaries a loader takes on are its own: its folds change neither the state
    dict it loaded (which another restart may load again) nor states taken before."""
    x = make_x(np.arange(45), 1)
    (state,) = _epochs([DataLoader(x, 4, seed=2, elastic=True, drop_last=True)], 6)
    before = json.loads(json.dumps(state))
    loader = DataLoader(x, 4, seed=2, elastic=True, drop_last=True)
    loader.load_state_dict(state)
    taken = loader.state_dict()
    _epochs([loader], 3)  # (epochs 2 .. 4 folded)
    assert state == before and taken["compacted"] == before["compacted"]


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (lambda s: s.update(compacted={}), r"state\['compacted'\] must be a list"),
        (lambda s: s["compacted"][0].update(shard=[0]), r"\[0\]\['shard'\] must be"),
        (lambda s: s["compacted"][0].update(epochs=[[3, 2, 8]]), r"\['epochs'\] must be"),
        (lambda s: s["compacted"][0].update(digest="zz"), r"\['digest'\] must be a hex"),
        (lambda s: s["compacted"][0].update(whole=None), r"\['whole'\] must be"),
        (lambda s: s["compacted"][0].update(drops=1), r"\['drops'\] must be a bool"),
        (lambda s: s["compacted"][0].update(promised=[]), r"\['promised'\] must be"),
    ],
)
def test_a_malformed_summary_is_refused_naming_the_key(change, match):
    (state,) = _epochs(_loaders(), 6)
    change(state)
    with pytest.raises((TypeError, ValueError), match=match):
        _loaders()[0].load_state_dict(state)
    with pytest.raises((TypeError, ValueError), match=match.replace("state", "states\\[0\\]")):
        certify([state])
