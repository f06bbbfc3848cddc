"""The ranges rule of elastic="ranges" (exactbatch.order.ranges): each segment's agenda
split among the ranks in contiguous shares, the rest re-dealt; every position handed
out once whatever the world-size history. Checked against the rule written out here
and against bench/elastic_ranges_rule.py's model, an independent implementation."""

from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch.order.ranges import (
    Piece,
    RangesOrder,
    agenda_after,
    agenda_at,
    check_segments,
    deal,
    first_agenda,
    remaining,
    rest,
    segments_of,
    share,
)

histories = st.lists(st.tuples(st.integers(1, 5), st.integers(0, 12)), max_size=4)


def run_history(n, window, batch, history, seed=1, epoch=0, mix=True):
    """Each segment's hand-outs, rank by rank (a list of position arrays), and the final
    segment run to its end at ``last`` ranks, as the loader would hand them out."""
    agenda, handed, steps = first_agenda(n), [], []
    for count, done in history:
        per_rank = []
        for r in range(count):
            order = RangesOrder(deal(agenda, count, r, window), seed=seed, epoch=epoch, mix=mix)
            k = order.n if done is None else min(done * batch, order.n)
            per_rank.append(order.rows(0, k))
            steps.append(-(-order.n // batch))
        handed.append(per_rank)
        if done is not None:
            agenda = agenda_after(agenda, count, done, window, batch)
    return handed, agenda


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(0, 300),
    window=st.integers(1, 60),
    batch=st.integers(1, 20),
    history=histories,
    last=st.integers(1, 5),
    seed=st.integers(0, 2**20),
)
def test_any_history_hands_out_every_position_once(n, window, batch, history, last, seed):
    """Every segment partitions its agenda; the next agenda is exactly what was not handed
    out (as a set, and its size from the shares alone); the ranks of a segment differ by
    at most one batch; the last segment, run to its end, leaves nothing."""
    agenda, seen = first_agenda(n), []
    for count, done in [*history, (last, None)]:
        m = sum(p.rows for p in agenda)
        orders = [deal(agenda, count, r, window) for r in range(count)]
        sizes = [sum(p.rows for p in o) for o in orders]
        assert sizes == [share(m, count, r)[1] - share(m, count, r)[0] for r in range(count)]
        batches = [-(-s // batch) for s in sizes]
        assert max(batches) - min(batches) <= 1
        dealt = np.concatenate(
            [
                RangesOrder(o, seed=seed, epoch=2).rows(0, s)
                for o, s in zip(orders, sizes, strict=True)
            ]
            or [[]]
        )
        want = RangesOrder(agenda, seed=seed, epoch=2).rows(0, m)
        assert sorted(dealt.tolist()) == sorted(want.tolist())  # a partition of the agenda
        for o in orders:
            for p in o:  # a piece mixes only within its window
                rows = RangesOrder([p], seed=seed, epoch=2).rows(0, p.rows)
                assert ((rows >= p.lo) & (rows < p.lo + p.size)).all()
        for o, s in zip(orders, sizes, strict=True):
            k = s if done is None else min(done * batch, s)
            seen += RangesOrder(o, seed=seed, epoch=2).rows(0, k).tolist()
        if done is not None:
            agenda = agenda_after(agenda, count, done, window, batch)
            left_order = RangesOrder(agenda, seed=seed, epoch=2)
            left = set(left_order.rows(0, left_order.n).tolist())
            assert left == set(range(n)) - set(seen) and len(seen) == len(set(seen))
    assert sorted(seen) == list(range(n))
    segments = [(c, d) for c, d in history]
    assert remaining(n, batch, segments) == sum(
        p.rows for p in agenda_at(n, window, batch, segments)
    )


def _model():
    path = pathlib.Path(__file__).resolve().parents[2] / "bench" / "elastic_ranges_rule.py"
    spec = importlib.util.spec_from_file_location("elastic_ranges_rule", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("trial", range(40))
def test_the_rule_is_the_models_rule(trial, monkeypatch):
    """Unmixed (the model's windows left in order, ours too), each rank of each segment
    hands out the same positions, in the same order, as bench/elastic_ranges_rule.py."""
    model = _model()
    monkeypatch.setattr(model, "_mixed", lambda rows, seed, epoch: rows)
    rng = np.random.default_rng(trial)
    n, window, batch = int(rng.integers(1, 400)), int(rng.integers(1, 80)), int(rng.integers(1, 30))
    history = [(int(rng.integers(1, 6)), int(rng.integers(0, 10))) for _ in range(3)]
    agenda = [(False, np.arange(n))]
    ours, _ = run_history(n, window, batch, [*history, (3, None)], mix=False)
    for (count, done), mine in zip([*history, (3, None)], ours, strict=True):
        streams = model.deal(agenda, count, window, 1, 0)
        for stream, got in zip(streams, mine, strict=True):
            flat = np.concatenate([x for _, x in stream]) if stream else np.zeros(0, np.int64)
            k = len(flat) if done is None else min(len(flat), done * batch)
            assert got.tolist() == flat[:k].tolist()
        if done is not None:
            agenda = [
                piece
                for s in streams
                for piece in model.rest(s, min(done * batch, sum(len(x) for _, x in s)))
            ]


def test_a_first_segment_is_contiguous_shares_cut_into_windows_from_their_start():
    """DESIGN's range rule: rank r of S takes [r*n//S, (r+1)*n//S), in windows from its
    first position; no window straddles two ranks."""
    assert deal(first_agenda(10), 3, 1, 2) == [Piece(3, 2, 0, 2, True), Piece(5, 1, 0, 1, True)]
    assert deal(first_agenda(10), 3, 2, 3) == [Piece(6, 3, 0, 3, True), Piece(9, 1, 0, 1, True)]
    assert deal(first_agenda(0), 2, 0, 3) == []
    order = RangesOrder(deal(first_agenda(100), 4, 2, 10), seed=5, epoch=1)
    assert sorted(order.rows(0, order.n).tolist()) == list(range(50, 75))
    assert sorted(order.rows(0, 10).tolist()) == list(range(50, 60))  # its first window


def test_a_resume_goes_on_with_the_window_in_progress_in_its_order():
    """The rest of a rank's window in progress keeps its order: after 2 steps of 4 rows at
    2 ranks, then 1 rank, rank 0's next rows are its old order's next rows."""
    agenda = first_agenda(40)
    old = RangesOrder(deal(agenda, 2, 0, 10), seed=9, epoch=3)
    later = agenda_after(agenda, 2, 2, 10, 4)
    assert later[0] == Piece(0, 10, 8, 10, True)  # the window in progress, its last two
    assert later[1] == Piece(10, 10, 0, 10, False)  # a window not begun: a run again
    new = RangesOrder(deal(later, 1, 0, 10), seed=9, epoch=3)
    assert new.rows(0, 2).tolist() == old.rows(8, 10).tolist()
    assert rest(deal(agenda, 2, 0, 10), 20) == []


def test_without_mixing_pieces_are_base_order_and_base_maps_them():
    order = RangesOrder(deal(first_agenda(12), 2, 1, 4), seed=0, epoch=0, mix=False)
    assert order.rows(0, 6).tolist() == [6, 7, 8, 9, 10, 11]
    mapped = RangesOrder(first_agenda(6), seed=0, epoch=0, mix=False, base=lambda p: 100 - p)
    assert mapped(np.array([[0, 5]])).tolist() == [[100, 95]]
    with pytest.raises(IndexError, match="out of range"):
        order(np.array([6]))


@pytest.mark.parametrize(
    ("segments", "error", "match"),
    [
        ("3", TypeError, r"state\['segments'\] must be a list"),
        ([[2]], ValueError, r"state\['segments'\]\[0\] must be \[num_shards, steps\]"),
        ([[2, True]], ValueError, "two ints"),
        ([[0, 1]], ValueError, "num_shards >= 1"),
        ([[2, -1]], ValueError, "stepping at most 5 times"),
        ([[2, 6]], ValueError, "stepping at most 5 times"),  # 100 rows, 2 ranks, batch 10
        ([[2, 5], [3, 1]], ValueError, r"\[1\]=\[3, 1\].* at most 0 times"),  # nothing left
    ],
)
def test_bad_segments_are_refused_naming_the_key(segments, error, match):
    with pytest.raises(error, match=match):
        check_segments(segments, 100, 10, "state['segments']")


def test_segments_read_back_as_tuples():
    assert check_segments([[2, 3], [1, 0]], 100, 10, "s") == ((2, 3), (1, 0))
    assert segments_of(0) == segments_of(()) == ()
    assert segments_of([[4, 2]]) == ((4, 2),)


@settings(max_examples=60, deadline=None)
@given(
    chunk_rows=st.lists(st.integers(0, 30), min_size=1, max_size=10),
    window=st.integers(1, 40),
    history=histories,
    count=st.integers(1, 4),
    cut=st.tuples(st.integers(0, 400), st.integers(0, 400)),
    mix=st.booleans(),
)
def test_row_sets_are_the_rows_of_a_span_as_a_set(chunk_rows, window, history, count, cut, mix):
    """A span's rows as runs and arrays (what a digest is taken of) are exactly its rows,
    each once, through a stream's chunk order (WindowedOrder.unmixed_ranges) or none."""
    from exactbatch.order.windows import WindowedOrder

    n = sum(chunk_rows)
    chunks = WindowedOrder(chunk_rows, window, seed=4, epoch=1)
    agenda = agenda_at(n, window, 3, history)
    for base in (None, chunks):
        kw = {} if base is None else {"base": base.unmixed, "base_ranges": base.unmixed_ranges}
        for pieces in (agenda, deal(agenda, count, count - 1, window)):
            order = RangesOrder(pieces, seed=4, epoch=1, mix=mix, **kw)
            a, z = sorted(min(c, order.n) for c in cut)
            runs, arrays = order.row_sets(a, z)
            got = [r for lo, hi in runs for r in range(lo, hi)]
            got += [int(r) for rows in arrays for r in rows]
            assert sorted(got) == sorted(order.rows(a, z).tolist())


def test_a_window_is_keyed_by_seed_epoch_its_first_position_and_length():
    """The documented key: window (lo, size) of epoch e is EpochBijection(size, seed,
    e, shard=lo) of its positions; two windows of one size mix alike only by chance."""
    from exactbatch.order.bijection import EpochBijection

    pieces = [Piece(0, 10, 0, 10, True), Piece(10, 10, 0, 10, True), Piece(20, 7, 0, 7, True)]
    order = RangesOrder(pieces, seed=11, epoch=2)
    for p, start in zip(pieces, (0, 10, 20), strict=True):
        want = p.lo + EpochBijection(p.size, seed=11, epoch=2, shard=p.lo)(np.arange(p.size))
        assert order.rows(start, start + p.size).tolist() == want.tolist()
    assert (order.rows(0, 10) - 0).tolist() != (order.rows(10, 20) - 10).tolist()
    part = RangesOrder([Piece(10, 10, 4, 9, True)], seed=11, epoch=2)  # a remainder
    assert part.rows(0, 5).tolist() == order.rows(14, 19).tolist()
