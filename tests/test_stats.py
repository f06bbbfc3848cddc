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
