"""exactbatch.sources.categorical on its own: ``categorical=``'s check, the Arrow types
that can be coded, learned vocabularies, a vocabulary's codes (every path: strings,
a dense table of integers, a search of numbers, the hash), its refusals, and the
dtype that can hold the codes. (Through the sources and ``convert``:
tests/sources/test_wide_and_coded.py, test_hive.py, tests/tools/test_convert_columns.py.)"""

from __future__ import annotations

import re

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from exactbatch.sources.categorical import (  # noqa: E402
    Vocabulary,
    check_categorical,
    check_code_dtype,
    code,
    is_categorical_type,
    learn,
    vocabularies,
)


def _codes(vocab, values, type=None, **kw):
    got = Vocabulary("c", vocab).encode(pa.array(values, type=type), "here", **kw)
    assert got.type == pa.float64()
    return [None if np.isnan(v) else int(v) for v in got.to_numpy(zero_copy_only=False)]


def test_categorical_as_given_is_a_dict_of_columns_and_vocabularies():
    assert check_categorical(None, "w") == {}
    assert check_categorical("a", "w") == {"a": None}
    assert check_categorical(("a", "b"), "w") == {"a": None, "b": None}
    got = check_categorical({"a": np.array(["x", "y"]), "b": [True, 1, 0.5]}, "w")
    assert got == {"a": ["x", "y"], "b": [True, 1, 0.5]}
    assert [type(v) for v in got["a"]] == [str, str]  # np.str_ made str


def test_a_given_vocabulary_of_strings_keeps_its_values_and_types():
    # strings only: checked by loops in C (types, repeats), the list copied as given
    names = [f"v{i}" for i in range(1000)]
    got = check_categorical({"a": names, "b": np.array(names), "c": np.array(names, object)}, "w")
    assert got == {"a": names, "b": names, "c": names}
    assert got["a"] is not names  # (a copy: the caller's list may change)
    assert {type(v) for col in got.values() for v in col} == {str}
    # NumPy scalars in a list or an object array made Python's, whatever else is there
    mixed = check_categorical(
        {"a": [np.str_("x"), "y"], "b": np.array([np.int64(3), "z"], object)}, "w"
    )
    assert mixed == {"a": ["x", "y"], "b": [3, "z"]}
    assert [type(v) for v in mixed["a"] + mixed["b"]] == [str, str, int, str]

    # a str subclass is not a str: keyed as before (the hash path), never merged with str
    class Tag(str):
        pass

    assert Vocabulary("c", [Tag("x"), "y"]).strings is False
    assert Vocabulary("c", ["x", "y"]).strings is True
    assert Vocabulary("c", []).strings is False


def test_a_repeat_in_a_large_given_vocabulary_is_named_at_once():
    names = [f"v{i}" for i in range(200_000)] + ["v7", "v9", "v7"]
    message = "w: categorical['a'] lists ['v7', 'v9', 'v7', 'v9', 'v7'] more than once"
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        check_categorical({"a": names}, "w")


@pytest.mark.parametrize(
    "bad, kind, message",
    [
        ({1: ["x"]}, TypeError, "w: categorical names columns by name; got 1"),
        (
            {"a": "xy"},
            TypeError,
            "w: categorical['a'] must be a list of values (the vocabulary); got 'xy'",
        ),
        (
            {"a": 5},
            TypeError,
            "w: categorical['a'] must be a list of values (the vocabulary); got 5",
        ),
        (
            {"a": [1, 2, 1.0]},
            ValueError,
            "w: categorical['a'] lists [1, 1.0] more than once; each value has one code",
        ),
        (
            {"a": [True, np.bool_(True)]},
            ValueError,
            "w: categorical['a'] lists [True, True] more than once; each value has one code",
        ),
        (
            5,
            TypeError,
            "w: categorical must be a list of column names or a dict {column: [values]}; got 5",
        ),
        (
            ["a", 1],
            TypeError,
            "w: categorical must be a list of column names or a dict {column: [values]}; "
            "got ['a', 1]",
        ),
        (
            ["a", "b", "a", "b"],
            ValueError,
            "w: categorical names column(s) ['a', 'b'] more than once",
        ),
    ],
)
def test_a_bad_categorical_is_named(bad, kind, message):
    with pytest.raises(kind, match="^" + re.escape(message) + "$"):
        check_categorical(bad, "w")


def test_which_arrow_types_can_be_coded():
    for t in (pa.string(), pa.large_string(), pa.int8(), pa.uint64(), pa.bool_(), pa.float32(),
              pa.null(), pa.dictionary(pa.int32(), pa.string())):  # fmt: skip
        assert is_categorical_type(t), t
    for t in (
        pa.date32(),
        pa.binary(),
        pa.list_(pa.int64()),
        pa.dictionary(pa.int8(), pa.binary()),
    ):
        assert not is_categorical_type(t), t


def test_a_learned_vocabulary_is_sorted_without_missing_values():
    assert learn([pa.array(["b", None, "a"]), pa.array(["c", "a"])]) == ["a", "b", "c"]
    floats = pa.array([2.5, np.nan, -0.0, None])
    assert learn([floats, pa.array([0, 1], pa.int64())]) == [0.0, 1, 2.5]
    assert [type(v) for v in learn([pa.array([-0.0, 1.5])])] == [float, float]
    assert str(learn([pa.array([-0.0])])[0]) == "0.0"
    assert learn([pa.array([True, None, False])]) == [False, True]
    assert learn([pa.array([True]), pa.array([3, 2])]) == [True, 2, 3]  # booleans first
    # True is not the category 1, nor False 0: a boolean file beside an integer one
    both = learn([pa.array([True, False]), pa.array([1, 0, 2])])
    assert both == [False, True, 0, 1, 2]
    assert [type(v) for v in both] == [bool, bool, int, int, int]
    assert learn([pa.array(["b", "a", "b"]).dictionary_encode()]) == ["a", "b"]
    assert learn([]) == [] and learn([pa.array([None, None])]) == []
    with pytest.raises(TypeError) as e:
        learn([pa.array(["a"]), pa.array([1])])
    assert str(e.value) == (
        "values of kinds ['int', 'str'] in one categorical column; give every file the same type"
    )


def test_strings_take_their_entrys_code_and_missing_values_none():
    vocab = ["b", "a", "c"]
    assert _codes(vocab, ["a", None, "c", "b"]) == [1, None, 2, 0]
    assert _codes(vocab, ["a", None, "c"], type=pa.large_string()) == [1, None, 2]
    assert _codes(vocab, pa.array(["c", None, "a"]).dictionary_encode()) == [2, None, 1]
    assert _codes(vocab, [None, None], type=pa.string()) == [None, None]
    chunked = pa.chunked_array([["a", "b"], ["c", None]])
    got = Vocabulary("c", vocab).encode(chunked, "here").to_pylist()
    assert got[:3] == [1.0, 0.0, 2.0] and np.isnan(got[3])
    one = pa.chunked_array([["c", "a"]])
    assert Vocabulary("c", vocab).encode(one, "here").to_pylist() == [2.0, 1.0]


def test_a_column_of_nulls_only_is_missing_without_a_warning():
    """Integers all null (a partition key of files outside every key folder): NaN codes,
    with no NumPy warning of an all-NaN maximum (an error under -W error)."""
    import warnings

    for vocab in ([1, 2], [1, 2_000_000]):  # the dense table, the search
        for values in ([None, None], [None, 1]):
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = _codes(vocab, values, type=pa.int64())
            assert got == [None, values[1] and 0]


def test_a_value_outside_the_vocabulary_is_named_with_its_row():
    message = (
        "here: column 'c' holds {v} (row {row}), which is not in its vocabulary of {k} "
        "value(s) (a value takes the code of the entry equal to it); add it to "
        "categorical={{'c': [...]}}, or let the vocabulary be learned (categorical=[...])"
    )
    cases = [
        (["a", "b"], ["a", None, "z"], None, "'z'", 2),
        (["a", 1], ["a", "1"], None, "'1'", 1),  # "1" is not 1 (the hash)
        ([0, 1, 2], [1, 7, 0], pa.int64(), "7", 1),  # the dense table
        ([0, 1, 2], [1, None, -1], pa.int64(), "-1", 2),
        ([0, 1, 2], [2, 3], pa.int64(), "3", 1),  # one past the table's top
        ([0, 1, 2], [2.0, 3.0], pa.float64(), "3.0", 1),
        ([0.5, 1e9], [0.5, 2e9], pa.float64(), "2000000000.0", 1),  # past the last entry
        ([0.5, 1e9], [0.5, 0.25], pa.float64(), "0.25", 1),  # the search
        ([0.0, 1.0], [0.0, -0.5], pa.float64(), "-0.5", 1),  # never truncated to 0
        ([0, 1], [False, True], pa.bool_(), "False", 0),  # a boolean is not a number
        ([False, True], [1], pa.int64(), "1", 0),
    ]
    for vocab, values, t, shown, row in cases:
        text = message.format(v=shown, row=row + 10, k=len(vocab))
        with pytest.raises(ValueError, match="^" + re.escape(text) + "$"):
            _codes(vocab, values, type=t, first_row=10)


def test_numbers_take_the_code_of_the_entry_equal_to_them():
    dense = [3, 1, 2]  # integers in a small range: the table
    assert _codes(dense, [1, 2, 3, 1], type=pa.int32()) == [1, 2, 0, 1]
    assert _codes(dense, [1, None, 3], type=pa.int64()) == [1, None, 0]
    assert _codes(dense, [1.0, np.nan, 3.0, None], type=pa.float64()) == [1, None, 0, None]
    assert _codes(dense, [2, 3], type=pa.uint64()) == [2, 0]
    sparse = [1e9, -0.0, 0.5]  # far apart: the search
    assert _codes(sparse, [0.5, 0.0, 1e9, -0.0], type=pa.float64()) == [2, 1, 0, 1]
    assert _codes(sparse, [0, 1_000_000_000], type=pa.int64()) == [1, 0]
    assert _codes([0.0, 1.0], [1, 0], type=pa.int8()) == [1, 0]  # 0 is the entry 0.0
    assert _codes([10, 5, 7, 1], [10, 7, 5, 1], type=pa.int16()) == [0, 2, 1, 3]
    assert _codes([-3, 2, -1], [2.0, -3.0, None], type=pa.float64()) == [1, 0, None]
    assert _codes([-3, 2, -1], [2, -3, -1], type=pa.int64()) == [1, 0, 2]
    assert _codes([0.5, 0.75, 1.5], [0.75, 0.5, 1.5], type=pa.float64()) == [1, 0, 2]
    big = [2**53, 2**53 + 1, 2**60]  # past float64's integers: the hash, exactly
    assert _codes(big, [2**53 + 1, 2**53, 2**60, None], type=pa.int64()) == [1, 0, 2, None]
    assert _codes([2, 2**60], [2**60, 2], type=pa.int64()) == [1, 0]
    assert _codes([np.inf, 1.0], [1.0, np.inf], type=pa.float64()) == [1, 0]


def test_booleans_and_mixed_vocabularies_go_through_the_hash():
    assert _codes([True, False], [False, True, None], type=pa.bool_()) == [1, 0, None]
    mixed = ["a", 1, True]
    assert _codes(mixed, ["a", None], type=pa.string()) == [0, None]
    assert _codes(mixed, [1.0, np.nan], type=pa.float64()) == [1, None]
    assert _codes(mixed, [True], type=pa.bool_()) == [2]
    assert _codes([1, 2], [None, None], type=pa.null()) == [None, None]
    assert _codes([1, 2], [2, 1], type=pa.int64()) == [1, 0]


def test_only_a_dtype_that_holds_every_code_exactly_is_taken():
    ok = {"c": list(range(2**11 + 1))}  # codes up to 2**11: float16 holds them
    check_code_dtype(ok, np.float16)
    check_code_dtype({"c": list(range(2**11 + 2))}, np.float32)
    check_code_dtype({"c": list(range(2**11 + 2))}, np.int8)  # not floating: not asked
    check_code_dtype({}, np.float16)
    with pytest.raises(ValueError) as e:
        check_code_dtype({"a": [0], "c": list(range(2**11 + 2))}, np.float16)
    assert str(e.value) == (
        "dtype=float16: column 'c' has 2,050 categories, whose codes up to 2,049 float16 "
        "cannot hold exactly (integers up to 2**11 only): two categories would get one "
        "code; load it with dtype=np.float64"
    )
    with pytest.raises(ValueError, match=r"^x=float16: column 'c' has 2,050"):
        check_code_dtype({"c": list(range(2**11 + 2))}, "float16", where="x")


def test_vocabularies_are_learned_in_one_pass_only_when_asked():
    calls = []

    def batches():
        calls.append(1)
        yield pa.table({"a": ["y", "x"], "b": [2, 1]})
        yield pa.table({"a": ["z", None], "b": [3, 1]})

    got = vocabularies({"a": None, "b": [3, 1, 2]}, batches)
    assert got["a"].values == ["x", "y", "z"] and got["b"].values == [3, 1, 2]
    assert got["a"].column == "a" and len(calls) == 1
    assert vocabularies({"b": [1]}, batches)["b"].values == [1] and len(calls) == 1
    with pytest.raises(TypeError, match=r"^column 'a': values of kinds \['int', 'str'\]"):
        vocabularies({"a": None}, lambda: [pa.table({"a": ["x"]}), pa.table({"a": [1]})])
    col = pa.array(["x"])
    assert code("other", col, got, "w") is col
    assert code("a", col, got, "w").to_pylist() == [0.0]
