"""Standardize (exactbatch.transform) on its own: the forms of its statistics, their
checks and messages, the statistics a loader's columns take (by name or by position),
the width rule and the NaN fills. (Through a loader: tests/loader/test_real_data.py,
test_nan_fill_columns.py and test_by_name.py.)"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from exactbatch import Standardize

NAMED = [
    {"name": "a", "mean": 1.0, "sd": 2.0},
    {"name": "b", "mean": 3.0, "sd": 4.0},
    {"name": "y", "mean": 5.0, "sd": 6.0},
]


def _exactly(text: str) -> str:
    return "^" + re.escape(text) + "$"


def test_a_reports_d_keeps_the_features_statistics_of_unnamed_columns():
    """An ``info`` report's ``d`` cuts statistics without names to the features'; a ``d``
    that is not a count of its columns is ignored."""
    unnamed = [{"mean": m, "sd": s} for m, s in ((1.0, 2.0), (3.0, 4.0), (5.0, 6.0))]
    assert Standardize({"d": 2, "stats": unnamed}).mean.tolist() == [1.0, 3.0]
    assert Standardize({"d": 0, "stats": unnamed}).width == 0
    for d in ("2", 4, -1, None, 2.0):
        assert Standardize({"d": d, "stats": unnamed}).mean.tolist() == [1.0, 3.0, 5.0]
    named = Standardize({"d": 2, "stats": NAMED})  # named: all kept, matched by name
    assert named.width == 3 and named.names == ("a", "b", "y")


def test_statistics_of_a_standardize_keep_its_names_and_values():
    named = Standardize(NAMED, nan_fill=0.5)
    again = Standardize(named)
    assert again.names == ("a", "b", "y") and again.mean.tolist() == [1.0, 3.0, 5.0]
    assert again.sd.tolist() == [2.0, 4.0, 6.0] and again.nan_fill is None
    plain = Standardize(Standardize(([1, 2], [3, 4])))
    assert plain.names is None and plain.sd.tolist() == [3.0, 4.0]
    assert plain.mean.dtype == np.float64 and Standardize(([1, 2], [3, 4])).mean.dtype == float
    assert Standardize({"mean": [0, 1], "sd": [1, 1], "names": ["p", 7]}).names == ("p", "7")
    # one column without a name: by position
    assert Standardize([{"mean": 0, "sd": 1}, {"name": "b", "mean": 0, "sd": 1}]).names is None


def test_statistics_that_are_no_accepted_form_are_a_type_error_naming_the_forms():
    forms = (
        "stats must be an `exactbatch info --stats --json` report (or its 'stats' list), "
        "exactbatch.dask.column_stats(...), a dict with 'mean' and 'sd', or a pair "
        "(mean, sd) of arrays; got "
    )
    for bad, kind in ((5, "int"), ("ab", "str"), (b"ab", "bytes"), ([1, 2, 3], "list")):
        with pytest.raises(TypeError, match=_exactly(forms + kind)):
            Standardize(bad)
    with pytest.raises(ValueError) as e:
        Standardize([{"mean": 0, "sd": 1}, {"mean": 0}])
    assert str(e.value) == (
        "stats: column 1 has no 'mean' and 'sd' (expected what "
        "`exactbatch info --stats --json` or exactbatch.dask.column_stats give)"
    )
    with pytest.raises(ValueError, match=_exactly("stats: 2 means but 2 sds and 3 names")):
        Standardize({"mean": [0, 1], "sd": [1, 1], "names": ["a", "b", "c"]})
    with pytest.raises(ValueError, match=_exactly("stats: 2 means but 1 sds")):
        Standardize(([0, 1], [1]))


def test_a_bad_statistic_names_its_column_and_what_is_expected():
    def value(v: str) -> str:  # (NumPy 2 shows a scalar as np.float64(v))
        return rf"(np\.float64\()?{re.escape(v)}\)?"

    with pytest.raises(
        ValueError, match=rf"^stats: column 1's mean is {value('nan')}; expected a finite number$"
    ):  # noqa: E501
        Standardize(([0.0, np.nan], [1.0, 1.0]))
    with pytest.raises(
        ValueError,
        match=rf"^stats: column 1 \('b'\)'s sd is {value('-4.0')}; expected a finite number >= 0$",
    ):  # noqa: E501
        Standardize([NAMED[0], {**NAMED[1], "sd": -4.0}])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the overflow of 1/sd is checked, never warned
        with pytest.raises(
            ValueError, match=rf"^stats: column 1's sd {value('1e-310')} is too small to divide by$"
        ):  # noqa: E501
            Standardize(([0.0, 0.0, 0.0], [1.0, 1e-310, 1e-310]))
        with pytest.raises(
            ValueError, match=rf"^stats: column 2 \('y'\)'s sd {value('1e-310')} is too"
        ):
            Standardize([NAMED[0], NAMED[1], {**NAMED[2], "sd": 1e-310}])
        assert Standardize(([7.0], [0.0])).scale.tolist() == [1.0]  # constant: divided by 1


def test_the_statistics_cannot_be_changed_in_place():
    """mean, sd and scale are read-only, a loader's copy (by name) too: one loader never
    changes another's transform."""
    s = Standardize(NAMED)
    for t in (s, s.for_columns(["b", "a"]), Standardize(([0.0], [1.0]))):
        for a in (t.mean, t.sd, t.scale):
            assert not a.flags.writeable
            with pytest.raises(ValueError, match="read-only"):
                a[0] = 9.0


def test_nan_fill_that_is_not_a_finite_number_names_itself():
    for fill, kind, text in (
        ("x", TypeError, "nan_fill must be a number, a mapping {name: number}, or None; got 'x'"),
        (True, TypeError, "nan_fill must be a number, a mapping {name: number}, or None; got True"),
        (np.inf, ValueError, "nan_fill must be finite; got inf"),
        ({"a": "x"}, TypeError, "nan_fill['a'] must be a number (or None); got 'x'"),
        ({"a": np.nan}, ValueError, "nan_fill['a'] must be finite; got nan"),
        ({1: 0.0}, TypeError, "nan_fill's keys must be column names (str); got 1"),
        ({"z": 0.0}, ValueError, "nan_fill names column(s) ['z'] not among the statistics' "
         "columns ['a', 'b', 'y']"),
    ):  # fmt: skip
        with pytest.raises(kind, match=_exactly(text)):
            Standardize(NAMED, nan_fill=fill)
    assert Standardize(NAMED, nan_fill={"a": None}).nan_fill == {"a": None}


def test_repr_says_the_width_whether_by_name_and_the_fill():
    assert repr(Standardize(([0.0, 1.0], [1.0, 1.0]))) == "Standardize(width=2, nan_fill=None)"
    assert repr(Standardize(NAMED, nan_fill=0)) == "Standardize(width=3, by name, nan_fill=0.0)"


def test_named_statistics_follow_the_loaders_features_in_its_order():
    s = Standardize(NAMED, nan_fill={"a": 7.0, "b": 9.0})
    t = s.for_columns(["b", "a"])
    assert t.names == ("b", "a") and t.mean.tolist() == [3.0, 1.0] and t.width == 2
    assert t.sd.tolist() == [4.0, 2.0] and t.nan_fill == {"a": 7.0, "b": 9.0}
    assert t(np.array([[np.nan, np.nan]])).tolist() == [[9.0, 7.0]]
    one = Standardize(NAMED, nan_fill=0.5).for_columns(["y"], ["a"])
    assert one.names == ("y",) and one(np.array([[np.nan]])).tolist() == [[0.5]]
    assert Standardize(NAMED).for_columns([]).width == 0
    kept = Standardize(NAMED).for_columns(None)  # a source without names: by position
    assert kept.names == ("a", "b", "y") and kept.features(3, None) == 3


def test_a_feature_without_statistics_of_its_name_is_named():
    with pytest.raises(ValueError) as e:
        Standardize(NAMED).for_columns(["a", "c"])
    assert str(e.value) == (
        "transform: Standardize has no statistics of the source's feature(s) ['c']; its "
        "statistics are of ['a', 'b', 'y'] (matched by name: compute them over the columns "
        "the loader reads)"
    )
    many = [f"c{j}" for j in range(21)]
    with pytest.raises(ValueError, match=re.escape(str([*many[:20], "..."]) + "; its")):
        Standardize(NAMED).for_columns(many)
    with pytest.raises(ValueError, match=re.escape(str(many[:20]) + "; its")):
        Standardize(NAMED).for_columns(many[:20])


def test_unnamed_statistics_take_a_fill_mapping_by_the_loaders_feature_names():
    s = Standardize(([0.0, 0.0], [1.0, 1.0]), nan_fill={"q": 4.0})
    t = s.for_columns(["p", "q"])
    assert t.names is None and t(np.array([[np.nan, np.nan]])).tolist()[0][1] == 4.0
    assert np.isnan(t(np.array([[np.nan, np.nan]]))[0, 0]) and t.features(2, 0) == 2
    with pytest.raises(ValueError) as e:
        s.for_columns(["p", "r"])
    assert (
        str(e.value) == "nan_fill names column(s) ['q'] not among the loader's features ['p', 'r']"
    )
    with pytest.raises(ValueError) as e:  # no names on either side: the mapping is placed nowhere
        s.features(2, None)
    assert str(e.value) == (
        "transform: nan_fill maps column names (['q']), but neither the statistics nor the "
        "source name their columns: give nan_fill as one number, or statistics with names"
    )
    plain = Standardize(([0.0], [1.0]), nan_fill=2.0)
    assert plain.for_columns(["p"]) is plain and plain.for_columns(None) is plain


def test_by_position_the_width_is_d_or_d_plus_l_and_nothing_else():
    s = Standardize(([0.0] * 3, [1.0] * 3))
    assert s.features(3, None) == 3 and s.features(3, 2) == 3 and s.features(2, 1) == 2
    with pytest.raises(ValueError) as e:
        s.features(2, 2, ["a", "b"])  # 3 columns: neither 2 nor 4
    assert str(e.value) == (
        "transform: Standardize has statistics of 3 columns by position; the source has "
        "d = 2 features ['a', 'b'], so expected 2 or d + l = 4 (features then labels) "
        "(statistics with column names are matched by name)"
    )
    with pytest.raises(ValueError) as e:
        s.features(2, None)
    assert str(e.value) == (
        "transform: Standardize has statistics of 3 columns by position; the source has "
        "d = 2 features, so expected 2 (statistics with column names are matched by name)"
    )
    for d, l in ((1, 1), (2, 0), (4, None), (1, None)):  # noqa: E741
        with pytest.raises(ValueError, match="statistics of 3 columns by position"):
            s.features(d, l)


def test_calling_it_keeps_the_shape_of_its_input():
    s = Standardize(([1.0, 2.0], [2.0, 4.0]), nan_fill=0.0)
    assert s(np.array([3.0, 6.0])).tolist() == [1.0, 1.0]
    assert s(np.array([[3.0], [np.nan]])).tolist() == [[1.0], [0.0]]
    with pytest.raises(
        ValueError, match=_exactly("expected rows of at most 2 columns; got shape (1, 3)")
    ):  # noqa: E501
        s(np.zeros((1, 3)))
