"""DataLoader over random-access sources: the rules of DESIGN.md, one test each.

Sources: a Dataset, an NdfFile, a bare array x and a pair (x, y). Row i of
every source is traceable (x[i, 0] == i, see helpers.py), so tests check
exact row ids and that every value of a batch belongs to its row.
"""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
from helpers import (
    ClosableChunks,
    check_rows,
    collect,
    ids,
    make_data,
    make_source,
    next_into_ids,
    rows_of,
)

from exactbatch import DataLoader, Dataset, open_ndf, save_ndf

# (source kind, label columns): a bare array has no labels.
KINDS = [("pair", 2), ("dataset", 2), ("ndf", 2), ("array", 0), ("ndf", 0), ("pair", 1)]
KIND_IDS = [f"{kind}-l{width}" for kind, width in KINDS]


@pytest.fixture
def build(tmp_path):
    """build(kind, n, d=3, l=2, batch_size=4, **loader_kwargs) -> DataLoader."""
    counter = itertools.count()

    def _build(kind="pair", n=23, d=3, l=2, batch_size=4, **kw):  # noqa: E741
        x, y = make_data(n, d, l)
        folder = tmp_path / f"src{next(counter)}"
        folder.mkdir()
        return DataLoader(make_source(kind, x, y, folder), batch_size, **kw)

    return _build


def flat(batches):
    return [r for b in batches for r in b]


# -- shapes and kinds ---------------------------------------------------------------------------


@pytest.mark.parametrize("kind,l", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_batches_are_float64_rows_by_d_and_rows_by_l(build, kind, l, shuffle):  # noqa: E741
    """iter(loader) yields (xb, yb) float64 arrays of shapes (rows, d) and (rows, l)."""
    loader = build(kind, n=23, d=3, l=l, batch_size=5, shuffle=shuffle)
    assert (loader.d, loader.l) == (3, l)
    sizes = []
    for xb, yb in loader:
        check_rows(xb, yb, 3, l)
        sizes.append(xb.shape[0])
    assert sizes == [5, 5, 5, 5, 3]


def test_pair_with_1d_labels_has_one_label_column():
    """A pair (x, y) with 1-D y means l = 1: yb has shape (rows, 1)."""
    x, y = make_data(10, 2, 1)
    loader = DataLoader((x, y[:, 0].copy()), 4, shuffle=False)
    assert loader.l == 1
    for xb, yb in loader:
        check_rows(xb, yb, 2, 1)


def test_array_source_has_no_labels_and_integer_input_becomes_float64():
    """A bare array x is a source with l = 0 (yb is (rows, 0)); ints become float64."""
    x = np.repeat(np.arange(10, dtype=np.int32).reshape(10, 1), 3, axis=1)
    loader = DataLoader(x, 4, shuffle=False)
    assert (loader.n, loader.d, loader.l) == (10, 3, 0)
    got = list(loader)
    assert [xb.shape for xb, _ in got] == [(4, 3), (4, 3), (2, 3)]
    assert [yb.shape for _, yb in got] == [(4, 0), (4, 0), (2, 0)]
    assert all(xb.dtype == np.float64 and yb.dtype == np.float64 for xb, yb in got)
    assert rows_of(got) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


def test_every_kind_of_source_gives_identical_batches(tmp_path):
    """A Dataset, an NdfFile and a pair with the same rows give identical batches."""
    x, y = make_data(57, 3, 2)
    kw = dict(shuffle=True, seed=11, num_shards=2, shard_index=1)
    runs = []
    for kind in ("pair", "dataset", "ndf"):
        loader = DataLoader(make_source(kind, x, y, tmp_path), 6, **kw)
        runs.append([[(xb.copy(), yb.copy()) for xb, yb in loader] for _ in range(3)])
    for other in runs[1:]:
        for e0, e1 in zip(runs[0], other, strict=True):
            assert len(e0) == len(e1)
            for (ax, ay), (bx, by) in zip(e0, e1, strict=True):
                np.testing.assert_array_equal(ax, bx)
                np.testing.assert_array_equal(ay, by)
    # and a bare array equals a pair with no label columns
    xa, ya = make_data(57, 3, 0)
    bare, pair = DataLoader(xa, 6, **kw), DataLoader((xa, ya), 6, **kw)
    for _ in range(3):
        assert collect(bare) == collect(pair)


# -- len, n, total_size, shards -----------------------------------------------------------------


@pytest.mark.parametrize(
    "n,b,drop_last,want",
    [
        (0, 1, False, 0),
        (0, 4, True, 0),
        (1, 1, False, 1),
        (9, 3, False, 3),
        (9, 3, True, 3),
        (10, 3, False, 4),
        (10, 3, True, 3),
        (2, 5, False, 1),
        (2, 5, True, 0),
        (100, 7, False, 15),
        (100, 7, True, 14),
    ],
)
def test_len_is_ceil_or_floor_with_drop_last(build, n, b, drop_last, want):
    """len(loader) == ceil(n / b), or floor(n / b) with drop_last; it is the batch count."""
    loader = build("pair", n=n, batch_size=b, drop_last=drop_last)
    assert len(loader) == want
    assert len(list(loader)) == want
    assert len(list(loader)) == want


def test_n_is_the_shards_rows_and_total_size_the_whole_datasets(build):
    """loader.n counts this shard's rows; loader.total_size the whole dataset's rows."""
    got = []
    for s in range(3):
        loader = build("pair", n=10, num_shards=3, shard_index=s)
        got.append(loader.n)
        assert loader.total_size == 10
    assert got == [3, 3, 4]
    assert build("ndf", n=10).n == 10
    assert build("ndf", n=10).total_size == 10


@pytest.mark.parametrize("n,S", [(10, 3), (7, 4), (3, 5), (100, 7), (1, 1), (64, 8), (5, 5)])
@pytest.mark.parametrize("kind", ["pair", "ndf"])
def test_shard_s_owns_rows_s_n_over_S_to_s_plus_1_n_over_S(build, kind, n, S):  # noqa: N803
    """Shard s of S hands out exactly rows [s*n//S, (s+1)*n//S), in file order without shuffle."""
    seen = []
    for s in range(S):
        loader = build(kind, n=n, batch_size=3, shuffle=False, num_shards=S, shard_index=s)
        want = list(range(s * n // S, (s + 1) * n // S))
        assert loader.n == len(want)
        assert flat(collect(loader)) == want
        seen += want
        # with shuffle the shard's rows are the same set, in some order
        shuffled = build(kind, n=n, batch_size=3, shuffle=True, num_shards=S, shard_index=s)
        assert sorted(flat(collect(shuffled))) == want
    assert seen == list(range(n))


# -- order ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pair", "ndf"])
def test_with_shuffle_each_epoch_is_a_different_permutation(build, kind):
    """With shuffle every epoch is a permutation of the rows, and no two epochs share one."""
    loader = build(kind, n=100, batch_size=8, shuffle=True)
    orders = [tuple(flat(collect(loader))) for _ in range(6)]
    for order in orders:
        assert sorted(order) == list(range(100))
        assert order != tuple(range(100))
    assert len(set(orders)) == len(orders)


def test_each_iter_call_begins_a_new_epoch(build):
    """iter() begins epoch 0, then 1, 2...; loader.epoch says which, and once an epoch is
    handed out whole, the next (as state_dict() does); unconsumed iters count."""
    mk = lambda: build("pair", n=30, batch_size=4)  # noqa: E731
    reference = mk()
    ref = [collect(reference) for _ in range(4)]  # epochs 0..3 by plain for loops

    loader = mk()
    assert loader.epoch == 0
    it0 = iter(loader)
    assert loader.epoch == 0
    assert rows_of(it0) == ref[0]
    assert loader.epoch == 1  # epoch 0 is over: the next iter() begins epoch 1
    assert loader.state_dict()["epoch"] == 1
    iter(loader)  # begins epoch 1, even though nothing is taken from it
    assert loader.epoch == 1
    it2 = iter(loader)
    assert loader.epoch == 2
    assert rows_of(it2) == ref[2]
    assert collect(loader) == ref[3]
    assert loader.epoch == 4


@pytest.mark.parametrize("e", [0, 1, 2, 5])
def test_set_epoch_then_iter_gives_that_epochs_order(build, e):
    """After set_epoch(e), iter() yields epoch e: equal to a fresh loader's (e+1)-th iteration."""
    fresh = build("pair", n=41, batch_size=6)
    for _ in range(e):
        list(fresh)
    want = collect(fresh)

    loader = build("pair", n=41, batch_size=6)
    list(loader)  # whatever happened before ...
    it = iter(loader)
    next(it)
    loader.set_epoch(e)  # ... set_epoch decides
    assert loader.epoch == e
    assert collect(loader) == want
    assert loader.epoch == e + 1  # epoch e is over
    assert collect(loader) == collect(_at_epoch(build("pair", n=41, batch_size=6), e + 1))
    assert loader.epoch == e + 2


def _at_epoch(loader, e):
    loader.set_epoch(e)
    return loader


def test_set_epoch_applies_to_next_into_too(build):
    """set_epoch(e) makes next_into hand out epoch e's batches."""
    want = collect(_at_epoch(build("pair", n=29, batch_size=4), 3))
    loader = build("pair", n=29, batch_size=4)
    loader.set_epoch(3)
    assert next_into_ids(loader) == want


def test_set_epoch_rejects_negative_and_non_int(build):
    """set_epoch takes an int >= 0: a negative epoch is a ValueError, a float a TypeError."""
    loader = build("pair")
    with pytest.raises(ValueError):
        loader.set_epoch(-1)
    with pytest.raises(TypeError):
        loader.set_epoch(1.5)


# -- reset ---------------------------------------------------------------------------------------


def _use_for_a_while(loader, how):
    if how == "fresh":
        return
    if how == "mid_epoch":
        list(loader)
        it = iter(loader)
        next(it)
        next(it)
    elif how == "end_of_epoch":
        list(loader)
        list(loader)
    elif how == "set_epoch":
        loader.set_epoch(9)
    elif how == "next_into":
        next_into_ids(loader, limit=3)
    elif how == "reset_other_seed":
        loader.reset(3)
        list(loader)


@pytest.mark.parametrize(
    "how", ["fresh", "mid_epoch", "end_of_epoch", "set_epoch", "next_into", "reset_other_seed"]
)
@pytest.mark.parametrize("kind", ["pair", "ndf"])
def test_reset_with_seed_is_a_pure_function_of_the_seed(build, kind, how):
    """After reset(7) a loader behaves as a fresh loader with seed=7, whatever happened before."""
    fresh = build(kind, n=37, batch_size=5, seed=7)
    want = [collect(fresh) for _ in range(3)]

    loader = build(kind, n=37, batch_size=5, seed=0)
    _use_for_a_while(loader, how)
    loader.reset(7)
    assert loader.epoch == 0
    assert [collect(loader) for _ in range(3)] == want

    loader.reset(7)  # and through next_into
    assert next_into_ids(loader) == want[0]


def test_reset_with_seed_rejects_negative(build):
    """reset(seed) with a negative seed is a ValueError."""
    with pytest.raises(ValueError):
        build("pair").reset(-1)


def _epoch_rows(build, e, **kw):
    return collect(_at_epoch(build("pair", n=26, batch_size=4, **kw), e))


def test_reset_mid_epoch_rewinds_to_the_start_of_the_next_epoch(build):
    """reset() in the middle of epoch 0 makes the next iter() begin epoch 1 from its start."""
    loader = build("pair", n=26, batch_size=4)
    it = iter(loader)
    next(it)
    next(it)
    loader.reset()
    assert loader.epoch == 1
    assert collect(loader) == _epoch_rows(build, 1)


def test_reset_after_a_finished_epoch_goes_to_the_next(build):
    """reset() after epoch 0 ran to its end makes the next iter() begin epoch 1."""
    loader = build("pair", n=26, batch_size=4)
    list(loader)
    loader.reset()
    assert loader.epoch == 1
    assert collect(loader) == _epoch_rows(build, 1)


def test_reset_before_the_epoch_began_keeps_the_pending_epoch(build):
    """reset() when the pending epoch has not begun rewinds to that same epoch."""
    loader = build("pair", n=26, batch_size=4)
    loader.reset()
    assert loader.epoch == 0
    assert collect(loader) == _epoch_rows(build, 0)

    loader = build("pair", n=26, batch_size=4)
    loader.set_epoch(4)
    loader.reset()
    assert loader.epoch == 4
    assert collect(loader) == _epoch_rows(build, 4)


def test_reset_twice_moves_one_epoch(build):
    """reset(); reset() after a begun epoch e moves to e + 1 once (e + 1 is then pending)."""
    loader = build("pair", n=26, batch_size=4)
    list(loader)
    loader.reset()
    loader.reset()
    assert loader.epoch == 1
    assert collect(loader) == _epoch_rows(build, 1)


def test_reset_after_next_into_reached_the_end(build):
    """After next_into returned 0, reset() makes next_into hand out the next epoch."""
    loader = build("pair", n=26, batch_size=4)
    assert next_into_ids(loader) == _epoch_rows(build, 0)
    loader.reset()
    assert loader.epoch == 1
    assert next_into_ids(loader) == _epoch_rows(build, 1)


def test_reset_keeps_the_seed_when_none_is_given(build):
    """reset() without a seed keeps the loader's seed (set at construction or by reset(seed))."""
    loader = build("pair", n=26, batch_size=4, seed=5)
    loader.reset(5)
    list(loader)
    loader.reset()
    assert collect(loader) == _epoch_rows(build, 1, seed=5)


# -- last_rows, next_into ----------------------------------------------------------------------


def test_last_rows_is_the_size_of_the_last_batch_handed_out(build):
    """last_rows is 0 before any batch, then the row count of the batch just handed out."""
    loader = build("pair", n=11, batch_size=4)
    assert loader.last_rows == 0
    for xb, _ in loader:
        assert loader.last_rows == xb.shape[0]
    assert loader.last_rows == 3
    loader.reset()
    bx, by = np.empty((4, 3)), np.empty((4, 2))
    got = []
    while (r := loader.next_into(bx, by)) > 0:
        assert loader.last_rows == r
        got.append(r)
    assert got == [4, 4, 3]


@pytest.mark.parametrize("kind,l", KINDS, ids=KIND_IDS)
def test_next_into_returns_row_counts_then_zero_until_reset_or_iter(build, kind, l):  # noqa: E741
    """next_into returns each batch's rows, then 0 at the end and 0 on every call after it."""
    loader = build(kind, n=11, l=l, batch_size=4, shuffle=True)
    bx = np.full((4, 3), np.nan)
    by = np.full((4, l), np.nan)
    counts, rows = [], []
    for _ in range(3):
        r = loader.next_into(bx, by)
        check_rows(bx[:r], by[:r], 3, l)
        counts.append(r)
        rows.append(ids(bx[:r]))
    assert counts == [4, 4, 3]
    assert [loader.next_into(bx, by) for _ in range(5)] == [0] * 5
    want = [_epoch_rows_kind(build, kind, l, e) for e in range(3)]
    assert rows == want[0]
    # a new iter() begins the next epoch
    assert collect(loader) == want[1]
    assert loader.next_into(bx, by) == 0  # that epoch ended too
    loader.reset()
    assert next_into_ids(loader) == want[2]


def _epoch_rows_kind(build, kind, l, e):  # noqa: E741
    return collect(_at_epoch(build(kind, n=11, l=l, batch_size=4, shuffle=True), e))


def test_next_into_on_a_fresh_loader_hands_out_epoch_0_like_iter(build):
    """next_into without any iter() hands out epoch 0's batches, the same as iter() would."""
    want = collect(build("ndf", n=50, batch_size=6))
    assert next_into_ids(build("ndf", n=50, batch_size=6)) == want


def test_next_into_by_none_is_allowed_when_there_are_no_labels(build):
    """With l == 0, next_into(bx) (by=None) writes the batch and returns its rows."""
    loader = build("array", n=10, l=0, batch_size=4, shuffle=False)
    bx = np.empty((4, 3))
    assert loader.next_into(bx) == 4
    assert ids(bx) == [0, 1, 2, 3]
    assert loader.next_into(bx, None) == 4
    assert ids(bx) == [4, 5, 6, 7]
    assert loader.next_into(bx) == 2
    assert ids(bx[:2]) == [8, 9]
    assert loader.next_into(bx) == 0


def _first_batch_is_still_next(loader):
    bx = np.empty((loader.batch_size, loader.d))
    by = np.empty((loader.batch_size, loader.l))
    assert loader.next_into(bx, by) == loader.batch_size
    assert ids(bx) == list(range(loader.batch_size))


def test_next_into_by_none_with_labels_is_an_error(build):
    """by=None is allowed only when l == 0; with labels it is refused and no batch is consumed."""
    loader = build("pair", n=40, batch_size=32, l=2, shuffle=False)
    with pytest.raises((TypeError, ValueError)):
        loader.next_into(np.empty((32, 3)))
    with pytest.raises((TypeError, ValueError)):
        loader.next_into(np.empty((32, 3)), None)
    _first_batch_is_still_next(loader)


def test_next_into_bx_none_is_a_type_error(build):
    """bx must be an array: next_into(None, by) is a TypeError and consumes no batch."""
    loader = build("pair", n=40, batch_size=32, l=2, shuffle=False)
    with pytest.raises(TypeError):
        loader.next_into(None, np.empty((32, 2)))
    _first_batch_is_still_next(loader)


@pytest.mark.parametrize(
    "which,shape,want",
    [
        ("bx", (31, 3), "(32, 3)"),
        ("bx", (33, 3), "(32, 3)"),
        ("bx", (32, 4), "(32, 3)"),
        ("bx", (32,), "(32, 3)"),
        ("by", (32, 1), "(32, 2)"),
        ("by", (32, 3), "(32, 2)"),
        ("by", (31, 2), "(32, 2)"),
        ("by", (64,), "(32, 2)"),
    ],
)
def test_next_into_wrong_shape_is_a_value_error_naming_the_expected_shape(
    build, which, shape, want
):
    """A buffer of the wrong shape is a ValueError whose message has the expected shape."""
    loader = build("pair", n=40, batch_size=32, d=3, l=2, shuffle=False)
    bufs = {"bx": np.empty((32, 3)), "by": np.empty((32, 2))}
    bufs[which] = np.empty(shape)
    with pytest.raises(ValueError) as info:
        loader.next_into(bufs["bx"], bufs["by"])
    assert want in str(info.value)
    _first_batch_is_still_next(loader)


@pytest.mark.parametrize("which", ["bx", "by"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.complex128])
def test_next_into_wrong_dtype_is_a_type_error(build, which, dtype):
    """A buffer that is not float64 is a TypeError (and consumes no batch)."""
    loader = build("pair", n=40, batch_size=32, d=3, l=2, shuffle=False)
    bufs = {"bx": np.empty((32, 3)), "by": np.empty((32, 2))}
    bufs[which] = np.zeros(bufs[which].shape, dtype=dtype)
    with pytest.raises(TypeError):
        loader.next_into(bufs["bx"], bufs["by"])
    _first_batch_is_still_next(loader)


def test_next_into_a_list_is_a_type_error(build):
    """A buffer that is not a NumPy array (a list) is a TypeError."""
    loader = build("pair", n=40, batch_size=32, d=3, l=2, shuffle=False)
    with pytest.raises(TypeError):
        loader.next_into([[0.0] * 3] * 32, np.empty((32, 2)))
    _first_batch_is_still_next(loader)


@pytest.mark.parametrize(
    "which,make",
    [
        ("bx", lambda: np.empty((32, 3), order="F")),
        ("bx", lambda: np.empty((64, 3))[::2]),
        ("bx", lambda: np.empty((32, 6))[:, :3]),
        ("bx", lambda: np.empty((32, 6))[:, ::2]),
        ("by", lambda: np.empty((32, 2), order="F")),
        ("by", lambda: np.empty((96, 2))[::3]),
    ],
    ids=["bx-fortran", "bx-rowstride", "bx-colslice", "bx-colstride", "by-fortran", "by-strided"],
)
def test_next_into_non_contiguous_buffer_is_a_value_error(build, which, make):
    """A buffer that is not C-contiguous (Fortran order, a strided view) is a ValueError."""
    loader = build("pair", n=40, batch_size=32, d=3, l=2, shuffle=False)
    bufs = {"bx": np.empty((32, 3)), "by": np.empty((32, 2))}
    bufs[which] = make()
    assert bufs[which].shape == ((32, 3) if which == "bx" else (32, 2))
    with pytest.raises(ValueError):
        loader.next_into(bufs["bx"], bufs["by"])
    _first_batch_is_still_next(loader)


def test_next_into_read_only_buffer_is_refused(build):
    """A read-only buffer cannot receive a batch: refused, no batch consumed."""
    loader = build("pair", n=40, batch_size=32, d=3, l=2, shuffle=False)
    bx = np.empty((32, 3))
    bx.flags.writeable = False
    with pytest.raises((TypeError, ValueError)):
        loader.next_into(bx, np.empty((32, 2)))
    _first_batch_is_still_next(loader)


def _retype(a):
    a.dtype = np.int64  # same itemsize: the shape stays (32, 3)


def _freeze(a):
    a.flags.writeable = False


def _reshape(a):
    a.shape = (16, 6)


@pytest.mark.parametrize(
    "change,error,words",
    [
        (_retype, TypeError, "bx must have dtype float64"),
        (_freeze, ValueError, "bx must be a writeable C-contiguous array"),
        (_reshape, ValueError, "bx must have shape (32, 3)"),
    ],
    ids=["dtype-set", "made-read-only", "shape-set"],
)
def test_next_into_checks_the_same_buffers_again_after_they_changed_in_place(
    build, change, error, words
):
    """The buffers passed call after call are checked on every call (no verdict kept by
    identity): the same bx changed in place between calls (its dtype or shape set, made
    read-only) is refused with its message, no batch consumed."""
    loader = build("pair", n=100, batch_size=32, d=3, l=2, shuffle=False)
    bx, by = np.empty((32, 3)), np.empty((32, 2))
    for k in range(2):  # the same buffers twice: the fast check passes them
        assert loader.next_into(bx, by) == 32
        assert ids(bx) == list(range(32 * k, 32 * k + 32))
    change(bx)
    with pytest.raises(error) as info:
        loader.next_into(bx, by)
    assert words in str(info.value)
    fresh = np.empty((32, 3))
    assert loader.next_into(fresh, by) == 32
    assert ids(fresh) == list(range(64, 96))  # the refused call took no batch


# -- yielded arrays are the caller's ------------------------------------------------------------


@pytest.mark.parametrize("kind,l", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("shuffle", [False, True])
def test_yielded_arrays_are_never_overwritten_later(build, kind, l, shuffle):  # noqa: E741
    """Batches kept by the caller keep their values through later batches and later epochs."""
    loader = build(kind, n=30, l=l, batch_size=4, shuffle=shuffle)
    kept, snapshots = [], []
    for _ in range(3):
        for xb, yb in loader:
            kept.append((xb, yb))
            snapshots.append((xb.copy(), yb.copy()))
    for (xb, yb), (sx, sy) in zip(kept, snapshots, strict=True):
        np.testing.assert_array_equal(xb, sx)
        np.testing.assert_array_equal(yb, sy)
        check_rows(xb, yb, 3, l)
    xs = [xb for xb, _ in kept]
    for a, b in itertools.combinations(xs, 2):
        assert not np.shares_memory(a, b)


@pytest.mark.parametrize("shuffle", [False, True])
def test_writing_into_a_yielded_batch_leaves_the_source_alone(shuffle):
    """Yielded arrays are the caller's: writing into them changes neither the source nor later
    epochs."""
    x, y = make_data(12, 3, 2)
    x0, y0 = x.copy(), y.copy()
    loader = DataLoader(Dataset(x, y), 5, shuffle=shuffle)
    for xb, yb in loader:
        assert not np.shares_memory(xb, x) and not np.shares_memory(yb, y)
        xb[...] = -1.0
        yb[...] = -1.0
    np.testing.assert_array_equal(x, x0)
    np.testing.assert_array_equal(y, y0)
    for xb, yb in loader:
        check_rows(xb, yb, 3, 2)


# -- drop_last ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["pair", "ndf"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_drop_last_every_batch_has_exactly_batch_size_rows(build, kind, shuffle):
    """With drop_last every batch has batch_size rows; the partial tail is never handed out."""
    loader = build(kind, n=23, batch_size=5, drop_last=True, shuffle=shuffle)
    assert len(loader) == 4
    for _ in range(3):
        batches = collect(loader)
        assert [len(b) for b in batches] == [5, 5, 5, 5]
        assert len(set(flat(batches))) == 20
    if not shuffle:
        assert flat(batches) == list(range(20))
    bx, by = np.empty((5, 3)), np.empty((5, 2))
    loader.reset()
    assert [loader.next_into(bx, by) for _ in range(6)] == [5, 5, 5, 5, 0, 0]


# -- empty sources and shards --------------------------------------------------------------------


@pytest.mark.parametrize("kind,l", KINDS, ids=KIND_IDS)
@pytest.mark.parametrize("drop_last", [False, True])
def test_empty_source_is_legal_with_no_batches(build, kind, l, drop_last):  # noqa: E741
    """A random-access source of n = 0 rows: len 0, every epoch yields nothing, next_into 0."""
    loader = build(kind, n=0, l=l, batch_size=4, drop_last=drop_last)
    assert (loader.n, loader.total_size, len(loader)) == (0, 0, 0)
    for _ in range(3):
        assert list(loader) == []
    bx, by = np.empty((4, 3)), np.empty((4, l))
    assert loader.next_into(bx, by) == 0
    loader.reset()
    assert loader.next_into(bx, by) == 0


@pytest.mark.parametrize("kind", ["pair", "ndf"])
def test_empty_shard_is_legal_with_no_batches(build, kind):
    """With n < num_shards some shards own no rows: len 0, no batches; the rest cover all rows."""
    n, S = 3, 5
    seen, empty = [], 0
    for s in range(S):
        loader = build(kind, n=n, batch_size=2, num_shards=S, shard_index=s)
        assert loader.total_size == n
        if loader.n == 0:
            empty += 1
            assert len(loader) == 0
            assert list(loader) == [] and list(loader) == []
            assert loader.next_into(np.empty((2, 3)), np.empty((2, 2))) == 0
        seen += flat(collect(loader))
    assert empty == 2
    assert sorted(seen) == list(range(n))


# -- stale iterators ------------------------------------------------------------------------------


def test_an_older_iterator_raises_after_a_new_iter(build):
    """After a new iter(), advancing an older iterator raises RuntimeError; the new one is whole."""
    loader = build("pair", n=30, batch_size=4)
    it0 = iter(loader)
    next(it0)
    it1 = iter(loader)
    with pytest.raises(RuntimeError) as info:
        next(it0)
    assert str(info.value) == (
        "this iterator is stale: a later iter(), reset(), set_epoch() or "
        "load_state_dict() moved the loader on"
    )
    assert rows_of(it1) == collect(_at_epoch(build("pair", n=30, batch_size=4), 1))


def test_an_iterator_is_stale_after_set_epoch_and_a_new_iter(build):
    """set_epoch() then iter(): the iterator from before both is stale, not mistaken for
    the new one."""
    loader = build("pair", n=30, batch_size=4)
    it0 = iter(loader)
    loader.set_epoch(3)
    it1 = iter(loader)
    with pytest.raises(RuntimeError, match="stale"):
        next(it0)
    assert rows_of(it1) == collect(_at_epoch(build("pair", n=30, batch_size=4), 3))


def test_an_unstarted_older_iterator_raises_too(build):
    """An iterator never advanced is stale as soon as a newer iter() exists."""
    loader = build("pair", n=30, batch_size=4)
    it0 = iter(loader)
    it1 = iter(loader)
    with pytest.raises(RuntimeError):
        next(it0)
    assert len(rows_of(it1)) == 8


# -- source kinds and construction errors ----------------------------------------------------------


@pytest.mark.parametrize("k", [0, 1, 3, 4])
def test_a_tuple_not_of_length_2_is_a_type_error(k):
    """A tuple source must be an (x, y) pair: any other length is a TypeError."""
    x, y = make_data(6, 2, 1)
    with pytest.raises(TypeError):
        DataLoader(tuple([x, y, x, y][:k]), 2)


def test_a_tuple_of_length_2_is_always_an_x_y_pair():
    """A 2-tuple is an (x, y) pair, even of two same-shaped arrays; mismatched rows are refused."""
    x, _ = make_data(6, 3, 0)
    loader = DataLoader((x, x * 2), 4, shuffle=False)
    assert (loader.n, loader.d, loader.l) == (6, 3, 3)
    (xb, yb), _ = list(loader)
    np.testing.assert_array_equal(xb, x[:4])
    np.testing.assert_array_equal(yb, 2 * x[:4])
    with pytest.raises(ValueError):
        DataLoader((x, x[:5]), 4)


@pytest.mark.parametrize(
    "source",
    ["data.ndf", 5, 2.5, None, {"x": 1}, object()],
    ids=["str", "int", "float", "None", "dict", "object"],
)
def test_an_unsupported_source_kind_is_a_type_error(source):
    """A source that is none of the supported kinds (a string, an int, ...) is a TypeError."""
    with pytest.raises(TypeError):
        DataLoader(source, 2)


@pytest.mark.parametrize("b", [0, -1, -32])
def test_batch_size_below_1_is_a_value_error(b):
    """batch_size < 1 is a ValueError."""
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(make_data(10)[0], b)


@pytest.mark.parametrize("b", [2.5, 2.0, True, False, "4", None])
def test_batch_size_not_an_int_is_a_type_error(b):
    """batch_size must be an int: a float (even 2.0), a bool, a string or None is a TypeError."""
    with pytest.raises(TypeError, match="batch_size"):
        DataLoader(make_data(10)[0], b)


def test_batch_size_numpy_integer_is_accepted():
    """A NumPy integer batch_size is an int like any other."""
    loader = DataLoader(make_data(10)[0], np.int64(4), shuffle=False)
    assert len(loader) == 3
    assert [len(b) for b in collect(loader)] == [4, 4, 2]


@pytest.mark.parametrize("S", [0, -1])
def test_num_shards_below_1_is_a_value_error(S):  # noqa: N803
    """num_shards < 1 is a ValueError."""
    with pytest.raises(ValueError, match="num_shards"):
        DataLoader(make_data(10)[0], 2, num_shards=S)


@pytest.mark.parametrize("S,s", [(1, 1), (1, -1), (4, 4), (4, 7), (4, -1), (4, -4)])
def test_shard_index_out_of_range_is_a_value_error(S, s):  # noqa: N803
    """shard_index must lie in [0, num_shards): anything else is a ValueError."""
    with pytest.raises(ValueError, match="shard_index"):
        DataLoader(make_data(10)[0], 2, num_shards=S, shard_index=s)


@pytest.mark.parametrize("kind", ["pair", "ndf"])
def test_total_size_must_equal_the_whole_datasets_rows(build, kind):
    """total_size as an int must equal n (the whole dataset's, even on a shard), else ValueError."""
    assert build(kind, n=10, total_size=10).total_size == 10
    assert build(kind, n=10, total_size="auto").total_size == 10
    for s in range(3):
        loader = build(kind, n=10, num_shards=3, shard_index=s, total_size=10)
        assert loader.total_size == 10
        assert loader.n < 10
    for bad in (9, 11, 0, 3):
        with pytest.raises(ValueError, match="total_size"):
            build(kind, n=10, total_size=bad)
    with pytest.raises(ValueError, match="total_size"):
        build(kind, n=10, num_shards=3, shard_index=0, total_size=3)  # the shard's rows


@pytest.mark.parametrize("bad", ["all", "AUTO", 10.0, True, [10]])
def test_total_size_of_another_kind_is_a_type_error(bad):
    """total_size is "auto", None or an int: anything else is a TypeError naming it, even
    where the row count is known anyway (a random-access source)."""
    with pytest.raises(TypeError, match='total_size must be "auto", None or an int; got'):
        DataLoader(make_data(10)[0], 2, total_size=bad)
    with pytest.raises(ValueError, match="total_size must be >= 0; got total_size=-1"):
        DataLoader(make_data(10)[0], 2, total_size=-1)
    with pytest.raises(ValueError, match='pass total_size="auto"'):
        DataLoader(make_data(10)[0], 2, total_size=9)


def test_negative_seed_is_a_value_error():
    """seed < 0 is a ValueError."""
    with pytest.raises(ValueError, match="seed"):
        DataLoader(make_data(10)[0], 2, seed=-1)


# -- .ndf handles ----------------------------------------------------------------------------------


def test_closing_the_users_ndffile_does_not_break_a_loader_over_it(tmp_path):
    """A loader holds its own share of an NdfFile: closing the user's NdfFile leaves it working."""
    x, y = make_data(20, 3, 2)
    path = tmp_path / "d.ndf"
    save_ndf(path, (x, y))
    f = open_ndf(path)
    loader = DataLoader(f, 6, seed=4)
    f.close()
    want = collect(_at_epoch(DataLoader((x, y), 6, seed=4), 0))
    got = []
    for xb, yb in loader:
        check_rows(xb, yb, 3, 2)
        got.append(ids(xb))
    assert got == want


def test_a_closed_loader_refuses_to_read_and_lets_go_of_its_ndf_file(tmp_path):
    """close() releases the loader's share of its .ndf file now (the descriptor closes
    when the user's share is gone too), and any read after it is a ValueError."""
    x, y = make_data(20, 3, 2)
    path = tmp_path / "d.ndf"
    save_ndf(path, (x, y))
    fds = set(os.listdir("/proc/self/fd"))
    f = open_ndf(path)
    loader = DataLoader(f, 6)
    f.close()
    next(iter(loader))
    loader.close()
    assert set(os.listdir("/proc/self/fd")) <= fds
    for read in (
        lambda: iter(loader),
        lambda: loader.next_into(np.empty((6, 3)), np.empty((6, 2))),
    ):
        with pytest.raises(ValueError, match="^read from a closed DataLoader$"):
            read()


def test_closing_a_loader_mid_epoch_closes_the_streams_iterator():
    """close() mid-epoch closes the source's iterator now (its file or connection is let
    go), not when the garbage collector gets to it."""
    opened = []
    loader = DataLoader(
        lambda: ClosableChunks([4, 4, 4], made=opened), 2, total_size=12, shuffle=False
    )
    next(iter(loader))
    loader.close()
    assert len(opened) == 1 and opened[0].closed


def test_closing_a_loader_does_not_close_the_users_ndffile(tmp_path):
    """Closing a loader over an NdfFile lets go of the loader's share only."""
    x, y = make_data(20, 3, 2)
    path = tmp_path / "d.ndf"
    save_ndf(path, (x, y))
    with open_ndf(path) as f:
        loader = DataLoader(f, 6)
        list(loader)
        loader.close()
        xr, yr = f.read_row(7)
        np.testing.assert_array_equal(xr, x[7])
        np.testing.assert_array_equal(yr, y[7])


def test_pickling_a_loader_is_a_type_error_pointing_to_state_dict():
    """A loader holds threads and open files: pickle refuses it, naming the way
    (its state_dict and the source), instead of a message about an inner object."""
    import copy
    import pickle

    loader = DataLoader(np.zeros((10, 2)), 4)
    for attempt in (pickle.dumps, copy.copy):
        with pytest.raises(TypeError, match=r"cannot be pickled.*state_dict\(\).*load_state_dict"):
            attempt(loader)
