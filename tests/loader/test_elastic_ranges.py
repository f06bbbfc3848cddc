"""elastic="ranges" (exactbatch.feeds.ranges): each segment's rows split among the ranks
in contiguous shares, the rest re-dealt at a resume; its states record the epoch's
world-size history, resume at any shard count, and certify. The laws over every source
kind are in tests/test_law_matrix.py (the ranges axis and check_reshard_ranges)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from exactbatch import DataLoader, ExactnessError, certify
from exactbatch.feeds import state_rules
from exactbatch.loader.state import STATE_VERSION

N, CHUNK, BATCH, WINDOW = 3000, 250, 64, 500


def chunks(n=N, size=CHUNK):
    x = np.arange(float(n)).reshape(n, 1)
    return [x[a : a + size] for a in range(0, n, size)]


class Counted:
    """A chunk source (the ChunkSource protocol) of rows 0..n-1 that counts the rows of
    every chunk read."""

    def __init__(self, n=N, size=CHUNK):
        self.parts = chunks(n, size)
        self.chunk_rows = [len(p) for p in self.parts]
        self.n_rows, self.rows = n, 0

    def read_chunk(self, i):
        self.rows += len(self.parts[i])
        return self.parts[i]


def rank(r, world, source=None, **kw):
    src = chunks() if source is None else source
    kw.setdefault("buffer_size", WINDOW)
    return DataLoader(src, BATCH, num_shards=world, shard_index=r, elastic="ranges", seed=3, **kw)


def ids(batch):
    return batch[0][:, 0].astype(np.int64).tolist()


def step(loaders, iters, k):
    """``k`` lockstep steps of every rank: the rows each handed out."""
    out = []
    for _ in range(k):
        for it in iters:
            b = next(it, None)
            if b is not None:
                out += ids(b)
    return out


@pytest.mark.parametrize("value", [True, False, np.bool_(True), "ranges"])
def test_elastic_takes_a_bool_or_ranges(value):
    assert DataLoader(chunks(), 64, total_size=N, elastic=value).elastic == (
        "ranges" if value == "ranges" else bool(value)
    )


@pytest.mark.parametrize(
    ("value", "error"), [("range", ValueError), (1, TypeError), (None, TypeError)]
)
def test_another_elastic_is_refused_naming_it(value, error):
    with pytest.raises(error, match=r"elastic must be False, True or 'ranges'"):
        DataLoader(chunks(), 64, elastic=value)


def test_a_stream_read_front_to_back_is_refused():
    with pytest.raises(ValueError, match="read front to back only"):
        DataLoader(lambda: iter(chunks()), 64, total_size=N, elastic="ranges")


def test_a_first_segment_reads_each_row_about_once():
    """At 4 ranks every rank reads the chunks of its contiguous share: all ranks together
    read N plus a chunk at most a cut between shares (elastic=True: every window a
    rank's batches touch, about 4 N here)."""
    for dealing, bound in (("ranges", N + 3 * CHUNK), (True, None)):
        sources = [Counted() for _ in range(4)]
        got = []
        for r in range(4):
            loader = DataLoader(
                sources[r],
                BATCH,
                num_shards=4,
                shard_index=r,
                elastic=dealing,
                buffer_size=WINDOW,
                seed=3,
            )
            got += [i for b in loader for i in ids(b)]
        assert sorted(got) == list(range(N))
        reads = sum(s.rows for s in sources)
        if bound is None:
            assert reads >= 3 * N  # (the amplification ranges removes)
        else:
            assert N <= reads <= bound, reads


def test_a_state_records_the_world_size_history_and_resumes_at_any_count():
    """Version 4 states: ``segments`` [[S, steps], ...], the same on every rank (one id);
    a resume at another count is a new segment, at the same count the segment goes on;
    every row once, and the states certify."""
    ranks = [rank(r, 3) for r in range(3)]
    assert ranks[0].state_dict()["segments"] == []  # an epoch's start: no segment yet
    seen = step(ranks, [iter(ld) for ld in ranks], 4)
    states = [json.loads(json.dumps(ld.state_dict())) for ld in ranks]
    assert {s["version"] for s in states} == {STATE_VERSION}
    assert [s["segments"] for s in states] == [[[3, 4]]] * 3
    assert [s["shard"] for s in states] == [[0, 3], [1, 3], [2, 3]]
    assert len({s["id"] for s in states}) == 1 and "global_batches_done" not in states[0]
    two = [rank(r, 2) for r in range(2)]
    for r, ld in enumerate(two):
        ld.load_state_dict(states[r])
    assert two[0].state_dict()["segments"] == [[3, 4]]  # no step at 2 ranks: no segment
    seen += step(two, [iter(ld) for ld in two], 2)
    mid = [json.loads(json.dumps(ld.state_dict())) for ld in two]
    assert [s["segments"] for s in mid] == [[[3, 4], [2, 2]]] * 2
    again = [rank(r, 2) for r in range(2)]  # the same count: the segment goes on
    for r, ld in enumerate(again):
        ld.load_state_dict(mid[r])
    iters = [iter(ld) for ld in again]
    seen += step(again, iters, 1)
    assert again[0].state_dict()["segments"] == [[3, 4], [2, 3]]
    seen += step(again, iters, 100)
    assert sorted(seen) == list(range(N))
    finals = [ld.state_dict() for ld in again]
    assert certify(states + mid + finals)
    assert not certify([finals[0], *states, *mid])  # rank 1's end missing


def test_batches_are_a_pure_function_of_seed_epoch_and_history():
    """Two runs through the same world-size history hand out the same batches on every
    rank; another history, other batches (every row once each time)."""

    def run(history):
        states, out = None, []
        for world, steps in history:
            loaders = [rank(r, world) for r in range(world)]
            if states is not None:
                for r, ld in enumerate(loaders):
                    ld.load_state_dict(states[r % len(states)])
            iters = [iter(ld) for ld in loaders]
            for _ in range(steps):
                out.append([ids(b) if (b := next(it, None)) is not None else [] for it in iters])
            states = [ld.state_dict() for ld in loaders]
        return out

    a = run([(4, 3), (2, 1000)])
    assert a == run([(4, 3), (2, 1000)])
    b = run([(4, 3), (3, 1000)])
    for got in (a, b):
        assert sorted(i for s in got for r in s for i in r) == list(range(N))
    assert a[3:] != b[3:]


def test_a_state_whose_history_was_changed_fails_the_ledger():
    """A state saying the ranks took another number of steps than they did resumes, and
    the epoch's end raises ExactnessError (the ledger it carries is every rank's rows)."""
    ranks = [rank(r, 2) for r in range(2)]
    step(ranks, [iter(ld) for ld in ranks], 3)
    state = json.loads(json.dumps(ranks[0].state_dict()))
    state["segments"] = [[2, 4]]
    loader = rank(0, 1)
    loader.load_state_dict(state)
    with pytest.raises(ExactnessError):
        for _ in loader:
            pass


@pytest.mark.parametrize(
    "segments", [[[2, 100]], [[0, 1]], "x", [[2, 1], [3]]], ids=["past", "zero", "text", "short"]
)
def test_malformed_segments_are_refused_naming_the_key(segments):
    ranks = [rank(r, 2) for r in range(2)]
    step(ranks, [iter(ld) for ld in ranks], 1)
    state = ranks[0].state_dict()
    state["segments"] = segments
    with pytest.raises((TypeError, ValueError), match=r"state\['segments'\]"):
        rank(0, 3).load_state_dict(state)


def test_under_ddp_uneven_steps_are_refused_unless_even_batches(monkeypatch):
    """At the world size of torch.distributed, ranks whose shares give other step counts
    (2178 rows less 2 steps at 2 ranks: 1922 rows, 640 and 641 a rank: 10 and 11 steps)
    would hang DDP: refused at load_state_dict, unless even_batches evens them."""
    ranks = [rank(r, 2, source=chunks(2178)) for r in range(2)]
    step(ranks, [iter(ld) for ld in ranks], 2)
    state = ranks[0].state_dict()
    monkeypatch.setattr(state_rules, "torch_world_size", lambda: 3)
    with pytest.raises(ValueError, match="DDP"):
        rank(0, 3, source=chunks(2178)).load_state_dict(state)
    rank(0, 3, source=chunks(2178), even_batches=True).load_state_dict(state)  # (another
    # even_batches loads: it says how each segment ends)
    monkeypatch.setattr(state_rules, "torch_world_size", lambda: 4)  # not these ranks' world
    rank(0, 3, source=chunks(2178)).load_state_dict(state)


def test_random_access_shares_are_contiguous_shards_shuffled():
    """On random access a first segment is contiguous sharding: shard s's rows are
    [s*n//S, (s+1)*n//S), a full shuffle of them."""
    x = np.arange(1000.0).reshape(1000, 1)
    loader = DataLoader(x, 32, num_shards=3, shard_index=1, elastic="ranges", seed=2)
    got = [i for b in loader for i in ids(b)]
    assert sorted(got) == list(range(333, 666)) and got != sorted(got)
    assert loader.mixing_window == 333
