"""Hypothesis properties of streamed epochs: re-batching, shuffle, sharding, resume.

For any chunk sizes (1-row chunks, empty chunks, one chunk holding
everything), any chunk form, batch size, buffer size and shard count:

* an unshuffled epoch reproduces every row exactly once in source order,
  every batch full but the last (dropped under drop_last);
* a shuffled epoch is a permutation of the rows, less fewer than batch_size
  rows under drop_last;
* batches are fresh arrays even when the source reuses one output buffer;
* shards hand out every row exactly once: row ranges [s*N//S, (s+1)*N//S)
  of the stream for a known size, chunks s, s+S, ... for total_size=None;
* next_into agrees with iteration, and state_dict resumes with exactly the
  remaining batches.
"""

from __future__ import annotations

import warnings

import numpy as np
from helpers import chunk_bounds, collect, make_x, make_y, next_into_ids
from hypothesis import given, settings
from hypothesis import strategies as st
from laws import check_epoch, check_resume

from exactbatch import DataLoader

D = 3

sizes_st = st.one_of(
    st.lists(st.integers(0, 12), min_size=0, max_size=10),  # any sizes, empty chunks
    st.lists(st.sampled_from([0, 1]), min_size=0, max_size=25),  # 1-row and empty chunks
    st.integers(0, 60).map(lambda n: [n]),  # one chunk holding everything
)


def flat(batches):
    return [i for b in batches for i in b]


def build_chunks(sizes, l, forms):  # noqa: E741
    """Chunks of ``sizes`` rows; ``forms[k]`` picks chunk k's form among those legal for it."""
    out = []
    for k, (lo, hi) in enumerate(chunk_bounds(sizes)):
        r = np.arange(lo, hi)
        x, y = make_x(r, D), make_y(r, l)
        f = forms[k % len(forms)] if forms else 0
        if hi - lo == 1 and f % 2 == 1:  # a single row as 1-D arrays
            out.append(x[0] if l == 0 else (x[0], y[0]))
        elif l == 0:
            out.append(x)
        elif l == 1 and f >= 2:  # 1-D labels, l = 1
            out.append((x, y[:, 0]))
        else:
            out.append((x, y))
    return out


def as_source(chunks, kind):
    if kind == "list":
        return chunks

    def factory():
        return (c for c in chunks)

    return factory


stream_st = st.fixed_dictionaries(
    {
        "sizes": sizes_st,
        "l": st.integers(0, 2),
        "forms": st.lists(st.integers(0, 3), min_size=1, max_size=6),
        "kind": st.sampled_from(["list", "factory"]),
        "sized": st.booleans(),
    }
)


def make_loader(stream, b, **kw):
    n = sum(stream["sizes"])
    chunks = build_chunks(stream["sizes"], stream["l"], stream["forms"])
    return DataLoader(
        as_source(chunks, stream["kind"]), b, total_size=n if stream["sized"] else None, **kw
    )


@settings(max_examples=150)
@given(stream=stream_st, b=st.integers(1, 20), drop_last=st.booleans())
def test_unshuffled_epoch_is_every_row_once_in_source_order(stream, b, drop_last):
    """Unshuffled: the epoch law (laws.check_epoch): rows in source order, each once;
    batches full but the last (drop_last: gone)."""
    n = sum(stream["sizes"])
    loader = make_loader(stream, b, shuffle=False, drop_last=drop_last)
    for _ in range(2):  # and again next epoch
        got = collect(loader, D, stream["l"])
        check_epoch([got], n=n, batch_size=b, drop_last=drop_last, shuffle=False)
        if stream["sized"]:
            assert len(got) == len(loader)


@settings(max_examples=150)
@given(
    stream=stream_st,
    b=st.integers(1, 20),
    buffer_size=st.one_of(st.none(), st.integers(1, 80)),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_shuffled_epoch_is_a_permutation_less_the_dropped_tail(
    stream, b, buffer_size, drop_last, seed
):
    """Shuffled: the epoch law: a permutation of the rows; under drop_last fewer than b
    rows are left out."""
    n = sum(stream["sizes"])
    loader = make_loader(
        stream, b, shuffle=True, seed=seed, drop_last=drop_last, buffer_size=buffer_size
    )
    for _ in range(2):
        got = collect(loader, D, stream["l"])
        check_epoch([got], n=n, batch_size=b, drop_last=drop_last, shuffle=True)
        if stream["sized"]:
            assert len(got) == len(loader)


@settings(max_examples=100)
@given(
    sizes=sizes_st,
    l=st.integers(0, 2),
    b=st.integers(1, 16),
    shuffle=st.booleans(),
    buffer_size=st.integers(1, 40),
    sized=st.booleans(),
)
def test_source_reusing_one_buffer_gives_intact_rows(sizes, l, b, shuffle, buffer_size, sized):  # noqa: E741
    """A source that overwrites ONE output buffer before each chunk still yields correct rows."""
    n = sum(sizes)
    big = max(sizes, default=0)
    bx, by = np.empty((big, D)), np.empty((big, l))

    def factory():
        def gen():
            for lo, hi in chunk_bounds(sizes):
                r = np.arange(lo, hi)
                bx[: hi - lo] = make_x(r, D)
                by[: hi - lo] = make_y(r, l)
                yield (bx[: hi - lo], by[: hi - lo]) if l else bx[: hi - lo]
            bx.fill(-7.0)
            by.fill(-7.0)

        return gen()

    loader = DataLoader(
        factory,
        b,
        shuffle=shuffle,
        seed=1,
        buffer_size=buffer_size,
        total_size=n if sized else None,
    )
    kept = list(loader)  # every batch held to the end: none may change
    rows = []
    for xb, yb in kept:
        np.testing.assert_array_equal(xb, make_x(xb[:, 0], D))
        np.testing.assert_array_equal(yb, make_y(xb[:, 0], l))
        rows += xb[:, 0].astype(int).tolist()
    assert sorted(rows) == list(range(n))


@settings(max_examples=120)
@given(
    stream=stream_st,
    shards=st.integers(1, 7),
    shuffle=st.booleans(),
    b=st.integers(1, 9),
    buffer_size=st.integers(1, 30),
    seed=st.integers(0, 1000),
)
def test_shards_of_a_stream_hand_out_every_row_once(stream, shards, shuffle, b, buffer_size, seed):
    """Shards split a sized stream by row range (the epoch law, laws.check_epoch) and an
    unsized one by chunk, each row once."""
    sizes = stream["sizes"]
    n = sum(sizes)
    bounds = chunk_bounds(sizes)
    per_shard = []
    for s in range(shards):
        loader = make_loader(
            stream,
            b,
            shuffle=shuffle,
            seed=seed,
            buffer_size=buffer_size,
            num_shards=shards,
            shard_index=s,
        )
        got = collect(loader, D, stream["l"])
        per_shard.append(got)
        if stream["sized"]:
            assert loader.n == len(range(s * n // shards, (s + 1) * n // shards))
            assert len(got) == len(loader)
            continue
        mine = [i for k, (lo, hi) in enumerate(bounds) if k % shards == s for i in range(lo, hi)]
        rows = flat(got)
        assert (sorted(rows) if shuffle else rows) == mine
        assert all(len(x) == b for x in got[:-1])
    if stream["sized"]:
        check_epoch(per_shard, n=n, batch_size=b, drop_last=False, shuffle=shuffle)
    assert sorted(flat(flat(per_shard))) == list(range(n))


@settings(max_examples=80)
@given(
    sizes=sizes_st,
    declared=st.integers(0, 80),
    shards=st.integers(1, 7),
    shuffle=st.booleans(),
    b=st.integers(1, 9),
)
def test_shards_hand_out_every_row_once_even_with_a_wrong_total_size(
    sizes, declared, shards, shuffle, b
):
    """Shard ranges come from the declared N; the last shard takes rows past N: each row once."""
    n = sum(sizes)
    chunks = build_chunks(sizes, 1, [0])
    everything = []
    for s in range(shards):
        loader = DataLoader(
            chunks,
            b,
            shuffle=shuffle,
            seed=4,
            buffer_size=7,
            total_size=declared,
            num_shards=shards,
            shard_index=s,
        )
        assert loader.n == (s + 1) * declared // shards - s * declared // shards
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the audit may (rightly) complain
            rows = flat(collect(loader, D, 1))
        lo = s * declared // shards
        hi = n if s == shards - 1 else min((s + 1) * declared // shards, n)
        assert (sorted(rows) if shuffle else rows) == list(range(lo, max(lo, hi)))
        everything += rows
    assert sorted(everything) == list(range(n))


@settings(max_examples=60)
@given(
    stream=stream_st,
    b=st.integers(1, 9),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    buffer_size=st.integers(1, 30),
)
def test_next_into_agrees_with_iteration(stream, b, shuffle, drop_last, buffer_size):
    """next_into writes the same batches iteration yields, for a loader built alike."""
    kw = {"shuffle": shuffle, "drop_last": drop_last, "buffer_size": buffer_size, "seed": 3}
    ref = collect(make_loader(stream, b, **kw), D, stream["l"])
    if not stream["sizes"]:
        return  # no chunk at all: see test_next_into_on_a_stream_with_no_chunks_returns_zero
    assert next_into_ids(make_loader(stream, b, **kw), D, stream["l"]) == ref


@settings(max_examples=60)
@given(
    stream=stream_st,
    b=st.integers(1, 9),
    shuffle=st.booleans(),
    drop_last=st.booleans(),
    buffer_size=st.integers(1, 30),
    data=st.data(),
)
def test_state_dict_resumes_with_exactly_the_remaining_batches(
    stream, b, shuffle, drop_last, buffer_size, data
):
    """A loader restored mid-epoch from state_dict hands out exactly the batches left, then
    the next epoch (laws.check_resume, cut at one drawn batch)."""
    kw = {"shuffle": shuffle, "drop_last": drop_last, "buffer_size": buffer_size, "seed": 8}
    ref = collect(make_loader(stream, b, **kw), D, stream["l"])
    k = data.draw(st.integers(0, len(ref)), label="batches taken")
    check_resume(lambda: make_loader(stream, b, **kw), D, stream["l"], cuts=[k])
