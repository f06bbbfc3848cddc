"""ColumnStats (exactbatch.stats): one streaming pass, mergeable, numerically stable."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from exactbatch.stats import ColumnStats


def _reference(a: np.ndarray):
    return np.nanmean(a, 0), np.nanstd(a, 0), np.nanmin(a, 0), np.nanmax(a, 0)


def _got(s: ColumnStats):
    t = s.table([str(j) for j in range(len(s.count))])
    return [np.array([r[k] for r in t]) for k in ("mean", "sd", "min", "max")]


@given(
    n=st.integers(1, 300),
    cuts=st.lists(st.integers(0, 300), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_any_cut_into_blocks_gives_the_whole_datas_statistics(n, cuts, seed):
    """Blocks updated in turn, or summarised apart and merged, give the statistics of
    the whole: the cut never matters."""
    a = np.random.default_rng(seed).standard_normal((n, 3)) * [1, 10, 1e-3] + [0, 5, -7]
    bounds = [0, *sorted(c for c in cuts if c < n), n]
    one, merged = ColumnStats(3), ColumnStats(3)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        one.update(a[lo:hi])
        merged.merge(ColumnStats.of(a[lo:hi]))
    for s in (one, merged):
        for got, want in zip(_got(s), _reference(a), strict=True):
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        assert s.count.tolist() == [n, n, n]


def test_stable_at_a_large_offset():
    """Variance 1 at offset 1e9, in blocks of 1000: E[x^2] - E[x]^2 would lose it all."""
    rng = np.random.default_rng(0)
    a = 1e9 + rng.standard_normal((20_000, 2))
    s = ColumnStats(2)
    for lo in range(0, len(a), 1000):
        s.update(a[lo : lo + 1000])
    mean, sd, _, _ = _got(s)
    np.testing.assert_allclose(mean - 1e9, np.mean(a - 1e9, 0), atol=3e-7)
    np.testing.assert_allclose(sd, np.std(a - 1e9, 0), rtol=1e-9)


def test_nans_are_counted_apart_and_an_all_nan_column_has_no_value():
    a = np.array([[1.0, np.nan], [np.nan, np.nan], [3.0, np.nan]])
    t = ColumnStats(2).update(a[:1]).update(a[1:]).table(["a", "b"])
    assert t[0] == {
        "name": "a",
        "count": 2,
        "nan": 1,
        "mean": 2.0,
        "sd": 1.0,
        "min": 1.0,
        "max": 3.0,
    }
    assert t[1] == {
        "name": "b",
        "count": 0,
        "nan": 3,
        "mean": None,
        "sd": None,
        "min": None,
        "max": None,
    }


def test_bad_shapes_are_refused():
    with pytest.raises(ValueError, match="2-D block"):
        ColumnStats.of(np.zeros(3))
    with pytest.raises(ValueError, match="cannot merge statistics of 2 columns into 3"):
        ColumnStats(3).merge(ColumnStats(2))
    with pytest.raises(ValueError, match="1 names for 2 columns"):
        ColumnStats(2).table(["a"])
    assert ColumnStats.of(np.zeros((0, 2))).count.tolist() == [0, 0]


@given(
    n=st.integers(2, 60),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    seed=st.integers(0, 2**16),
)
def test_any_cut_of_rows_with_nans_gives_each_columns_own_statistics(n, cuts, seed):
    """Rows holding NaN (about a third of the values, a column NaN throughout some blocks
    and not others): every column's count, mean, sd, min and max are its own non-NaN
    values', whatever the cut."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((n, 3)) * [1, 10, 100] + [0, 50, -7]
    a[rng.random((n, 3)) < 0.35] = np.nan
    a[: n // 2, 2] = np.nan  # a column with no value in the first blocks
    a[-1, 0] = np.nan if n > 2 else a[-1, 0]
    a[0, 1] = 1e6  # each column's extremes differ from the others'
    bounds = [0, *sorted(c for c in cuts if c < n), n]
    s = ColumnStats(3)
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        s.update(a[lo:hi])
    t = s.table(["a", "b", "c"])
    for j, row in enumerate(t):
        v = a[~np.isnan(a[:, j]), j]
        assert (row["count"], row["nan"]) == (len(v), n - len(v))
        if len(v) == 0:
            assert row["mean"] is None and row["sd"] is None
            continue
        np.testing.assert_allclose(row["mean"], v.mean(), rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(row["sd"], v.std(), rtol=1e-9, atol=1e-12)
        assert (row["min"], row["max"]) == (v.min(), v.max())


def test_float32_rows_are_summarised_in_float64():
    """A float32 block's statistics are those of its values taken as float64 (float32
    sums would lose the digits below 1e-7 of the mean)."""
    x = (np.float32(1000) + np.arange(7, dtype=np.float32) * np.float32(0.001)).reshape(-1, 1)
    x[3, 0] = np.nan
    for block in (x, np.c_[x, x[::-1]]):
        got = ColumnStats.of(block).table(["a", "b"][: block.shape[1]])
        want = ColumnStats.of(block.astype(np.float64)).table(["a", "b"][: block.shape[1]])
        assert got == want
        v = x[~np.isnan(x[:, 0]), 0].astype(np.float64)
        assert got[0]["mean"] == pytest.approx(v.mean(), rel=1e-15, abs=0)
