"""Resuming a random-access DataLoader: state_dict() / load_state_dict().

Laws (DESIGN.md): a state taken mid-epoch resumes - in this process or a new
one - with exactly the batches not yet handed out, in the same order; a state
taken at the end of an epoch resumes at the start of the next; the state is
small plain (JSON-safe) data with a "version" key; a state of another
version is refused (ValueError).

The resume law over every kind of source and option - cut at every batch,
in a fresh process, with prefetch, and states from loaders with other
settings refused - is in test_law_matrix.py; this file keeps the particular
ways to reach a state (a for loop to its end, set_epoch, reset(seed), a
state taken right after restoring) and saving in a process of its own.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import textwrap

import numpy as np
import pytest
from helpers import (
    collect,
    make_data,
    make_source,
    next_into_ids,
    rows_of,
    wait_until_prefetched,
)
from laws import roundtrip, run_python

import exactbatch
from exactbatch import DataLoader


@pytest.fixture
def build(tmp_path):
    """build(kind, n=47, batch_size=5, **kw): loaders over the same traceable rows."""
    counter = itertools.count()

    def _build(kind="pair", n=47, d=2, l=1, batch_size=5, **kw):  # noqa: E741
        x, y = make_data(n, d, l)
        folder = tmp_path / f"src{next(counter)}"
        folder.mkdir()
        return DataLoader(make_source(kind, x, y, folder), batch_size, **kw)

    return _build


def reference(build, kind, epochs, **kw):
    """Row ids of epochs 0..epochs-1, each from a fresh loader's set_epoch."""
    out = []
    for e in range(epochs):
        loader = build(kind, **kw)
        loader.set_epoch(e)
        out.append(collect(loader))
    return out


PREFETCH_CONFIGS = [
    dict(shuffle=True, drop_last=False),
    dict(shuffle=False, drop_last=False),
    dict(shuffle=True, drop_last=True, num_shards=3, shard_index=2),
]


@pytest.mark.parametrize("kind", ["pair", "ndf"])
@pytest.mark.parametrize("config", PREFETCH_CONFIGS, ids=str)
def test_resume_with_prefetched_batches_ready_hands_out_exactly_those_not_received(
    build, kind, config
):
    """A state taken mid-epoch while the prefetch thread holds batches ready counts only
    the batches received: restored (with or without prefetch) it hands out exactly the
    rest, and the original goes on with the same batches."""
    ref = reference(build, kind, 2, **config)
    nb = len(ref[0])
    for k in sorted({0, 1, nb // 2, nb - 1}):
        original = build(kind, prefetch=2, **config)
        it = iter(original)
        taken = [next(it)[0][:, 0].astype(int).tolist() for _ in range(k)]
        assert taken == ref[0][:k]
        wait_until_prefetched(it)
        state = roundtrip(original.state_dict())
        assert (state["epoch"], state["batches_done"]) == (0, k)
        for prefetch in (0, 2):
            restored = build(kind, prefetch=prefetch, **config)
            restored.load_state_dict(state)
            assert collect(restored) == ref[0][k:], (k, prefetch)
            assert collect(restored) == ref[1]
        assert rows_of(it) == ref[0][k:]


@pytest.mark.parametrize("kind", ["pair", "ndf"])
@pytest.mark.parametrize("how", ["for_loop", "exactly_len_nexts", "next_into_until_0"])
def test_state_at_the_end_of_an_epoch_resumes_at_the_start_of_the_next(build, kind, how):
    """A state taken once every batch of epoch e is handed out resumes at epoch e+1's start."""
    ref = reference(build, kind, 4)
    original = build(kind)
    list(original)  # epoch 0
    if how == "for_loop":
        assert collect(original) == ref[1]
    elif how == "exactly_len_nexts":
        it = iter(original)
        assert [next(it)[0][:, 0].astype(int).tolist() for _ in range(len(original))] == ref[1]
    else:
        original.reset()
        assert next_into_ids(original) == ref[1]
    state = roundtrip(original.state_dict())

    restored = build(kind)
    restored.load_state_dict(state)
    assert restored.epoch == 2
    assert collect(restored) == ref[2]
    assert collect(restored) == ref[3]

    again = build(kind)
    again.load_state_dict(state)
    assert next_into_ids(again) == ref[2]


def test_state_of_a_fresh_loader_resumes_at_epoch_0(build):
    """A state taken before anything was handed out resumes at the start of epoch 0."""
    ref = reference(build, "pair", 2)
    state = roundtrip(build("pair").state_dict())
    restored = build("pair")
    restored.load_state_dict(state)
    assert [collect(restored), collect(restored)] == ref


def test_state_after_set_epoch_resumes_at_that_epoch(build):
    """A state taken after set_epoch(5), before any batch, resumes at the start of epoch 5."""
    loader = build("pair")
    list(loader)
    loader.set_epoch(5)
    state = roundtrip(loader.state_dict())
    want = collect(loader)
    restored = build("pair")
    restored.load_state_dict(state)
    assert collect(restored) == want


def test_a_state_resumes_only_under_its_seed(build):
    """The seed fixes the order, so a state records it (DESIGN.md, "Exactness across every
    combination"): a loader with another seed refuses it with a ValueError naming both
    seeds, and is left as it was; one built with the state's seed, or reset to it, resumes
    it. A state taken after reset(seed) records that seed."""
    original = build("pair", seed=0)
    original.reset(77)
    list(original)
    it = iter(original)
    next(it)
    next(it)
    state = roundtrip(original.state_dict())
    assert state["seed"] == 77
    remaining = rows_of(it)
    other = build("pair", seed=0)
    with pytest.raises(ValueError, match=r"seed=77, this loader has seed=0"):
        other.load_state_dict(state)
    assert collect(other) == reference(build, "pair", 1, seed=0)[0]  # untouched: epoch 0
    want_next = reference(build, "pair", 3, seed=77)[2]
    for restored in (build("pair", seed=77), build("pair", seed=0)):
        restored.reset(77)  # (a no-op on the first)
        restored.load_state_dict(state)
        assert collect(restored) == remaining
        assert collect(restored) == want_next


def test_a_state_taken_right_after_restoring_resumes_at_the_same_place(build):
    """Checkpointing straight after load_state_dict loses nothing: the new state resumes at the
    same batch as the old one."""
    original = build("ndf")
    it = iter(original)
    for _ in range(4):
        next(it)
    state = roundtrip(original.state_dict())
    remaining = rows_of(it)
    first = build("ndf")
    first.load_state_dict(state)
    state2 = roundtrip(first.state_dict())
    second = build("ndf")
    second.load_state_dict(state2)
    assert collect(second) == remaining
    assert collect(first) == remaining


def test_state_dict_does_not_disturb_the_iteration(build):
    """Taking a state mid-epoch (even repeatedly) changes nothing the loader hands out."""
    want = reference(build, "pair", 2)
    loader = build("pair")
    got = []
    for xb, _ in loader:
        loader.state_dict()
        got.append(xb[:, 0].astype(int).tolist())
        loader.state_dict()
    assert got == want[0]
    assert collect(loader) == want[1]


def test_state_is_small_plain_json_data_with_a_version(build):
    """state_dict() is plain data: it survives JSON unchanged, has a "version" key, and is small."""
    loader = build("ndf", n=10_000, batch_size=7)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert isinstance(state, dict)
    assert "version" in state
    text = json.dumps(state)
    assert json.loads(text) == state
    assert len(text) < 2000  # no per-row data in it


@pytest.mark.parametrize("version", ["newer", 0, 999, "as text", None, "missing"])
def test_a_state_of_another_version_is_a_value_error(build, version):
    """load_state_dict refuses (ValueError) a state whose "version" is neither this one's
    nor 1 (which still loads): the next one, others, the current one as text, none."""
    loader = build("pair")
    state = roundtrip(loader.state_dict())
    current = state["version"]
    assert isinstance(current, int) and current not in (0, 999)
    if version == "missing":
        del state["version"]
    else:
        other = {"newer": current + 1, "as text": str(current)}
        state["version"] = other.get(version, version)
    with pytest.raises(ValueError):
        build("pair").load_state_dict(state)


# -- in a new process ----------------------------------------------------------------------------

SETTINGS = "batch_size=7, shuffle=True, seed=3, num_shards=2, shard_index=1"

SAVE = textwrap.dedent(
    f"""
    import json, sys
    import numpy as np
    from exactbatch import DataLoader, open_ndf
    path, out, via, k = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    loader = DataLoader(open_ndf(path), {SETTINGS})
    loader.set_epoch(1)
    if via == "iter":
        it = iter(loader)
        for _ in range(k):
            next(it)
    else:
        bx, by = np.empty((7, loader.d)), np.empty((7, loader.l))
        for _ in range(k):
            assert loader.next_into(bx, by) > 0
    with open(out, "w") as f:
        json.dump(loader.state_dict(), f)
    """
)

RESUME = textwrap.dedent(
    f"""
    import json, sys
    import numpy as np
    from exactbatch import DataLoader, open_ndf
    path, state_file, out = sys.argv[1], sys.argv[2], sys.argv[3]
    loader = DataLoader(open_ndf(path), {SETTINGS})
    with open(state_file) as f:
        loader.load_state_dict(json.load(f))
    for name in ("rest", "next"):  # the rest of the epoch, then the next epoch
        batches = [xb[:, 0].astype(np.int64) for xb, _ in loader]
        np.save(f"{{out}}-{{name}}-rows.npy", np.concatenate(batches))
        np.save(f"{{out}}-{{name}}-sizes.npy", np.array([len(b) for b in batches]))
    """
)


@pytest.mark.parametrize("via", ["iter", "next_into"])
def test_resume_in_a_new_process_hands_out_exactly_the_remaining_batches(tmp_path, via):
    """A process takes 3 batches of epoch 1 and saves its state as JSON; a new process restores
    it and hands out epoch 1's batches 3.. and then epoch 2, exactly as computed in-process."""
    x, y = make_data(101, 2, 1)
    path = tmp_path / "data.ndf"
    exactbatch.save_ndf(path, (x, y))
    state_file = tmp_path / "state.json"
    run_python(SAVE, path, state_file, via, 3)
    state = json.loads(state_file.read_text())
    assert "version" in state
    run_python(RESUME, path, state_file, tmp_path / "out")

    settings = dict(batch_size=7, shuffle=True, seed=3, num_shards=2, shard_index=1)
    fresh = DataLoader((x, y), **settings)
    fresh.set_epoch(1)
    epoch1 = collect(fresh)
    epoch2 = collect(fresh)
    # shard 1 of 2 owns rows 50..100 (51 rows): 8 batches, the last of 2 rows
    assert [len(b) for b in epoch1] == [7] * 7 + [2]
    assert sorted(r for b in epoch1 for r in b) == list(range(50, 101))
    for name, want in (("rest", epoch1[3:]), ("next", epoch2)):
        rows = np.load(tmp_path / f"out-{name}-rows.npy")
        sizes = np.load(tmp_path / f"out-{name}-sizes.npy")
        assert sizes.tolist() == [len(b) for b in want]
        assert rows.tolist() == [r for b in want for r in b]


# -- a state's edges -----------------------------------------------------------------------------


def test_a_state_unpacks_to_the_position_it_was_packed_from(build):
    """state.py's round trip: the Position a cursor snapshots, packed and unpacked (through
    JSON), is that Position again, with the batches claimed before it (pending included);
    its lineage is the state's own id (the parent of what follows)."""
    from exactbatch.loader.lineage import state_id
    from exactbatch.loader.state import pack_state, unpack_state

    for k, pending in ((0, []), (4, []), (4, [1])):
        loader = build("pair", seed=3)
        if k:
            it = iter(loader)
            for _ in range(k):
                next(it)
        pos = loader._cursor.snapshot()
        state = roundtrip(pack_state(pos, loader._feed))
        if pending:  # a batch whose read failed waits (batches 0-4 claimed, 4 handed out)
            state["pending"] = pending
            pos = dataclasses.replace(pos, pending=tuple(pending))
        pos = dataclasses.replace(pos, parent=state_id(state))
        assert unpack_state(state, loader._feed, 3) == (pos, k + len(pending))
    loader.set_epoch(2)  # the start of an epoch: nothing claimed, nothing begun
    pos = loader._cursor.snapshot()
    state = roundtrip(loader.state_dict())
    pos = dataclasses.replace(pos, parent=state["id"])
    assert unpack_state(state, loader._feed, 3) == (pos, 0)


def _stream(chunks, **kw) -> DataLoader:
    """A stream read by a factory: its widths (d, l) are unknown until it is first read."""
    return DataLoader(lambda: iter(chunks), 5, seed=3, total_size=47, **kw)


def test_a_state_of_a_stream_not_read_yet_loads_into_one_read_and_checks_the_rest():
    """A state taken before a stream was read records no widths (d, l None): a loader of
    the same stream that has been read resumes it, and every other setting (those
    recorded after the widths among them) is still checked."""
    x, y = make_data(47, 2, 1)
    chunks = [(x[a : a + 10], y[a : a + 10]) for a in range(0, 47, 10)]
    state = roundtrip(_stream(chunks, buffer_size=20).state_dict())
    assert (state["d"], state["l"]) == (None, None)
    want = collect(_stream(chunks, buffer_size=20))
    read = _stream(chunks, buffer_size=20)
    it = iter(read)
    next(it)
    assert (read.state_dict()["d"], read.state_dict()["l"]) == (2, 1)
    read.load_state_dict(state)
    assert collect(read) == want
    for changed in ("buffer_size", "n_rows"):
        other = _stream(chunks, buffer_size=30)
        next(iter(other))
        assert state["buffer_size"] == 20 and "n_rows" in state
        theirs = {**state, "n_rows": 46} if changed == "n_rows" else state
        with pytest.raises(ValueError, match=rf"state was taken with {changed}="):
            (other if changed == "buffer_size" else read).load_state_dict(theirs)


@pytest.mark.parametrize("how", ["no ledger key", "ledger None"])
def test_an_elastic_state_without_a_ledger_is_checked_only_from_the_epochs_start(build, how):
    """An elastic state without a ledger (from before elastic states carried one, or taken
    after a version-1 resume) resumes unchecked mid-epoch; at the start of an epoch there
    is nothing to miss, and that epoch's ledger is checked (and recorded) again."""
    for g, checked in ((0, True), (4, False)):
        loader = build("pair", n=50, batch_size=5, num_shards=2, elastic=True)
        it = iter(loader)
        for _ in range(g // 2):
            next(it)
        state = roundtrip(loader.state_dict())
        assert state["global_batches_done"] == g and state["ledger"] is not None
        if how == "no ledger key":
            del state["ledger"]
        else:
            state["ledger"] = None
        resumed = build("pair", n=50, batch_size=5, num_shards=2, elastic=True)
        resumed.load_state_dict(state)
        assert (resumed.state_dict()["ledger"] is not None) is checked
