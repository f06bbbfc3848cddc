"""Splits that survive growth and stratified splits (DESIGN.md, "Splits that survive growth").

Laws (hypothesis over keys, fractions, k, seeds and appended rows): a split or
k-fold by ``key=`` is a partition in which a row's side is a function of its
key and the seed alone, so rows appended later never move an old row; rows of
equal key share a side. A stratified split holds, in each part, within one row
of ``m_c * f_p`` of each class c (a stratified k-fold: ``m_c // k`` or one more,
and ``n // k`` or one more in all). Stratified and keyed: appending m rows to a
class moves at most m of its old rows per cut. Every result reports its counts.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import make_data
from hypothesis import given, settings
from hypothesis import strategies as st
from test_splits import check_partition, fractions_st

from exactbatch import kfold, open_ndf, save_ndf, split

keys_st = st.lists(st.integers(-(2**62), 2**62), min_size=0, max_size=120, unique=True)


def side_of(parts) -> dict[int, int]:
    return {int(r): i for i, p in enumerate(parts) for r in p}


@settings(max_examples=80, deadline=None)
@given(keys=keys_st, more=keys_st, fractions=fractions_st, seed=st.integers(0, 2**40))
def test_a_keyed_split_keeps_every_old_row_on_its_side_when_rows_are_appended(
    keys, more, fractions, seed
):
    old = np.array(keys, dtype=np.int64)
    grown = np.concatenate([old, np.array(more, dtype=np.int64)])
    before = split(len(old), fractions, seed=seed, key=old)
    after = split(len(grown), fractions, seed=seed, key=grown)
    check_partition(before, len(old))
    check_partition(after, len(grown))
    was, now = side_of(before), side_of(after)
    assert all(now[r] == s for r, s in was.items()), "an old row changed side"
    assert before.counts == tuple(len(p) for p in before)
    assert np.allclose(before.expected, len(old) * np.asarray(fractions))


@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(st.sampled_from("abcdefgh"), min_size=5, max_size=80),
    more=st.lists(st.sampled_from("abcdefghij"), max_size=20),
    k=st.integers(2, 5),
    seed=st.integers(0, 2**40),
)
def test_a_keyed_kfold_keeps_groups_whole_and_old_folds_when_rows_are_appended(
    labels, more, k, seed
):
    old, grown = np.array(labels), np.array(labels + more)
    before, after = (
        kfold(len(old), k, seed=seed, key=old),
        kfold(len(grown), k, seed=seed, key=grown),
    )
    check_partition([t for _, t in before], len(old))
    for train, test in after:
        assert not set(grown[train]) & set(grown[test]), "a key on both sides of a fold"
        assert np.array_equal(np.sort(np.concatenate([train, test])), np.arange(len(grown)))
    was, now = side_of([t for _, t in before]), side_of([t for _, t in after])
    assert all(now[r] == s for r, s in was.items())
    assert sum(before.counts) == len(old) and before.expected == (len(old) / k,) * k


@settings(max_examples=80, deadline=None)
@given(
    classes=st.lists(st.integers(0, 4), min_size=0, max_size=200),
    fractions=fractions_st,
    seed=st.integers(0, 2**40),
)
def test_a_stratified_split_holds_each_class_within_one_row_of_its_share(classes, fractions, seed):
    c = np.array(classes, dtype=np.int64)
    parts = split(len(c), fractions, seed=seed, stratify=c)
    check_partition(parts, len(c))
    labels = np.unique(c)
    for p, f in zip(parts, fractions, strict=True):
        for label in labels:
            m = int(np.sum(c == label))
            assert abs(int(np.sum(c[p] == label)) - m * f) < 1, (label, m, f)
        assert abs(len(p) - len(c) * f) < max(1, len(labels))


@settings(max_examples=80, deadline=None)
@given(
    classes=st.lists(st.integers(0, 4), min_size=5, max_size=200),
    k=st.integers(2, 5),
    seed=st.integers(0, 2**40),
)
def test_a_stratified_kfold_deals_each_class_and_the_whole_within_one_row(classes, k, seed):
    c = np.array(classes)
    folds = kfold(len(c), k, seed=seed, stratify=c)
    check_partition([t for _, t in folds], len(c))
    assert sorted(folds.counts) == sorted(len(c) // k + (i < len(c) % k) for i in range(k))
    for label in np.unique(c):
        m = int(np.sum(c == label))
        assert {int(np.sum(c[t] == label)) for _, t in folds} <= {m // k, m // k + 1}


@settings(max_examples=60, deadline=None)
@given(
    classes=st.lists(st.integers(0, 3), min_size=1, max_size=150),
    more=st.lists(st.integers(0, 3), max_size=15),
    fractions=fractions_st,
    seed=st.integers(0, 2**40),
)
def test_stratified_and_keyed_appending_m_rows_to_a_class_moves_at_most_m_per_cut(
    classes, more, fractions, seed
):
    c = np.array(classes + more, dtype=np.int64)
    ids = np.arange(len(c)) * 7 + 3  # any distinct keys
    n = len(classes)
    before = split(n, fractions, seed=seed, key=ids[:n], stratify=c[:n])
    after = split(len(c), fractions, seed=seed, key=ids, stratify=c)
    was, now = side_of(before), side_of(after)
    for p, f in zip(after, fractions, strict=True):
        for label in np.unique(c):
            m = int(np.sum(c == label))
            assert abs(int(np.sum(c[p] == label)) - m * f) < 1
    for label in np.unique(c):
        added = int(np.sum(c[n:] == label))
        moved = sum(1 for r in range(n) if c[r] == label and now[r] != was[r])
        assert moved <= added * (len(fractions) - 1), (label, added, moved)


def test_a_key_hashes_alike_from_ints_floats_and_objects_and_strings_work():
    ids = np.array([3, 17, 2**40, -5, 0, 99, 123456789])
    want = split(len(ids), (0.5, 0.5), seed=4, key=ids)
    for same in (ids.astype(np.float64), ids.astype(object), ids.tolist()):
        got = split(len(ids), (0.5, 0.5), seed=4, key=same)
        assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    words = np.array(["ann", "bob", "cy", "ann", "dee"])
    parts = split(5, (0.5, 0.5), seed=1, key=words)
    assert side_of(parts)[0] == side_of(parts)[3]  # equal keys, one side
    mixed = np.array([1.5, 2.0, -0.0, 0.0])
    assert (
        side_of(split(4, (0.5, 0.5), key=mixed))[2] == side_of(split(4, (0.5, 0.5), key=mixed))[3]
    )


def test_keyed_fractions_hold_in_expectation_and_the_seed_matters():
    n = 100_000
    parts = split(n, (0.8, 0.2), seed=0, key=np.arange(n))
    sd = (n * 0.8 * 0.2) ** 0.5
    assert abs(parts.counts[0] - 80_000) < 5 * sd
    other = split(n, (0.8, 0.2), seed=1, key=np.arange(n))
    assert not np.array_equal(parts[1], other[1])


def test_key_and_stratify_by_a_column_name_of_an_ndf_file(tmp_path):
    n = 60
    x, y = make_data(n, d=2, l=1)
    x[:, 1] = np.arange(n) // 6  # "customer"
    y[:, 0] = np.arange(n) % 3  # "label"
    path = tmp_path / "named.ndf"
    save_ndf(path, (x, y), features=["id", "customer"], labels=["label"])
    f = open_ndf(path)
    got = split(f, (0.7, 0.3), seed=2, key="customer")
    want = split(n, (0.7, 0.3), seed=2, key=x[:, 1].astype(np.int64))
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    strat = kfold(f, 3, seed=2, stratify="label")
    assert all(set(np.bincount(y[t, 0].astype(int)).tolist()) <= {6, 7} for _, t in strat)
    assert strat.counts == (20, 20, 20)


def test_the_results_pickle_and_report_counts():
    parts = split(10, (0.7, 0.3))
    assert parts.counts == (7, 3) and parts.expected == (7.0, 3.0)
    back = pickle.loads(pickle.dumps(parts))
    assert back.counts == (7, 3) and back.expected == (7.0, 3.0)
    folds = pickle.loads(pickle.dumps(kfold(10, 3)))
    assert folds.counts == (4, 3, 3) and len(folds) == 3


# -- bad input ---------------------------------------------------------------------------------


def test_bad_keys_and_labels_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="key must hold one label per row: 5"):
        split(5, (0.5, 0.5), key=[1, 2, 3])
    with pytest.raises(ValueError, match=r"key holds NaN .* the first row 1"):
        split(3, (0.5, 0.5), key=[1.0, float("nan"), 2.0])
    with pytest.raises(ValueError, match="stratify holds NaN"):
        kfold(4, 2, stratify=np.array(["a", None, "b", "a"], dtype=object))
    with pytest.raises(ValueError, match="groups= or key=, not both"):
        split(4, (0.5, 0.5), key=[1, 2, 3, 4], groups=[1, 1, 2, 2])
    with pytest.raises(ValueError, match="stratify= with groups="):
        kfold(4, 2, stratify=[1, 1, 2, 2], groups=[1, 1, 2, 2])
    with pytest.raises(TypeError, match="key must hold integers, strings or bytes"):
        split(2, (0.5, 0.5), key=np.array([1 + 2j, 3j]))
    with pytest.raises(TypeError, match="key='id' names a column, but the first argument"):
        split(4, (0.5, 0.5), key="id")
    with pytest.raises(TypeError, match="key='id' names a column, but a tuple source"):
        split(make_data(4), (0.5, 0.5), key="id")
    x, y = make_data(4)
    save_ndf(tmp_path / "a.ndf", (x, y), features=["id", "b", "c"], labels=["t"])
    with pytest.raises(KeyError, match=r"stratify='shop': no such column"):
        split(open_ndf(tmp_path / "a.ndf"), (0.5, 0.5), stratify="shop")


def test_the_order_takes_labels_as_arrays_never_a_column_name():
    """The order's split of ids reads no source: a column name is refused, naming the
    argument (exactbatch.split looks columns up, above the order)."""
    from exactbatch.order.splits import kfold_rows, split_rows

    with pytest.raises(TypeError, match="groups='g' names a column"):
        split_rows(10, (0.5, 0.5), groups="g")
    with pytest.raises(TypeError, match="key='id' names a column"):
        kfold_rows(10, 2, key="id")
