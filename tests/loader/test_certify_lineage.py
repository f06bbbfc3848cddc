"""The certificate follows the run's lineage (issue 38): a state names itself and its
parent, certify sets aside what a restart abandoned, refuses other runs' states, counts
every record a state holds (a replay is never certified), and takes an epoch begun with
no batch for nothing. The random trees of kills, resumes and rollbacks are the lineage
law (tests/laws.py, ``check_lineage``)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import make_x
from laws import roundtrip

from exactbatch import DataLoader, certify
from exactbatch.loader.lineage import state_id

N = 1000


def x_of(n: int = N) -> np.ndarray:
    return make_x(np.arange(n), 1)


def _ids(batches) -> list[int]:
    return sorted(int(i) for b in batches for i in b[-1])


def _take(it, k: int) -> list:
    return [next(it) for _ in range(k)]


# -- a replay is never certified -----------------------------------------------------------


def test_an_epoch_begun_again_on_a_resumed_loader_is_certified_only_if_no_row_repeats():
    """The torch habit, set_epoch every epoch, after a mid-epoch resume: whatever rule
    set_epoch follows, certify's verdict is the truth of the row ids handed out."""
    loader = DataLoader(x_of(), 64, seed=1, with_rows=True)
    first = _take(iter(loader), 5)
    checkpoint = roundtrip(loader.state_dict())
    resumed = DataLoader(x_of(), 64, seed=1, with_rows=True)
    resumed.load_state_dict(checkpoint)
    resumed.set_epoch(0)
    rest = list(resumed)
    final = roundtrip(resumed.state_dict())
    exact = _ids(first + rest) == list(range(N))
    assert bool(certify([checkpoint, final])) == exact
    assert bool(certify([final])) == exact


def test_an_epoch_begun_again_mid_way_is_a_replay_not_certified():
    loader = DataLoader(x_of(), 64, seed=1, with_rows=True)
    got = _take(iter(loader), 5)
    loader.set_epoch(0)
    got += list(loader)
    final = roundtrip(loader.state_dict())
    assert len(_ids(got)) == N + 5 * 64  # (the rows of the 5 batches, twice)
    (e,) = certify([final]).epochs
    assert (e.exact, e.handed, e.repeated) == (False, N + 320, 320)


def test_two_records_of_one_segment_in_one_state_both_count():
    (rec,) = [r for r in _whole_epoch_state()["history"]]
    cut = {**rec, "promised": None, "rows": 64, "digest": "0" * 16}
    for history in ([cut, rec], [rec, cut]):
        (e,) = certify([{"version": 2, "history": history}]).epochs
        assert not e.exact and e.handed == N + 64 and e.repeated == 64


def _whole_epoch_state() -> dict:
    loader = DataLoader(x_of(), 64, seed=1)
    for _ in loader:
        pass
    return roundtrip(loader.state_dict())


# -- reset(seed=...) starts a new run ----------------------------------------------------


def test_reset_to_another_seed_leaves_no_record_of_the_old_run():
    loader = DataLoader(x_of(), 64, seed=1)
    for _ in loader:
        pass
    before = roundtrip(loader.state_dict())
    loader.reset(seed=2)
    _take(iter(loader), 3)
    after = roundtrip(loader.state_dict())
    assert [(r["epoch"], r["rows"], r["promised"]) for r in after["history"]] == [(0, 192, None)]
    assert after["parent"] is None and after["loaded_at"] is None
    (e,) = certify([after]).epochs
    assert not e.exact and e.handed == 192
    with pytest.raises(ValueError, match=r"different runs: seed=1 and seed=2"):
        certify([before, after])


# -- other runs are refused, naming the field ----------------------------------------------


@pytest.mark.parametrize(
    ("other", "match"),
    [
        ({"seed": 2}, "seed=1 and seed=2"),
        ({"batch_size": 32}, "batch_size=64 and batch_size=32"),
        ({"x": x_of(N + 1)}, "total_size=1000 and total_size=1001"),
        ({"x": x_of() + 1}, "fingerprints differ in sample"),
    ],
)
def test_states_of_another_run_are_refused_naming_the_field(other, match):
    def run(shard, seed=1, batch_size=64, x=None):
        loader = DataLoader(
            x_of() if x is None else x, batch_size, num_shards=2, shard_index=shard, seed=seed
        )
        for _ in loader:
            pass
        return roundtrip(loader.state_dict())

    assert certify([run(0), run(1)])
    with pytest.raises(ValueError, match=match):
        certify([run(0), run(1, **other)])


# -- an epoch begun with no batch is nothing ---------------------------------------------


@pytest.mark.parametrize("elastic", [False, True])
def test_an_epoch_begun_by_iter_with_no_batch_taken_is_not_cut_short(elastic):
    loader = DataLoader(x_of(), 64, seed=1, elastic=elastic)
    for _ in loader:
        pass
    iter(loader)
    state = roundtrip(loader.state_dict())
    cert = certify([state])
    assert cert and [e.epoch for e in cert.epochs] == [0], str(cert)


# -- the lineage ----------------------------------------------------------------------------


def test_every_state_names_itself_and_the_state_it_was_loaded_from():
    loader = DataLoader(x_of(), 64, seed=1)
    it = iter(loader)
    _take(it, 2)
    a = roundtrip(loader.state_dict())
    _take(it, 2)
    b = roundtrip(loader.state_dict())
    assert (a["parent"], a["loaded_at"], b["parent"]) == (None, None, None)
    assert a["id"] == state_id(a) and b["id"] == state_id(b) and a["id"] != b["id"]
    resumed = DataLoader(x_of(), 64, seed=1)
    resumed.load_state_dict(a)
    at_once = roundtrip(resumed.state_dict())  # nothing handed out since: a's place, a's child
    assert at_once["parent"] == a["id"] and isinstance(at_once["loaded_at"], int)
    assert at_once["id"] != a["id"]
    position = ("epoch", "batches_done", "ledger", "history", "compacted")
    assert [at_once[k] for k in position] == [a[k] for k in position]
    _take(iter(resumed), 1)
    c = roundtrip(resumed.state_dict())
    assert c["parent"] == a["id"] and isinstance(c["loaded_at"], int)
    forged = {**a, "batches_done": 3}
    assert state_id(forged) != a["id"]  # (the id is of the content: made again, not trusted)


def _elastic(states_in, shards, steps, seed=5):
    """Loaders at ``shards`` elastic shards (each from ``states_in[s]`` if given) stepped
    ``steps`` batches in lockstep (None: to the end): their states."""
    loaders = [
        DataLoader(x_of(), 32, num_shards=shards, shard_index=s, elastic=True, seed=seed)
        for s in range(shards)
    ]
    for s, loader in enumerate(loaders):
        if states_in:
            loader.load_state_dict(states_in[s % len(states_in)])
    its = [iter(ld) for ld in loaders]
    k = 0
    while steps is None or k < steps:
        if all(b is None for b in [next(it, None) for it in its]):
            break
        k += 1
    return list(zip(loaders, its, strict=True)), [roundtrip(ld.state_dict()) for ld in loaders]


def test_a_checkpoint_the_restart_did_not_resume_from_is_set_aside():
    """Checkpoints A and B saved (Ray Train keeps both), the job restarted from A at
    another world size: B is set aside and said so, not counted as rows repeated."""
    running, a = _elastic(None, 2, 3)
    for _ in range(2):  # the same epoch goes on: 2 more steps, then B
        for _, it in running:
            next(it)
    b = [roundtrip(ld.state_dict()) for ld, _ in running]
    _, final = _elastic(a, 3, None)
    cert = certify(a + b + final)
    assert cert, str(cert)
    assert cert.set_aside == (b[0]["id"],) and b[0]["id"] == b[1]["id"]
    assert "set aside: 1 state(s)" in str(cert)
    assert certify(final + a) and certify(final + b + a)  # any order; more states no harm
    assert not certify(b + final[:2])  # without A's ranks: rows of the first segment unseen


def test_a_restart_from_an_earlier_checkpoint_abandons_the_later_and_what_came_of_them():
    loader = DataLoader(x_of(), 64, seed=3)
    it = iter(loader)
    _take(it, 3)
    a = roundtrip(loader.state_dict())
    _take(it, 3)
    b = roundtrip(loader.state_dict())
    from_b = DataLoader(x_of(), 64, seed=3)
    from_b.load_state_dict(b)
    _take(iter(from_b), 4)
    c = roundtrip(from_b.state_dict())  # then this restart died too
    from_a = DataLoader(x_of(), 64, seed=3)
    from_a.load_state_dict(a)
    for _ in from_a:
        pass
    final = roundtrip(from_a.state_dict())
    cert = certify([a, b, c, final])
    assert cert and set(cert.set_aside) == {b["id"], c["id"]}, str(cert)


def _loaded(state, **kw) -> DataLoader:
    loader = DataLoader(x_of(), 64, seed=3, **kw)
    loader.load_state_dict(state)
    return loader


def test_two_restarts_from_one_checkpoint_that_reach_one_place_are_told_apart():
    """Restarted from A, then from A again (the first restart given up): both reach the
    start of epoch 1, one place, one id. A restart from the first one's state there
    (given up with it) is not one from the second's: the second runs on, certified."""
    loader = DataLoader(x_of(), 64, seed=3)
    _take(iter(loader), 3)
    a = roundtrip(loader.state_dict())
    first = _loaded(a)
    for _ in first:
        pass
    d1 = roundtrip(first.state_dict())  # epoch 0 ended: epoch 1's start
    from_d1 = _loaded(d1)
    _take(iter(from_d1), 2)
    e = roundtrip(from_d1.state_dict())  # (then this restart died too)
    second = _loaded(a)
    for _ in second:
        pass
    d2 = roundtrip(second.state_dict())
    assert d2["id"] == d1["id"]  # (one place of one lineage: one id)
    for _ in second:
        pass
    final = roundtrip(second.state_dict())
    cert = certify([a, d1, e, d2, final])
    assert cert and [x.epoch for x in cert.epochs] == [0, 1], str(cert)
    assert set(cert.set_aside) == {d1["id"], e["id"]}


def test_a_place_reached_twice_in_one_session_restarts_from_the_right_one():
    """One loader stands at the start of epoch 1 twice (set_epoch(1) after part of it),
    saved both times (one id); restarts from the second then from a state between:
    each rolls back to the state it loaded, and the final lineage is certified."""
    loader = DataLoader(x_of(), 64, seed=3)
    for _ in loader:
        pass
    x1 = roundtrip(loader.state_dict())  # epoch 1's start
    it = iter(loader)
    _take(it, 2)
    y = roundtrip(loader.state_dict())
    loader.set_epoch(1)
    x2 = roundtrip(loader.state_dict())  # epoch 1's start again: 2 batches of it on record
    assert x2["id"] == x1["id"]
    from_x2 = _loaded(x2)
    _take(iter(from_x2), 3)
    dead = roundtrip(from_x2.state_dict())
    final_loader = _loaded(y)
    for _ in final_loader:
        pass
    final = roundtrip(final_loader.state_dict())
    cert = certify([x1, y, x2, dead, final])
    assert cert, str(cert)
    assert certify([x1, y, x2, dead, final][::-1])  # (any order)


def test_a_state_after_close_is_the_same_place_with_the_same_id():
    """close() lets go of the data, so a state taken after it knows less of the data:
    it stands where the state before close stood, with the same id."""
    loader = DataLoader(x_of(), 64, seed=3)
    _take(iter(loader), 2)
    loader.close()
    closed = roundtrip(loader.state_dict())
    again = roundtrip(_loaded(closed).state_dict())  # (a restart from it: its child)
    assert again["parent"] == closed["id"] and state_id(again) == again["id"] != closed["id"]
    open_one = DataLoader(x_of(), 64, seed=3)
    _take(iter(open_one), 2)
    assert roundtrip(open_one.state_dict())["id"] == closed["id"]


def test_two_elastic_restarts_from_one_checkpoint_at_other_counts_keep_the_later():
    """Restarted from A at 1 shard, given up, then from A at 3 shards: the first
    restart's states (other shards than the second's) are set aside."""
    _, a = _elastic(None, 2, 3)
    _, first = _elastic(a, 1, 4)
    _, final = _elastic(a, 3, None)
    cert = certify(a + first + final)
    assert cert and cert.set_aside == (first[0]["id"],), str(cert)


def test_an_elastic_state_taken_right_after_a_resume_at_another_count_is_its_child():
    """Ranks of another count save as soon as they resume (the checkpoint's place, each
    naming its own shard and the checkpoint as parent: one id across the ranks), and
    the job is restarted from an earlier checkpoint: the copies fall with the
    checkpoint's later states, whatever shard they name."""
    running, a = _elastic(None, 2, 2)
    for _ in range(3):
        for _, it in running:
            next(it)
    b = [roundtrip(ld.state_dict()) for ld, _ in running]
    copies = [roundtrip(_loaded_elastic(b[s % 2], s, 3).state_dict()) for s in range(3)]
    assert len({c["id"] for c in copies}) == 1 and copies[0]["id"] != b[0]["id"]
    assert {c["parent"] for c in copies} == {b[0]["id"]}
    _, final = _elastic(a, 2, None)
    cert = certify(a + b + copies + final)
    assert cert, str(cert)
    assert set(cert.set_aside) == {b[0]["id"], copies[0]["id"]}, str(cert)


@pytest.mark.parametrize("elastic", [False, True])
def test_a_restart_that_saves_before_any_batch_and_stops_is_cut_short(elastic):
    """Checkpoint A mid-run, B at the run's end; a restart from A saves at once (before
    any batch) and stops. Its states are a node of their own (the restart is on record):
    B is set aside, and the lineage that ends at the restart's states is cut short."""
    running, a = _elastic(None, 2, 3) if elastic else _plain(3)
    for _, it in running:
        for _ in it:
            pass
    b = [roundtrip(ld.state_dict()) for ld, _ in running]
    assert certify(a + b)
    if elastic:  # (at another count: each rank a copy of a rank's state of A)
        copy = [roundtrip(_loaded_elastic(a[s % 2], s, 3).state_dict()) for s in range(3)]
    else:
        copy = [roundtrip(_loaded(a[0]).state_dict())]
    cert = certify(a + b + copy)
    assert not cert, str(cert)
    assert {c["parent"] for c in copy} == {a[0]["id"]} and copy[0]["id"] != a[0]["id"]
    assert set(cert.set_aside) == {b[0]["id"]}, str(cert)
    assert not certify(b + copy + a)  # (any order)


def _plain(steps):
    loader = DataLoader(x_of(), 64, seed=3)
    it = iter(loader)
    _take(it, steps)
    return [(loader, it)], [roundtrip(loader.state_dict())]


def _loaded_elastic(state, s, shards, seed=5) -> DataLoader:
    loader = DataLoader(x_of(), 32, num_shards=shards, shard_index=s, elastic=True, seed=seed)
    loader.load_state_dict(state)
    return loader


def test_states_of_the_run_before_reset_seed_are_refused_naming_it():
    """reset(seed=s) begins a new run, even of the same seed: its states and the old
    run's are not merged (the old run's whole epochs would bless the new one's cut
    short)."""
    loader = DataLoader(x_of(), 64, seed=7)
    for _ in range(2):
        for _ in loader:
            pass
    old = roundtrip(loader.state_dict())
    loader.reset(seed=7)
    for _ in loader:
        pass
    _take(iter(loader), 1)
    new = roundtrip(loader.state_dict())
    assert new["run"] == 1 and "run" not in old
    assert not certify([new])
    with pytest.raises(ValueError, match=r"run=0 and run=1 \(reset\(seed=...\) began a new run\)"):
        certify([old, new])
    resumed = DataLoader(x_of(), 64, seed=7)
    resumed.load_state_dict(new)
    _take(iter(resumed), 1)
    assert roundtrip(resumed.state_dict())["run"] == 1  # (a resume goes on with the run)


# -- elastic under DDP never falls out of step -------------------------------------------------


def _fake_torch_distributed(monkeypatch, world: int) -> None:
    """torch.distributed initialised at ``world`` ranks, as the loader asks it."""
    import sys
    import types

    dist = types.SimpleNamespace(
        is_available=lambda: True,
        is_initialized=lambda: True,
        get_world_size=lambda: world,
        get_rank=lambda: 0,
    )
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(distributed=dist))


def test_an_elastic_resume_under_ddp_never_gives_ranks_different_step_counts(monkeypatch):
    """3 ranks, 5 steps (15 of the 32 global batches), resumed at 2 ranks under
    torch.distributed: 17 batches left would be 9 and 8 steps (a hang in DDP's all-reduce).
    The default refuses at load_state_dict, saying why; even_batches=True (the state
    loads under it) gives both ranks 8 steps, and the run is certified."""
    _, states = _elastic(None, 3, 5)
    _fake_torch_distributed(monkeypatch, 2)
    plain = DataLoader(x_of(), 32, num_shards=2, shard_index=1, elastic=True, seed=5)
    with pytest.raises(ValueError, match=r"17 global batches, which 2 ranks .* 9 and 8 steps"):
        plain.load_state_dict(states[1])
    assert plain.state_dict()["global_batches_done"] == 0  # (left as it was)
    even = [
        DataLoader(x_of(), 32, num_shards=2, shard_index=s, elastic=True, seed=5, even_batches=True)
        for s in range(2)
    ]
    steps = []
    for s, loader in enumerate(even):
        loader.load_state_dict(states[s])
        steps.append(sum(1 for _ in loader))
    assert steps == [8, 8]
    assert certify(states + [roundtrip(ld.state_dict()) for ld in even])


@pytest.mark.parametrize(("world", "taken"), [(2, 8), (4, 4), (1, 5)])
def test_an_elastic_resume_under_ddp_that_divides_evenly_loads(monkeypatch, world, taken):
    _, states = _elastic(None, 2, taken)  # 2 * taken of the 32 global batches
    _fake_torch_distributed(monkeypatch, world)
    loaders = [
        DataLoader(x_of(), 32, num_shards=world, shard_index=s, elastic=True, seed=5)
        for s in range(world)
    ]
    for loader in loaders:
        loader.load_state_dict(states[0])
    assert len({sum(1 for _ in ld) for ld in loaders}) == 1 or world == 1


def test_the_command_names_the_states_set_aside(tmp_path, capsys):
    import json

    from exactbatch.cli import main

    loader = DataLoader(x_of(), 64, seed=3)
    it = iter(loader)
    _take(it, 3)
    a = roundtrip(loader.state_dict())
    _take(it, 3)
    b = roundtrip(loader.state_dict())
    resumed = DataLoader(x_of(), 64, seed=3)
    resumed.load_state_dict(a)
    for _ in resumed:
        pass
    path = tmp_path / "states.json"
    path.write_text(json.dumps([a, b, resumed.state_dict()]))
    assert main(["certify", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["set_aside"] == [b["id"]]
    other = DataLoader(x_of(), 64, seed=4)
    for _ in other:
        pass
    path.write_text(json.dumps([a, other.state_dict()]))
    assert main(["certify", str(path)]) == 2
    assert "different runs: seed=3 and seed=4" in capsys.readouterr().err
