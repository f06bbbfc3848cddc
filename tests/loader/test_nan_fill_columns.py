"""Standardize(..., nan_fill={name: value}): each named feature its own NaN fill.

Laws: a mapping fills each named column's NaN with its own value (the others
keep NaN), bit for bit what the transform applied after a plain gather gives,
on both backends, in float64 and float32, from random access and streams; the
names meet the statistics' names, or the loader's features for statistics
without names; a name that meets no column, a source and statistics both
without names, or a bad key or value is an error naming ``nan_fill`` (or
``transform``).
"""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch import DataLoader, Standardize, open_ndf, save_ndf

NAMES = ["age", "income", "city"]


def _data():
    x = np.array([[np.nan, 4.0, np.nan], [2.0, np.nan, np.nan], [1.0, 2.0, 3.0]] * 5)
    return x, np.arange(len(x), dtype=np.float64)


def _want(x, mean, sd, fills):
    out = (x - mean) * (1.0 / np.asarray(sd))
    for j, f in enumerate(fills):
        if f is not None:
            out[np.isnan(out[:, j]), j] = f
    return out


def _epoch(loader):
    return np.concatenate([b[0] for b in loader])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_each_named_column_takes_its_own_fill(tmp_path, each_backend, dtype):
    x, y = _data()
    save_ndf(tmp_path / "a.ndf", (x, y), features=NAMES, labels=["t"])
    stats = {"names": [*NAMES, "t"], "mean": [1.0, 2.0, 0.0, 0.0], "sd": [2.0, 1.0, 1.0, 1.0]}
    # a missing category: code -1, not the mean's code 0; income's NaN kept
    t = Standardize(stats, nan_fill={"city": -1.0, "age": 0.5, "income": None})
    want = _want(x, [1.0, 2.0, 0.0], [2.0, 1.0, 1.0], [0.5, None, -1.0]).astype(dtype)
    np.testing.assert_array_equal(t(x).astype(dtype), want)
    chunks = [(x[:7], y[:7]), (x[7:], y[7:])]
    with open_ndf(tmp_path / "a.ndf") as f:
        for source in (f, (x, y), chunks):
            loader = DataLoader(source, 4, shuffle=False, transform=t, dtype=dtype, total_size=15)
            np.testing.assert_array_equal(_epoch(loader), want)


def test_statistics_without_names_meet_the_loader_features_by_name(tmp_path, each_backend):
    x, y = _data()
    save_ndf(tmp_path / "a.ndf", (x, y), features=NAMES, labels=["t"])
    t = Standardize(([0.0, 0.0, 0.0], [1.0, 1.0, 1.0]), nan_fill={"city": 9.0})
    with open_ndf(tmp_path / "a.ndf") as f:
        np.testing.assert_array_equal(
            _epoch(DataLoader(f, 5, shuffle=False, transform=t)), _want(x, 0, 1, [None, None, 9])
        )
        # and the loader's chosen columns (features=): the fill follows its column
        t2 = Standardize(([0.0, 0.0], [1.0, 1.0]), nan_fill={"city": 9.0})
        loader = DataLoader(f, 5, shuffle=False, transform=t2, features=["city", "age"])
        np.testing.assert_array_equal(_epoch(loader), _want(x[:, [2, 0]], 0, 1, [9, None]))
        with pytest.raises(ValueError, match=r"nan_fill names column\(s\) \['zip'\] not among"):
            DataLoader(f, 5, transform=Standardize(([0.0] * 3, [1.0] * 3), nan_fill={"zip": 1}))


def test_a_mapping_without_any_names_is_refused_at_construction():
    t = Standardize(([0.0, 0.0], [1.0, 1.0]), nan_fill={"city": 1.0})
    with pytest.raises(ValueError, match="transform: nan_fill maps column names"):
        DataLoader(np.zeros((4, 2)), 2, transform=t)


@pytest.mark.parametrize(
    "fill, error, words",
    [
        ({"zip": 1.0}, ValueError, r"nan_fill names column\(s\) \['zip'\] not among the stat"),
        ({0: 1.0}, TypeError, "nan_fill's keys must be column names"),
        ({"age": "x"}, TypeError, r"nan_fill\['age'\] must be a number"),
        ({"age": np.inf}, ValueError, r"nan_fill\['age'\] must be finite"),
        ({"age": True}, TypeError, r"nan_fill\['age'\]"),
    ],
)
def test_bad_mappings_name_nan_fill(fill, error, words):
    with pytest.raises(error, match=words):
        Standardize({"names": NAMES, "mean": [0, 0, 0], "sd": [1, 1, 1]}, nan_fill=fill)


def test_one_number_still_fills_every_column(each_backend):
    x, _ = _data()
    t = Standardize(([0.0] * 3, [1.0] * 3), nan_fill=-2.0)
    assert t.nan_fill == -2.0
    np.testing.assert_array_equal(
        _epoch(DataLoader(x, 4, shuffle=False, transform=t)), _want(x, 0, 1, [-2, -2, -2])
    )
