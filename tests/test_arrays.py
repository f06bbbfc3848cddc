"""exactbatch.arrays' helpers on their own: a buffer's bytes and the check of an output
array. (What is read as an array, and how: tests/sources/test_array_likes.py and
tests/test_dataset.py.)"""

from __future__ import annotations

import re

import numpy as np
import pytest

from exactbatch.arrays import (
    ALIGN,
    _library,
    as_numpy,
    batch_pair,
    byte_view,
    check_out_array,
    is_array_like,
)


def test_byte_view_is_the_flat_unsigned_bytes_or_empty():
    a = np.array([[1.0, -2.0]])
    view = byte_view(a)
    assert (view.format, view.ndim, view.nbytes) == ("B", 1, 16)
    assert view.tolist() == list(a.tobytes())  # unsigned: 0..255
    view[8:] = np.array([5.0]).tobytes()  # written through
    assert a[0, 1] == 5.0
    for empty in (np.empty((0, 3)), np.empty((3, 0)), b""):
        view = byte_view(empty)  # a cast refuses a shape with a zero: an empty view instead
        assert view.nbytes == 0 and view.tobytes() == b""


def test_check_out_array_gives_a_new_array_of_the_dtype_for_none():
    out = check_out_array(None, (2, 3), "out_x", np.float32)
    assert (out.shape, out.dtype) == ((2, 3), np.float32)
    assert check_out_array(None, (1,), "out_x").dtype == np.float64


def test_check_out_array_refuses_each_wrong_output_naming_it():
    ok = np.empty((2, 3), np.float32)
    assert check_out_array(ok, (2, 3), "out_x", np.float32) is ok
    cases = [
        (
            [[0.0] * 3] * 2,
            TypeError,
            "out_x must be a float32 NumPy array of shape (2, 3); got list",
        ),
        (
            ok.astype(np.float64),
            TypeError,
            "out_x must have dtype float32 and shape (2, 3); got dtype float64",
        ),
        (np.empty((3, 2), np.float32), ValueError, "out_x must have shape (2, 3); got (3, 2)"),
        (np.empty((3, 3), np.float32)[:2], None, None),  # a C-contiguous slice of rows: fine
        (
            np.empty((2, 6), np.float32)[:, ::2],
            ValueError,
            "out_x must be a writeable C-contiguous array of shape (2, 3)",
        ),
    ]
    readonly = np.empty((2, 3), np.float32)
    readonly.flags.writeable = False
    cases.append(
        (readonly, ValueError, "out_x must be a writeable C-contiguous array of shape (2, 3)")
    )
    for out, error, message in cases:
        if error is None:
            assert check_out_array(out, (2, 3), "out_x", np.float32) is out
            continue
        with pytest.raises(error, match=f"^{re.escape(message)}$"):
            check_out_array(out, (2, 3), "out_x", np.float32)


def _stand_in(name: str, module: str, base=object):
    """A class ``module.name`` (nothing imported) whose objects NumPy reads as [[1, 2]]."""
    return type(name, (base,), {"__module__": module, "__array__": _two})


def _two(self, dtype=None, copy=None):
    return np.array([[1.0, 2.0]])


def test_library_is_told_by_class_name_and_root_module_both():
    """Only a ``Tensor`` of the torch package is a torch tensor; only a ``DataFrame`` of
    pandas or polars a frame; subclasses too (by their bases); no import."""
    assert _library(_stand_in("Tensor", "torch")()) == "torch"
    assert _library(_stand_in("Parameter", "torch.nn", _stand_in("Tensor", "torch._C"))()) == (
        "torch"
    )
    assert _library(_stand_in("DataFrame", "pandas.core.frame")()) == "pandas"
    assert _library(_stand_in("DataFrame", "polars")()) == "polars"
    for name, module in (
        ("Tensor", "tensorflow"),  # another library's Tensor
        ("Size", "torch"),  # torch, but no tensor
        ("DataFrame", "dask.dataframe"),
        ("Series", "pandas"),
        ("Tensor", "torchvision"),  # a root that only starts like torch
    ):
        assert _library(_stand_in(name, module)()) is None, (name, module)


def test_an_array_like_of_no_known_library_is_read_as_numpy_reads_it():
    for name, module in (("Tensor", "tensorflow"), ("Size", "torch")):
        got = as_numpy(_stand_in(name, module)(), "x")
        np.testing.assert_array_equal(got, [[1.0, 2.0]])


def test_batch_pair_is_one_allocation_x_then_y_each_on_a_line():
    """x (padded to whole 64-byte lines) then y in one uint8 buffer of those bytes and
    one line of slack (for the alignment): both start on a line, never overlap."""
    cases = ((5, 3, 2, np.float32, None), (7, 1, 1, np.float64, np.int64))
    for rows, d, l, dt, yt in cases:  # noqa: E741
        x, y = batch_pair(rows, d, l, dt, yt)
        assert x.base is y.base and x.base.dtype == np.uint8
        x_bytes = rows * d * np.dtype(dt).itemsize
        at_y = -(-x_bytes // ALIGN) * ALIGN
        assert x.base.nbytes == at_y + rows * l * np.dtype(yt or dt).itemsize + ALIGN
        assert x.ctypes.data % ALIGN == 0 and y.ctypes.data % ALIGN == 0
        assert y.ctypes.data - x.ctypes.data == at_y
        assert not np.shares_memory(x, y)
        assert x.flags.c_contiguous and y.flags.c_contiguous
        assert (x.shape, y.shape, x.dtype, y.dtype) == ((rows, d), (rows, l), dt, yt or dt)


def test_is_array_like_by_any_of_numpy_s_three_protocols():
    class Interface:
        def __init__(self):
            self.__array_interface__ = np.zeros(3).__array_interface__

    class Struct:
        def __init__(self):
            self.__array_struct__ = np.zeros(3).__array_struct__

    class Array:
        def __array__(self, dtype=None, copy=None):
            return np.zeros(3)

    for a in (np.zeros(2), Interface(), Struct(), Array()):
        assert is_array_like(a), a
    for a in ([1.0, 2.0], (np.zeros(2), np.zeros(2)), 3.0, "ab", object()):
        assert not is_array_like(a), a


def test_as_numpy_of_ragged_input_hints_at_chunks_only_for_chunks():
    """Ragged 2-D arrays (or tuples) in a sequence are chunks, not rows: the hint says to
    pass them as a list; ragged rows of numbers get no hint."""
    hint = (
        " (a source that is a tuple of two is an (x, y) pair: pass a sequence of "
        "(x, y) chunks as a list)"
    )
    for chunks in (
        [np.zeros((2, 2)), np.zeros((3, 2))],
        (np.zeros((1, 3)), np.zeros((2, 3))),
        [(np.zeros((2, 1)), np.zeros(2)), (np.zeros((1, 1)), np.zeros(1))],
    ):
        with pytest.raises(ValueError) as info:
            as_numpy(chunks, "x")
        assert str(info.value).endswith(hint), str(info.value)
    for rows in ([[1.0, 2.0], [3.0]], [np.zeros(2), np.zeros(3)]):
        with pytest.raises(ValueError) as info:
            as_numpy(rows, "y")
        try:
            np.asarray(rows)
        except ValueError as e:
            numpy_says = str(e)
        assert str(info.value) == (
            "y must be a rectangular array of numbers, but its rows differ in length or "
            f"shape: {numpy_says}"
        )


def test_as_numpy_of_what_numpy_cannot_read_names_the_argument():
    class Broken:
        def __init__(self, error):
            self.error = error

        def __array__(self, dtype=None, copy=None):
            raise self.error

    for error in (TypeError("no dtype"), RuntimeError("on a device")):
        with pytest.raises(TypeError) as info:
            as_numpy(Broken(error), "labels")
        assert str(info.value) == f"labels cannot be read as a NumPy array: {error}"
        assert info.value.__cause__ is error
    a = np.zeros((2, 2))
    assert as_numpy(a, "x") is a
