"""Sharding for distributed jobs: "auto" shards, even_batches and elastic order."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from laws import check_epoch

from exactbatch import DataLoader, open_ndf, save_ndf
from exactbatch.distributed import distributed_shard
from exactbatch.order import epoch_rows


def ids(n):
    return np.arange(n, dtype=np.float64).reshape(n, 1)


def rows(loader):
    return [xb[:, 0].astype(np.int64).tolist() for xb, _ in loader]


# -- "auto" -------------------------------------------------------------------


def test_auto_shards_come_from_the_environment(monkeypatch):
    """With RANK/WORLD_SIZE set (torchrun does), "auto" takes them."""
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = DataLoader(ids(10), 2, num_shards="auto", shard_index="auto")
    assert (loader.num_shards, loader.shard_index, loader.n) == (3, 2, 4)


def test_auto_shards_default_to_one_shard(monkeypatch):
    """Without torch.distributed or the environment, "auto" is one shard."""
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert distributed_shard() == (1, 0)
    loader = DataLoader(ids(10), 2, num_shards="auto", shard_index="auto")
    assert (loader.num_shards, loader.shard_index, loader.n) == (1, 0, 10)


@pytest.mark.parametrize("rank,world", [("3", "3"), ("x", "2"), ("0", None), ("-1", "2")])
def test_auto_shards_refuse_a_bad_environment(monkeypatch, rank, world):
    """A RANK/WORLD_SIZE pair that is not 0 <= RANK < WORLD_SIZE is a ValueError naming them."""
    monkeypatch.setenv("RANK", rank)
    if world is None:
        monkeypatch.delenv("WORLD_SIZE", raising=False)
    else:
        monkeypatch.setenv("WORLD_SIZE", world)
    with pytest.raises(ValueError, match="RANK"):
        DataLoader(ids(10), 2, num_shards="auto", shard_index="auto")


def test_other_strings_are_refused():
    """Only the string "auto" is accepted for the shard arguments."""
    with pytest.raises(ValueError, match="auto"):
        DataLoader(ids(10), 2, num_shards="all")


# -- even_batches ---------------------------------------------------------------


@settings(max_examples=150)
@given(
    n=st.integers(0, 400),
    shards=st.integers(1, 7),
    batch=st.integers(1, 40),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    elastic=st.booleans(),
)
def test_even_batches_gives_every_shard_the_same_count(
    n, shards, batch, drop_last, shuffle, elastic
):
    """With even_batches every shard yields len(loader) batches, the same for all: the
    epoch law (laws.check_epoch) with the smallest shard's count; under contiguous sharding
    at most one batch per shard is left out."""
    loaders = [
        DataLoader(
            ids(n),
            batch,
            shuffle=shuffle,
            drop_last=drop_last,
            num_shards=shards,
            shard_index=s,
            even_batches=True,
            elastic=elastic,
            seed=3,
        )
        for s in range(shards)
    ]
    counts = {len(ld) for ld in loaders}
    assert len(counts) == 1
    got = [rows(ld) for ld in loaders]
    check_epoch(
        got,
        n=n,
        batch_size=batch,
        drop_last=drop_last,
        shuffle=shuffle,
        even_batches=True,
        elastic=elastic,
    )
    assert {len(g) for g in got} == counts
    if not elastic:
        full = [
            DataLoader(ids(n), batch, drop_last=drop_last, num_shards=shards, shard_index=s)
            for s in range(shards)
        ]
        assert all(len(f) - len(ld) <= 1 for f, ld in zip(full, loaders, strict=True))


def test_even_batches_needs_a_known_size():
    """A stream of unknown size cannot promise equal counts: ValueError at construction."""
    with pytest.raises(ValueError, match="even_batches"):
        DataLoader([ids(10)], 2, total_size=None, even_batches=True, num_shards=2)


# -- elastic ----------------------------------------------------------------------


@settings(max_examples=100)
@given(
    n=st.integers(0, 500),
    shards=st.integers(1, 7),
    batch=st.integers(1, 50),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**32),
)
def test_elastic_shards_hand_out_every_row_once(n, shards, batch, shuffle, seed):
    """Elastic shards deal one global order's batches: the epoch law (laws.check_epoch),
    across shards every row once."""
    got = []
    for s in range(shards):
        ld = DataLoader(
            ids(n),
            batch,
            shuffle=shuffle,
            num_shards=shards,
            shard_index=s,
            elastic=True,
            seed=seed,
        )
        r = rows(ld)
        assert len(r) == len(ld)
        assert sum(map(len, r)) == ld.n
        got.append(r)
    check_epoch(got, n=n, batch_size=batch, drop_last=False, shuffle=shuffle, elastic=True)


def test_elastic_global_order_does_not_depend_on_the_shard_count():
    """Under elastic, the global order of an epoch is a function of (seed, epoch) alone."""

    def global_order(shards):
        per = [
            rows(DataLoader(ids(1000), 16, num_shards=shards, shard_index=s, elastic=True, seed=7))
            for s in range(shards)
        ]
        out = [None] * sum(map(len, per))
        for s, batches in enumerate(per):
            for j, b in enumerate(batches):
                out[s + j * shards] = b
        return np.concatenate(out)

    assert np.array_equal(global_order(1), global_order(3))
    assert np.array_equal(global_order(2), global_order(5))


@pytest.mark.parametrize("taken", [0, 1, 5, 20])
def test_elastic_checkpoint_at_three_shards_resumes_at_two(taken):
    """Checkpoint mid-epoch at 3 lockstep shards, resume at 2: the union of the rows
    handed out before and after is every row exactly once, and the next epoch is whole."""
    n, b = 1000, 16
    before, states = [], []
    for s in range(3):
        ld = DataLoader(ids(n), b, num_shards=3, shard_index=s, elastic=True, seed=11)
        it = iter(ld)
        before += [next(it)[0][:, 0].astype(np.int64) for _ in range(taken)]
        states.append(ld.state_dict())
    assert len({st["global_batches_done"] for st in states}) == 1
    after, next_epoch = [], []
    for s in range(2):
        ld = DataLoader(ids(n), b, num_shards=2, shard_index=s, elastic=True, seed=11)
        ld.load_state_dict(states[s % 3])
        after += rows(ld)
        next_epoch += rows(ld)
    flat = np.concatenate(before + after)
    assert np.array_equal(np.sort(flat), np.arange(n))
    assert np.array_equal(np.sort(np.concatenate(next_epoch)), np.arange(n))


def test_elastic_needs_a_random_access_source_or_an_indexed_stream():
    """A stream read front to back (a generator factory) cannot be re-dealt mid-epoch:
    elastic on it is a ValueError saying why; a list of arrays is indexed, and elastic."""
    with pytest.raises(ValueError, match=r"elastic=True needs .* read front to back"):
        DataLoader(lambda: iter([ids(10)]), 2, total_size=10, elastic=True)
    loader = DataLoader([ids(4), ids(6)[4:]], 2, elastic=True, num_shards=2)
    assert len(loader) == 2 and loader.total_size == 6


# -- each shard's order is its own key's ----------------------------------------------


@pytest.mark.parametrize("kind", ["pair", "ndf"])
@pytest.mark.parametrize("n, shards, batch", [(103, 3, 8), (64, 2, 5), (10, 4, 3)])
def test_each_shard_hands_out_the_order_keyed_by_seed_epoch_and_its_own_index(
    tmp_path, kind, n, shards, batch
):
    """Epoch e of shard s is its rows [s*n//S, (s+1)*n//S) in the order of
    EpochBijection(shard size, seed, e, shard=s), cut into batches: pinned per
    (seed, epoch, shard), and no two shards share an order."""
    x = ids(n)
    if kind == "ndf":
        save_ndf(tmp_path / "d.ndf", x)
    for seed in (0, 9):
        relative = {}
        for s in range(shards):
            source = open_ndf(tmp_path / "d.ndf") if kind == "ndf" else (x, np.zeros((n, 0)))
            loader = DataLoader(source, batch, seed=seed, num_shards=shards, shard_index=s)
            start, stop = s * n // shards, (s + 1) * n // shards
            for epoch in range(3):
                loader.set_epoch(epoch)
                got = rows(loader)
                want = start + epoch_rows(stop - start, seed=seed, epoch=epoch, shard=s)
                assert [len(b) for b in got] == [
                    len(b) for b in np.split(want, range(batch, stop - start, batch))
                ]
                assert np.array_equal(np.concatenate(got), want), (seed, s, epoch)
                relative[s, epoch] = np.concatenate(got) - start
        for epoch in range(3):  # the shards' orders differ (as positions within the shard)
            for a in range(shards if n // shards >= 10 else 0):
                for b in range(a + 1, shards):
                    m = min(len(relative[a, epoch]), len(relative[b, epoch]))
                    assert not np.array_equal(relative[a, epoch][:m], relative[b, epoch][:m])


@pytest.mark.parametrize("shards", [1, 2, 3])
def test_elastic_order_is_the_global_order_of_shard_key_0_dealt_in_turn(shards):
    """Under elastic sharding every shard slices one global order, keyed (seed, epoch, 0):
    shard s hands out global batches s, s + S, ... of it."""
    n, batch = 50, 4
    for epoch in range(2):
        whole = epoch_rows(n, seed=5, epoch=epoch, shard=0)
        global_batches = [whole[a : a + batch] for a in range(0, n, batch)]
        for s in range(shards):
            loader = DataLoader(
                ids(n), batch, seed=5, num_shards=shards, shard_index=s, elastic=True
            )
            loader.set_epoch(epoch)
            got = rows(loader)
            want = global_batches[s::shards]
            assert len(got) == len(want)
            assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
