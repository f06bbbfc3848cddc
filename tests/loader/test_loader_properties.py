"""Property tests of the random-access DataLoader (hypothesis).

Over n in 0..5000, d in 1..8, l in 0..3, batch_size in 1..n+3, 1..7 shards,
drop_last and shuffle on or off, any seed and epoch:

* the epoch law (laws.check_epoch): without drop_last, across all shards
  every row is handed out exactly once per epoch, each shard its own range,
  in ceil(n_s/b) batches; with drop_last every batch is full and each shard
  hands out exactly floor(n_s/b)*b distinct rows of its own range;
* the order is a pure function of (seed, epoch, shard);
* in-memory sources (pair, Dataset, bare array) and the .ndf path give
  identical batches.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
from helpers import check_rows, ids, make_data, make_source
from hypothesis import given, settings
from hypothesis import strategies as st
from laws import check_epoch, shard_bounds

from exactbatch import DataLoader


@st.composite
def configs(draw, max_n=5000):
    n = draw(st.integers(0, max_n))
    return {
        "n": n,
        "d": draw(st.integers(1, 8)),
        "l": draw(st.integers(0, 3)),
        "batch_size": draw(st.integers(1, n + 3)),
        "num_shards": draw(st.integers(1, 7)),
        "drop_last": draw(st.booleans()),
        "shuffle": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**63 - 1)),
        "epoch": draw(st.integers(0, 1000)),
    }


def loader_kwargs(c, shard):
    return dict(
        shuffle=c["shuffle"],
        seed=c["seed"],
        drop_last=c["drop_last"],
        num_shards=c["num_shards"],
        shard_index=shard,
    )


def epoch_of(loader, epoch, d, l):  # noqa: E741
    """Batches (x, y) of epoch ``epoch``, each checked to hold intact source rows."""
    loader.set_epoch(epoch)
    out = []
    for xb, yb in loader:
        check_rows(xb, yb, d, l)
        out.append((xb, yb))
    return out


def row_ids(batches):
    return [ids(xb) for xb, _ in batches]


@settings(max_examples=100)
@given(configs())
def test_every_row_once_per_epoch_across_shards_or_full_batches_with_drop_last(c):
    """The epoch law (laws.check_epoch): without drop_last each row goes out exactly once
    per epoch across shards (each shard its own range, ceil(n_s/b) batches, only the last
    partial); with drop_last every batch is full and shard s hands out exactly
    floor(n_s/b)*b distinct rows of its range; unshuffled, in file order."""
    n, d, l, b, S = c["n"], c["d"], c["l"], c["batch_size"], c["num_shards"]  # noqa: E741, N806
    x, y = make_data(n, d, l)
    per_shard = []
    for s in range(S):
        lo, hi = shard_bounds(n, S, s)
        loader = DataLoader((x, y), b, **loader_kwargs(c, s))
        assert loader.n == hi - lo
        assert loader.total_size == n
        batches = row_ids(epoch_of(loader, c["epoch"], d, l))
        assert len(loader) == len(batches)
        per_shard.append(batches)
    check_epoch(per_shard, n=n, batch_size=b, drop_last=c["drop_last"], shuffle=c["shuffle"])


@settings(max_examples=100)
@given(configs(max_n=2000), st.data())
def test_order_is_a_pure_function_of_seed_epoch_and_shard(c, data):
    """Two fresh loaders agree on (seed, epoch, shard); so does one that was used, then
    set_epoch(epoch); and a fresh loader's (epoch+1)-th iteration when epoch is small."""
    n, d, l, b, S = c["n"], c["d"], c["l"], c["batch_size"], c["num_shards"]  # noqa: E741, N806
    s = data.draw(st.integers(0, S - 1), label="shard")
    x, y = make_data(n, d, l)
    kw = loader_kwargs(c, s)
    e = c["epoch"]
    first = row_ids(epoch_of(DataLoader((x, y), b, **kw), e, d, l))
    assert row_ids(epoch_of(DataLoader((x, y), b, **kw), e, d, l)) == first

    used = DataLoader((x, y), b, **kw)
    list(used)
    it = iter(used)
    next(it, None)
    used.set_epoch(data.draw(st.integers(0, 50), label="other epoch"))
    list(used)
    assert row_ids(epoch_of(used, e, d, l)) == first

    small = data.draw(st.integers(0, 4), label="small epoch")
    fresh = DataLoader((x, y), b, **kw)
    for _ in range(small):
        list(fresh)
    assert row_ids(list(fresh)) == row_ids(epoch_of(DataLoader((x, y), b, **kw), small, d, l))

    # reset(seed) is the same as a fresh loader with that seed
    used.reset(c["seed"])
    used.set_epoch(e)
    assert row_ids(list(used)) == first


@settings(max_examples=60)
@given(configs(max_n=5000), st.data())
def test_memory_and_ndf_sources_give_identical_batches(c, data):
    """A pair, a Dataset, a bare array (when l == 0) and an .ndf file with the same rows give
    identical batches, values included, for identical settings."""
    n, d, l, b, S = c["n"], c["d"], c["l"], c["batch_size"], c["num_shards"]  # noqa: E741, N806
    s = data.draw(st.integers(0, S - 1), label="shard")
    x, y = make_data(n, d, l)
    kinds = ["pair", "dataset", "ndf"] + (["array"] if l == 0 else [])
    with tempfile.TemporaryDirectory() as folder:
        runs = {}
        for kind in kinds:
            source = make_source(kind, x, y, folder)
            loader = DataLoader(source, b, **loader_kwargs(c, s))
            runs[kind] = [epoch_of(loader, c["epoch"] + k, d, l) for k in range(2)]
            loader.close()
            if kind == "ndf":
                source.close()
                os.remove(source.path)
    ref = runs["pair"]
    for kind in kinds[1:]:
        got = runs[kind]
        for e_ref, e_got in zip(ref, got, strict=True):
            assert len(e_ref) == len(e_got)
            for (rx, ry), (gx, gy) in zip(e_ref, e_got, strict=True):
                np.testing.assert_array_equal(rx, gx)
                np.testing.assert_array_equal(ry, gy)


@settings(max_examples=60)
@given(configs(max_n=1000))
def test_next_into_hands_out_the_same_batches_as_iter(c):
    """next_into yields the same batches, in the same order, as iter() for the same epoch."""
    n, d, l, b, S = c["n"], c["d"], c["l"], c["batch_size"], c["num_shards"]  # noqa: E741, N806
    x, y = make_data(n, d, l)
    for s in range(S):
        kw = loader_kwargs(c, s)
        want = row_ids(epoch_of(DataLoader((x, y), b, **kw), c["epoch"], d, l))
        loader = DataLoader((x, y), b, **kw)
        loader.set_epoch(c["epoch"])
        bx, by = np.empty((b, d)), np.empty((b, l))
        got = []
        while (r := loader.next_into(bx, by)) > 0:
            assert loader.last_rows == r
            check_rows(bx[:r], by[:r], d, l)
            got.append(ids(bx[:r]))
        assert got == want
        assert loader.next_into(bx, by) == 0
