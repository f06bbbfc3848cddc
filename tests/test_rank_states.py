"""The loader states of a checkpoint folder, function by function (rank_states.py): which
loader a wrapper holds, the world a job's loader must be sharded by, which files are
states, when a checkpoint is complete and, when not, the words that say why; which
rank's state a loader resumes from. The engines' end-to-end runs are
tests/adapters/test_checkpoints.py's."""

import json
from types import SimpleNamespace

import pytest

from exactbatch import rank_states as rs


def _loader(rank=0, shards=2, elastic=False):
    loaded = []
    return SimpleNamespace(
        shard_index=rank,
        num_shards=shards,
        elastic=elastic,
        state_dict=lambda: {"version": 3, "shard": [rank, shards]},
        load_state_dict=loaded.append,
        loaded=loaded,
    )


def test_the_loader_inside_a_wrapper_is_found_and_anything_else_is_named():
    loader = _loader()
    assert rs.loader_of(loader, "save") is loader
    assert rs.loader_of(SimpleNamespace(loader=loader), "save") is loader
    with pytest.raises(TypeError, match=r"^save needs an exactbatch DataLoader .*; got list$"):
        rs.loader_of([], "save")
    with pytest.raises(TypeError, match="got SimpleNamespace"):
        rs.loader_of(SimpleNamespace(state_dict=None), "save")  # no load_state_dict


def test_the_loader_must_be_sharded_by_the_jobs_world():
    rs.check_world(_loader(shards=4), 4, "save")
    rs.check_world(_loader(shards=4), None, "save")
    with pytest.raises(ValueError) as e:
        rs.check_world(_loader(shards=1), 4, "save")
    assert str(e.value) == (
        'save: the loader has num_shards=1 in a job of 4 ranks; build it with num_shards="auto", '
        'shard_index="auto" so that each rank saves its own state'
    )


def test_a_state_is_a_json_object_with_a_version():
    assert rs.read_state(b'{"version": 3}', "f") == {"version": 3}
    for text in ("[1]", '{"shard": 1}'):
        with pytest.raises(ValueError) as e:
            rs.read_state(text, "ck/loader-0.json")
        assert str(e.value) == (
            "ck/loader-0.json: not a loader state (a JSON object from state_dict())"
        )
    with pytest.raises(ValueError, match=r"^ck: not a loader state \(not JSON: "):
        rs.read_state(b"\xff", "ck")


def test_why_a_checkpoint_is_incomplete_names_the_files():
    assert rs.missing_ranks({0: "a", 1: "b"}, 2, "ck") == ""
    assert rs.missing_ranks({}, 2, "ck") == (
        "ck: no loader state (loader-0.json, ...) in this checkpoint"
    )
    assert rs.missing_ranks({0: "a"}, None, "ck") == "ck: its states name no shard count"
    assert rs.missing_ranks({0: "a", 3: "d"}, 4, "ck") == (
        "ck: a checkpoint of 4 ranks holds the states of ranks [0, 3] (loader-1.json, "
        "loader-2.json missing): every rank must save its state into every checkpoint"
    )
    assert rs.missing_ranks({0: "a", 1: "b", 2: "c", 3: "d"}, 2, "ck") == (
        "ck: a checkpoint of 2 ranks holds the states of ranks [0, 1, 2, 3] (loader-2.json, "
        "loader-3.json beyond them): every rank must save its state into every checkpoint"
    )


def test_a_loader_resumes_from_its_own_rank_or_elastic_from_any():
    assert rs.to_load([0, 1], _loader(rank=1, shards=2), "ck") == 1
    assert rs.to_load([0, 1, 2, 3], _loader(rank=3, shards=2, elastic=True), "ck") == 3
    assert rs.to_load([2, 1], _loader(rank=3, shards=4, elastic=True), "ck") == 1  # the lowest
    with pytest.raises(ValueError) as e:
        rs.to_load([0, 1], _loader(rank=1, shards=4), "ck")  # its rank, another world
    assert str(e.value) == (
        "ck: a checkpoint of 2 ranks cannot resume rank 1 of 4: resume at the same number "
        "of ranks, or build the loader with elastic=True (any number of ranks resumes from "
        "its states)"
    )
    with pytest.raises(ValueError, match="cannot resume rank 2 of 2"):
        rs.to_load([0, 1], _loader(rank=2, shards=2), "ck")


def test_a_checkpoint_of_mixed_worlds_is_named_by_rank():
    def read(name):
        return json.dumps({"version": 3, "shard": [0, {"a": 2, "b": 2, "c": 3}[name[-6]]]})

    names = ["x/loader-0.json-a", "x/loader-1.json-b"]  # (not state names: skipped)
    assert rs.checkpoint_states(names, read, "ck") == ({}, rs.missing_ranks({}, None, "ck"))
    states, why = rs.checkpoint_states(["x/loader-0.json"], lambda n: read("..a.json"), "ck")
    assert states == {0: {"version": 3, "shard": [0, 2]}} and "loader-1.json missing" in why
    texts = {"loader-0.json": read("a.json"), "loader-1.json": read("c.json")}
    states, why = rs.checkpoint_states(sorted(texts), texts.__getitem__, "ck")
    assert why == (
        "ck: its states were taken at different numbers of ranks (by rank: {0: 2, 1: 3}): "
        "a killed run's checkpoint, partly overwritten"
    )
    texts["loader-2.json"] = read("c.json")  # three states, two worlds
    assert "different numbers of ranks" in rs.checkpoint_states(sorted(texts), texts.get, "ck")[1]


def test_resume_loads_the_chosen_state_and_names_the_file_it_refuses():
    loader = _loader(rank=1, shards=2)
    rs.resume(loader, {0: {"s": 0}, 1: {"s": 1}}, "ck")
    assert loader.loaded == [{"s": 1}]

    def refuse(state):
        raise ValueError("another source")

    loader.load_state_dict = refuse
    with pytest.raises(ValueError, match=r"^ck/loader-1.json: another source$"):
        rs.resume(loader, {0: {}, 1: {}}, "ck")
