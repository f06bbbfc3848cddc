"""Exactness across combinations: the epoch ledger, read errors, states and streams.

Each test here pins one way a combination of features broke exactness
silently (issue 12), and the ledger that now catches the class: every
epoch's row ids are checked against what it promised when it ends.
The laws themselves, over every source and option, are in test_law_matrix.py.
"""

from __future__ import annotations

import json
import tracemalloc
import warnings

import numpy as np
import pytest
from helpers import chunks_of, ids, wait_until_prefetched, write_parquet
from laws import FlakyFactory, reader_of, reads_through_read

import exactbatch.loader.cursor
from exactbatch import (
    DataLoader,
    ExactnessError,
    TotalSizeWarning,
    ndf_blocks,
    open_ndf,
    parquet_source,
    save_ndf,
)
from exactbatch.batching.buffer import DEFAULT_BUFFER_BYTES
from exactbatch.loader.lineage import state_id
from exactbatch.loader.state import STATE_VERSION
from exactbatch.order.digest import (
    RangeDigests,
    Tally,
    batch_digests,
    range_digest,
    rows_digest,
)

N = 100


def rows_of(loader) -> list[int]:
    return [r for xb, _ in loader for r in ids(xb)]


def roundtrip(state: dict) -> dict:
    return json.loads(json.dumps(state))


def x_of(n: int = N) -> np.ndarray:
    return np.arange(n, dtype=np.float64).reshape(-1, 1)


# -- the digest ---


@pytest.mark.parametrize("start", [0, 1, 7, 2**31 - 3, 10**12])
@pytest.mark.parametrize("size", [0, 1, 5, 64])
def test_range_digest_is_the_digest_of_the_rows(start, size):
    """The closed form of a run of rows equals the sum of their hashes, and so does the
    fast form for runs of one length."""
    rows = np.arange(start, start + size, dtype=np.int64)
    assert range_digest(start, start + size) == rows_digest(rows)
    assert RangeDigests(size or 1)(start, start + size) == rows_digest(rows)
    assert rows_digest(slice(start, start + size)) == rows_digest(rows)


def test_digest_is_order_independent_and_tells_sets_apart():
    rng = np.random.default_rng(0)
    rows = rng.permutation(1000)
    assert rows_digest(rows) == rows_digest(np.sort(rows)) == range_digest(0, 1000)
    repeated = rows.copy()
    repeated[3] = repeated[4]  # one row twice, one missing: same count, other digest
    assert rows_digest(repeated) != rows_digest(rows)
    digests = batch_digests(rows, 64)
    assert len(digests) == 16
    assert int(digests.sum(dtype=np.uint64)) == range_digest(0, 1000)
    assert int(digests[-1]) == rows_digest(rows[960:])


def test_tally_adds_and_subtracts():
    t = Tally()
    t.add_range(0, 10)
    t.add(5, rows_digest(np.arange(10, 15)))
    whole = Tally()
    whole.add_range(0, 15)
    assert t == whole
    part = Tally()
    part.add_range(10, 15)
    left = whole.minus(part)
    ten = Tally()
    ten.add_range(0, 10)
    assert left == ten and left != whole


# -- the ledger catches what a state cannot say ---


def _stream(n=N, size=10):
    return [x_of(n)[i : i + size] for i in range(0, n, size)]


SOURCES = {
    "array": lambda: x_of(),
    "stream": lambda: _stream(),
}


@pytest.mark.parametrize("kind", sorted(SOURCES))
@pytest.mark.parametrize(
    "forge",
    [
        pytest.param(lambda s: s.update(batches_done=s["batches_done"] + 1), id="skip-one"),
        pytest.param(lambda s: s.update(batches_done=s["batches_done"] - 1), id="repeat-one"),
        pytest.param(lambda s: s.update(seed=s["seed"] + 1), id="other-seed"),
        pytest.param(lambda s: s.update(epoch=s["epoch"] + 1), id="other-epoch"),
        pytest.param(
            lambda s: s["ledger"].update(digest=f"{int(s['ledger']['digest'], 16) ^ 1:016x}"),
            id="digest",
        ),
        pytest.param(lambda s: s["ledger"].update(rows=s["ledger"]["rows"] + 1), id="rows"),
    ],
)
@pytest.mark.parametrize("via", ["iter", "next_into"])
def test_a_forged_state_is_an_exactness_error_when_the_epoch_ends(kind, forge, via):
    loader = DataLoader(SOURCES[kind](), 7, seed=3, total_size=N)
    it = iter(loader)
    for _ in range(5):
        next(it)
    state = roundtrip(loader.state_dict())
    forge(state)
    # (a loader of another seed refuses the state at load: this one has the forged seed)
    restored = DataLoader(SOURCES[kind](), 7, seed=state["seed"], total_size=N)
    restored.load_state_dict(state)
    bx, by = np.empty((7, 1)), np.empty((7, 0))
    with pytest.raises(ExactnessError, match=r"epoch \d+ of shard 0 of 1: handed out \d+ rows"):
        if via == "iter":
            list(restored)
        while restored.next_into(bx, by):
            pass


@pytest.fixture
def checked(monkeypatch):
    """``(epoch, rows handed out)`` of each ledger check, in order."""
    out = []
    real = exactbatch.loader.cursor.check_ledger

    def spy(handed, promised, **where):
        out.append((where["epoch"], handed.rows))
        real(handed, promised, **where)

    monkeypatch.setattr(exactbatch.loader.cursor, "check_ledger", spy)
    return out


def test_the_ledger_is_checked_at_the_end_of_every_epoch(checked):
    """Not only the first epoch's or a resumed one's: each epoch's end checks its ledger,
    whether the next epoch comes from iter(), set_epoch() or reset()."""
    loader = DataLoader(x_of(), 7, seed=3)
    rows_of(loader)
    rows_of(loader)
    loader.set_epoch(5)
    rows_of(loader)
    loader.reset()
    rows_of(loader)
    assert checked == [(0, N), (1, N), (5, N), (6, N)]


@pytest.mark.parametrize("prefetch", [0, 2])
def test_the_ledger_is_checked_as_the_epochs_last_batch_is_handed_out(checked, prefetch):
    """Once a claim has found nothing left (here peek, reading to the epoch's end), the
    hand-out of the last batch checks the ledger: no further call is needed for it."""
    loader = DataLoader(x_of(), 7, seed=3, prefetch=prefetch)  # 15 batches
    it = iter(loader)
    assert len(it.peek(16)) == 15
    for _ in range(14):
        next(it)
    assert checked == []
    next(it)
    assert checked == [(0, N)]


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_an_honest_resume_passes_the_ledger(kind):
    loader = DataLoader(SOURCES[kind](), 7, seed=3, total_size=N)
    it = iter(loader)
    first = [ids(next(it)[0]) for _ in range(5)]
    restored = DataLoader(SOURCES[kind](), 7, seed=3, total_size=N)
    restored.load_state_dict(roundtrip(loader.state_dict()))
    rest = rows_of(restored)
    assert sorted(sum(first, []) + rest) == list(range(N))
    assert restored.state_dict()["ledger"] == {"rows": 0, "digest": "0" * 16}


def test_exactness_error_is_a_runtime_error_exported():
    import exactbatch

    assert issubclass(ExactnessError, RuntimeError)
    assert "ExactnessError" in exactbatch.__all__


def test_a_version_1_state_still_loads_and_is_not_checked():
    loader = DataLoader(x_of(), 7, seed=3)
    it = iter(loader)
    got = [r for _ in range(4) for r in ids(next(it)[0])]
    state = {
        k: v
        for k, v in loader.state_dict().items()
        if k in ("seed", "epoch", "batches_done", "batch_size", "shuffle", "drop_last")
        or k in ("even_batches", "elastic", "total_size", "num_shards", "shard_index", "n")
    }
    state["version"] = 1
    restored = DataLoader(x_of(), 7, seed=3)
    restored.load_state_dict(state)
    assert sorted(got + rows_of(restored)) == list(range(N))
    state["batches_done"] += 1  # unchecked: a version-1 state carries no ledger
    again = DataLoader(x_of(), 7, seed=3)
    again.load_state_dict(state)
    assert len(rows_of(again)) == N - 35


def version_1_state(loader) -> dict:
    """``loader``'s state as version 1 wrote it: no source kind, widths, ledger or pending."""
    state = {
        k: v for k, v in loader.state_dict().items() if k not in ("source", "d", "l", "ledger")
    }
    state["version"] = 1
    return state


def test_a_version_1_state_is_checked_against_the_settings_it_recorded():
    """Version 1 recorded no source kind; the settings it did record are still checked."""
    state = version_1_state(DataLoader(x_of(), 7, seed=3))
    with pytest.raises(ValueError, match="state was taken with shuffle=True, this loader has"):
        DataLoader(x_of(), 7, seed=3, shuffle=False).load_state_dict(state)


def test_a_version_1_state_at_batch_0_is_checked_and_one_at_the_end_hands_out_nothing():
    """A version-1 state at the start of an epoch resumes with a checked ledger (nothing was
    handed out); one at the end of an epoch (batches_done = every batch) is legal and
    hands out no batch."""
    loader = DataLoader(x_of(), 7, seed=3)
    state = version_1_state(loader)
    resumed = DataLoader(x_of(), 7, seed=3)
    resumed.load_state_dict(state)
    assert resumed.state_dict()["ledger"] == {"rows": 0, "digest": "0" * 16}
    state["batches_done"] = 1  # mid-epoch: no ledger to go on, so not checked
    resumed.load_state_dict(state)
    assert resumed.state_dict()["ledger"] is None
    assert len(rows_of(resumed)) == N - 7
    state["batches_done"] = len(loader)
    resumed.load_state_dict(state)
    assert rows_of(resumed) == []


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_pending_batches_of_a_state_come_first_in_batch_order(kind):
    """Batches 3 and 1 waited to be read again (listed in any order): resumed, they come
    first, 1 then 3, then batch 5 on (a version-1 state: no ledger to forge)."""
    state = version_1_state(DataLoader(SOURCES[kind](), 7, shuffle=False, total_size=N))
    state.update(batches_done=3, pending=[3, 1])
    resumed = DataLoader(SOURCES[kind](), 7, shuffle=False, total_size=N)
    resumed.load_state_dict(state)
    firsts = [int(xb[0, 0]) for xb, _ in resumed]
    assert firsts[:3] == [7, 21, 35]


def test_a_stream_state_past_its_last_batch_resumes_to_an_empty_epoch():
    """A stream of unknown size cannot refuse a state past its batches: the replay ends
    early, the epoch hands out nothing, and the next epoch is whole."""
    state = version_1_state(DataLoader(lambda: iter(_stream()), 7, total_size=None))
    state["batches_done"] = 20  # the stream has 15
    resumed = DataLoader(lambda: iter(_stream()), 7, total_size=None)
    resumed.load_state_dict(state)
    assert rows_of(resumed) == []
    assert sorted(rows_of(resumed)) == list(range(N))


def test_a_version_2_state_without_its_ledger_is_refused():
    loader = DataLoader(x_of(), 7)
    state = loader.state_dict()
    del state["ledger"]
    with pytest.raises(ValueError, match="ledger"):
        DataLoader(x_of(), 7).load_state_dict(state)


# -- settings and the source's shape ---


def _ndf(tmp_path, n=N):
    path = tmp_path / "d.ndf"
    save_ndf(path, (x_of(n), np.zeros((n, 1))))
    return open_ndf(path)


@pytest.mark.parametrize(
    ("make", "other", "setting"),
    [
        (
            lambda p: DataLoader(_stream(), 10, buffer_size=20, total_size=N),
            lambda p: DataLoader(_stream(), 10, buffer_size=50, total_size=N),
            "buffer_size",
        ),
        (
            lambda p: DataLoader(ndf_blocks(_ndf(p), 10), 10, buffer_size=40),
            lambda p: DataLoader(ndf_blocks(_ndf(p), 20), 10, buffer_size=40),
            "block_rows",
        ),
        (
            lambda p: DataLoader(x_of(), 10),
            lambda p: DataLoader(np.hstack([x_of(), x_of()]), 10),
            "d",
        ),
        (
            lambda p: DataLoader((x_of(), x_of()), 10),
            lambda p: DataLoader(x_of(), 10),
            "l",
        ),
        (
            lambda p: DataLoader(_stream(), 10, total_size=N),
            lambda p: DataLoader(x_of(), 10),
            "source",
        ),
    ],
)
def test_a_state_from_other_settings_or_shape_is_refused(tmp_path, make, other, setting):
    """The state records every setting that fixes the order and the source's shape."""
    loader = make(tmp_path)
    it = iter(loader)
    next(it)
    with pytest.raises(ValueError, match=f"state was taken with {setting}="):
        other(tmp_path).load_state_dict(roundtrip(loader.state_dict()))


# -- read errors: the cursor stays ---


class FlakyReads:
    """Makes the read of a loader's reader that reads the ``fail_at``-th batch raise
    OSError once: the ``fail_at``-th read when batches are read one by one, the read of
    its group when the iterator reads small batches a group at a time."""

    def __init__(self, loader, fail_at: int):
        self.calls, self.failed = 0, False
        self.row = (fail_at - 1) * loader.batch_size  # the batch's first row, in read order
        self.done = 0  # rows read so far
        reader = reads_through_read(reader_of(loader))
        self.read, reader.read = reader.read, self

    def __call__(self, rows, out_x, out_y):
        self.calls += 1
        if not self.failed and self.done <= self.row < self.done + out_x.shape[0]:
            self.failed = True
            raise OSError("injected read error")
        self.done += out_x.shape[0]
        return self.read(rows, out_x, out_y)


def _iterate_through_errors(it) -> tuple[list[int], int]:
    got, errors = [], 0
    while True:
        try:
            xb, _ = next(it)
        except OSError:
            errors += 1
            continue
        except StopIteration:
            return got, errors
        got += ids(xb)


@pytest.mark.parametrize("prefetch", [0, 2])
@pytest.mark.parametrize("fail_at", [1, 4, 15])
def test_a_failed_read_is_read_again_by_the_next_call(prefetch, fail_at):
    loader = DataLoader(x_of(), 7, seed=1, prefetch=prefetch)
    FlakyReads(loader, fail_at)
    got, errors = _iterate_through_errors(iter(loader))
    assert errors == 1
    assert got == rows_of(DataLoader(x_of(), 7, seed=1))
    assert loader.state_dict()["epoch"] == 1


def test_a_failed_read_through_next_into_is_not_counted():
    loader = DataLoader(x_of(), 7, seed=1)
    flaky = FlakyReads(loader, 3)
    bx, by = np.empty((7, 1)), np.empty((7, 0))
    got = []
    for _ in range(2):
        got += ids(bx[: loader.next_into(bx, by)])
    with pytest.raises(OSError):
        loader.next_into(bx, by)
    state = roundtrip(loader.state_dict())
    assert state["batches_done"] == 2 and "pending" not in state
    restored = DataLoader(x_of(), 7, seed=1)
    restored.load_state_dict(state)
    assert sorted(got + rows_of(restored)) == list(range(N))
    while n := loader.next_into(bx, by):  # the live loader reads the failed batch again
        got += ids(bx[:n])
    assert sorted(got) == list(range(N)) and flaky.calls == 16


@pytest.mark.parametrize("kind", [*sorted(SOURCES), "stream in order"])
def test_a_batch_that_failed_while_later_ones_were_handed_out_is_pending_in_the_state(kind):
    """Threads: batch 2's read fails while batch 3 is handed out; the state says so, and
    batch 2 is the live loader's next.
    Batches 2 and 3 are of one group of next_into's where a claim takes several (random
    access; a shuffled stream, whose claim takes a buffer gather's batches: batches of
    2 here, 6 a gather); a stream in order is claimed a batch at a time (issue 42), so
    batch 2 is its group's only one, and batch 3 is handed out from the next group."""
    b, shuffle = 2, kind != "stream in order"
    source = SOURCES["stream" if kind == "stream in order" else kind]
    loader = DataLoader(source(), b, shuffle=shuffle, seed=1, total_size=N)
    bx, by = np.empty((b, 1)), np.empty((b, 0))
    got = []
    for _ in range(2):
        got += ids(bx[: loader.next_into(bx, by)])
    group = loader._holder.group
    if shuffle:
        assert [item[0].k for item in group.queue][:2] == [2, 3]  # (the premise)
        item2 = group.queue.popleft()  # a thread's next_into takes batch 2 ...
    else:
        assert not group.queue  # batch 1 was its group's only one
        group, item2 = loader._cursor.claim_next(loader._holder, 16)  # (as it claims)
        assert item2[0].k == 2 and not group.queue
    job2 = item2[0]
    got += ids(bx[: loader.next_into(bx, by)])  # ... another hands out batch 3 ...
    group.unpop(item2)  # ... and batch 2's read fails
    state = roundtrip(loader.state_dict())
    assert state["batches_done"] == 3 and state["pending"] == [2]
    restored = DataLoader(source(), b, shuffle=shuffle, seed=1, total_size=N)
    restored.load_state_dict(state)
    rest = rows_of(restored)
    assert sorted(got + rest) == list(range(N))
    assert rest[:b] == ids(job2.take()[0])  # the pending batch comes first
    # the live loader hands it out next, and then it is no longer pending
    assert ids(bx[: loader.next_into(bx, by)]) == rest[:b]
    state = loader.state_dict()
    assert state["batches_done"] == 4 and "pending" not in state


class FlakySource:
    """A factory whose pass raises OSError at chunk ``at`` on its ``fail_pass``-th pass."""

    def __init__(self, at: int, fail_pass: int = 1):
        self.at, self.fail_pass, self.passes = at, fail_pass, 0

    def __call__(self):
        self.passes += 1
        broken = self.passes == self.fail_pass

        def gen():
            for k, c in enumerate(chunks_of([9] * 11 + [1], d=2, l=1)):
                if broken and k == self.at:
                    raise OSError("injected source error")
                yield c

        return gen()


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("prefetch", [0, 2])
def test_a_stream_that_fails_once_mid_pass_loses_nothing(shuffle, prefetch):
    loader = DataLoader(
        FlakySource(at=6), 8, shuffle=shuffle, total_size=N, buffer_size=24, prefetch=prefetch
    )
    got, errors = _iterate_through_errors(iter(loader))
    assert errors == 1
    want = rows_of(
        DataLoader(FlakySource(at=6, fail_pass=0), 8, shuffle=shuffle, total_size=N, buffer_size=24)
    )
    assert got == want and sorted(got) == list(range(N))


# -- prefetch ---


@pytest.mark.parametrize("prefetch", [0, 4])  # 0: a group claimed and counted at once
@pytest.mark.parametrize("leave", ["del", "close"])
def test_batches_prefetched_by_an_iterator_left_mid_epoch_are_handed_out_later(leave, prefetch):
    loader = DataLoader(x_of(), 7, seed=2, prefetch=prefetch)
    it = iter(loader)
    got = [r for _ in range(3) for r in ids(next(it)[0])]
    if leave == "del":
        del it
    else:
        it.close()
    state = roundtrip(loader.state_dict())
    assert state["batches_done"] == 3 and "pending" not in state
    bx, by = np.empty((7, 1)), np.empty((7, 0))
    while n := loader.next_into(bx, by):
        got += ids(bx[:n])
    assert got == rows_of(DataLoader(x_of(), 7, seed=2))
    assert loader.state_dict()["epoch"] == 1


# -- streams ---


@pytest.mark.parametrize("shuffle", [False, True])
def test_even_batches_on_a_stream_rolls_over_on_every_shard_and_audits(shuffle):
    counts = []
    for s in range(3):
        loader = DataLoader(
            _stream(),
            7,
            shuffle=shuffle,
            num_shards=3,
            shard_index=s,
            even_batches=True,
            total_size=N,
        )
        counts.append(len(rows_of(loader)) // 7)
        state = loader.state_dict()
        assert (state["epoch"], state["batches_done"]) == (1, 0)
    assert len(set(counts)) == 1
    short = DataLoader(
        _stream(),
        7,
        shuffle=shuffle,
        num_shards=3,
        shard_index=2,
        even_batches=True,
        total_size=66,
    )
    with pytest.warns(TotalSizeWarning, match="shard 2's share"):
        list(short)


@pytest.mark.parametrize("s", range(3))
def test_even_batches_on_a_stream_rolls_over_once_the_common_count_is_handed_out(s):
    """A state taken right after the shard's last batch under even_batches (before the end
    is seen, the shard's extra batches still unread) says the next epoch. (Batches of 11:
    shard 2 has 4, the others 3.)"""
    kw = dict(num_shards=3, shard_index=s, even_batches=True, total_size=N)
    common = len(list(DataLoader(_stream(), 11, **kw)))
    assert common == 3
    loader = DataLoader(_stream(), 11, **kw)
    it = iter(loader)
    for _ in range(common):
        next(it)
    assert (loader.state_dict()["epoch"], loader.state_dict()["batches_done"]) == (1, 0)


def test_a_streams_last_batch_prefetched_and_given_back_is_still_to_come():
    """The pass has ended on the prefetch thread, but its last batch was given back when
    the iterator closed: a state taken then resumes with exactly that batch."""
    loader = DataLoader(_stream(), 7, shuffle=False, prefetch=2, total_size=N)
    it = iter(loader)
    for _ in range(14):
        next(it)
    wait_until_prefetched(it)
    it.close()
    state = roundtrip(loader.state_dict())
    assert (state["epoch"], state["batches_done"]) == (0, 14)
    resumed = DataLoader(_stream(), 7, shuffle=False, total_size=N)
    resumed.load_state_dict(state)
    assert rows_of(resumed) == [98, 99]


def test_a_failed_stream_read_gives_back_the_batches_its_claim_took_over():
    """next_into takes over the 6 batches an iterator left ready (of a shuffle buffer's
    last gather of 8 one-row batches: a stream's claim takes one group of its pass, here
    a gather's, at once), then claims one more from the stream, whose read (the buffer's
    next fill) fails: the batches taken over go back with it, and the epoch hands out
    every row once, in the order of a pass that never failed."""
    n = 128
    x = x_of(n)
    chunks = [x[a : a + 16] for a in range(0, n, 16)]
    kw = dict(shuffle=True, seed=5, total_size=n, buffer_size=64)  # 4 chunks a fill
    reference = DataLoader(chunks, 1, **kw)
    rows_of(reference)
    want = rows_of(reference)  # epoch 1, whole
    source = FlakyFactory(chunks)
    loader = DataLoader(source, 1, **kw)
    rows_of(loader)  # epoch 0 learns the widths: iter() claims a gather's batches at once
    source.arm(4)  # epoch 1: the buffer's second fill fails once
    it = iter(loader)
    got = [r for _ in range(57) for r in ids(next(it)[0])]  # 7 gathers of 8, and one more
    assert [len(g.queue) for g in loader._cursor._live] == [6]  # (the premise)
    bx, by = np.empty((1, 1)), np.empty((1, 0))
    with pytest.raises(OSError, match="chunk 4"):
        loader.next_into(bx, by)
    while loader.next_into(bx, by):
        got += ids(bx)
    assert source.raised == 1 and got == want and sorted(want) == list(range(n))


@pytest.mark.parametrize("via", ["iter", "next_into"])
def test_a_failed_read_past_the_even_batches_count_gives_back_the_batches_claimed_before_it(via):
    """even_batches=True over a stream longer than its declared total_size (60 of 144
    rows, one-row batches): the claim that reaches the count takes a gather's batches up
    to it (56-59), then reads the rest of the pass to leave it out, and that read fails:
    the batches it took go back (a claim into the group refilled in place,
    Cursor._refill), and the epoch hands out its 60 batches once, in order."""
    x = x_of(144)
    chunks = [x[a : a + 16] for a in range(0, 144, 16)]
    kw = dict(shuffle=True, seed=2, total_size=60, buffer_size=64, even_batches=True)
    reference = DataLoader(chunks, 1, **kw)
    with pytest.warns(TotalSizeWarning):
        rows_of(reference)
    want = rows_of(reference)  # epoch 1, whole
    source = FlakyFactory(chunks)
    loader = DataLoader(source, 1, **kw)
    with pytest.warns(TotalSizeWarning):
        rows_of(loader)  # epoch 0 learns the widths: claims take a gather's batches
    source.arm(4)  # epoch 1: the read of the pass past batch 59 fails once
    bx, by = np.empty((1, 1)), np.empty((1, 0))
    if via == "next_into":
        loader.reset()  # (next_into's: the epoch after)
    it = iter(loader) if via == "iter" else None

    def step() -> list[int]:  # the next batch's rows ([] at the end)
        if it is None:
            return ids(bx[: loader.next_into(bx, by)])
        return ids(next(it, (np.empty((0, 1)),))[0])

    got, failed_at = [], []
    while True:
        try:
            rows = step()
        except OSError:
            failed_at.append(len(got))
            continue
        if not rows:
            break
        got += rows
    assert failed_at == [56] and source.raised == 1  # (the claim of 56-59, mid-gather)
    assert len(want) == 60 and got == want


def test_a_state_taken_when_the_next_stream_read_fails_is_not_the_next_epoch():
    """state_dict() reads one batch ahead to know whether the pass has ended; when that
    read fails, the epoch is not over: the state says where it is, and the iterator
    goes on (the failed read is tried again) with every row."""
    source, passes = FlakyFactory(_stream()), []
    # rows 90..99 fail once: batch 12 (rows 84..90) is the first to need them, and the
    # feed reads a batch ahead (for the audit), so reading batch 11 fails
    source.arm(9)
    loader = DataLoader(lambda: passes.append(1) or source(), 7, shuffle=False, total_size=N)
    it = iter(loader)
    for _ in range(11):
        next(it)
    state = loader.state_dict()
    assert source.raised == 1 and (state["epoch"], state["batches_done"]) == (0, 11)
    assert [r for xb, _ in it for r in ids(xb)] == list(range(77, 100))
    assert len(passes) == 2  # the failed pass, then one replay (not one per batch)


def test_auto_total_size_of_a_stream_of_labels_only():
    chunks = [(np.empty((5, 0)), np.arange(5.0) + 5 * i) for i in range(4)]
    with pytest.warns(UserWarning, match="counted"):
        loader = DataLoader(chunks, 3, total_size="auto")
    assert loader.total_size == 20 and loader.d == 0
    assert sorted(r for _, yb in loader for r in yb[:, 0].astype(int)) == list(range(20))


def test_a_declared_total_size_never_sizes_an_allocation():
    loader = DataLoader(_stream(), 10, total_size=10**13, buffer_size=10**9)
    tracemalloc.start()
    try:
        with pytest.warns(TotalSizeWarning):
            got = rows_of(loader)
        assert sorted(rows_of(loader)) == list(range(N))  # the next epoch too
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert sorted(got) == list(range(N))
    assert peak < 10 << 20  # the buffer grew with the 100 rows that came, not toward 10**9


def test_a_source_that_restarts_empty_is_a_value_error_that_names_restarting():
    spent = iter(_stream())
    loader = DataLoader(lambda: spent, 10, total_size=N)
    assert len(rows_of(loader)) == N
    with pytest.raises(ValueError, match="restart"):
        list(loader)


def test_a_declared_total_size_that_differs_from_parquet_metadata_is_refused(tmp_path):
    write_parquet(tmp_path / "a.parquet", [30, 30, 40])
    src = parquet_source(tmp_path / "a.parquet", labels=["y0"])
    with pytest.raises(ValueError, match="n_rows=100"):
        DataLoader(src, 10, total_size=70)
    assert DataLoader(src, 10, total_size=100).total_size == 100


# (even_batches takes "pad" too: tests/loader/test_pad.py checks what it refuses; elastic
# takes "ranges": tests/loader/test_elastic_ranges.py)
@pytest.mark.parametrize("flag", ["shuffle", "drop_last"])
@pytest.mark.parametrize("value", ["False", 0, 1.0, None])
def test_flags_are_bools(flag, value):
    with pytest.raises(TypeError, match=f"{flag} must be a bool"):
        DataLoader(x_of(), 10, **{flag: value})


def test_flags_accept_numpy_bools_and_ints_accept_numpy_ints():
    loader = DataLoader(x_of(), np.int64(10), shuffle=np.bool_(False), seed=np.uint8(3))
    assert loader.batch_size == 10 and loader.shuffle is False and loader.seed == 3


# -- elastic: every rank's state says the same ---


@pytest.mark.parametrize("n", [50, 41])
def test_elastic_ranks_in_lockstep_report_the_same_state(n):
    x = x_of(n)
    loaders = [DataLoader(x, 10, num_shards=2, shard_index=r, elastic=True) for r in range(2)]
    its = [iter(ld) for ld in loaders]
    handed = []
    for _ in range(3):  # rank 1 has 2 batches of the 5 (or 3 of 5 with n=41: 5 batches too)
        states = [ld.state_dict() for ld in loaders]
        assert states[0]["global_batches_done"] == states[1]["global_batches_done"]
        assert states[0]["epoch"] == states[1]["epoch"]
        for it in its:
            batch = next(it, None)
            if batch is not None:
                handed += ids(batch[0])
    assert sorted(handed) == list(range(n))
    for it in its:
        assert next(it, None) is None
    assert [ld.state_dict()["epoch"] for ld in loaders] == [1, 1]


def test_elastic_state_after_the_last_global_batch_says_the_next_epoch_on_every_rank():
    """4 global batches over 2 ranks: once both ranks have handed out their 2 (and before
    either has seen the end), every rank's state says the next epoch."""
    loaders = [
        DataLoader(x_of(40), 10, num_shards=2, shard_index=r, elastic=True) for r in range(2)
    ]
    its = [iter(ld) for ld in loaders]
    for _ in range(2):
        for it in its:
            next(it)
    for ld in loaders:
        state = ld.state_dict()
        assert (state["epoch"], state["global_batches_done"]) == (1, 0)


def test_elastic_resume_from_the_rank_with_fewer_batches_skips_nothing():
    x = x_of(50)
    loaders = [DataLoader(x, 10, num_shards=2, shard_index=r, elastic=True) for r in range(2)]
    its = [iter(ld) for ld in loaders]
    handed = [r for _ in range(2) for it in its for r in ids(next(it)[0])]
    state = roundtrip(loaders[1].state_dict())  # rank 1 has handed out all it has
    assert (state["epoch"], state["global_batches_done"]) == (0, 4)
    resumed = DataLoader(x, 10, num_shards=1, shard_index=0, elastic=True)
    resumed.load_state_dict(state)
    assert sorted(handed + rows_of(resumed)) == list(range(50))


# -- mixing window ---


def test_mixing_window(tmp_path):
    assert DataLoader(x_of(), 10).mixing_window == N
    assert DataLoader(x_of(), 10, shuffle=False).mixing_window == 1
    assert DataLoader(_stream(), 10, buffer_size=30, total_size=N).mixing_window == 30
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert DataLoader(_stream(), 10, buffer_size=500).mixing_window == N  # never past N
    blocks = ndf_blocks(_ndf(tmp_path, 4000), 10)
    # a buffer of 16+ blocks on a larger stream reads ahead in halves
    assert DataLoader(blocks, 10, buffer_size=400).mixing_window == 200
    assert DataLoader(lambda: iter(_stream()), 10, total_size=None).mixing_window is None
    assert DataLoader(x_of(1), 10).mixing_window == 1  # never past the rows, at least 1
    assert DataLoader(_stream(), 10, shuffle=False, total_size=N).mixing_window == 1


@pytest.mark.parametrize(("d", "l"), [(3, 0), (0, 2)])
def test_the_default_buffer_of_a_stream_read_once_is_sized_by_its_widths(d, l):  # noqa: E741
    """buffer_size=None, the stream's size unknown: once read, its window is the 64 MiB
    buffer's rows of d + l values (features only, or labels only)."""
    chunks = [(np.ones((10, d)), np.ones((10, l))) for _ in range(5)]
    loader = DataLoader(lambda: iter(chunks), 10, total_size=None)
    next(iter(loader))
    assert loader.mixing_window == DEFAULT_BUFFER_BYTES // (8 * (d + l))


def test_the_ledger_is_checked_by_whoever_hands_out_the_last_batch():
    """next_into reaches the end while a prefetching iterator still holds batches: it
    hands out first those the iterator holds ready, and the check runs when the last
    batch is handed out, by next_into or by the iterator (a group it was still reading)."""
    x = x_of()
    run = DataLoader(x, 7, seed=4)
    it = iter(run)
    next(it)
    state = roundtrip(run.state_dict())
    state["batches_done"] += 1  # forged: one batch never handed out
    loader = DataLoader(x, 7, seed=4, prefetch=4)
    loader.load_state_dict(state)
    it = iter(loader)
    next(it)
    bx, by = np.empty((7, 1)), np.empty((7, 0))
    with pytest.raises(ExactnessError, match="handed out 93 rows"):
        while loader.next_into(bx, by):
            pass
        for _ in it:
            pass


# -- the state's format, pinned ------------------------------------------------------------


def test_the_state_of_a_random_access_loader_mid_epoch_is_exactly_this():
    loader = DataLoader((x_of(), np.zeros((N, 2))), 7, seed=3, num_shards=2, shard_index=1)
    it = iter(loader)
    got = [r for _ in range(2) for r in ids(next(it)[0])]
    state = loader.state_dict()
    fingerprint = state.pop("fingerprint")  # the data's identity: tests/loader/test_fingerprint.py
    assert (fingerprint["kind"], fingerprint["n"], fingerprint["d"]) == ("memory", N, 1)
    lineage = {
        k: state.pop(k) for k in ("id", "parent", "loaded_at")
    }  # tests/loader/test_certify_lineage.py
    assert lineage == {
        "id": state_id({**state, **lineage, "fingerprint": fingerprint}),
        "parent": None,
        "loaded_at": None,
    }
    assert state == {
        "version": STATE_VERSION,
        "seed": 3,
        "epoch": 0,
        "batches_done": 2,
        "source": "random access",
        "batch_size": 7,
        "shuffle": True,
        "drop_last": False,
        "even_batches": False,
        "elastic": False,
        "total_size": N,
        "d": 1,
        "l": 2,
        "num_shards": 2,
        "shard_index": 1,
        "n": 50,
        "ledger": {"rows": 14, "digest": f"{rows_digest(np.array(got)):016x}"},
        "history": [  # this epoch's record, for certify: this shard's hand-outs so far
            {
                "epoch": 0,
                "shard": [1, 2],
                "elastic": False,
                "start": 0,
                "drops": False,
                "rows": 14,
                "digest": f"{rows_digest(np.array(got)):016x}",
                "promised": None,  # not ended yet
                "whole": {"rows": N, "digest": f"{range_digest(0, N):016x}"},
            }
        ],
        "compacted": [],  # old epochs' records, folded (tests/loader/test_compaction.py)
    }


def test_the_state_of_a_stream_and_of_an_elastic_loader_is_exactly_this(tmp_path):
    blocks = DataLoader(ndf_blocks(_ndf(tmp_path), 10), 10, buffer_size=40, shuffle=False)
    it = iter(blocks)
    next(it)
    state = blocks.state_dict()
    assert {k: state[k] for k in ("source", "buffer_size", "n_rows", "block_rows", "ledger")} == {
        "source": "stream",
        "buffer_size": 40,
        "n_rows": N,
        "block_rows": 10,
        "ledger": {"rows": 10, "digest": f"{range_digest(0, 10):016x}"},
    }
    assert (
        len(state) == 26 and state["fingerprint"]["kind"] == "ndf"
    )  # (22 + id, parent, loaded_at, compacted)
    elastic = DataLoader(x_of(), 10, num_shards=2, shard_index=0, elastic=True)
    it = iter(elastic)
    next(it)
    # every shard's global batches 0 and 1: one shard's first two batches share that order
    whole = iter(DataLoader(x_of(), 10))
    first_two = np.array(ids(next(whole)[0]) + ids(next(whole)[0]))
    state = elastic.state_dict()
    assert state.pop("fingerprint")["kind"] == "memory"
    assert {k: state.pop(k) for k in ("parent", "loaded_at", "shard")} == {
        "parent": None,
        "loaded_at": None,
        "shard": [0, 2],  # (an elastic state's settings do not name it)
    }
    assert isinstance(state.pop("id"), str)
    assert (
        state
        == {
            "version": STATE_VERSION,
            "seed": 0,
            "epoch": 0,
            "batches_done": 1,
            "source": "random access",
            "batch_size": 10,
            "shuffle": True,
            "drop_last": False,
            "even_batches": False,
            "elastic": True,
            "total_size": N,
            "d": 1,
            "l": 0,
            "global_batches_done": 2,
            "ledger": {"rows": 20, "digest": f"{rows_digest(first_two):016x}"},
            "history": [  # this rank's own hand-outs: global batch 0 (the ledger has both)
                {
                    "epoch": 0,
                    "shard": [0, 2],
                    "elastic": True,
                    "start": 0,
                    "drops": False,
                    "rows": 10,
                    "digest": f"{rows_digest(first_two[:10]):016x}",
                    "promised": None,
                    "whole": {"rows": N, "digest": f"{range_digest(0, N):016x}"},
                }
            ],
            "compacted": [],
        }
    )


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (lambda s: s.update(version=STATE_VERSION + 1), ValueError, f"version {STATE_VERSION + 1}"),
        (lambda s: s.pop("version"), ValueError, "version None"),
        (lambda s: s.update(seed=-1), ValueError, r"state\['seed'\] must be >= 0"),
        (lambda s: s.update(epoch="1"), TypeError, r"state\['epoch'\] must be an int"),
        (lambda s: s.update(epoch=-1), ValueError, r"state\['epoch'\] must be >= 0"),
        (lambda s: s.update(batches_done=None), TypeError, r"state\['batches_done'\]"),
        (lambda s: s.update(batches_done=-1), ValueError, r"state\['batches_done'\] must be >= 0"),
        (lambda s: s.update(batches_done=16), ValueError, "exceeds the 15 batches of an epoch$"),
        (lambda s: s.update(pending=3), TypeError, r"state\['pending'\] must be a list"),
        (lambda s: s.update(pending=[1, 1]), ValueError, "must be distinct batches below"),
        (lambda s: s.update(pending=[9]), ValueError, r"below batches_done \+ len"),
        (lambda s: s.update(pending=[5]), ValueError, r"below batches_done \+ len"),  # 4 + 1
        (lambda s: s.update(pending=[-1]), ValueError, r"state\['pending'\]\[i\] must be >= 0"),
        (lambda s: s.update(ledger=[]), TypeError, r"state\['ledger'\] must be a dict"),
        (lambda s: s["ledger"].update(digest="zz"), ValueError, "hexadecimal"),
        (lambda s: s["ledger"].update(digest=None), ValueError, "hexadecimal"),
        (lambda s: s["ledger"].update(rows=-1), ValueError, r"\['rows'\] must be >= 0"),
        (
            lambda s: s.pop("ledger"),
            ValueError,
            r"^state has no 'ledger' \(every state since version 2",
        ),
        (lambda s: s.pop("n"), ValueError, "state was taken with n=None, this loader has n=100"),
        (lambda s: s.update(d=2), ValueError, "state was taken with d=2, this loader has d=1"),
        (lambda s: s.update(source="stream"), ValueError, "source='stream'"),
        (lambda s: s.update(history={}), TypeError, r"state\['history'\] must be a list"),
        (lambda s: s.update(history=[1]), TypeError, r"state\['history'\]\[0\] must be a dict"),
        (lambda s: s["history"][0].pop("epoch"), ValueError, r"\[0\]\['epoch'\] must be a"),
        (lambda s: s["history"][0].update(digest=7), ValueError, "hexadecimal"),
        (lambda s: s["history"][0].update(whole=3), ValueError, r"\['whole'\] must be None"),
    ],
)
def test_a_malformed_state_is_refused_naming_the_key(change, error, match):
    loader = DataLoader(x_of(), 7, seed=3)
    it = iter(loader)
    for _ in range(4):
        next(it)
    state = roundtrip(loader.state_dict())
    change(state)
    target = DataLoader(x_of(), 7, seed=3)
    with pytest.raises(error, match=match):
        target.load_state_dict(state)
    assert target.state_dict()["batches_done"] == 0  # left as it was


def test_a_state_must_be_a_dict():
    with pytest.raises(TypeError, match="state must be a dict from state_dict.*got list"):
        DataLoader(x_of(), 7).load_state_dict([("seed", 0)])


def test_an_elastic_state_past_the_epoch_or_with_pending_batches_is_refused():
    loader = DataLoader(x_of(), 10, num_shards=2, shard_index=0, elastic=True)
    state = roundtrip(loader.state_dict())
    target = DataLoader(x_of(), 10, num_shards=3, shard_index=0, elastic=True)
    with pytest.raises(ValueError, match=r"global_batches_done'\]=11 exceeds the 10 batches"):
        target.load_state_dict({**state, "global_batches_done": 11})
    with pytest.raises(ValueError, match="waited to be read again"):
        target.load_state_dict({**state, "batches_done": 1, "pending": [0]})
    unchecked = {k: v for k, v in state.items() if k != "ledger"}  # (a state from before
    target.load_state_dict({**unchecked, "global_batches_done": 10})  # the elastic ledger)
    assert rows_of(target) == [] and target.state_dict()["epoch"] == 1


def _elastic_state_at(g: int) -> dict:
    """An honest state of rank 0 of 2 (elastic, batch 10 over N rows) after ``g`` global
    batches: both ranks stepped g/2 times."""
    loader = DataLoader(x_of(), 10, num_shards=2, shard_index=0, elastic=True)
    it = iter(loader)
    for _ in range(g // 2):
        next(it)
    return roundtrip(loader.state_dict())


@pytest.mark.parametrize("forged", [3, 6, 10])
def test_an_elastic_state_with_a_forged_position_fails_its_ledger(forged):
    """Elastic states carry the ledger of every shard's batches before their position:
    a state whose global_batches_done was changed is caught at the end of the epoch it
    resumes, at any shard count; the honest one resumes without a word."""
    state = _elastic_state_at(4)
    assert state["global_batches_done"] == 4 and state["ledger"]["rows"] == 40
    for shards in (1, 3):
        honest = DataLoader(x_of(), 10, num_shards=shards, elastic=True)
        honest.load_state_dict(state)
        assert len(rows_of(honest)) == len(range(4, 10, shards)) * 10
        target = DataLoader(x_of(), 10, num_shards=shards, elastic=True)
        target.load_state_dict({**state, "global_batches_done": forged})
        with pytest.raises(ExactnessError, match="epoch 0 of shard 0"):
            rows_of(target)


def test_an_elastic_resume_counts_from_its_first_batch_and_the_next_epoch_from_zero():
    loader = DataLoader(x_of(), 10, num_shards=2, shard_index=1, elastic=True)
    loader.load_state_dict(_elastic_state_at(4))
    it = iter(loader)
    next(it)
    assert loader.state_dict()["global_batches_done"] == 6  # 4, then one step of 2 shards
    rest = [b for b in it]
    assert len(rest) == 2  # global batches 7 and 9
    after = loader.state_dict()
    assert (after["epoch"], after["global_batches_done"]) == (1, 0)


def test_an_elastic_resume_checks_its_epochs_ledger(checked):
    """Resumed at global batch 4 of 10 on rank 1 of 2: the 40 rows of every shard's
    batches 0-3 the state carries, and its batches 5, 7 and 9, are checked against
    what the epoch promised."""
    loader = DataLoader(x_of(), 10, num_shards=2, shard_index=1, elastic=True)
    loader.load_state_dict(_elastic_state_at(4))
    assert len(rows_of(loader)) == 30
    assert checked == [(0, 70)]


@pytest.mark.parametrize(
    ("value", "error"), [(-1, ValueError), (None, TypeError), ("4", TypeError)]
)
def test_a_malformed_elastic_position_is_refused_naming_it(value, error):
    state = roundtrip(DataLoader(x_of(), 10, num_shards=2, elastic=True).state_dict())
    target = DataLoader(x_of(), 10, num_shards=2, elastic=True)
    with pytest.raises(error, match=r"state\['global_batches_done'\] must be"):
        target.load_state_dict({**state, "global_batches_done": value})


def test_a_state_taken_after_a_version_1_resume_says_its_epoch_is_unchecked():
    state = version_1_state(DataLoader(x_of(), 7, seed=3))
    state.update(batches_done=5)  # a version-1 state: no ledger
    resumed = DataLoader(x_of(), 7, seed=3)
    resumed.load_state_dict(state)
    it = iter(resumed)
    next(it)
    mid = roundtrip(resumed.state_dict())
    assert mid["version"] == STATE_VERSION and mid["batches_done"] == 6 and mid["ledger"] is None
    again = DataLoader(x_of(), 7, seed=3)
    again.load_state_dict(mid)  # loads, and its epoch is not checked either
    assert len(rows_of(again)) == N - 42
    for _ in it:
        pass
    assert resumed.state_dict()["ledger"] == {"rows": 0, "digest": "0" * 16}  # next epoch: checked
