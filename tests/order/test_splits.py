"""exactbatch.split and exactbatch.kfold (DESIGN.md, "Real data"): pure functions giving
disjoint int64 id arrays whose union is every row; with groups, each group on one side.

Laws (hypothesis over n, fractions, k, seeds and group labels): a partition of
range(n), each part sorted int64; the counts of the largest remainder method
(split) or n // k (+1) (kfold); each group wholly in one part; the same
arguments give the same arrays; train and test of a fold complement each other.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import make_data
from hypothesis import given, settings
from hypothesis import strategies as st

import exactbatch
from exactbatch import (
    DataLoader,
    kfold,
    open_ndf,
    open_ndf_dataset,
    save_ndf,
    save_ndf_dataset,
    split,
)
from exactbatch.order.splits import split_counts


def check_partition(parts, n: int) -> None:
    """Disjoint sorted int64 id arrays whose union is range(n)."""
    for p in parts:
        assert isinstance(p, np.ndarray) and p.dtype == np.int64 and p.ndim == 1
        assert np.all(np.diff(p) > 0), "a part is not sorted, or holds an id twice"
    joined = np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)
    assert len(joined) == n, f"{len(joined)} ids over the parts, n={n}"
    assert np.array_equal(np.sort(joined), np.arange(n)), "not a partition of range(n)"


def check_groups_whole(parts, groups) -> None:
    """Every group's rows lie in one part."""
    home = {}
    for i, p in enumerate(parts):
        for g in set(np.asarray(groups)[p].tolist()):
            assert home.setdefault(g, i) == i, f"group {g!r} lies in parts {home[g]} and {i}"


fractions_st = st.lists(st.integers(1, 50), min_size=1, max_size=5).map(
    lambda w: [x / sum(w) for x in w]
)


def largest_remainder(n, fractions):
    """The counts, computed here independently: floor(n f), then one more for the parts
    of the largest remainders (the earlier first)."""
    exact = [n * f / math.fsum(fractions) for f in fractions]
    counts = [math.floor(e) for e in exact]
    order = sorted(range(len(fractions)), key=lambda i: (-(exact[i] - counts[i]), i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


@settings(max_examples=150, deadline=None)
@given(n=st.integers(0, 300), fractions=fractions_st, seed=st.integers(0, 2**40))
def test_split_is_a_partition_with_largest_remainder_counts(n, fractions, seed):
    parts = split(n, fractions, seed=seed)
    assert isinstance(parts, tuple) and len(parts) == len(fractions)
    check_partition(parts, n)
    assert [len(p) for p in parts] == largest_remainder(n, fractions)
    assert all(abs(len(p) - n * f) < 1 for p, f in zip(parts, fractions, strict=True))
    again = split(n, list(fractions), seed=seed)  # a pure function of its arguments
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


@settings(max_examples=100, deadline=None)
@given(
    labels=st.lists(st.integers(0, 12), min_size=1, max_size=200),
    fractions=fractions_st,
    seed=st.integers(0, 2**40),
)
def test_split_with_groups_keeps_every_group_whole(labels, fractions, seed):
    groups = np.array(labels)
    parts = split(len(groups), fractions, seed=seed, groups=groups)
    check_partition(parts, len(groups))
    check_groups_whole(parts, groups)
    if len(set(labels)) >= len(fractions):  # a group each first: no part is empty
        assert all(len(p) for p in parts)
    biggest = max(np.bincount(groups))
    for p, f in zip(parts, fractions, strict=True):  # within about a group of its target
        assert abs(len(p) - len(groups) * f) <= biggest * len(fractions)
    again = split(len(groups), fractions, seed=seed, groups=list(labels))
    assert all(np.array_equal(a, b) for a, b in zip(parts, again, strict=True))


@settings(max_examples=100, deadline=None)
@given(n=st.integers(2, 200), k=st.integers(2, 9), seed=st.integers(0, 2**40))
def test_kfold_tests_partition_the_rows_and_trains_complement_them(n, k, seed):
    if k > n:
        with pytest.raises(ValueError, match=r"\bk=\d+"):
            kfold(n, k, seed=seed)
        return
    folds = kfold(n, k, seed=seed)
    assert len(folds) == k
    tests = [test for _, test in folds]
    check_partition(tests, n)
    assert sorted(len(t) for t in tests) == sorted(n // k + (i < n % k) for i in range(k))
    for train, test in folds:
        check_partition([train, test], n)
    assert all(
        np.array_equal(a[1], b[1]) for a, b in zip(folds, kfold(n, k, seed=seed), strict=True)
    )


@settings(max_examples=80, deadline=None)
@given(
    labels=st.lists(st.sampled_from("abcdefghij"), min_size=2, max_size=150),
    k=st.integers(2, 6),
    seed=st.integers(0, 2**40),
)
def test_kfold_with_groups_puts_each_group_in_one_test_fold(labels, k, seed):
    groups = np.array(labels)  # strings group as well as numbers
    if k > len(set(labels)):
        with pytest.raises(ValueError, match="groups"):
            kfold(len(groups), k, seed=seed, groups=groups)
        return
    folds = kfold(len(groups), k, seed=seed, groups=groups)
    tests = [test for _, test in folds]
    check_partition(tests, len(groups))
    check_groups_whole(tests, groups)
    assert all(len(t) for t in tests), "a fold with no group"
    for train, test in folds:
        assert not set(groups[train]) & set(groups[test]), "a group on both sides"


def test_the_seed_changes_the_split_and_the_split_is_not_the_loaders_order():
    a, b = split(1000, (0.5, 0.5), seed=0), split(1000, (0.5, 0.5), seed=1)
    assert not np.array_equal(a[0], b[0])
    first_half = np.sort(exactbatch.order.epoch_rows(1000, seed=0, epoch=0)[:500])
    assert not np.array_equal(a[0], first_half), "split reuses the loader's epoch-0 order"


def test_split_counts_are_documented_largest_remainders():
    assert split_counts(10, (0.7, 0.2, 0.1)) == [7, 2, 1]
    assert split_counts(10, (1 / 3, 1 / 3, 1 / 3)) == [4, 3, 3]
    assert split_counts(2, (0.5, 0.25, 0.25)) == [1, 1, 0]
    assert split_counts(0, (0.5, 0.5)) == [0, 0]


def test_split_of_a_source_equals_split_of_its_row_count(tmp_path):
    x, y = make_data(57)
    path = tmp_path / "d.ndf"
    save_ndf(path, (x, y))
    want = split(57, (0.6, 0.4), seed=4)
    for source in ((x, y), x, exactbatch.Dataset(x, y), open_ndf(path)):
        got = split(source, (0.6, 0.4), seed=4)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_groups_by_a_column_name_of_an_ndf_file_and_a_dataset(tmp_path):
    n = 90
    x, y = make_data(n, d=2, l=1)
    x[:, 1] = np.arange(n) // 10  # "customer": 9 customers of 10 rows
    path = tmp_path / "named.ndf"
    save_ndf(path, (x, y), features=["id", "customer"], labels=["churn"])
    folder = tmp_path / "ds"
    save_ndf_dataset(
        folder, [(x[:40], y[:40]), (x[40:], y[40:])], features=["id", "customer"], labels=["churn"]
    )
    want = split(n, (0.7, 0.3), seed=2, groups=x[:, 1])
    for source in (open_ndf(path), open_ndf_dataset(folder)):
        got = split(source, (0.7, 0.3), seed=2, groups="customer")
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
        check_groups_whole(got, x[:, 1])
        folds = kfold(source, 3, seed=2, groups="customer")
        check_groups_whole([t for _, t in folds], x[:, 1])
    # a label column groups too
    assert len(split(open_ndf(path), (0.5, 0.5), groups="churn")) == 2


def _same(got, want) -> bool:
    if isinstance(want[0], tuple):  # folds: (train, test) pairs
        return all(_same(g, w) for g, w in zip(got, want, strict=True))
    return all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_key_and_stratify_by_column_name_are_the_columns_values(tmp_path):
    """key= and stratify= take a column name as groups= does: the same parts as the
    column's values given as an array, for split and kfold."""
    n = 60
    x, y = make_data(n, d=2, l=1)
    x[:, 1] = np.arange(n) % 7  # "customer"
    y[:, 0] = np.arange(n) % 3  # "churn": three classes
    path = tmp_path / "named.ndf"
    save_ndf(path, (x, y), features=["id", "customer"], labels=["churn"])
    f = open_ndf(path)

    def halves(source, **kw):
        return split(source, (0.7, 0.3), seed=5, **kw)

    def thirds(source, **kw):
        return kfold(source, 3, seed=5, **kw)

    for cut in (halves, thirds):
        assert _same(cut(f, key="customer"), cut(n, key=x[:, 1])), cut.__name__
        assert _same(cut(f, stratify="churn"), cut(n, stratify=y[:, 0])), cut.__name__
        assert _same(cut(f, groups="customer"), cut(n, groups=x[:, 1])), cut.__name__
        assert not _same(cut(f, key="customer"), cut(f, key="id")), cut.__name__
        assert not _same(cut(f, stratify="churn"), cut(f)), cut.__name__
        for arg in ("groups", "key", "stratify"):
            with pytest.raises(KeyError) as info:
                cut(f, **{arg: "zz"})
            assert str(info.value).startswith(f"{arg}='zz': no such column"), cut.__name__


def test_a_numpy_row_count_and_a_seed_of_any_size(tmp_path):
    assert _same(split(np.int64(20), (0.5, 0.5), seed=3), split(20, (0.5, 0.5), seed=3))
    assert _same(kfold(np.int32(20), 4, seed=3), kfold(20, 4, seed=3))
    big = 2**70  # a seed has no ceiling
    check_partition(split(20, (0.5, 0.5), seed=big), 20)
    check_partition([t for _, t in kfold(20, 4, seed=big)], 20)
    for arg in ("groups", "key", "stratify"):
        with pytest.raises(TypeError) as info:
            kfold(np.int64(12), 2, **{arg: "a"})
        assert str(info.value) == (
            f"{arg}='a' names a column, but the first argument is a row count: pass the "
            f"source itself, or {arg} as an array"
        )
    assert _same(kfold(20, 4), kfold(20, 4, seed=0))  # the default seed
    assert _same(split(20, (0.5, 0.5)), split(20, (0.5, 0.5), seed=0))
    with pytest.raises(ValueError) as info:
        kfold(20, 4, seed=-1)
    assert str(info.value) == "seed must be >= 0; got seed=-1"
    g = np.arange(20) % 5
    for kw in ({"groups": g, "key": g}, {"groups": g, "stratify": g}):
        with pytest.raises(ValueError):
            kfold(20, 4, **kw)
        with pytest.raises(ValueError):
            split(20, (0.5, 0.5), **kw)
    with pytest.raises(TypeError) as info:
        kfold(True, 2)
    assert str(info.value) == ("source_or_n must be a row count (an int) or a random-access source")


def test_groups_by_a_dataframe_column_of_strings():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"a": np.arange(30.0), "shop": list("xyz") * 10})
    parts = split(frame, (0.5, 0.5), seed=1, groups="shop")
    check_partition(parts, 30)
    check_groups_whole(parts, frame["shop"].to_numpy())


def test_parts_feed_a_loader_exactly():
    x, y = make_data(101)
    train, valid = split((x, y), (0.8, 0.2), seed=7)
    seen = []
    for part in (train, valid):
        for xb, _ in DataLoader((x, y), 16, rows=part, seed=3):
            seen += xb[:, 0].astype(int).tolist()
    assert sorted(seen) == list(range(101))


# -- bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fractions, match",
    [
        ((0.5, 0.4), "sum to 1"),
        ((0.5, 0.6), "sum to 1"),
        ((1.2, -0.2), "> 0"),
        ((1.0, 0.0), "> 0"),
        ((float("nan"), 1.0), "> 0"),
        ((), "non-empty"),
    ],
)
def test_bad_fractions_are_a_value_error_naming_them(fractions, match):
    with pytest.raises(ValueError, match=f"fractions.*{match}|{match}.*fractions"):
        split(10, fractions)


@pytest.mark.parametrize("fractions", ["0.5", 0.5, None, ("a", "b")])
def test_fractions_of_the_wrong_kind_are_a_type_error(fractions):
    with pytest.raises(TypeError, match="fractions"):
        split(10, fractions)


@pytest.mark.parametrize("k", [0, 1, -3])
def test_k_below_two_is_a_value_error(k):
    with pytest.raises(ValueError, match="k must be >= 2"):
        kfold(10, k)


def test_k_beyond_the_rows_or_the_groups_is_a_value_error():
    with pytest.raises(ValueError, match="k=11 folds exceed the n=10 rows"):
        kfold(10, 11)
    with pytest.raises(ValueError, match="k=4 folds exceed the 3 groups"):
        kfold(10, 4, groups=[0, 1, 2, 0, 1, 2, 0, 1, 2, 0])
    with pytest.raises(TypeError, match="k must be an int"):
        kfold(10, 2.0)


def test_groups_of_the_wrong_length_are_a_value_error():
    with pytest.raises(ValueError, match="one label per row: 10 labels"):
        split(10, (0.5, 0.5), groups=np.zeros(9))
    with pytest.raises(ValueError, match="one label per row"):
        kfold(10, 2, groups=np.zeros((10, 2)))


def test_groups_with_nan_are_a_value_error_naming_them(tmp_path):
    groups = np.arange(10.0)
    groups[4] = np.nan
    with pytest.raises(ValueError, match=r"groups holds NaN.*row 4"):
        split(10, (0.5, 0.5), groups=groups)
    with pytest.raises(ValueError, match=r"row 2"):
        kfold(4, 2, groups=np.array(["a", "b", None, "a"], dtype=object))
    x, y = make_data(12, d=2)
    x[7, 1] = np.nan
    path = tmp_path / "nan.ndf"
    save_ndf(path, (x, y), features=["id", "store"], labels=["t"])
    with pytest.raises(ValueError, match=r"column 'store' holds NaN.*row 7"):
        split(open_ndf(path), (0.5, 0.5), groups="store")


def test_a_missing_column_is_a_key_error_and_value_error_naming_it_and_the_names(tmp_path):
    x, y = make_data(12, d=2)
    path = tmp_path / "n.ndf"
    save_ndf(path, (x, y), features=["id", "store"], labels=["t"])
    for error in (KeyError, ValueError):
        with pytest.raises(error, match=r"groups='shop'.*no such column.*'id', 'store', 't'"):
            split(open_ndf(path), (0.5, 0.5), groups="shop")


def test_a_column_name_without_column_names_is_a_type_error():
    x, y = make_data(12)
    with pytest.raises(TypeError, match="no column names"):
        split((x, y), (0.5, 0.5), groups="a")
    with pytest.raises(TypeError, match="row count"):
        split(12, (0.5, 0.5), groups="a")


def test_a_stream_cannot_be_split():
    with pytest.raises(TypeError, match="stream"):
        split(lambda: iter([np.zeros((3, 2))]), (0.5, 0.5))
    with pytest.raises(TypeError, match="source_or_n"):
        split(True, (0.5, 0.5))
    with pytest.raises(ValueError, match="n must be >= 0"):
        split(-1, (0.5, 0.5))
    with pytest.raises(ValueError, match="seed must be >= 0"):
        split(5, (0.5, 0.5), seed=-1)


def test_golden_splits_never_change_between_versions():
    """A split names an experiment's rows: these literals (the splits of 2026-12) change
    only on purpose. They pin the seeded order, the largest remainder's tie rule (the
    earlier part first), kfold's extra rows to the first folds, and the groups' deal
    (the least full part, the earlier on a tie)."""
    assert split_counts(10, (1 / 3, 1 / 3, 1 / 3)) == [4, 3, 3]  # a three-way tie
    assert split_counts(5, (0.5, 0.5)) == [3, 2]
    assert split_counts(7, (0.25,) * 4) == [2, 2, 2, 1]
    assert split_counts(10, (0.25, 0.5, 0.25)) == [3, 5, 2]
    golden = {
        (10, (0.6, 0.4), 0): [[0, 2, 4, 5, 8, 9], [1, 3, 6, 7]],
        (10, (0.6, 0.4), 1): [[0, 1, 2, 5, 6, 9], [3, 4, 7, 8]],
        (11, (0.5, 0.25, 0.25), 3): [[0, 2, 3, 7, 8], [1, 4, 5], [6, 9, 10]],
    }
    for (n, fractions, seed), parts in golden.items():
        assert [p.tolist() for p in split(n, fractions, seed=seed)] == parts
    assert [t.tolist() for _, t in kfold(10, 3, seed=2)] == [[4, 5, 6, 9], [0, 3, 7], [1, 2, 8]]
    pairs = np.repeat(np.arange(6), 2)  # six groups of two rows
    got = split(12, (0.5, 0.5), seed=0, groups=pairs)
    assert [p.tolist() for p in got] == [[0, 1, 2, 3, 8, 9], [4, 5, 6, 7, 10, 11]]
    folds = [t.tolist() for _, t in kfold(12, 3, seed=1, groups=pairs)]
    assert folds == [[6, 7, 10, 11], [2, 3, 4, 5], [0, 1, 8, 9]]
    sizes = np.array([0, 1, 1, 2, 2, 2, 3, 3, 3, 3])  # groups of 1, 2, 3 and 4 rows
    folds = [t.tolist() for _, t in kfold(10, 2, seed=0, groups=sizes)]
    assert folds == [[0, 1, 2, 3, 4, 5], [6, 7, 8, 9]]
