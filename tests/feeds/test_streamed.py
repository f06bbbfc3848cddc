"""Streamed sources through DataLoader: the rules of DESIGN.md, one test each.

Sources are zero-argument callables, re-iterables (lists, objects whose
``__iter__`` returns a fresh iterator) and every chunk form DESIGN.md lists.
Row ``i`` of every stream is traceable (``x[i, 0] == i``, see
helpers.py), so tests check exact row ids and that every value of a
batch belongs to its row. Parquet is in sources/test_parquet.py, total_size
and its audit in test_streamed_audit.py, hypothesis properties in
test_streamed_properties.py.
"""

from __future__ import annotations

import gc
import json
import re
import tracemalloc
import warnings
import weakref

import numpy as np
import pytest
from helpers import (
    check_rows,
    chunk_bounds,
    chunks_of,
    collect,
    ids,
    make_x,
    make_y,
    next_into_ids,
)

import exactbatch.batching.buffer as buffer_module
from exactbatch import DataLoader

SIZES = [5, 1, 0, 12, 3, 7, 0, 2]  # 30 rows, an empty chunk in the middle
N = sum(SIZES)


def flat(batches):
    return [i for b in batches for i in b]


# -- 1. sources ------------------------------------------------------------------------


def test_factory_source_streams_every_row_in_order():
    """A zero-argument callable returning an iterator of chunks is a source, restarted per epoch."""
    chunks = chunks_of(SIZES, d=3, l=1)
    calls = []

    def factory():
        calls.append(1)
        return iter(chunks)

    loader = DataLoader(factory, 4, shuffle=False, total_size=N)
    for _ in range(2):
        assert flat(collect(loader, 3, 1)) == list(range(N))
    assert len(calls) == 2


def test_generator_function_source_streams_every_row():
    """A generator function (not its generator object) is a zero-argument callable source."""

    def gen():
        yield from chunks_of(SIZES, d=2, l=2)

    loader = DataLoader(gen, 7, shuffle=False, total_size=N)
    assert flat(collect(loader, 2, 2)) == list(range(N))
    assert flat(collect(loader, 2, 2)) == list(range(N))


def test_list_of_arrays_source_streams_every_row():
    """A list of arrays (x only) is a re-iterable source with l == 0."""
    chunks = chunks_of(SIZES, d=3, l=0)
    loader = DataLoader(chunks, 4, shuffle=False, total_size=N)
    got = collect(loader, 3, 0)
    assert flat(got) == list(range(N))
    assert loader.d == 3 and loader.l == 0


def test_reiterable_object_source_is_read_once_per_epoch():
    """An object whose __iter__ returns a fresh iterator is a source; each epoch calls __iter__."""

    class Chunks:
        def __init__(self):
            self.passes = 0

        def __iter__(self):
            self.passes += 1
            return iter(chunks_of(SIZES, d=3, l=1))

    src = Chunks()
    loader = DataLoader(src, 4, shuffle=False, total_size=N)
    for k in range(3):
        assert flat(collect(loader, 3, 1)) == list(range(N))
        assert src.passes == k + 1


def test_bare_iterator_is_a_type_error_naming_the_fix():
    """A bare iterator is refused at construction: TypeError naming a zero-argument function."""
    with pytest.raises(TypeError, match="zero-argument function"):
        DataLoader(iter(chunks_of(SIZES)), 4)


def test_generator_object_is_a_type_error_naming_the_fix():
    """A generator object is refused at construction: TypeError naming a zero-argument function."""

    def gen():
        yield from chunks_of(SIZES)

    g = gen()
    with pytest.raises(TypeError, match="zero-argument function"):
        DataLoader(g, 4, total_size=None)
    with pytest.raises(TypeError, match="zero-argument function"):
        DataLoader(g, 4, total_size=N)


# -- 1. chunk forms ----------------------------------------------------------------------


def test_chunk_x_2d_only_means_no_labels():
    """A chunk that is a 2-D x alone gives rows of d features and l == 0 labels."""
    chunks = [make_x(np.arange(lo, hi), 4) for lo, hi in chunk_bounds([3, 4, 2])]
    got = collect(DataLoader(chunks, 2, shuffle=False, total_size=None), 4, 0)
    assert got == [[0, 1], [2, 3], [4, 5], [6, 7], [8]]


def test_chunk_x_1d_is_one_row():
    """A 1-D x chunk is one row of d features."""

    def gen():
        for i in range(7):
            yield make_x([i], 3)[0]

    got = collect(DataLoader(gen, 3, shuffle=False, total_size=7), 3, 0)
    assert got == [[0, 1, 2], [3, 4, 5], [6]]


def test_chunk_pair_y_2d():
    """A chunk (x, y) with y 2-D gives l == y.shape[1] labels per row."""
    chunks = chunks_of([4, 3, 5], d=3, l=3)
    got = collect(DataLoader(chunks, 5, shuffle=False, total_size=12), 3, 3)
    assert got == [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11]]


def test_chunk_pair_y_1d_means_one_label_per_row():
    """A chunk (x, y) with y 1-D means l == 1: y[i] is row i's label."""
    chunks = [
        (make_x(np.arange(lo, hi), 2), make_y(np.arange(lo, hi), 1)[:, 0])
        for lo, hi in chunk_bounds([4, 1, 3])
    ]
    loader = DataLoader(chunks, 3, shuffle=False, total_size=8)
    assert collect(loader, 2, 1) == [[0, 1, 2], [3, 4, 5], [6, 7]]
    assert loader.l == 1


def test_chunk_pair_of_1d_arrays_is_one_rows_features_and_labels():
    """A chunk (x1d, y1d) is one row: x1d its d features, y1d its l labels."""

    def gen():
        for i in range(5):
            yield make_x([i], 3)[0], make_y([i], 2)[0]

    loader = DataLoader(gen, 2, shuffle=False, total_size=5)
    assert collect(loader, 3, 2) == [[0, 1], [2, 3], [4]]
    assert loader.l == 2


@pytest.mark.parametrize(
    "sizes",
    [[0, 3, 4], [3, 0, 4], [3, 4, 0], [0, 0, 3, 0, 0, 4, 0, 0], [0, 7]],
    ids=["first", "middle", "last", "many", "first-then-all"],
)
@pytest.mark.parametrize("shuffle", [False, True])
def test_empty_chunks_anywhere_are_skipped(sizes, shuffle):
    """Chunks of 0 rows anywhere in the stream hand out nothing and lose nothing."""
    chunks = chunks_of(sizes, d=3, l=1)
    loader = DataLoader(chunks, 3, shuffle=shuffle, total_size=None, seed=1)
    got = collect(loader, 3, 1)
    if shuffle:
        assert sorted(flat(got)) == list(range(7))
    else:
        assert got == [[0, 1, 2], [3, 4, 5], [6]]


def test_mixed_chunk_forms_in_one_stream():
    """One stream may mix 2-D chunks, 1-D single rows, 1-D labels and empty chunks."""

    def gen():
        yield make_x([0, 1], 3), make_y([0, 1], 1)  # y 2-D
        yield make_x([2], 3)[0], make_y([2], 1)[0]  # one row, 1-D x and y
        yield np.empty((0, 3)), np.empty((0, 1))  # empty
        yield make_x([3, 4, 5], 3), make_y([3, 4, 5], 1)[:, 0]  # y 1-D, l = 1
        yield make_x([6], 3), make_y([6], 1)

    got = collect(DataLoader(gen, 4, shuffle=False, total_size=None), 3, 1)
    assert got == [[0, 1, 2, 3], [4, 5, 6]]


def test_integer_and_bool_chunks_become_float64():
    """Chunks of integer (or float32) dtype are handed out as float64 with the same values."""
    chunks = [
        (np.arange(0, 4, dtype=np.int32).reshape(-1, 1), np.ones(4, dtype=np.int64)),
        (np.arange(4, 6, dtype=np.float32).reshape(-1, 1), np.ones(2, dtype=bool)),
    ]
    batches = list(DataLoader(chunks, 4, shuffle=False, total_size=6))
    assert [b[0].dtype for b in batches] == [np.float64] * 2
    assert [b[1].dtype for b in batches] == [np.float64] * 2
    assert [ids(b[0]) for b in batches] == [[0, 1, 2, 3], [4, 5]]
    assert all((b[1] == 1.0).all() for b in batches)


# -- 2. re-batching ----------------------------------------------------------------------


@pytest.mark.parametrize("b", [1, 2, 4, 5, 7, 30, 31, 100])
@pytest.mark.parametrize("drop_last", [False, True])
def test_rebatching_gives_exact_batches_in_source_order(b, drop_last):
    """Chunks of any sizes come out as exact batches, remainder carried across chunks."""
    loader = DataLoader(chunks_of(SIZES), b, shuffle=False, drop_last=drop_last, total_size=N)
    got = collect(loader, 3, 1)
    keep = (N // b) * b if drop_last else N
    assert flat(got) == list(range(keep))
    assert all(len(batch) == b for batch in got[:-1])
    if got:
        assert len(got[-1]) == (b if drop_last else (N - 1) % b + 1)
    assert len(got) == len(loader)


def test_source_reusing_one_buffer_still_gives_correct_rows():
    """Yielded batches are fresh: a source overwriting one output buffer per chunk is safe."""
    d, l = 3, 2  # noqa: E741
    bufx, bufy = np.empty((12, d)), np.empty((12, l))

    def gen():
        for lo, hi in chunk_bounds(SIZES):
            r = np.arange(lo, hi)
            bufx[: hi - lo] = make_x(r, d)
            bufy[: hi - lo] = make_y(r, l)
            yield bufx[: hi - lo], bufy[: hi - lo]
        bufx[:] = -1.0  # scribble after the last chunk too
        bufy[:] = -1.0

    for shuffle in (False, True):
        loader = DataLoader(gen, 4, shuffle=shuffle, total_size=N, buffer_size=8)
        kept = list(loader)  # hold every batch: none may change afterwards
        for xb, yb in kept:
            check_rows(xb, yb, d, l)
        assert sorted(i for xb, _ in kept for i in ids(xb)) == list(range(N))


def test_yielded_batches_are_not_overwritten_by_later_batches():
    """Batches yielded earlier keep their values while later batches are read."""
    loader = DataLoader(chunks_of(SIZES), 3, shuffle=False, total_size=N)
    it = iter(loader)
    first = next(it)
    snapshot = (first[0].copy(), first[1].copy())
    rest = list(it)
    np.testing.assert_array_equal(first[0], snapshot[0])
    np.testing.assert_array_equal(first[1], snapshot[1])
    assert ids(first[0]) == [0, 1, 2] and len(rest) == 9


# -- 3. shuffle -----------------------------------------------------------------------------


def _shuffled(seed=3, shard=0, shards=1, **kw):
    kw.setdefault("buffer_size", 9)
    kw.setdefault("total_size", N)
    return DataLoader(
        chunks_of(SIZES), 4, shuffle=True, seed=seed, num_shards=shards, shard_index=shard, **kw
    )


def test_shuffle_is_a_function_of_seed_epoch_and_shard():
    """set_epoch(e) on a fresh loader gives the e-th epoch; per shard too."""
    for shard in range(2):
        a = _shuffled(shard=shard, shards=2)
        epochs = [collect(a) for _ in range(4)]
        for e in (3, 1, 0, 2):
            fresh = _shuffled(shard=shard, shards=2)
            fresh.set_epoch(e)
            assert collect(fresh) == epochs[e]


def test_shuffle_epochs_and_seeds_differ():
    """Each epoch is a different order, and a different seed gives a different order."""
    a = _shuffled()
    epochs = [flat(collect(a)) for _ in range(4)]
    assert len({tuple(e) for e in epochs}) == 4
    assert flat(collect(_shuffled(seed=4))) != epochs[0]


def test_drop_last_drops_different_rows_each_epoch():
    """Under drop_last the dropped rows (< batch_size) are re-drawn every epoch."""
    loader = DataLoader(
        chunks_of(SIZES), 4, shuffle=True, seed=0, drop_last=True, total_size=N, buffer_size=64
    )
    dropped = []
    for _ in range(6):
        got = collect(loader, 3, 1)
        assert all(len(b) == 4 for b in got)
        kept = flat(got)
        assert len(kept) == len(set(kept)) == (N // 4) * 4
        dropped.append(frozenset(range(N)) - frozenset(kept))
    assert all(len(d) == N % 4 for d in dropped)
    assert len(set(dropped)) > 1


# Positions of n = 8 rows over many seeded epochs, as an 8x8 table counts[row, position].
# Under a uniform shuffle, with m epochs, the covariance of the table is m/(n-1) times
# the projection onto the (n-1)^2 = 49 dimensions with zero row and column sums, so
# Pearson's statistic sum((c - m/n)^2 / (m/n)) is n/(n-1) times a chi-square with 49
# degrees of freedom (mean 56 = 8 rows x 7). Critical value at p = 0.001, computed
# from the regularized incomplete gamma function: chi2.ppf(0.999, 49) = 85.3506.
CHI2_CRIT_49 = 85.35


def _position_chi2(sizes, b, buffer_size, seeds=2000, n=8):
    chunks = chunks_of(sizes, d=1, l=0)
    counts = np.zeros((n, n), dtype=np.int64)  # counts[row, position]
    for seed in range(seeds):
        loader = DataLoader(
            chunks, b, shuffle=True, seed=seed, total_size=n, buffer_size=buffer_size
        )
        order = [i for xb, _ in loader for i in ids(xb)]
        assert sorted(order) == list(range(n))
        counts[order, np.arange(n)] += 1
    expected = seeds / n
    pearson = float(((counts - expected) ** 2 / expected).sum())
    return pearson * (n - 1) / n, counts


@pytest.mark.parametrize(
    ("sizes", "b", "buffer_size"),
    [([3, 5], 8, 8), ([1, 4, 0, 3], 3, 8), ([8], 2, 1000)],
    ids=["buffer=data", "buffer=data,b=3", "buffer>data"],
)
def test_buffer_as_large_as_the_data_is_a_uniform_shuffle(sizes, b, buffer_size):
    """A buffer >= the data is a full shuffle: each row lands in each position uniformly."""
    chi2, counts = _position_chi2(sizes, b, buffer_size)
    assert chi2 < CHI2_CRIT_49, (chi2, counts)


def test_buffer_smaller_than_the_data_is_not_a_full_shuffle():
    """A buffer of one batch only mixes locally: the same statistic rejects uniformity."""
    chi2, counts = _position_chi2([8], 2, 2, seeds=400)
    assert chi2 > CHI2_CRIT_49, (chi2, counts)
    assert counts[0, 4:].sum() == 0  # row 0 never leaves the first window


def test_buffer_docstring_states_the_block_shuffle_limit():
    """The shuffle buffer's docs say a bounded buffer only mixes locally on sorted data."""
    doc = buffer_module.__doc__
    assert doc and "sorted" in doc
    assert "full" in doc and "shuffle" in doc


def test_small_buffer_keeps_stream_order_coarsely():
    """A buffer of one batch mixes only locally: a batch holds rows within its window."""
    loader = DataLoader(
        chunks_of([10] * 6, d=2, l=0), 5, shuffle=True, seed=0, total_size=60, buffer_size=5
    )
    for k, batch in enumerate(collect(loader, 2, 0)):
        assert sorted(batch) == list(range(5 * k, 5 * k + 5))


# -- 7. memory ---------------------------------------------------------------------------------


@pytest.mark.parametrize("sized", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_memory_is_two_batches_and_their_chunks(sized, shuffle):
    """With the caller dropping each batch, at most 2 source chunks and 2 batches stay alive."""
    sizes = [1, 7, 3, 12, 0, 5, 9, 2] * 4 + [8, 1]
    n = sum(sizes)
    chunk_refs = []

    def factory():
        def gen():
            for lo, hi in chunk_bounds(sizes):
                r = np.arange(lo, hi)
                x, y = make_x(r, 3), make_y(r, 1)
                chunk_refs.append(weakref.ref(x))
                chunk_refs.append(weakref.ref(y))
                yield x, y
                del x, y

        return gen()

    loader = DataLoader(
        factory, 4, shuffle=shuffle, seed=0, total_size=n if sized else None, buffer_size=4
    )
    batch_refs = []
    seen = []
    it = iter(loader)
    worst_chunks = worst_batches = 0
    while True:
        try:
            xb, yb = next(it)
        except StopIteration:
            break
        seen.extend(ids(xb))
        batch_refs.append(weakref.ref(xb))
        batch_refs.append(weakref.ref(yb))
        del xb, yb
        gc.collect()
        live_chunks = sum(r() is not None for r in chunk_refs) // 2
        live_batches = sum(r() is not None for r in batch_refs) // 2
        worst_chunks = max(worst_chunks, live_chunks)
        worst_batches = max(worst_batches, live_batches)
    assert sorted(seen) == list(range(n))
    assert worst_chunks <= 2, worst_chunks
    assert worst_batches <= 2, worst_batches


def _numpy_bytes() -> int:
    snap = tracemalloc.take_snapshot()
    snap = snap.filter_traces([tracemalloc.DomainFilter(True, np.lib.tracemalloc_domain)])
    return sum(t.size for t in snap.traces)


@pytest.mark.parametrize("chunk_rows", [150, 500, 1300])
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("via", ["iter", "next_into"])
@pytest.mark.parametrize("epoch", ["first", "later"])
def test_memory_bytes_are_buffer_two_batches_and_two_chunks(chunk_rows, shuffle, dtype, via, epoch):
    """NumPy memory held while streaming <= shuffle buffer + 2 batches + 2 chunks, whatever N
    (float32 batches: the buffer's rows and the batches at 4 bytes a value, the chunks
    the source's float64), through iter() and next_into alike, in the first epoch (a
    stream not read yet) and a later one (its widths known, so its claims take groups).
    Each claim used to hold more: the compiled hand-outs kept the last group between
    calls (an emptied one kept held its batches' arrays past the next group's read,
    3.4-6.1 batches here), and a stream's claim of a group read that many batches
    ahead of the pass (issue 42: next_into, 13.4-18 batches; iter() in a later epoch,
    7.4-12.7), where it now reads one group of the pass at most."""
    d, b, buffer_rows = 20, 500, 1000
    sizes = [chunk_rows] * (12000 // chunk_rows)
    chunk_bytes = (d + 1) * 8
    row_bytes = (d + 1) * np.dtype(dtype).itemsize

    def factory():
        def gen():
            for lo, hi in chunk_bounds(sizes):
                r = np.arange(lo, hi)
                yield make_x(r, d), make_y(r, 1)

        return gen()

    # The buffer holds each row's ledger hash beside it: 8 bytes a row more.
    bound = 2 * b * row_bytes + 2 * chunk_rows * chunk_bytes
    bound += buffer_rows * (row_bytes + 8) if shuffle else 0
    bound += bound // 20 + 4096  # slack for small bookkeeping arrays
    loader = DataLoader(
        factory,
        b,
        shuffle=shuffle,
        seed=0,
        total_size=sum(sizes),
        buffer_size=buffer_rows,
        dtype=dtype,
    )
    worst = 0
    count = 0
    bx, by = np.empty((b, d), dtype), np.empty((b, 1), dtype)  # (before the count starts)
    if epoch == "later":
        for _ in loader:
            pass
        loader.reset()  # (next_into's: the epoch after)
    tracemalloc.start()
    try:
        if via == "iter":
            for xb, yb in loader:
                count += xb.shape[0]
                del xb, yb
                gc.collect()
                worst = max(worst, _numpy_bytes())
        else:
            while got := loader.next_into(bx, by):
                count += got
                gc.collect()
                worst = max(worst, _numpy_bytes())
    finally:
        tracemalloc.stop()
    assert count == sum(sizes)
    assert worst <= bound, (worst / (b * row_bytes), "batches held")


# -- 8. bad input mid-stream ---------------------------------------------------------------------


def _bad_at_3(bad):
    good = chunks_of([4, 4, 4], d=5, l=2)

    def gen():
        yield from good
        yield bad
        yield from chunks_of([4], d=5, l=2)

    return gen


def _bad_cases():
    r = np.arange(12, 16)
    return {
        "x-width": ((make_x(r, 2), make_y(r, 2)), ["(4, 2)"], [r"\b5\b"]),
        "y-width": ((make_x(r, 5), make_y(r, 1)), ["(4, 1)"], [r"\b2\b"]),
        "y-rows": ((make_x(r, 5), make_y(r[:3], 2)), ["(4, 5)", "(3, 2)"], []),
        "non-numeric": ((np.full((4, 5), "a"), make_y(r, 2)), ["(4, 5)"], []),
        "not-2d": ((np.zeros((4, 5, 1)), make_y(r, 2)), ["(4, 5, 1)"], []),
    }


@pytest.mark.parametrize("case", list(_bad_cases()))
@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("total_size", [None, 20])
def test_bad_chunk_mid_stream_is_a_value_error_naming_it(case, shuffle, total_size):
    """A malformed chunk mid-stream is a ValueError naming 'chunk 3' and the shapes."""
    bad, shapes, patterns = _bad_cases()[case]
    loader = DataLoader(_bad_at_3(bad), 4, shuffle=shuffle, total_size=total_size)
    with pytest.raises(ValueError, match="chunk 3") as info:
        for xb, yb in loader:
            check_rows(xb, yb, 5, 2)
    msg = str(info.value)
    for s in shapes:
        assert s in msg, msg
    for p in patterns:
        assert re.search(p, msg.replace("chunk 3", "")), msg


def test_bad_chunk_through_next_into_is_a_value_error_naming_it():
    """next_into reports a malformed chunk the same way as iteration."""
    r = np.arange(12, 16)
    loader = DataLoader(_bad_at_3((make_x(r, 3), make_y(r, 2))), 4, shuffle=False, total_size=20)
    with pytest.raises(ValueError, match=r"chunk 3.*\(4, 3\)"):
        next_into_ids(loader, 5, 2)


class Boom:
    """A factory whose stream raises a given exception at chunk 2 on its first ``fails`` passes."""

    def __init__(self, fails=1, sizes=(4, 4, 4, 4, 4)):
        self.sizes, self.fails, self.passes = list(sizes), fails, 0
        self.error = RuntimeError("boom")

    def __call__(self):
        self.passes += 1
        broken = self.passes <= self.fails

        def gen():
            for k, c in enumerate(chunks_of(self.sizes, d=2, l=1)):
                if broken and k == 2:
                    raise self.error
                yield c

        return gen()


@pytest.mark.parametrize("shuffle", [False, True])
def test_source_exception_propagates_unchanged(shuffle):
    """An exception raised by the source reaches the caller as the same object."""
    src = Boom()
    loader = DataLoader(src, 3, shuffle=shuffle, total_size=20)
    with pytest.raises(RuntimeError) as info:
        list(loader)
    assert info.value is src.error
    assert str(info.value) == "boom"


def test_source_exception_propagates_unchanged_through_next_into():
    """next_into re-raises the source's own exception object."""
    src = Boom()
    loader = DataLoader(src, 3, shuffle=False, total_size=20)
    with pytest.raises(RuntimeError) as info:
        next_into_ids(loader, 2, 1)
    assert info.value is src.error


@pytest.mark.parametrize("shuffle", [False, True])
def test_next_after_source_error_raises_not_a_silent_end(shuffle):
    """A source that keeps failing: every next() on the iterator raises; it never just stops."""
    src = Boom(fails=99)
    it = iter(DataLoader(src, 3, shuffle=shuffle, total_size=20))
    with pytest.raises(RuntimeError):
        while True:
            next(it)
    for _ in range(2):
        with pytest.raises(Exception) as info:
            next(it)
        assert not isinstance(info.value, StopIteration)


@pytest.mark.parametrize("shuffle", [False, True])
def test_retry_after_source_error_hands_out_the_rest_exactly_once(shuffle):
    """A source that fails once: the caller catches the error and goes on, and the epoch
    still hands out every row exactly once (the pass is read again up to the failed batch)."""
    src = Boom(fails=1)
    loader = DataLoader(src, 3, shuffle=shuffle, total_size=20)
    it = iter(loader)
    got, errors = [], 0
    while True:
        try:
            xb, _ = next(it)
        except RuntimeError:
            errors += 1
            continue
        except StopIteration:
            break
        got += list(ids(xb))
    assert errors == 1
    assert sorted(got) == list(range(20))
    assert loader.state_dict()["epoch"] == 1


def test_next_into_after_source_error_raises_not_zero():
    """A source that keeps failing: next_into raises again instead of returning 0."""
    src = Boom(fails=99)
    loader = DataLoader(src, 3, shuffle=False, total_size=20)
    with pytest.raises(RuntimeError):
        next_into_ids(loader, 2, 1)
    bx, by = np.empty((3, 2)), np.empty((3, 1))
    for _ in range(2):
        with pytest.raises(Exception):  # noqa: B017 - any error, but never a 0 return
            loader.next_into(bx, by)


@pytest.mark.parametrize("shuffle", [False, True])
def test_loader_works_again_after_reset_following_a_source_error(shuffle):
    """After a source error, reset() starts a fresh epoch that hands out every row."""
    src = Boom(fails=1)
    loader = DataLoader(src, 3, shuffle=shuffle, total_size=20)
    with pytest.raises(RuntimeError):
        list(loader)
    loader.reset()
    assert sorted(flat(collect(loader, 2, 1))) == list(range(20))
    # and iteration through next_into too, from a fresh failure
    src2 = Boom(fails=1)
    loader2 = DataLoader(src2, 3, shuffle=shuffle, total_size=20)
    with pytest.raises(RuntimeError):
        next_into_ids(loader2, 2, 1)
    loader2.reset()
    assert sorted(flat(next_into_ids(loader2, 2, 1))) == list(range(20))


def test_new_iter_after_source_error_starts_a_working_epoch():
    """After a source error, a new iter() begins the next epoch and works."""
    src = Boom(fails=1)
    loader = DataLoader(src, 3, shuffle=False, total_size=20)
    with pytest.raises(RuntimeError):
        list(loader)
    assert flat(collect(loader, 2, 1)) == list(range(20))


@pytest.mark.parametrize("how", ["reset", "set_epoch", "iter", "close"])
def test_abandoned_epoch_closes_the_source_iterator(how):
    """Leaving an epoch early (reset, set_epoch, a new iter, close) closes the source's iterator."""
    closed = []

    def factory():
        def gen():
            try:
                yield from chunks_of([4] * 10, d=2, l=1)
            finally:
                closed.append(1)

        return gen()

    loader = DataLoader(factory, 3, shuffle=False, total_size=40)
    it = iter(loader)
    next(it)
    assert closed == []
    if how == "reset":
        loader.reset()
    elif how == "set_epoch":
        loader.set_epoch(5)
    elif how == "iter":
        iter(loader)
    else:
        loader.close()
    assert closed == [1]  # now, not at garbage collection


# -- 9. next_into and resume ---------------------------------------------------------------------


@pytest.mark.parametrize("total_size", [None, N])
@pytest.mark.parametrize("drop_last", [False, True])
def test_next_into_gives_exact_row_counts_then_zero(total_size, drop_last):
    """next_into writes exact batches in source order, then returns 0 on every call."""
    loader = DataLoader(
        chunks_of(SIZES, d=3, l=2), 7, shuffle=False, drop_last=drop_last, total_size=total_size
    )
    bx, by = np.empty((7, 3)), np.empty((7, 2))
    counts, rows = [], []
    while (got := loader.next_into(bx, by)) != 0:
        check_rows(bx[:got], by[:got], 3, 2)
        counts.append(got)
        rows.extend(ids(bx[:got]))
        assert loader.last_rows == got
    assert counts == ([7, 7, 7, 7] if drop_last else [7, 7, 7, 7, 2])
    assert rows == list(range(sum(counts)))
    assert [loader.next_into(bx, by) for _ in range(3)] == [0, 0, 0]
    loader.reset()
    assert loader.next_into(bx, by) == 7


def test_next_into_without_labels_accepts_by_none():
    """On a stream with l == 0, next_into(bx) works without a label buffer."""
    loader = DataLoader(chunks_of(SIZES, d=2, l=0), 8, shuffle=False, total_size=None)
    bx = np.empty((8, 2))
    got = []
    while (k := loader.next_into(bx)) != 0:
        got.extend(ids(bx[:k]))
    assert got == list(range(N))


@pytest.mark.parametrize("total_size", [0, None])
def test_next_into_on_a_stream_with_no_chunks_returns_zero(total_size):
    """A stream with no chunk at all is an empty epoch: next_into returns 0, never a shape error."""
    for source in ([], lambda: iter([])):
        loader = DataLoader(source, 4, total_size=total_size)
        assert list(loader) == []
        loader = DataLoader(source, 4, total_size=total_size)
        assert loader.next_into(np.empty((4, 2)), np.empty((4, 1))) == 0
        assert loader.next_into(np.empty((4, 2)), np.empty((4, 1))) == 0


def test_next_into_shuffled_stream_is_the_same_as_iteration():
    """next_into hands out the same batches as iter() for a shuffled stream built alike."""
    a, b = _shuffled(), _shuffled()
    assert next_into_ids(a, 3, 1) == collect(b, 3, 1)


def _resume_loader(shuffle, drop_last, total_size, seed=5):
    return DataLoader(
        chunks_of(SIZES, d=3, l=1),
        4,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        total_size=total_size,
        buffer_size=10,
    )


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("total_size", [N, None])
@pytest.mark.parametrize("k", [0, 1, 3, 6])
def test_state_dict_resumes_a_stream_mid_epoch(shuffle, drop_last, total_size, k):
    """A streamed loader restored from state_dict hands out exactly the batches not yet out."""
    ref = collect(_resume_loader(shuffle, drop_last, total_size), 3, 1)
    a = _resume_loader(shuffle, drop_last, total_size)
    it = iter(a)
    taken = [ids(next(it)[0]) for _ in range(k)]
    assert taken == ref[:k]
    state = json.loads(json.dumps(a.state_dict()))  # plain data
    assert state["batches_done"] == k  # the batch read ahead is not counted
    b = _resume_loader(shuffle, drop_last, total_size)
    b.load_state_dict(state)
    assert collect(b, 3, 1) == ref[k:]
    assert [ids(xb) for xb, _ in it] == ref[k:]  # the original goes on the same way


@pytest.mark.parametrize("shuffle", [False, True])
def test_state_dict_resume_through_next_into(shuffle):
    """Resuming mid-epoch works through next_into too."""
    ref = collect(_resume_loader(shuffle, False, N), 3, 1)
    a = _resume_loader(shuffle, False, N)
    assert next_into_ids(a, 3, 1, limit=2) == ref[:2]
    b = _resume_loader(shuffle, False, N)
    b.load_state_dict(a.state_dict())
    assert next_into_ids(b, 3, 1) == ref[2:]


@pytest.mark.parametrize("shuffle", [False, True])
def test_state_dict_at_end_of_stream_epoch_resumes_next_epoch(shuffle):
    """A state taken after a streamed epoch's last batch resumes at the start of the next."""
    a = _resume_loader(shuffle, False, N)
    first = collect(a, 3, 1)
    second = collect(a, 3, 1)
    c = _resume_loader(shuffle, False, N)
    it = iter(c)
    for _ in range(len(first)):
        next(it)
    state = c.state_dict()
    assert state["epoch"] == 1 and state["batches_done"] == 0
    d = _resume_loader(shuffle, False, N)
    d.load_state_dict(state)
    assert collect(d, 3, 1) == second


def test_stream_loader_warns_nothing_for_a_declared_correct_size():
    """A list source with a correct int total_size emits no warning at all."""
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        loader = DataLoader(chunks_of(SIZES), 4, shuffle=False, total_size=N)
        for _ in range(2):
            collect(loader)
    assert rec == []


def test_a_bad_chunk_of_a_chunk_indexed_source_is_named_by_its_position():
    """A chunk read by index is checked like any chunk: one of the wrong width is a
    ChunkError naming its position in the pass and the shape expected."""

    class Blocks:  # chunk-indexed, like ndf_blocks: chunk 1 has a column too many
        chunk_rows, n_rows, d, l = [4, 4, 4], 12, 2, 1  # noqa: E741

        def read_chunk(self, i):
            return np.ones((4, 3 if i == 1 else 2)), np.ones((4, 1))

    with pytest.raises(ValueError, match=r"^chunk 1: expected x of shape \(rows, 2\)"):
        list(DataLoader(Blocks(), 4, shuffle=False))


def test_a_ragged_chunk_is_a_chunk_error_naming_its_position():
    chunks = [np.ones((4, 2)), (np.ones((4, 2)), [[1.0], [2.0, 3.0], [4.0], [5.0]])]
    with pytest.raises(ValueError, match=r"^chunk 1: y must be a rectangular array"):
        list(DataLoader(chunks, 4, shuffle=False, total_size=8))


@pytest.mark.parametrize("kind", ["parquet", "ndf_blocks"])
def test_a_chunk_indexed_stream_knows_its_widths_before_the_first_read(tmp_path, kind):
    """Parquet and ndf_blocks know d and l from their metadata: the loader says them
    before any chunk is read."""
    from helpers import write_parquet

    from exactbatch import ndf_blocks, open_ndf, parquet_source, save_ndf

    if kind == "parquet":
        pytest.importorskip("pyarrow")
        write_parquet(tmp_path / "w.parquet", [5, 7], d=3, l=2)
        source = parquet_source(tmp_path / "w.parquet", labels=["y0", "y1"])
    else:
        save_ndf(tmp_path / "w.ndf", (np.zeros((12, 3)), np.zeros((12, 2))))
        source = ndf_blocks(open_ndf(tmp_path / "w.ndf"), 4)
    loader = DataLoader(source, 4, total_size=12)
    assert (loader.d, loader.l) == (3, 2)


class _Passes:
    """A stream (re-iterable) of ``chunks``; counts the passes opened and closed."""

    def __init__(self, chunks):
        self.chunks, self.opened, self.closed = chunks, 0, 0

    def __iter__(self):
        self.opened += 1
        try:
            yield from self.chunks
        finally:
            self.closed += 1


def test_a_streams_fingerprint_is_its_identity_and_sizes_as_known_then():
    """Its source's identity (a list of chunks: their kind and a sample) and its sizes;
    a stream's rows from total_size where it has no n_rows; taken first after close, its
    kind and sizes only."""
    x = np.arange(40.0).reshape(20, 2)
    feed = DataLoader([x[:10], x[10:]], 4)._feed
    fp = feed.fingerprint()
    assert (fp["kind"], fp["n"], fp["d"], fp["l"]) == ("chunks", 20, 2, 0)
    assert "sample" in fp
    loader = DataLoader(_Passes([x[:10], x[10:]]), 4, total_size=20)
    assert loader._feed.fingerprint() == {
        "kind": "stream", "names": None, "rows": None, "n": 20, "d": None, "l": None,
    }  # fmt: skip
    closed = DataLoader(_Passes([x[:10], x[10:]]), 4, total_size=20)
    closed.close()
    assert closed._feed.fingerprint() == {"kind": "stream", "n": 20, "d": None, "l": None}


def test_a_streams_widths_are_learned_from_its_first_chunk_in_a_pass_closed_after():
    """learn_widths: one chunk of a pass of its own, which it closes; the first chunk's
    error names chunk 0; a stream with no chunk leaves the widths unknown."""
    x = np.arange(40.0).reshape(20, 2)
    stream = _Passes([(x[:10], x[:10, :1]), (x[10:], x[10:, :1])])
    feed = DataLoader(stream, 4, total_size=20)._feed
    feed.learn_widths()
    assert (feed.d, feed.l) == (2, 1)
    assert (stream.opened, stream.closed) == (1, 1)
    bad = DataLoader(_Passes([np.zeros((2, 2, 2))]), 4, total_size=2)._feed
    with pytest.raises(ValueError, match=r"^chunk 0: x must be 2-D"):
        bad.learn_widths()
    empty = DataLoader(_Passes([]), 4, total_size=0)._feed
    empty.learn_widths()
    assert (empty.d, empty.l) == (None, None)
