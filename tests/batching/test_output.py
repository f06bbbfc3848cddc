"""What a loader's batches are made into (exactbatch.batching.output.Output): the rows
of a read through its rules, and each refusal naming the row by its id and the column
by its number and name. (Through the loader: tests/loader/test_real_data.py,
test_nan_fill_columns.py, test_rows.py.)"""

from __future__ import annotations

import re
import warnings

import numpy as np
import pytest

from exactbatch import Standardize
from exactbatch.batching.output import Output


def _read(x, y):
    """A reader's ``read(rows, out_x, out_y)`` of ``x`` and ``y`` (no fused kernel)."""

    def read(rows, out_x, out_y):
        out_x[...], out_y[...] = x[rows], y[rows]

    return read


def _rows(n: int = 5):
    x = np.arange(n * 3, dtype=np.float64).reshape(n, 3) / 4
    return x, np.arange(n, dtype=np.float64)[:, None]


def _fails(output, x, y, rows, ids=None):
    ox, oy = output.pair(len(x[rows]), x.shape[1], y.shape[1])
    with pytest.raises(ValueError) as e:
        output.fill(_read(x, y), False, rows, ox, oy, ids)
    return str(e.value)


def test_a_nan_row_is_named_by_its_id_and_its_column_by_number_and_name():
    x, y = _rows()
    x[0, 1] = np.nan  # the batch's first row
    named = Output(nan="error")
    named.name_columns((["a", "b", "c"], ["label"]))
    rows = np.array([0, 2, 4])
    want = "nan='error': row 0 has NaN in feature column 1 ('b')"
    assert _fails(named, x, y, rows) == want
    assert _fails(named, x, y, rows, ids=np.array([70, 72, 74])) == want.replace("0", "70", 1)
    assert _fails(Output(nan="error"), x, y, slice(0, 3)) == (
        "nan='error': row 0 has NaN in feature column 1"
    )
    x[0, 1], y[3, 0] = 0.0, np.nan
    assert _fails(named, x, y, slice(2, 5)) == "nan='error': row 3 has NaN in label column 0"
    assert _fails(named, x, y, slice(2, 5), ids=np.array([9, 8, 7])) == (
        "nan='error': row 8 has NaN in label column 0"
    )


def test_a_column_past_the_names_is_named_by_its_number_alone():
    x = np.zeros((2, 3))
    x[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"row 6 has NaN in feature column 2$"):
        Output._refuse_nan(x, np.zeros((2, 0)), 1, slice(5, 7), None, ["a", "b"])


def test_a_re_batched_streams_batch_is_named_by_its_rows_position_or_id():
    x, y = _rows(4)
    x[2, 0] = np.nan
    with pytest.raises(ValueError, match=r"^nan='error': row 2 has NaN in feature column 0$"):
        Output(nan="error").finish(x, y, None)
    with pytest.raises(ValueError, match=r"^nan='error': row 12 has NaN in feature column 0$"):
        Output(nan="error").finish(x, y, np.arange(10, 14))
    gx, gy = Output(np.float32, np.int32).finish(x, y, None)
    assert (gx.dtype, gy.dtype) == (np.float32, np.int32)
    np.testing.assert_array_equal(gx, x.astype(np.float32))
    np.testing.assert_array_equal(gy, y.astype(np.int32))


def test_a_bad_class_label_is_named_by_its_rows_id_without_a_warning():
    x, y = _rows()
    y[3, 0] = 2.5
    out = Output(label_dtype=np.int64)
    rows = np.array([1, 3])
    assert _fails(out, x, y, rows) == (
        "label_dtype=int64: row 3 has label 2.5 in column 0, not an integer in int64's range"
    )
    assert re.match(r"label_dtype=int64: row 31 has", _fails(out, x, y, rows, np.array([30, 31])))
    y[3, 0] = np.nan
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the cast of a NaN does not warn: it is refused
        assert "row 3 has label nan" in _fails(out, x, y, rows)


def test_float32_features_with_class_labels_are_copied_whole():
    """float32 features and int64 labels, no transform: x is read as float64 rows and
    cast, the labels checked and converted."""
    x, y = _rows()
    out = Output(np.float32, np.int64)
    ox, oy = out.pair(3, 3, 1)
    out.fill(_read(x, y), False, np.array([4, 0, 2]), ox, oy)
    assert (ox.dtype, oy.dtype) == (np.float32, np.int64)
    np.testing.assert_array_equal(ox, x[[4, 0, 2]].astype(np.float32))
    np.testing.assert_array_equal(oy, [[4], [0], [2]])


def test_a_transform_of_the_wrong_width_names_the_sources_columns():
    out = Output(transform=Standardize((np.zeros(4), np.ones(4))))
    out.name_columns((["a", "b"], ["label"]))
    want = re.escape("the source has d = 2 features ['a', 'b'], so expected 2 or d + l = 3")
    with pytest.raises(ValueError, match=want):
        out.check_widths(2, 1)
    with pytest.raises(ValueError, match=want):
        out.kernel(2, 1)
    out.check_widths(None, None)  # a stream not read yet: nothing to check
