"""The elastic="ranges" dealing (exactbatch.feeds.ranges): a rank's positions, plan and
order, and the promise of every rank's rows."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.order.digest import Tally, rows_digest
from exactbatch.order.windows import WindowedOrder


def _ids(batch):
    return batch[0][:, 0].astype(np.int64)


def _chunks(n, size):
    x = np.arange(float(n)).reshape(n, 1)
    return [x[a : a + size] for a in range(0, n, size)]


def test_a_ranks_positions_and_batches_are_its_share_from_zero():
    """Rank r of 3 over 1000 rows holds positions 0 .. its share (333 or 334), batch k at
    k*b .. (the last one short); positions asked outside them are cut off."""
    for r, size in enumerate([333, 333, 334]):
        loader = DataLoader(np.zeros((1000, 1)), 64, num_shards=3, shard_index=r, elastic="ranges")
        dealing = loader._feed.dealing
        assert dealing.positions(-5, 10**6, ()).tolist() == list(range(size))
        assert dealing.positions(10, 20, ()).dtype == np.int64
        assert dealing.positions(300, 400, ()).tolist() == list(range(300, size))
        plan = dealing.plan(())
        assert plan.locate(0) == (0, 64) and plan.locate(5) == (320, size)
        assert (plan.key, plan.size, plan.span) == (r, size, size)


def test_an_epochs_layout_is_asked_of_the_keyed_orders_once_for_every_rank():
    """The base order's layout (a keyed order, made afresh each time it is asked) is
    kept for the last (seed, epoch) asked, and a rank's order for a few: every rank's
    order of an epoch, asked twice, makes the layout once; another epoch makes its own;
    going back finds the first epoch's orders kept. Each rank's order is a fresh
    dealing's."""
    dealings = [
        DataLoader(np.zeros((1000, 1)), 64, num_shards=3, elastic="ranges", seed=2)._feed.dealing
        for _ in range(2)
    ]
    dealing, fresh = dealings
    asked = []
    real = dealing._orders
    dealing._orders = lambda seed, epoch, *rest: (
        asked.append((seed, epoch)) or real(seed, epoch, *rest)
    )
    for epoch in (1, 1, 2, 1):
        for r in range(3):
            got = dealing.rank_order(2, epoch, (), r).rows(0, 333)
            assert got.tolist() == fresh.rank_order(2, epoch, (), r).rows(0, 333).tolist()
    assert asked == [(2, 1), (2, 2)]
    assert dealing.rank_order(2, 1, (), 0) is dealing.rank_order(2, 1, 0, 0)


def test_unshuffled_ranks_hand_out_their_contiguous_shares_in_file_order():
    """No shuffle: rank r's rows are rows [r*n//S, (r+1)*n//S) in order, over a stream's
    chunks and over random access alike."""
    n = 1000
    for source in (_chunks(n, 70), np.arange(float(n)).reshape(n, 1)):
        for r in range(3):
            loader = DataLoader(
                source, 64, num_shards=3, shard_index=r, elastic="ranges", shuffle=False
            )
            got = [i for b in loader for i in _ids(b).tolist()]
            assert got == list(range(r * n // 3, (r + 1) * n // 3))


def test_shuffled_stream_ranks_read_shares_of_the_epochs_chunk_order():
    """Shuffled, one rank over a stream: its rows come window by window of the chunk order
    of WindowedOrder(seed, epoch) (each window's rows those of its positions there)."""
    n, size, window = 1000, 50, 200
    loader = DataLoader(
        _chunks(n, size), 50, elastic="ranges", buffer_size=window, seed=4, num_shards=1
    )
    assert loader.mixing_window == window
    got = np.array([i for b in loader for i in _ids(b).tolist()])
    base = WindowedOrder([size] * (n // size), window, seed=4, epoch=0)
    chunks = base.rows(0, n)
    for w in range(n // window):
        part = slice(w * window, (w + 1) * window)
        assert sorted(got[part].tolist()) == sorted(chunks[part].tolist())
    assert got.tolist() != chunks.tolist()  # (mixed within each window)
    # (and not the chunk order's rows unmixed: each share's window mixed)
    assert got.tolist() != base.unmixed(np.arange(n, dtype=np.int64)).tolist()


def test_a_declared_total_size_of_a_ranges_stream_must_be_its_rows():
    with pytest.raises(ValueError, match="total_size=99"):
        DataLoader(_chunks(100, 10), 8, elastic="ranges", total_size=99)


def _handed_out(loaders):
    """The rows every loader hands out in an epoch, as the ledger counts them."""
    out = Tally()
    for loader in loaders:
        for batch in loader:
            ids = _ids(batch)
            out.add(len(ids), rows_digest(ids))
    return out


@pytest.mark.parametrize("drop_last,even", [(False, False), (True, False), (False, True)])
def test_the_global_promise_is_every_ranks_rows(drop_last, even):
    """global_promise: the rows every rank hands out in an epoch (what drop_last leaves of
    each share, and even_batches of the longer ones, left out)."""
    n, b, seed = 1922, 64, 2  # shares of 640, 641 and 641 rows: 10, 11 and 11 batches
    x = np.arange(float(n)).reshape(n, 1)
    kw = {"drop_last": drop_last, "even_batches": even, "seed": seed, "elastic": "ranges"}
    loaders = [DataLoader(x, b, num_shards=3, shard_index=r, **kw) for r in range(3)]
    want = _handed_out(loaders)
    assert want.rows < n if drop_last or even else want.rows == n
    for loader in loaders:
        feed = loader._feed
        got = feed.global_promise(feed.open_epoch(seed, 0, 0), ())
        assert (got.rows, got.digest) == (want.rows, want.digest)


def test_the_global_promise_of_a_subset_is_every_ranks_source_rows():
    """rows=: the ledger counts the source's row ids (a subset's ids taken), as handed out."""
    n, b, seed = 3000, 64, 2
    x = np.arange(float(n)).reshape(n, 1)
    subset = np.random.default_rng(0).permutation(n)[:1922]
    kw = {"rows": subset, "seed": seed, "elastic": "ranges", "even_batches": True}
    loaders = [DataLoader(x, b, num_shards=3, shard_index=r, **kw) for r in range(3)]
    want = _handed_out(loaders)
    assert want.rows == 3 * 640
    feed = loaders[1]._feed
    got = feed.global_promise(feed.open_epoch(seed, 0, 0), ())
    assert (got.rows, got.digest) == (want.rows, want.digest)


@pytest.mark.parametrize(
    "kw,counts",
    [
        ({}, [10, 11, 11]),
        ({"drop_last": True}, [10, 10, 10]),
        ({"even_batches": True}, [10, 10, 10]),
        ({"even_batches": "pad"}, [11, 11, 11]),
    ],
)
def test_each_ranks_batches_of_its_share(kw, counts):
    """Shares of 640, 641 and 641 rows in batches of 64: 10, 11 and 11 batches (the
    smallest under even_batches=True, the largest under "pad")."""
    x = np.zeros((1922, 1))
    for r in range(3):
        loader = DataLoader(x, 64, num_shards=3, shard_index=r, elastic="ranges", **kw)
        assert len(loader) == loader._feed.dealing.nbatches == counts[r]
        assert sum(1 for _ in loader) == counts[r]


def test_each_checkpoint_of_an_epoch_carries_every_ranks_rows_so_far():
    """States taken step after step (the ranks in lockstep): each one's ledger is the rows
    every rank handed out before it, as rank 0 measures it (the others' from the order)."""
    n, b = 1922, 64
    x = np.arange(float(n)).reshape(n, 1)
    loaders = [
        DataLoader(x, b, num_shards=3, shard_index=r, elastic="ranges", seed=5) for r in range(3)
    ]
    its = [iter(ld) for ld in loaders]
    want = Tally()
    for step in range(4):
        for it in its:
            ids = _ids(next(it))
            want.add(len(ids), rows_digest(ids))
        for r in (0, 2):
            ledger = loaders[r].state_dict()["ledger"]
            assert ledger == {"rows": want.rows, "digest": f"{want.digest:016x}"}, (step, r)


def _steps_of(x, b, ranks, epoch, seed):
    """Each rank's batches of an epoch as Tallies, step by step (the ranks in lockstep)."""
    out = []
    for r in range(ranks):
        loader = DataLoader(x, b, num_shards=ranks, shard_index=r, elastic="ranges", seed=seed)
        loader.set_epoch(epoch)
        steps = []
        for batch in loader:
            ids = _ids(batch)
            steps.append(Tally(len(ids), rows_digest(ids)))
        out.append(steps)
    return out


def _sum(tallies):
    out = Tally()
    for t in tallies:
        out.add(t.rows, t.digest)
    return out


def test_a_ranges_ledger_asked_in_turn_is_every_ranks_rows_so_far():
    """global_ledger of one dealing asked for states in turn - later in an epoch, earlier,
    another epoch, a resume that goes on with its segment (its steps before counted
    once) - is each time this rank's own ledger plus the other ranks' steps since."""
    n, b, seed = 1922, 64, 5
    x = np.arange(float(n)).reshape(n, 1)
    steps = {e: _steps_of(x, b, 3, e, seed) for e in (0, 1)}
    dealing = DataLoader(x, b, num_shards=3, elastic="ranges", seed=seed)._feed.dealing
    for epoch, before, done in [(0, 0, 2), (0, 0, 4), (0, 0, 1), (1, 0, 3), (1, 2, 4), (0, 3, 5)]:
        per = steps[epoch]
        # the state resumed after `before` steps of every rank (its ledger those), then
        # this rank's own steps to `done`
        ledger = _sum([t for r in range(3) for t in per[r][:before]] + per[0][before:done])
        first = ((3, before),) if before else ()
        at = SimpleNamespace(seed=seed, epoch=epoch, first=first, done=done, ledger=ledger)
        got = dealing.global_ledger(at)
        want = _sum([t for r in range(3) for t in per[r][:done]])
        assert (got.rows, got.digest) == (want.rows, want.digest), (epoch, before, done)


@pytest.mark.parametrize("drop_last", [False, True])
def test_a_resumed_ranks_positions_plan_and_promise_are_of_the_segment_in_progress(drop_last):
    """After a segment of 2 ranks' 2 steps (256 rows), 1666 rows are left: shares of 555,
    555 and 556 at 3 ranks; the promise of all ranks' rows is every row handed out in
    the first segment and each rank's share of the second (with drop_last, its full
    batches: 8 a rank, not the 10 of a share of the whole epoch)."""
    n, b, seed = 1922, 64, 5
    x = np.arange(float(n)).reshape(n, 1)
    first = ((2, 2),)
    kw = {"elastic": "ranges", "seed": seed, "drop_last": drop_last}
    old = [DataLoader(x, b, num_shards=2, shard_index=r, **kw) for r in (0, 1)]
    states = []
    handed = Tally()
    for loader in old:
        it = iter(loader)
        for _ in range(2):
            ids = _ids(next(it))
            handed.add(len(ids), rows_digest(ids))
        states.append(loader.state_dict())
    assert states[0]["segments"] == [[2, 2]]
    for r, size in enumerate([555, 555, 556]):
        loader = DataLoader(x, b, num_shards=3, shard_index=r, **kw)
        dealing = loader._feed.dealing
        assert dealing.positions(-5, 10**6, first).tolist() == list(range(size))
        assert dealing.plan(first).size == size
        loader.load_state_dict(states[0])
        for batch in loader:
            ids = _ids(batch)
            handed.add(len(ids), rows_digest(ids))
    feed = loader._feed
    got = feed.global_promise(feed.open_epoch(seed, 0, 0, first), first)
    assert handed.rows == (256 + 3 * 8 * 64 if drop_last else n)
    assert (got.rows, got.digest) == (handed.rows, handed.digest)
