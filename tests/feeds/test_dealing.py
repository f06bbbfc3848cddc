"""How an epoch's batches are dealt to the shards (exactbatch.feeds.dealing): one
strategy picked where the feed opens, each dealing's epoch layout checked against the
sharding rules of DESIGN.md written out here independently."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exactbatch import DataLoader
from exactbatch.batching.blocked_order import BlockedOrder
from exactbatch.feeds import BatchSpec, Contiguous, Elastic, ElasticStreamFeed, StreamFeed
from exactbatch.feeds.dealing import GlobalBatches
from exactbatch.order import EpochBijection, Shard
from exactbatch.order.digest import Tally, range_digest, rows_digest


def _dealing(kind, n, b, count, index, **kw):
    spec = BatchSpec(b, shard=Shard(index, count), **kw)
    return kind(spec, n, None, None, None)


def _positions(plan):
    """The positions of the order each batch of ``plan`` holds, batch by batch."""
    return [np.arange(*plan.locate(k)) for k in range(plan.real)]


@pytest.mark.parametrize("n,b,count", [(103, 10, 3), (100, 10, 4), (7, 10, 3), (0, 4, 2)])
def test_contiguous_shard_s_takes_its_rows_in_batches_of_its_own_order(n, b, count):
    for s in range(count):
        deal = _dealing(Contiguous, n, b, count, s)
        start, stop = s * n // count, (s + 1) * n // count  # DESIGN.md's range rule
        plan = deal.plan(0)
        assert (deal.start, deal.n, deal.total_batches) == (start, stop - start, None)
        assert (plan.key, plan.size, plan.offset, plan.span) == (
            s,
            stop - start,
            start,
            stop - start,
        )
        assert plan.batches == plan.real == -(-(stop - start) // b)
        got = _positions(plan)
        want = [np.arange(a, min(a + b, stop - start)) for a in range(0, stop - start, b)]
        assert [g.tolist() for g in got] == [w.tolist() for w in want]
        assert deal.positions(-5, 10**6, 0).tolist() == list(range(stop - start))


@pytest.mark.parametrize("n,b,count,first", [(103, 10, 3, 0), (103, 10, 3, 4), (100, 10, 4, 2)])
def test_elastic_deals_global_batch_g_to_shard_g_mod_s_from_first(n, b, count, first):
    batches = -(-n // b)
    seen = []
    for s in range(count):
        deal = _dealing(Elastic, n, b, count, s)
        plan = deal.plan(first)
        assert (plan.key, plan.size, plan.offset, plan.span) == (0, n, 0, None)
        mine = list(range(first + s, batches, count))  # the rule, written out
        assert plan.batches == plan.real == len(mine)
        got = _positions(plan)
        assert [g.tolist() for g in got] == [list(range(g * b, min(g * b + b, n))) for g in mine]
        held = np.concatenate(got) if got else np.array([], dtype=np.int64)
        assert deal.positions(0, n, first).tolist() == held.tolist()
        assert deal.positions(25, 61, first).tolist() == held[(held >= 25) & (held < 61)].tolist()
        seen += held.tolist()
    assert sorted(seen) == list(range(first * b, n))  # every global batch from `first`, once


def test_elastic_even_batches_cap_and_pad_the_count():
    n, b, count = 103, 10, 3  # 11 global batches: shares 4, 4, 3
    capped = [_dealing(Elastic, n, b, count, s, even_batches=True).plan(0) for s in range(3)]
    padded = [_dealing(Elastic, n, b, count, s, even_batches="pad").plan(0) for s in range(3)]
    assert [p.batches for p in capped] == [3, 3, 3] and [p.real for p in capped] == [4, 4, 3]
    assert [p.batches for p in padded] == [4, 4, 4] and [p.real for p in padded] == [4, 4, 3]


def test_contiguous_has_no_global_batches():
    deal = _dealing(Contiguous, 10, 2, 2, 0)
    with pytest.raises(TypeError, match="no global batches"):
        deal.global_promise(None, 0)
    with pytest.raises(TypeError, match="no global batches"):
        deal.global_ledger(None)
    # a stream read front to back (contiguous shards) answers the feed's elastic calls alike
    x = np.arange(20.0).reshape(10, 2)
    feed = DataLoader([x[:5], x[5:]], 2, num_shards=2, total_size=10)._feed
    assert type(feed) is StreamFeed
    with pytest.raises(TypeError, match="no global batches: a shard's own promise"):
        feed.global_promise(SimpleNamespace(order=None), 0)
    with pytest.raises(TypeError, match="no global batches: the state's own ledger"):
        feed.global_ledger(None)


def test_the_feed_opened_takes_the_dealing_of_its_elastic_setting():
    x = np.arange(60.0).reshape(30, 2)
    chunks = [x[a : a + 10] for a in range(0, 30, 10)]
    for elastic, kind in ((False, Contiguous), (True, Elastic)):
        loader = DataLoader(x, 4, elastic=elastic, num_shards=2, shard_index=1)
        assert type(loader._feed.dealing) is kind
        streamed = DataLoader(
            chunks, 4, elastic=elastic, num_shards=2, shard_index=1, total_size=30
        )
        assert type(streamed._feed) is (ElasticStreamFeed if elastic else StreamFeed)
    assert type(streamed._feed.dealing) is Elastic  # a list read chunk by chunk, dealt


@pytest.mark.parametrize("first,even,stop", [(0, True, 90), (4, True, 100), (4, False, 103)])
def test_elastic_global_promise_leaves_out_the_batches_past_the_equal_shares(first, even, stop):
    """103 rows, batch 10, 3 shards: 11 global batches. Capped (even_batches=True) from
    global batch 0, each shard takes 11 // 3 = 3: batches 0..8, rows 0..89; from global
    batch 4, (11 - 4) // 3 = 2 more each: batches 0..9, rows 0..99; not capped, every
    row."""
    n, b = 103, 10

    def whole():
        return Tally(n, range_digest(0, n))

    spec = BatchSpec(b, shuffle=False, even_batches=even, shard=Shard(1, 3))
    deal = Elastic(spec, n, None, None, whole)
    got = deal.global_promise(SimpleNamespace(order=None), first)
    assert got == Tally(stop, range_digest(0, stop))


@settings(max_examples=60, deadline=None)
@given(
    total=st.integers(0, 300),
    b=st.integers(1, 40),
    subset=st.booleans(),
    shuffle=st.booleans(),
    picks=st.lists(st.integers(0, 10**6), max_size=12),
    span=st.tuples(st.integers(0, 12), st.integers(0, 12)),
)
def test_global_batches_tally_alike_from_digests_closed_forms_and_the_mapped_order(
    total, b, subset, shuffle, picks, span
):
    """The ledger's count of any set of an epoch's global batches (rows, digest) is the
    same whether summed from the digests computed with the whole order, in closed form
    (file order), or from the order's rows mapped and hashed: the digests of the rows
    those batches hold, written out here."""
    nb = -(-total // b)
    ids = np.random.default_rng(total).permutation(2 * total + 3)[:total] if subset else None
    bij = EpochBijection(total, seed=3, epoch=1) if shuffle and total else None
    blocked = BlockedOrder(bij or (lambda p: p), 0, np.int64, b, ids)
    if bij is None:  # file order: the positions themselves
        blocked.bijection = SimpleNamespace(rows=lambda a, z: np.arange(a, z), n=total)
    rows_all, digests = blocked.mapped_all(np.empty(total, dtype=np.int64))
    ways = [
        GlobalBatches(b, total, ids, bij, np.frombuffer(digests, dtype=np.uint64)),
        GlobalBatches(b, total, ids, bij, None),
    ]
    g = np.array(sorted({p % nb for p in picks}) if nb else [], dtype=np.int64)
    lo, hi = min(span[0], nb), min(span[1], nb)

    def want(batches):
        rows = [rows_all[k * b : k * b + b] for k in batches]
        rows = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
        return len(rows), rows_digest(rows)

    for way in ways:
        assert way.tally(g) == want(g.tolist())
        got = way.span(lo, hi)
        assert (got.rows, got.digest) == want(range(lo, hi))


def _global_batches(x, b, seed, epoch, **kw):
    """An elastic epoch's global batches, as row ids: one shard's batches (the global
    order is the same at any shard count)."""
    loader = DataLoader(x, b, elastic=True, seed=seed, **kw)
    loader.set_epoch(epoch)
    return [batch[0][:, 0].astype(np.int64) for batch in loader]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("subset", [False, True])
def test_an_elastic_ledger_without_the_orders_digests_is_every_shards_batches_so_far(
    shuffle, subset
):
    """global_ledger with no digests of the whole order (the feed passes them when its
    background thread has made them): from the bijection keyed (seed, epoch, 0) -
    file order unshuffled - over the subset's ids; the shard's own ledger (the
    batches before ``first``, and its own since) plus the other shards' batches since,
    for states of one dealing taken in turn over two epochs (a cache that extends the
    last state's sum, and is not another epoch's or resume's), resumed at 0 and 4."""
    n, b, count, index, seed = 230, 10, 3, 1, 7
    x = np.arange(float(n)).reshape(n, 1)
    kw = {"shuffle": shuffle, "rows": np.arange(3, 203) if subset else None}
    loader = DataLoader(x, b, num_shards=count, shard_index=index, elastic=True, seed=seed, **kw)
    dealing = loader._feed.dealing
    for epoch, first, done in [(0, 0, 2), (0, 0, 3), (0, 0, 1), (1, 0, 2), (1, 4, 2), (0, 4, 3)]:
        batches = _global_batches(x, b, seed, epoch, **kw)
        stop = first + done * count
        ledger = Tally()
        mine = [first + index + k * count for k in range(done)]
        for g in [*range(first), *mine]:  # what this shard's own ledger holds
            ledger.add(len(batches[g]), rows_digest(batches[g]))
        want = Tally()
        for g in range(stop):
            want.add(len(batches[g]), rows_digest(batches[g]))
        at = SimpleNamespace(seed=seed, epoch=epoch, first=first, done=done, ledger=ledger)
        got = dealing.global_ledger(at)
        assert (got.rows, got.digest) == (want.rows, want.digest), (epoch, first, done)


def test_a_contiguous_shards_positions_from_a_start_and_no_global_batches():
    """positions(a, z): the shard's positions in [a, z), int64; a contiguous shard (and a
    stream read front to back) has no global batches to count a ledger or promise by."""
    deal = _dealing(Contiguous, 103, 10, 3, 1)
    got = deal.positions(5, 12, 0)
    assert (got.tolist(), got.dtype) == (list(range(5, 12)), np.int64)
    assert deal.positions(30, 99, 0).tolist() == list(range(30, 34))
    with pytest.raises(TypeError) as e:
        deal.global_ledger(None)
    assert str(e.value) == "contiguous sharding has no global batches: the state's own ledger"
    with pytest.raises(TypeError) as e:
        deal.global_promise(None, 0)
    assert str(e.value) == "contiguous sharding has no global batches: each shard's own promise"
    stream = DataLoader([np.zeros((20, 1))], 4)._feed
    assert isinstance(stream, StreamFeed)
    with pytest.raises(TypeError) as e:
        stream.global_ledger(None)
    assert str(e.value) == (
        "a stream read front to back has no global batches: the state's own ledger"
    )
    with pytest.raises(TypeError) as e:
        stream.global_promise(None, 0)
    assert str(e.value) == (
        "a stream read front to back has no global batches: a shard's own promise"
    )
