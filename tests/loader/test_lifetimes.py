"""Threads and lifetimes at the loader's seams (issue 27): finalizers, properties that
agree with the state, and the one claim protocol's bookkeeping.

The laws over every source and option (a state taken mid-read, an iterator left
mid-epoch, one iterator shared by threads, a read error at each batch) are axes of
test_law_matrix.py; each test here pins one reported failure.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
from helpers import ids
from laws import run_python

from exactbatch import DataLoader
from exactbatch.loader.lineage import state_id

N = 100


def x_of(n: int = N) -> np.ndarray:
    return np.arange(n, dtype=np.float64).reshape(-1, 1)


# The collector frees a prefetching iterator (caught in a reference cycle) while this
# thread holds the cursor's lock, with the prefetch thread waiting for that lock: its
# finalizer must neither take the lock nor join the thread.
_CYCLE_CHILD = """
import gc, threading, time
import numpy as np
import laws
from exactbatch import DataLoader

gc.disable()
x = np.arange(2000, dtype=np.float64).reshape(-1, 1)
loader = DataLoader(x, 10, seed=1, prefetch=1)
gate = laws.wrap_reader(loader, laws.GateReader)
gate.arm()
it = iter(loader)  # the prefetch thread's first read waits at the gate
assert gate.entered.wait(30)
cycle = [it]
cycle.append(cycle)
del it, cycle
cursor = loader._cursor
real = cursor._position

def collected_under_the_lock():
    gate.release(False)  # the thread reads, hands its group over, and claims again:
    time.sleep(0.3)  # it waits for the lock this thread holds
    gc.collect()  # the iterator's finalizer runs here
    return real()

cursor._position = collected_under_the_lock
state = loader.state_dict()
cursor._position = real
print(state["epoch"], state["batches_done"])
"""


def test_an_iterator_freed_by_the_collector_under_the_cursor_lock_does_not_deadlock():
    """A prefetching iterator in a reference cycle, collected during state_dict() (which
    holds the cursor's lock) while its thread waits for that lock: no deadlock, and the
    state counts no batch (none was handed out)."""
    try:
        out = run_python(_CYCLE_CHILD, timeout=60)
    except subprocess.TimeoutExpired:  # pragma: no cover - the failure this pins
        pytest.fail("the finalizer deadlocked on the cursor's lock")
    assert out.split() == ["0", "0"]


def test_an_iterator_left_in_a_cycle_leaves_its_batches_to_next_into():
    """Its batches read ahead stay with the loader: next_into hands them out first."""
    import gc

    want = [r for xb, _ in DataLoader(x_of(), 10, seed=2) for r in ids(xb)]
    loader = DataLoader(x_of(), 10, seed=2, prefetch=2)
    it = iter(loader)
    got = ids(next(it)[0])
    cycle = [it]
    cycle.append(cycle)
    del it, cycle
    gc.collect()
    bx, by = np.empty((10, 1)), np.empty((10, 0))
    while r := loader.next_into(bx, by):
        got += ids(bx[:r])
    assert got == want and loader.epoch == 1


def test_the_epoch_property_agrees_with_the_state():
    """loader.epoch is the epoch a state records: after a finished epoch, the next one
    (the one the next iter() begins), so `while loader.epoch < 2` files each epoch's
    rows under its own number."""
    loader = DataLoader(x_of(), 30, seed=1)
    seen = {}
    while loader.epoch < 2:
        e = loader.epoch
        for xb, _ in loader:
            seen.setdefault(e, []).extend(ids(xb))
            assert loader.epoch == loader.state_dict()["epoch"]
    assert sorted(seen) == [0, 1]
    assert all(sorted(rows) == list(range(N)) for rows in seen.values())
    assert loader.epoch == loader.state_dict()["epoch"] == 2


@pytest.mark.parametrize("elastic", [False, True])
def test_reset_after_a_mid_epoch_resume_begins_the_next_epoch(elastic):
    """reset() rewinds to the start of the next epoch, also for an elastic loader resumed
    mid-epoch (its position is a global batch, not batches claimed)."""
    run = DataLoader(x_of(), 10, seed=3, num_shards=2, elastic=elastic)
    it = iter(run)
    next(it)
    next(it)
    state = run.state_dict()
    loader = DataLoader(x_of(), 10, seed=3, num_shards=2, elastic=elastic)
    loader.load_state_dict(state)
    loader.reset()
    assert loader.epoch == 1
    ref = DataLoader(x_of(), 10, seed=3, num_shards=2, elastic=elastic)
    ref.set_epoch(1)
    assert [ids(xb) for xb, _ in loader] == [ids(xb) for xb, _ in ref]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_dropped_iterator_leaves_nothing_claimed_behind(prefetch):
    """Every batch of an epoch ends handed out, given back or dropped with its epoch:
    after an iterator is closed mid-group (its prefetch thread's groups too, and the
    group it was handing out), no group of the cursor holds a batch."""
    loader = DataLoader(x_of(), 5, seed=1, prefetch=prefetch)
    it = iter(loader)
    next(it)
    it.close()
    cursor = loader._cursor
    assert all(not g.queue and g.done() for g in cursor._live)
    state = loader.state_dict()
    assert state["batches_done"] == 1 and "pending" not in state


@pytest.mark.parametrize("depth", [1, 3], ids=["straight-in", "read-ahead"])
@pytest.mark.parametrize("buffer_size", [200, 1000], ids=["one-piece", "halves"])
def test_a_stream_closed_early_waits_for_no_thread(tmp_path, monkeypatch, buffer_size, depth):
    """A stream's generators closed early (the loader moved on, or the garbage collector
    freed them, on whatever thread it runs) stop their threads without waiting for
    them: a wait there deadlocked when the collector ran on the very thread waited on
    (a dropped loader's two-halves buffer, collected while its helper started a thread)."""
    import threading
    import time

    from exactbatch import ndf_blocks, open_ndf, save_ndf
    from exactbatch import prefetch as prefetch_module
    from exactbatch.feeds import streamed

    save_ndf(tmp_path / "s.ndf", x_of(2000))
    blocks = ndf_blocks(open_ndf(tmp_path / "s.ndf"), 50)
    if depth > 1:  # blocks read ahead, several at once (prefetch.ReadAhead)
        monkeypatch.setattr(streamed, "read_depth", lambda *args: depth)
        monkeypatch.setattr(type(blocks), "open_chunk", property(lambda self: self.read_block))
    loader = DataLoader(blocks, 10, buffer_size=buffer_size)
    it = iter(loader)
    next(it)
    waited = []
    for cls in (prefetch_module.Prefetcher, prefetch_module.Hinter, prefetch_module.ReadAhead):
        monkeypatch.setattr(cls, "close", lambda self, cls=cls: waited.append(cls.__name__))
    loader.set_epoch(0)  # the epoch's generators are closed here
    assert waited == []
    monkeypatch.undo()
    del loader, blocks, it
    deadline = time.monotonic() + 30
    while any(t.name.startswith("exactbatch-") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "a stopped thread did not end"
        time.sleep(0.01)


@pytest.mark.parametrize("handed", [0, 3, 20, 100])
def test_a_state_taken_after_close_resumes_where_the_loader_stood(handed):
    """close() lets go of the source, not of the position: a state taken after it (a
    checkpoint after a with block, say) is the state taken before it, and resumes at the
    batch after the last handed out. A closed loader reads nothing more."""
    loader = DataLoader(x_of(), 1, seed=2)  # 100 batches of one row, read 16 at a time
    got = []
    if handed:
        it = iter(loader)
        got = [ids(next(it)[0]) for _ in range(handed)]
    before = loader.state_dict()
    assert before["epoch"] == (1 if handed == N else 0)
    loader.close()
    loader.close()  # (again: nothing more to let go)
    assert loader.state_dict() == before
    resumed = DataLoader(x_of(), 1, seed=2)
    resumed.load_state_dict(before)
    ref = DataLoader(x_of(), 1, seed=2)
    ref.set_epoch(before["epoch"])
    want = [ids(xb) for xb, _ in ref]
    if handed < N:  # (else the state is at the next epoch's start)
        assert got == want[:handed]
    assert [ids(xb) for xb, _ in resumed] == want[before["batches_done"] :]
    bx, by = np.empty((1, 1)), np.empty((1, 0))
    with pytest.raises(ValueError, match="^read from a closed DataLoader$"):
        loader.next_into(bx, by)
    with pytest.raises(ValueError, match="^read from a closed DataLoader$"):
        iter(loader)
    assert loader.state_dict() == before


@pytest.mark.parametrize("steps", [2, 5])
def test_a_state_taken_after_close_keeps_an_elastic_position(steps):
    """Under elastic sharding too: the global batch and the ledger of every shard's
    batches before it (at the epoch's end: the next epoch's start)."""
    loader = DataLoader(x_of(), 10, seed=2, num_shards=2, elastic=True)
    it = iter(loader)
    for _ in range(steps):
        next(it)
    before = loader.state_dict()
    assert (before["epoch"], before["global_batches_done"]) == ((0, 4) if steps == 2 else (1, 0))
    loader.close()
    assert loader.state_dict() == before


def test_a_state_taken_after_close_keeps_the_pending_batches_of_a_restored_one():
    """Closed right after a state with a batch waiting to be read again was loaded: a
    state taken then is that state."""
    loader = DataLoader(x_of(), 10, seed=2)
    it = iter(loader)
    for _ in range(4):
        next(it)
    state = {**loader.state_dict(), "pending": [1]}  # batches 0-4 claimed, 1 not handed
    state["id"] = state_id(state)  # (edited: its id is made again)
    restored = DataLoader(x_of(), 10, seed=2)
    restored.load_state_dict(state)
    restored.close()
    after = restored.state_dict()  # (a child of the state loaded: it names the load)
    assert after.pop("parent") == state["id"] and isinstance(after.pop("loaded_at"), int)
    lineage = ("id", "parent", "loaded_at")
    assert {k: v for k, v in after.items() if k != "id"} == {
        k: v for k, v in state.items() if k not in lineage
    }
