"""Small batches claimed a group at a time by ``iter()`` (epoch_iterator.py's EpochIterator;
from random access, read with one gather: random_access_epoch.take_group): fewer reads, the
same batches, and the state and give-back laws of batches handed out one by one, also
for states taken on another thread while a group is handed out without the lock."""

from __future__ import annotations

import re
import sys
import threading
from collections import deque
from concurrent.futures import Future

import numpy as np
import pytest
from helpers import chunks_of, collect, make_x, make_y
from laws import (
    FlakyReader,
    GateReader,
    check_abandoned_iterator,
    check_epoch,
    check_resume,
    check_retry,
    drain,
    reader_of,
    reads_through_read,
    roundtrip,
    wrap_reader,
)

from exactbatch import DataLoader
from exactbatch.feeds import random_access
from exactbatch.loader import epoch_iterator

N = 1000
GROUP_BATCHES = epoch_iterator._GROUP_BATCHES  # the default: 64 small batches a group


@pytest.fixture(autouse=True)
def groups_of_sixteen(monkeypatch):
    """The laws of groups hold at any size: these tests count in groups of 16 (64 only
    where a test says so), next_into's claims too."""
    monkeypatch.setattr(epoch_iterator, "_GROUP_BATCHES", 16)
    monkeypatch.setattr(epoch_iterator, "_LAZY_BATCHES", 16)


def x_of() -> np.ndarray:
    return np.arange(N, dtype=np.float64).reshape(-1, 1)


class CountReads:
    """Counts the loader's reader's reads and the rows of each."""

    def __init__(self, loader):
        self.sizes = []
        reader = reads_through_read(reader_of(loader))
        self.read, reader.read = reader.read, self

    def __call__(self, rows, out_x, out_y):
        self.sizes.append(out_x.shape[0])
        return self.read(rows, out_x, out_y)


def ids(batches) -> list[int]:
    return [int(v) for xb, _ in batches for v in xb[:, 0]]


@pytest.mark.parametrize("shuffle", [False, True])
def test_small_batches_are_read_sixty_four_at_a_time_with_the_same_batches(shuffle, monkeypatch):
    monkeypatch.setattr(epoch_iterator, "_GROUP_BATCHES", GROUP_BATCHES)
    assert GROUP_BATCHES == 64
    loader = DataLoader(x_of(), 10, shuffle=shuffle, seed=3)
    reads = CountReads(loader)
    got = list(iter(loader))
    assert reads.sizes == [640, 360]  # 100 batches: 2 groups
    want = DataLoader(x_of(), 10, shuffle=shuffle, seed=3)
    want._groups = (1, 1)  # one by one
    reads = CountReads(want)
    expected = list(iter(want))
    assert reads.sizes == [10] * 100
    assert len(got) == len(expected) == 100
    for (a, b), (c, e) in zip(got, expected, strict=True):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, e)
    assert got[3][0].base is got[4][0].base  # views of one group's arrays


def test_prefetch_reads_small_batches_in_larger_groups():
    """The prefetch thread reads groups of up to 64 batches and 4 MiB (a hand-off between
    threads costs as much as a batch of 1024 rows), prefetch groups ahead; the batches are
    those read one by one, and each counts only when handed out."""
    loader = DataLoader(x_of(), 10, shuffle=True, seed=3, prefetch=2)
    reads = CountReads(loader)
    it = iter(loader)
    first = next(it)
    assert loader.state_dict()["batches_done"] == 1
    got = [first, *it]
    assert reads.sizes == [640, 360]
    wide = DataLoader(np.zeros((N, 1024)), 32, prefetch=1)  # 256 KiB batches: 16 in 4 MiB
    reads = CountReads(wide)
    assert sum(1 for _ in wide) == 32 and reads.sizes == [512, 488]
    huge = DataLoader(np.zeros((N, 1024)), 600, prefetch=1)  # 4.7 MiB batches: one a read
    reads = CountReads(huge)
    assert sum(1 for _ in huge) == 2 and reads.sizes == [600, 400]
    want = DataLoader(x_of(), 10, shuffle=True, seed=3)
    want._groups = (1, 1)
    assert ids(got) == ids(want)


def test_large_batches_and_next_into_read_batch_by_batch():
    wide = np.zeros((N, 1024))  # 8 KiB rows: 64 a batch is 512 KiB, one batch a read
    loader = DataLoader(wide, 64)
    reads = CountReads(loader)
    for _ in zip(range(3), loader, strict=False):
        pass
    assert reads.sizes == [64, 64, 64]
    it = iter(loader)  # claimed unread, _LAZY_BATCHES at a time (16 here), read one by one
    next(it)
    assert reads.sizes[3:] == [64] and len(it._current.jobs) == 16
    assert loader.state_dict()["batches_done"] == 1
    assert sum(1 for _ in it) == len(loader) - 1 and reads.sizes[3:] == [64] * 15 + [40]
    half = DataLoader(wide, 32)  # 256 KiB batches: two a read
    reads = CountReads(half)
    for _ in zip(range(3), half, strict=False):
        pass
    assert reads.sizes == [64, 64]
    pair = DataLoader((np.zeros((N, 1024)), np.zeros((N, 512))), 32)  # labels count too:
    reads = CountReads(pair)  # 384 KiB batches, one a read
    for _ in zip(range(3), pair, strict=False):
        pass
    assert reads.sizes == [32, 32, 32]
    small = DataLoader(x_of(), 10)
    reads = CountReads(small)
    bx, by = np.empty((10, 1)), np.empty((10, 0))
    small.next_into(bx, by)
    assert reads.sizes[-1] == 10


def test_a_state_mid_group_counts_only_the_batches_handed_out():
    loader = DataLoader(x_of(), 10, shuffle=True, seed=1)
    it = iter(loader)
    first = [next(it) for _ in range(3)]  # one group of 16 read, 3 handed out
    state = loader.state_dict()
    assert state["batches_done"] == 3 and not state.get("pending")
    restored = DataLoader(x_of(), 10, shuffle=True, seed=1)
    restored.load_state_dict(state)
    rest = list(iter(restored))
    assert sorted(ids(first) + ids(rest)) == list(range(N))
    more = [next(it) for _ in range(20)]  # the live iterator goes on, into the next group
    assert ids(more) == ids(rest[:20])


def test_leaving_a_group_midway_gives_its_batches_back():
    """The batches read ahead and not handed out go back to the loader: next_into
    hands them out next, and the epoch is exact (its ledger checked at the end)."""
    loader = DataLoader(x_of(), 10, shuffle=True, seed=2)
    it = iter(loader)
    got = ids([next(it) for _ in range(5)])
    it.close()
    assert loader.state_dict()["batches_done"] == 5
    bx, by = np.empty((10, 1)), np.empty((10, 0))
    while r := loader.next_into(bx, by):
        got += [int(v) for v in bx[:r, 0]]
    assert sorted(got) == list(range(N))
    assert got == ids(DataLoader(x_of(), 10, shuffle=True, seed=2))


def into_ids(loader, calls=None) -> list[list[int]]:
    """The ids of each batch ``next_into`` writes, ``calls`` times or until it returns 0."""
    bx, by, out = np.empty((loader.batch_size, 1)), np.empty((loader.batch_size, 0)), []
    while (calls is None or len(out) < calls) and (r := loader.next_into(bx, by)):
        out.append([int(v) for v in bx[:r, 0]])
    return out


def test_next_into_takes_the_next_batch_whichever_thread_calls():
    """next_into claims small batches a group at a time into one queue all its callers
    share: calls made in turn from different threads still get batch 0, 1, 2... as
    one thread's calls would, and a state after them counts only those handed out."""
    want = into_ids(DataLoader(x_of(), 10, shuffle=True, seed=4))
    loader, got = DataLoader(x_of(), 10, shuffle=True, seed=4), []
    for k in range(40):  # 2.5 groups
        worker = threading.Thread(target=lambda: got.extend(into_ids(loader, 1)))
        worker.start()
        worker.join()
        if k == 20:
            assert len(loader._holder.group.queue) == 11  # the group of 16 claimed at batch 16
    assert got == want[:40]
    state = loader.state_dict()
    assert state["batches_done"] == 40 and not state.get("pending")
    restored = DataLoader(x_of(), 10, shuffle=True, seed=4)
    restored.load_state_dict(state)
    assert into_ids(restored) == want[40:]
    assert into_ids(loader) == want[40:]  # the live loader goes on from its group


class _PoppedMeanwhile(deque):
    """An empty group's queue that a caller's first look finds not empty: another thread
    popped its last batch between that look and the caller's pop."""

    looks = 0

    def __bool__(self):
        self.looks += 1
        return self.looks == 1 or len(self) > 0


def test_next_into_claims_the_next_group_when_its_last_batch_is_popped_meanwhile():
    """A call of next_into whose claim, under the lock, loses the group's last batch to
    another thread (popped without the lock) claims the next group: it hands out the
    next batch, and none is lost or handed twice."""
    want = into_ids(DataLoader(x_of(), 10, shuffle=True, seed=4))
    loader = DataLoader(x_of(), 10, shuffle=True, seed=4)
    assert into_ids(loader, 16) == want[:16]  # the first group of 16, handed out
    loader._holder.group.queue = racy = _PoppedMeanwhile()
    assert into_ids(loader) == want[16:]
    # the look that lost the race, then the one that claimed: into the same group, all
    # handed out, refilled in place (Cursor._refill), whose queue each later claim looks at
    assert racy.looks >= 2


def test_a_failed_read_of_a_groups_last_batch_after_next_into_moved_on_is_next_again():
    """Thread A pops the last batch of next_into's group and reads it; thread B finds the
    group empty and claims the next; A's read raises. The batch is next again - B's next
    call reads it - and the epoch hands out every batch once (it was left in the old
    group, which no claim takes from, and the epoch ended one batch short, unchecked)."""
    want = into_ids(DataLoader(x_of(), 10, shuffle=True, seed=4))
    loader = DataLoader(x_of(), 10, shuffle=True, seed=4)
    gate = wrap_reader(loader, GateReader)
    got = into_ids(loader, 15)  # batch 15, the group's last, left
    gate.arm()
    errors = []

    def thread_a():
        try:
            into_ids(loader, 1)
        except OSError as e:
            errors.append(e)

    worker = threading.Thread(target=thread_a)
    worker.start()
    assert gate.entered.wait(60)  # A reads batch 15, held at the gate
    got += into_ids(loader, 1)  # B: batch 16, from the next group
    gate.release(True)
    worker.join(60)
    assert len(errors) == 1
    got += into_ids(loader)
    assert got == want[:15] + [want[16], want[15]] + want[17:]
    assert loader.state_dict()["epoch"] == 1


def test_a_failed_read_after_the_loader_moved_on_stays_with_its_epoch():
    """Thread A reads a batch of next_into's group; meanwhile the loader moves to epoch 1
    and next_into claims there; A's read raises: its batch belongs to epoch 0 and is
    not handed out in epoch 1, which hands out its own batches, once each."""
    want = into_ids(DataLoader(x_of(), 10, shuffle=True, seed=4))
    loader = DataLoader(x_of(), 10, shuffle=True, seed=4)
    gate = wrap_reader(loader, GateReader)
    assert into_ids(loader, 3) == want[:3]
    gate.arm()
    errors = []

    def thread_a():
        try:
            into_ids(loader, 1)
        except OSError as e:
            errors.append(e)

    worker = threading.Thread(target=thread_a)
    worker.start()
    assert gate.entered.wait(60)  # A reads batch 3 of epoch 0, held at the gate
    loader.set_epoch(1)
    got = into_ids(loader, 1)  # epoch 1's group of 16 claimed, batch 0 handed out
    gate.release(True)
    worker.join(60)
    assert len(errors) == 1
    got += into_ids(loader)
    ref = DataLoader(x_of(), 10, shuffle=True, seed=4)
    ref.set_epoch(1)
    assert got == into_ids(ref)


def test_next_into_takes_over_ready_batches_behind_a_batch_being_read():
    """A claim looks past a group whose last batch is being read (on another thread) to
    the batches other claimants hold ready: next_into takes over the iterator's next
    batch, not one claimed after it."""
    want = into_ids(DataLoader(x_of(), 10, shuffle=True, seed=4))
    loader = DataLoader(x_of(), 10, shuffle=True, seed=4)
    gate = wrap_reader(loader, GateReader)
    it = iter(loader)
    assert into_ids(loader, 15) == want[:15]  # next_into's group of 16: batch 15 left
    gate.arm()
    got_a = []
    worker = threading.Thread(target=lambda: got_a.extend(into_ids(loader, 1)))
    worker.start()
    try:
        assert gate.entered.wait(60)  # thread A reads batch 15, held at the gate
        assert ids([next(it)]) == want[16]  # the iterator's group: batches 16-31
        assert into_ids(loader, 1) == [want[17]]  # taken over from the iterator
    finally:
        gate.release(False)
        worker.join(60)
    assert got_a == [want[15]]


@pytest.mark.parametrize("move", ["reset", "iter", "set_epoch", "load_state_dict"])
def test_next_into_drops_its_group_when_the_loader_moves_on(move):
    """Batches next_into claimed ahead (a group) belong to their epoch: once the loader
    moves to another position, next_into hands out that position's batches, and the
    epoch's ledger checks."""
    loader = DataLoader(x_of(), 10, shuffle=True, seed=5)
    state = loader.state_dict()
    into_ids(loader, 3)  # 3 handed out, 13 held
    if move == "reset":
        loader.reset()
    elif move == "iter":
        iter(loader)
    elif move == "set_epoch":
        loader.set_epoch(1)
    else:
        loader.load_state_dict(state)
    epoch = 0 if move == "load_state_dict" else 1
    want = DataLoader(x_of(), 10, shuffle=True, seed=5)
    want.set_epoch(epoch)
    assert into_ids(loader) == into_ids(want)
    assert loader.state_dict()["epoch"] == epoch + 1


def test_a_thread_that_stops_mid_group_leaves_its_batches_to_the_others():
    """A thread that stops calling next_into inside a group holds no batch: the group
    is the loader's, and another thread's calls hand out the rest, each row once."""
    loader = DataLoader(x_of(), 10, shuffle=True, seed=6)
    first = []
    worker = threading.Thread(target=lambda: first.extend(into_ids(loader, 3)))
    worker.start()
    worker.join()
    rest = into_ids(loader)
    assert len(first) == 3 and len(rest) == 97
    assert sorted(v for batch in first + rest for v in batch) == list(range(N))


def test_a_stale_iterator_with_a_group_read_ahead_raises():
    loader = DataLoader(x_of(), 10)
    old = iter(loader)
    next(old)
    new = iter(loader)  # the next epoch: the old iterator is stale
    with pytest.raises(RuntimeError, match="stale"):
        next(old)
    assert len(list(new)) == 100


@pytest.mark.parametrize("prefetch", [0, 2])
def test_peek_reads_ahead_without_handing_out(prefetch):
    """peek(k): the next k batches (fewer at the end), counted only when next() hands them
    out, the same arrays; closing the iterator gives them back; k must be an int >= 0."""
    loader = DataLoader(x_of(), 100, shuffle=True, seed=2, prefetch=prefetch)  # 10 batches
    want = DataLoader(x_of(), 100, shuffle=True, seed=2)
    want._groups = (1, 1)
    want = [ids([b]) for b in want]
    it = iter(loader)
    assert it.peek(0) == [] and loader.state_dict()["batches_done"] == 0
    ahead = it.peek(3)
    assert [ids([b]) for b in ahead] == want[:3]
    assert loader.state_dict()["batches_done"] == 0
    first = next(it)
    assert first[0] is ahead[0][0] and loader.state_dict()["batches_done"] == 1
    assert [ids([b]) for b in it.peek(20)] == want[1:]  # fewer at the epoch's end
    it.close()  # the 9 read ahead go back: the loader hands them out next
    bx, by = np.empty((100, 1)), np.empty((100, 0))
    assert loader.next_into(bx, by) == 100 and ids([(bx, by)]) == want[1]
    for bad, error in ((-1, "k must be >= 0; got k=-1"), (1.5, "k must be an int; got 1.5")):
        with pytest.raises((TypeError, ValueError), match=f"^{re.escape(error)}$"):
            iter(loader).peek(bad)
    with pytest.raises(TypeError, match="^k must be an int; got '2'$"):
        iter(loader).peek("2")


def test_peek_reads_only_the_groups_it_needs():
    """peek(k) reads nothing when k batches are ready (none for k = 0), else the next
    groups of 16 small batches (at least the batches missing), and hands nothing out."""
    loader = DataLoader(x_of(), 10, shuffle=False)  # 100 batches of 80 bytes: groups of 16
    reads = CountReads(loader)
    it = iter(loader)
    assert it.peek(0) == [] and reads.sizes == []
    first = next(it)
    assert reads.sizes == [160]
    assert len(it.peek(15)) == 15 and reads.sizes == [160]  # the group holds them
    assert len(it.peek(20)) == 20 and reads.sizes == [160, 160]  # 5 more: one group
    assert len(it.peek(60)) == 60 and reads.sizes == [160, 160, 290]  # 29 more at once
    assert ids([first]) + ids(it.peek(99)) == list(range(N))
    assert loader.state_dict()["batches_done"] == 1


def test_peek_reads_the_batches_an_iterator_takes_over_from_next_into():
    """next_into's group holds batches claimed and not read (read at hand-out): an
    iterator of the same epoch takes them over, and peek reads them."""
    loader = DataLoader(x_of(), 10, shuffle=True, seed=5)
    want = [ids([b]) for b in DataLoader(x_of(), 10, shuffle=True, seed=5)]
    reads = CountReads(loader)
    it = iter(loader)
    bx, by = np.empty((10, 1)), np.empty((10, 0))
    assert loader.next_into(bx, by) == 10 and ids([(bx, by)]) == want[0]
    ahead = it.peek(3)
    assert [ids([b]) for b in ahead] == want[1:4]
    # its group: the 15 taken over, and 1 batch claimed and read now; peek reads 3
    assert reads.sizes == [10] * 5
    assert [ids([next(it)]) for _ in range(3)] == want[1:4]


def test_a_failed_read_of_a_batch_taken_over_from_next_into_is_read_again():
    """A batch an iterator took over from next_into's group is read at its hand-out: a
    read that raises there leaves it next, and the next call reads it again."""
    loader = DataLoader(x_of(), 10, shuffle=True, seed=5)
    want = [ids([b]) for b in DataLoader(x_of(), 10, shuffle=True, seed=5)]
    flaky = wrap_reader(loader, FlakyReader)
    it = iter(loader)
    bx, by = np.empty((10, 1)), np.empty((10, 0))
    assert loader.next_into(bx, by) == 10  # its group: 16 batches claimed, 1 read
    flaky.arm(1)  # the iterator's one fresh batch reads; then batch 1, taken over, fails
    with pytest.raises(OSError, match="injected"):
        next(it)
    assert flaky.raised == 1
    assert [ids([next(it)]) for _ in range(99)] == want[1:]


def _stream(shuffle: bool, prefetch: int) -> DataLoader:
    """A stream of 1000 traceable rows in chunks of 70, read by a factory, so that its
    widths are unknown until the first pass."""
    parts = [x_of()[a : a + 70] for a in range(0, N, 70)]
    return DataLoader(
        lambda: iter(parts), 10, shuffle=shuffle, seed=4, prefetch=prefetch, total_size=N
    )


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_stream_hands_its_batches_from_the_prefetch_thread_in_groups(shuffle):
    """Its prefetch thread claims a stream's batches and hands them over up to 64 (and
    4 MiB) at a time, not one a hand-off; iter() without prefetch claims up to 16 at a time
    (one group of the stream's pass at most: stream_epoch's claim_many).
    The batches are those of the loop without prefetch, each counted when handed out."""
    loader = _stream(shuffle, prefetch=2)
    assert loader._groups is None  # the widths are unknown before the first pass
    claims = []
    claim = loader._cursor.claim

    def counted(owner, count, *rest):
        group, fresh = claim(owner, count, *rest)
        claims.append(len(fresh))
        return group, fresh

    loader._cursor.claim = counted
    it = iter(loader)
    first = next(it)
    assert loader.state_dict()["batches_done"] == 1
    got = [first, *it]
    assert claims[:3] == [1, 64, 35] and not any(claims[3:])  # sized once read
    assert loader.state_dict()["batches_done"] == 0  # the epoch's end: the next one's start
    plain = _stream(shuffle, prefetch=0)
    want = list(iter(plain))
    assert ids(got) == ids(want) and len(got) == 100
    assert sorted(ids(got)) == list(range(N))
    claims.clear()
    assert ids(iter(loader)) == ids(iter(plain))  # the next epochs: sized from the start
    assert loader._groups == plain._groups == (16, 64) and claims[:2] == [64, 36]


@pytest.fixture(params=["whole order", "blocks"])
def order_path(request, monkeypatch):
    """Shuffled epochs with their whole order computed at once (consecutive batches are
    then claimed and read as one slice of it), or never (batches map blocks of
    positions, and a group's rows are joined)."""
    if request.param == "blocks":
        monkeypatch.setattr(random_access, "_WHOLE_ROWS", 0)
    else:

        def at_once(compute):
            done = Future()
            done.set_result(compute())
            return done

        monkeypatch.setattr(random_access, "_in_background", at_once)
    return request.param


GROUP_CASES = [  # (shards, drop_last, even_batches, elastic): n = 1000, batch 7 (uneven)
    (1, False, False, False),
    (1, True, False, False),
    (3, False, False, False),
    (3, True, True, False),
    (3, False, False, True),
    (3, False, True, True),
]


def _grouped(shards, drop_last, even, elastic, s, prefetch=0, dtype=np.float64):
    x, y = make_x(np.arange(N), 3), make_y(np.arange(N), 1)
    return DataLoader(
        (x, y), 7, shuffle=True, seed=5, drop_last=drop_last, num_shards=shards,
        shard_index=s, even_batches=even, elastic=elastic, prefetch=prefetch, dtype=dtype,
    )  # fmt: skip


@pytest.mark.parametrize("case", GROUP_CASES)
@pytest.mark.parametrize("via", ["iter", "prefetch", "peek"])
def test_groups_hand_out_the_batches_claimed_one_by_one(order_path, case, via):
    """The epoch law over every shard, and the very batches of a loader claiming and
    reading one batch at a time, two epochs running (the ledger is checked at each end)."""
    shards, drop_last, even, elastic = case
    got, want = [], []
    for s in range(shards):
        loader = _grouped(*case, s, prefetch=2 if via == "prefetch" else 0)
        one = _grouped(*case, s)
        one._groups = (1, 1)
        way = "peek" if via == "peek" else "iter"
        got.append([drain(loader, way, 3, 1) for _ in range(2)])
        want.append([drain(one, "iter", 3, 1) for _ in range(2)])
    assert got == want
    for e in range(2):
        check_epoch(
            [epochs[e] for epochs in got], n=N, batch_size=7, drop_last=drop_last,
            shuffle=True, even_batches=even, elastic=elastic,
        )  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_group_of_one_slice_of_the_whole_order_is_views_of_one_gather(order_path, dtype):
    loader = _grouped(1, False, False, False, 0, dtype=dtype)
    reads = CountReads(loader)
    batches = list(loader)
    assert reads.sizes == [112] * 8 + [104]  # 143 batches of 7 (the last of 6), 16 a group
    assert batches[1][0].base is batches[2][0].base and batches[0][0].dtype == dtype
    assert [len(xb) for xb, _ in batches] == [7] * 142 + [6]


@pytest.mark.parametrize("via", ["iter", "next_into"])
@pytest.mark.parametrize("at", [0, 5, 16, 20])
def test_a_read_error_in_a_group_gives_every_batch_of_it_once(order_path, at, via):
    """The read-error law, the read failing at a group's first batch, inside one, at the
    next group's first: the caller who goes on gets the epoch's batches exactly, the
    failed one by the next call."""

    def make():
        return _grouped(1, False, False, False, 0)

    want = drain(make(), "iter", 3, 1)
    loader = make()
    flaky = wrap_reader(loader, FlakyReader)
    flaky.batch = 7
    check_retry(loader, lambda: flaky.arm(at), want, via, 3, 1, make)


def test_a_state_taken_inside_a_group_resumes_at_the_next_batch(order_path):
    """The resume law, cut inside groups and at their edges, under contiguous sharding."""
    check_resume(
        lambda: _grouped(3, True, True, False, 1), 3, 1, epoch=1, cuts=[0, 1, 15, 16, 17, 40, 47]
    )


def test_a_group_of_batches_not_consecutive_is_read_as_its_own_rows(order_path):
    """Batches claimed together need not be consecutive (a thread's next_into holds one
    between batches given back and fresh ones): each still gets its own rows."""
    loader = _grouped(1, False, False, False, 0)
    cursor = loader._cursor
    cursor.next_epoch()
    owner = cursor.current
    jobs = [owner.claim() for _ in range(20)]
    for group in (jobs[3:9] + jobs[10:14], jobs[:16], [jobs[5], jobs[4]]):
        want = [job.take() for job in group]
        got = owner.take_group(group)
        assert len(got) == len(want)
        for (a, b), (c, e) in zip(got, want, strict=True):
            np.testing.assert_array_equal(a, c)
            np.testing.assert_array_equal(b, e)


def ids_per_batch(loader) -> list[list[int]]:
    """One epoch of ``loader`` (rows of one column holding their ids), batch by batch."""
    return [[int(v) for v in xb[:, 0]] for xb, _ in loader]


def _traced(kind: str) -> DataLoader:
    """30,000 traceable rows in batches of 3, shuffled: from memory, or a stream of
    chunks of 700 through a buffer of 2,000 rows."""
    x = np.arange(30_000, dtype=np.float64).reshape(-1, 1)
    if kind == "memory":
        return DataLoader(x, 3, shuffle=True, seed=6)
    chunks = [x[a : a + 700] for a in range(0, len(x), 700)]
    return DataLoader(chunks, 3, shuffle=True, seed=6, total_size=len(x), buffer_size=2000)


@pytest.mark.parametrize("kind", ["memory", "stream"])
def test_states_taken_from_another_thread_mid_group_resume_exactly(kind):
    """iter() hands out a group's batches without the lock, each counted at its claim;
    states taken meanwhile from another thread (the GIL switching every few
    microseconds) count only those handed out: each resumes, in a fresh loader, at
    exactly the batches after it, and its ledger checks at the epoch's end."""
    want = ids_per_batch(_traced(kind))
    loader, got, states, errors = _traced(kind), [], [], []
    done = threading.Event()

    def consume():
        try:
            got.extend(ids_per_batch(loader))
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
        finally:
            done.set()

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        worker = threading.Thread(target=consume, daemon=True)
        worker.start()
        while not done.is_set():
            states.append(roundtrip(loader.state_dict()))
        worker.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not errors and got == want
    mid = [s for s in states if s["epoch"] == 0 and 0 < s["batches_done"] < len(want)]
    assert len({s["batches_done"] for s in mid}) >= 5, "too few states taken mid-epoch"
    for state in mid[:: max(1, len(mid) // 12)]:
        resumed = _traced(kind)
        resumed.load_state_dict(state)
        assert ids_per_batch(resumed) == want[state["batches_done"] :]


@pytest.mark.parametrize("via", ["next_into", "iter"])
def test_the_ledger_a_state_takes_is_a_copy(via):
    """The ledger in a snapshot is a copy made under the lock: batches handed out after
    it (by another thread, before state_dict() has packed it) leave it as it was."""
    loader = DataLoader(x_of(), 10, shuffle=True, seed=1)
    bx, by = np.empty((10, 1)), np.empty((10, 0))
    it = iter(loader)
    for _ in range(16):  # a whole group handed out: the iterator holds none
        next(it) if via == "iter" else loader.next_into(bx, by)
    ledger = loader._cursor.snapshot().ledger
    before = (ledger.rows, ledger.digest)
    for _ in range(20):
        next(it) if via == "iter" else loader.next_into(bx, by)
    assert (ledger.rows, ledger.digest) == before and before[0] == 160


def test_peek_of_large_batches_claimed_unread_hands_out_the_same_arrays():
    """Batches over 256 KiB are claimed a prefetch group at a time and read as they are
    handed out; peek() reads them ahead once: next() hands out those very arrays, in
    order, each read once, and the epoch is the one read batch by batch."""
    wide = np.arange(N * 1024, dtype=np.float64).reshape(N, 1024)  # 512 KiB batches of 64
    loader = DataLoader(wide, 64, shuffle=True, seed=6)
    reads = CountReads(loader)
    it = iter(loader)
    first = next(it)
    ahead = it.peek(3)
    assert len(reads.sizes) == 4
    got = [first, *(next(it) for _ in range(3))]
    assert all(a[0] is b[0] for a, b in zip(ahead, got[1:], strict=True))
    assert len(reads.sizes) == 4  # read once, by peek
    got += list(it)
    want = DataLoader(wide, 64, shuffle=True, seed=6)
    want._groups = (1, 1)
    expected = list(iter(want))
    assert [g[0][:, 0].tolist() for g in got] == [e[0][:, 0].tolist() for e in expected]


def test_a_stream_in_order_is_claimed_a_batch_at_a_time_into_one_group_refilled():
    """A stream in order makes one batch at a time, so a claim takes one (a claim of more
    read the stream ahead and held their batches: issue 42); next_into's group, all
    handed out, is refilled in place (Cursor._refill), not replaced, and a state counts
    exactly the batches handed out."""
    n, b = 200, 10
    x = np.arange(n, dtype=np.float64).reshape(n, 1)
    chunks = [x[a : a + 30] for a in range(0, n, 30)]
    loader = DataLoader(chunks, b, shuffle=False, total_size=n)
    assert into_ids(loader, 1) == [list(range(b))]
    group = loader._holder.group
    for k in range(1, 12):
        assert into_ids(loader, 1) == [list(range(k * b, (k + 1) * b))]
        assert loader._holder.group is group and len(group.jobs) == 1
    assert loader.state_dict()["batches_done"] == 12
    assert into_ids(loader) == [list(range(a, a + b)) for a in range(12 * b, n, b)]


def _gathered_stream() -> DataLoader:
    """A shuffled stream of 1000 rows whose buffer's gathers make several batches at once
    (256 rows a fill, 32 a gather: 8 batches of 4), so that iter()'s claim takes 7 - once
    a pass has learnt its widths (before, it claims one at a time): epoch 0 again."""
    loader = DataLoader(chunks_of([50] * 20), 4, seed=3, total_size=1000, buffer_size=256)
    collect(loader)
    loader.set_epoch(0)
    return loader


@pytest.mark.parametrize("keep", [True, False], ids=["kept", "dropped"])
@pytest.mark.parametrize("k", [1, 3])
def test_a_stream_iterator_left_mid_gather_never_ends_the_epoch_early(k, keep):
    """laws.check_abandoned_iterator where its premise holds for a stream without
    prefetch: the iterator is left holding batches it claimed and has not handed out
    (a claim takes one group of a stream's pass at most: here a gather's), and
    next_into hands them out first. (A stream in order, claimed a batch at a time, and
    the law matrix's small buffers, one batch a gather, leave none: issue 42.)"""
    loader = _gathered_stream()
    it = iter(loader)
    for _ in range(k):
        next(it)
    assert sum(len(g.queue) for g in loader._cursor._live) == 7 - k  # (the premise)
    it.close()
    want = collect(_gathered_stream(), 3, 1)
    check_abandoned_iterator(_gathered_stream, want, k, keep, 3, 1)
