"""Dataset: the in-memory data model (DESIGN.md, "Data model").

n examples, each d float64 features and l float64 labels; ``x`` (n, d) and
``y`` (n, l), both float64 C-contiguous, converted without a copy when the
input already is.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from exactbatch import Dataset


def _rng(seed: int = 0) -> np.random.Generator:
    return np.random.default_rng(seed)


def _is_f64_c(a: np.ndarray) -> bool:
    return isinstance(a, np.ndarray) and a.dtype == np.float64 and a.flags.c_contiguous


# -- shapes and attributes ------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "d", "l"),
    [(7, 3, 2), (1, 1, 1), (5, 4, 0), (6, 0, 3), (0, 3, 2), (0, 0, 0), (4, 0, 0)],
)
def test_attributes_match_shapes(n, d, l):  # noqa: E741
    """n, d, l, x, y and len(ds) describe the arrays: x (n, d), y (n, l), len == n."""
    x = _rng().standard_normal((n, d))
    y = _rng(1).standard_normal((n, l))
    ds = Dataset(x, y)
    assert (ds.n, ds.d, ds.l) == (n, d, l)
    assert len(ds) == n
    assert ds.x.shape == (n, d)
    assert ds.y.shape == (n, l)
    np.testing.assert_array_equal(ds.x, x)
    np.testing.assert_array_equal(ds.y, y)
    assert _is_f64_c(ds.x) and _is_f64_c(ds.y)


@pytest.mark.parametrize("n", [0, 1, 9])
def test_y_none_means_no_labels(n):
    """Dataset(x) (y=None) has l == 0 and y of shape (n, 0), float64 C-contiguous."""
    ds = Dataset(np.ones((n, 3)))
    assert ds.l == 0
    assert ds.y.shape == (n, 0)
    assert _is_f64_c(ds.y)
    assert (ds.n, ds.d, len(ds)) == (n, 3, n)


def test_y_none_keyword_same_as_positional():
    """Dataset(x, y=None) is the same as Dataset(x)."""
    x = np.arange(6.0).reshape(3, 2)
    a, b = Dataset(x), Dataset(x, y=None)
    assert (a.n, a.d, a.l) == (b.n, b.d, b.l) == (3, 2, 0)
    assert a.y.shape == b.y.shape == (3, 0)


@pytest.mark.parametrize("n", [0, 1, 8])
def test_1d_y_is_one_label_per_row(n):
    """A 1-D y of length n means l == 1: y has shape (n, 1) holding those values."""
    x = np.zeros((n, 2))
    y = np.arange(n, dtype=np.float64) * 1.5
    ds = Dataset(x, y)
    assert ds.l == 1
    assert ds.y.shape == (n, 1)
    np.testing.assert_array_equal(ds.y[:, 0], y)
    assert _is_f64_c(ds.y)


def test_2d_y_with_zero_columns_is_l_zero():
    """A 2-D y of shape (n, 0) is accepted and gives l == 0."""
    ds = Dataset(np.zeros((4, 2)), np.zeros((4, 0)))
    assert ds.l == 0 and ds.y.shape == (4, 0)


def test_nested_lists_are_accepted():
    """Plain nested Python lists are converted to float64 arrays."""
    ds = Dataset([[1, 2], [3, 4], [5, 6]], [7, 8, 9])
    assert (ds.n, ds.d, ds.l) == (3, 2, 1)
    np.testing.assert_array_equal(ds.x, [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    np.testing.assert_array_equal(ds.y, [[7.0], [8.0], [9.0]])
    assert _is_f64_c(ds.x) and _is_f64_c(ds.y)


# -- conversion and copies ------------------------------------------------------


def test_no_copy_for_float64_c_contiguous_input():
    """x and y that already are float64 C-contiguous are used without a copy."""
    x = _rng().standard_normal((10, 4))
    y = _rng(1).standard_normal((10, 2))
    ds = Dataset(x, y)
    assert np.shares_memory(ds.x, x)
    assert np.shares_memory(ds.y, y)
    x[3, 1] = 123.0  # later writes show through: it is the same memory
    y[7, 0] = -5.0
    assert ds.x[3, 1] == 123.0
    assert ds.y[7, 0] == -5.0


def test_no_copy_for_float64_1d_y():
    """A float64 contiguous 1-D y is viewed as (n, 1), not copied."""
    y = np.arange(5, dtype=np.float64)
    ds = Dataset(np.zeros((5, 1)), y)
    assert np.shares_memory(ds.y, y)
    assert ds.y.shape == (5, 1)


def test_no_copy_for_contiguous_row_slice():
    """A C-contiguous float64 view (a slice of whole rows) is not copied either."""
    base = _rng().standard_normal((20, 3))
    x = base[5:15]
    assert x.flags.c_contiguous
    ds = Dataset(x)
    assert np.shares_memory(ds.x, base)
    np.testing.assert_array_equal(ds.x, base[5:15])


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda a: np.asfortranarray(a), id="fortran"),
        pytest.param(lambda a: a[:, ::2], id="column-stride"),
        pytest.param(lambda a: a[::2], id="row-stride"),
        pytest.param(lambda a: a.T.copy().T, id="transposed"),
    ],
)
def test_non_contiguous_float64_becomes_c_contiguous(make):
    """Non-contiguous float64 inputs are copied into C-contiguous arrays, same values."""
    a = make(_rng().standard_normal((6, 4)))
    assert not a.flags.c_contiguous
    ds = Dataset(a, a)
    for got in (ds.x, ds.y):
        assert _is_f64_c(got)
        np.testing.assert_array_equal(got, a)
        assert not np.shares_memory(got, a)


@pytest.mark.parametrize(
    "dtype",
    [np.float32, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint64, bool],
)
def test_real_numeric_dtypes_are_converted_to_float64(dtype):
    """Bool, integer and lower-precision float inputs become float64 with equal values."""
    src = (np.arange(12) % 5).reshape(4, 3)
    x = src.astype(dtype)
    y = (src[:, 0] % 2).astype(dtype)
    ds = Dataset(x, y)
    assert _is_f64_c(ds.x) and _is_f64_c(ds.y)
    np.testing.assert_array_equal(ds.x, x.astype(np.float64))
    np.testing.assert_array_equal(ds.y[:, 0], y.astype(np.float64))


def test_bools_become_zero_and_one():
    """True/False become 1.0/0.0."""
    ds = Dataset(np.array([[True, False], [False, True]]))
    np.testing.assert_array_equal(ds.x, [[1.0, 0.0], [0.0, 1.0]])
    assert ds.x.dtype == np.float64


def test_big_endian_float64_is_converted_to_native():
    """A byte-swapped float64 input is converted to native float64 with the same values."""
    x = np.arange(6.0).reshape(3, 2).astype(">f8")
    ds = Dataset(x)
    assert ds.x.dtype == np.float64 and ds.x.dtype.isnative
    np.testing.assert_array_equal(ds.x, np.arange(6.0).reshape(3, 2))


def test_special_float_values_are_kept():
    """nan, inf, -inf and -0.0 are stored as given."""
    x = np.array([[np.nan, np.inf], [-np.inf, -0.0]])
    ds = Dataset(x)
    assert np.isnan(ds.x[0, 0])
    assert ds.x[0, 1] == np.inf and ds.x[1, 0] == -np.inf
    assert ds.x[1, 1] == 0.0 and np.signbit(ds.x[1, 1])


# -- wrong kinds: TypeError naming x or y --------------------------------------

_BAD_KINDS = [
    pytest.param(np.array([["a", "b"], ["c", "d"]]), id="str"),
    pytest.param(np.array([[b"a", b"b"], [b"c", b"d"]]), id="bytes"),
    pytest.param(np.array([[1.0, None], [2.0, 3.0]], dtype=object), id="object"),
    pytest.param(np.array([[1 + 2j, 3j], [1.0, 2.0]]), id="complex"),
    pytest.param(np.array([["2020-01-01"], ["2021-01-01"]], dtype="datetime64[D]"), id="datetime"),
]


def _names(arg: str, message: str) -> bool:
    return re.search(rf"\b{arg}\b", message) is not None


@pytest.mark.parametrize("bad", _BAD_KINDS)
def test_non_numeric_x_is_type_error_naming_x(bad):
    """Strings, objects, complex numbers (anything not bool/int/float) as x: TypeError naming x."""
    with pytest.raises(TypeError) as info:
        Dataset(bad)
    assert _names("x", str(info.value)), str(info.value)


@pytest.mark.parametrize("arg", ["x", "y"])
def test_ragged_rows_are_a_value_error_naming_the_argument(arg):
    """Rows of different lengths (NumPy cannot make an array of them): a ValueError naming
    the argument, not NumPy's own message alone."""
    ragged = [[1.0, 2.0], [3.0]]
    with pytest.raises(ValueError, match=rf"^{arg} must be a rectangular array") as info:
        Dataset(ragged) if arg == "x" else Dataset(np.zeros((2, 2)), ragged)
    assert "chunks as a list" not in str(info.value)  # rows, not chunks: no hint


def test_chunks_passed_as_a_tuple_of_two_are_refused_pointing_at_a_list():
    """A tuple of two is an (x, y) pair (DESIGN.md), so two (x, y) chunks in a tuple are an x
    that is no array: the error says to pass the chunks as a list."""
    from exactbatch import DataLoader

    x, y = np.zeros((8, 3)), np.zeros((8, 1))
    hint = r"pass a sequence of \(x, y\) chunks as a list"
    with pytest.raises(ValueError, match=rf"^x must be .*{hint}"):
        DataLoader(((x[:4], y[:4]), (x[4:], y[4:])), 2)
    assert len(list(DataLoader([(x[:4], y[:4]), (x[4:], y[4:])], 2, total_size=8))) == 4


@pytest.mark.parametrize("bad", _BAD_KINDS)
def test_non_numeric_y_is_type_error_naming_y(bad):
    """Strings, objects, complex numbers as y: TypeError naming y."""
    x = np.zeros((bad.shape[0], 2))
    with pytest.raises(TypeError) as info:
        Dataset(x, bad)
    assert _names("y", str(info.value)), str(info.value)


def test_non_numeric_1d_y_is_type_error_naming_y():
    """A 1-D y of strings is a TypeError naming y."""
    with pytest.raises(TypeError) as info:
        Dataset(np.zeros((2, 1)), np.array(["a", "b"]))
    assert _names("y", str(info.value))


# -- wrong shapes: ValueError naming the argument and the shape ---------------


@pytest.mark.parametrize(
    "shape", [(5,), (0,), (2, 3, 4), (1, 1, 1), ()], ids=["1d", "1d-empty", "3d", "3d-ones", "0d"]
)
def test_x_not_2d_is_value_error_naming_x_and_shape(shape):
    """x must be 2-D: 1-D, 3-D or 0-D x is a ValueError naming x and the shape found."""
    with pytest.raises(ValueError) as info:
        Dataset(np.zeros(shape))
    msg = str(info.value)
    assert _names("x", msg), msg
    assert str(shape) in msg, msg


def test_x_1d_is_refused_even_with_1d_y():
    """A 1-D x is refused (1-D is only meaningful for y), naming x."""
    with pytest.raises(ValueError) as info:
        Dataset(np.zeros(4), np.zeros(4))
    assert _names("x", str(info.value))
    assert "(4,)" in str(info.value)


@pytest.mark.parametrize("shape", [(4, 2, 1), ()])
def test_y_not_1d_or_2d_is_value_error_naming_y_and_shape(shape):
    """y must be 2-D or 1-D: a 3-D or 0-D y is a ValueError naming y and the shape."""
    with pytest.raises(ValueError) as info:
        Dataset(np.zeros((4, 2)), np.zeros(shape))
    msg = str(info.value)
    assert _names("y", msg), msg
    assert str(shape) in msg, msg


@pytest.mark.parametrize(
    ("x_shape", "y_shape"),
    [((5, 3), (4, 2)), ((5, 3), (6,)), ((0, 3), (1, 1)), ((3, 2), (0, 2))],
)
def test_different_n_is_value_error_naming_both_shapes(x_shape, y_shape):
    """x and y with a different number of rows: ValueError naming both shapes."""
    with pytest.raises(ValueError) as info:
        Dataset(np.zeros(x_shape), np.zeros(y_shape))
    msg = str(info.value)
    want_y = y_shape if len(y_shape) == 2 else (y_shape[0], 1)
    assert str(x_shape) in msg, msg
    assert str(want_y) in msg or str(y_shape) in msg, msg


def test_every_refusal_s_text():
    """The messages in full: the argument, what it must be, what was found."""
    cases = [
        (
            (np.array([["a"]]),),
            TypeError,
            "x must hold real numbers (bool, int or float); got dtype <U1",
        ),
        (
            (np.zeros((2, 2)), np.array([1j, 2j])),
            TypeError,
            "y must hold real numbers (bool, int or float); got dtype complex128",
        ),
        ((np.zeros(3),), ValueError, "x must be 2-D (n, d); got shape (3,)"),
        (
            (np.zeros((2, 2)), np.zeros((2, 1, 1))),
            ValueError,
            "y must be 2-D (n, l) or 1-D (n,); got shape (2, 1, 1)",
        ),
        (
            (np.zeros((3, 2)), np.zeros((2, 1))),
            ValueError,
            "x and y must have the same number of rows; got x (3, 2) and y (2, 1)",
        ),
    ]
    for args, error, message in cases:
        with pytest.raises(error) as info:
            Dataset(*args)
        assert str(info.value) == message
    with pytest.raises(ValueError) as info:
        Dataset(np.zeros((2, 2)), [[1.0], [2.0, 3.0]])
    assert str(info.value).startswith(
        "y must be a rectangular array of numbers, but its rows differ in length or shape: "
    )


def test_no_labels_are_an_empty_float64_column_block():
    ds = Dataset(np.zeros((4, 2), dtype=np.float32))
    assert ds.y.shape == (4, 0) and ds.y.dtype == np.float64 and ds.y.flags.c_contiguous
    assert (ds.n, ds.d, ds.l, len(ds)) == (4, 2, 0, 4)
    assert repr(ds) == "Dataset(n=4, d=2, l=0)"
