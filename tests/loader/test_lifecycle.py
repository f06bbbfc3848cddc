"""The loader's lifecycle (issue 38, its lifecycle half): close, set_epoch after a resume,
reset(seed) mid-run, a read error near an epoch's end on one of several threads, and
elastic states taken while threads read. Each test pins one reported failure; the
laws over sources and ways are axes of test_law_matrix.py (laws.check_close,
laws.check_reset_seed, laws.check_errors_near_the_end)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import ids
from laws import GateReader, roundtrip, wrap_reader

from exactbatch import DataLoader, certify

N = 200


def x_of(n: int = N) -> np.ndarray:
    return np.arange(n, dtype=np.float64).reshape(-1, 1)


def into_ids(loader, limit=None) -> list[list[int]]:
    bx, by = np.empty((loader.batch_size, 1)), np.empty((loader.batch_size, 0))
    out = []
    while limit is None or len(out) < limit:
        r = loader.next_into(bx, by)
        if not r:
            break
        out.append(ids(bx[:r]))
    return out


def batches(loader) -> list[list[int]]:
    return [ids(b[0]) for b in loader]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_close_stops_an_iterator_and_the_state_counts_what_it_handed_out(prefetch):
    """After close() the iterator raises (it handed out 15 more batches at prefetch=0,
    the rest of the epoch at prefetch=2), and a state resumes after the one batch
    handed out."""
    want = batches(DataLoader(x_of(1000), 10, seed=1))
    loader = DataLoader(x_of(1000), 10, seed=1, prefetch=prefetch)
    it = iter(loader)
    got = [ids(next(it)[0])]
    loader.close()
    with pytest.raises(ValueError, match="closed DataLoader"):
        got.append(ids(next(it)[0]))
    with pytest.raises(ValueError, match="closed DataLoader"):
        next(it)
    state = roundtrip(loader.state_dict())
    assert state["batches_done"] == len(got) == 1
    resumed = DataLoader(x_of(1000), 10, seed=1)
    resumed.load_state_dict(state)
    assert got + batches(resumed) == want


class ReadThenGate(GateReader):
    """A read in flight past its copy: reads, then waits at the gate (then raises
    OSError, ``fail``, or returns)."""

    def read(self, rows, out_x, out_y):
        with self._lock:
            mine, self.armed = self.armed, False
        self.inner.read(rows, out_x, out_y)
        if mine:
            self.entered.set()
            assert self._gate.wait(60), "the gate was never released"
            if self.fail:
                raise OSError("injected: rows could not be read")


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("succeeds", [True, False], ids=["read", "fails"])
def test_a_next_into_read_racing_close_is_counted_when_handed_out(succeeds):
    """A next_into read in flight on one thread while another closes the loader: the
    batch it then returns counts in batches_done (it did not), one whose read fails
    does not; and the state resumes after exactly the batches handed out."""
    want = into_ids(DataLoader(x_of(), 10, seed=4))
    loader = DataLoader(x_of(), 10, seed=4)
    gate = wrap_reader(loader, ReadThenGate)
    got = into_ids(loader, 3)
    gate.arm()
    out, errors = [], []

    def reader():
        try:
            out.extend(into_ids(loader, 1))
        except OSError as e:
            errors.append(e)

    worker = threading.Thread(target=reader)
    worker.start()
    assert gate.entered.wait(60)
    loader.close()
    gate.release(not succeeds)
    worker.join(60)
    assert len(out) == succeeds and len(errors) == (not succeeds)
    got += out
    state = roundtrip(loader.state_dict())
    assert state["batches_done"] == len(got)
    with pytest.raises(ValueError, match="closed DataLoader"):
        into_ids(loader, 1)
    resumed = DataLoader(x_of(), 10, seed=4)
    resumed.load_state_dict(state)
    assert got + into_ids(resumed) == want


@pytest.mark.parametrize("elastic", [False, True])
def test_set_epoch_after_a_mid_epoch_resume_keeps_the_restored_position(elastic):
    """The torch habit: load_state_dict, then set_epoch(e) for the state's epoch every
    epoch: the rest of the epoch (60 rows, not 100 more), then the next epoch whole;
    the final state certifies both."""
    make = lambda: DataLoader(x_of(100), 10, seed=1, elastic=elastic)  # noqa: E731
    ref = make()
    want = [batches(ref), batches(ref)]
    run = make()
    it = iter(run)
    got = [ids(next(it)[0]) for _ in range(4)]
    state = roundtrip(run.state_dict())
    resumed = make()
    resumed.load_state_dict(state)
    resumed.set_epoch(state["epoch"])
    got += batches(resumed)
    assert got == want[0]
    resumed.set_epoch(1)
    assert batches(resumed) == want[1]
    assert certify([resumed.state_dict()])


def test_set_epoch_of_another_epoch_after_a_resume_moves():
    """Any other epoch (or the same one once the resumed epoch has begun) is its start."""
    run = DataLoader(x_of(100), 10, seed=1)
    it = iter(run)
    next(it)
    state = run.state_dict()
    ref = DataLoader(x_of(100), 10, seed=1)
    ref.set_epoch(3)
    resumed = DataLoader(x_of(100), 10, seed=1)
    resumed.load_state_dict(state)
    resumed.set_epoch(3)
    assert batches(resumed) == batches(ref)
    again = DataLoader(x_of(100), 10, seed=1)
    again.load_state_dict(state)
    it = iter(again)
    next(it)
    again.set_epoch(0)
    assert again.state_dict()["batches_done"] == 0


@pytest.mark.parametrize("prefetch", [0, 2])
def test_reset_seed_mid_run_hands_out_epoch_0_of_the_new_seed(prefetch):
    """reset(seed=s) with an iterator mid-epoch (prefetching) and next_into's group
    half handed out: the old iterator is stale, what follows is epoch 0 of s exactly,
    and a state taken then resumes in a loader of seed s."""
    fresh = batches(DataLoader(x_of(), 10, seed=7))
    loader = DataLoader(x_of(), 10, seed=1, prefetch=prefetch)
    into_ids(loader, 3)
    it = iter(loader)
    next(it)
    loader.reset(seed=7)
    with pytest.raises(RuntimeError, match="stale"):
        next(it)
    assert loader.epoch == 0 and loader.seed == 7
    got = into_ids(loader, 5)
    state = roundtrip(loader.state_dict())
    assert (state["seed"], state["epoch"], state["batches_done"]) == (7, 0, 5)
    resumed = DataLoader(x_of(), 10, seed=7)
    resumed.load_state_dict(state)
    assert got + batches(resumed) == fresh
    assert got + into_ids(loader) == fresh


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("elastic", [False, True])
def test_a_read_error_near_the_end_on_one_thread_is_no_exactness_error_on_another(elastic):
    """Thread A reads batch 15, the last of next_into's first group, and fails after
    thread B handed out the last group whole (retired): the batch goes back to the
    epoch, not into that retired group, so B hands it out counted (no false
    ExactnessError) and a state taken meanwhile resumes exactly."""
    want = into_ids(DataLoader(x_of(), 10, seed=4, elastic=elastic))
    loader = DataLoader(x_of(), 10, seed=4, elastic=elastic)  # 20 batches: 16, then 4
    gate = wrap_reader(loader, GateReader)
    got = into_ids(loader, 15)
    gate.arm()
    errors = []

    def thread_a():
        try:
            into_ids(loader, 1)
        except OSError as e:
            errors.append(e)

    worker = threading.Thread(target=thread_a)
    worker.start()
    assert gate.entered.wait(60)
    got += into_ids(loader, 4)  # B: batches 16-19, the last group
    # a state retires it (an elastic one waits for A's read: on another thread)
    taker = threading.Thread(target=loader.state_dict)
    taker.start()
    gate.release(True)
    worker.join(60)
    taker.join(60)
    assert len(errors) == 1
    state = roundtrip(loader.state_dict())
    got += into_ids(loader)
    assert sorted(got) == sorted(want) and loader.epoch == 1
    assert state["batches_done"] == 19 and state["pending"] == [15]
    resumed = DataLoader(x_of(), 10, seed=4, elastic=elastic)
    if elastic:  # a batch whose read failed waits: refused at every shard count
        with pytest.raises(ValueError, match="failed"):
            resumed.load_state_dict(state)
        return
    resumed.load_state_dict(state)
    assert into_ids(resumed) == [want[15]]
    assert resumed.epoch == 1


@pytest.mark.usefixtures("each_backend")
@pytest.mark.parametrize("after", [1, 2, 3, 4])
def test_an_elastic_state_taken_while_a_thread_reads_loads_at_every_shard_count(after):
    """Elastic, two ranks in lockstep, next_into on two threads of rank 0: a state taken
    while batch 3's read is in flight and batch 4 was handed out (no read failed)
    counts batches 0-4 (it waits for the read), so it loads at any shard count and
    the ranks there hand out every later global batch once."""
    make = lambda s, i: DataLoader(x_of(), 10, seed=2, elastic=True, num_shards=s, shard_index=i)  # noqa: E731
    order = batches(make(1, 0))  # the epoch's global batches, in order
    loader = make(2, 0)
    gate = wrap_reader(loader, GateReader)
    into_ids(loader, 3)
    gate.arm()
    worker = threading.Thread(target=into_ids, args=(loader, 1))
    worker.start()
    assert gate.entered.wait(60)
    into_ids(loader, 1)  # batch 4, handed out while 3 is read
    states = []
    taker = threading.Thread(target=lambda: states.append(roundtrip(loader.state_dict())))
    taker.start()
    gate.release(False)
    worker.join(60)
    taker.join(60)
    (state,) = states
    assert "pending" not in state and state["global_batches_done"] == 10
    rest = []
    for i in range(after):
        rank = make(after, i)
        rank.load_state_dict(state)
        rest += batches(rank)
    assert sorted(rest) == sorted(order[10:])
