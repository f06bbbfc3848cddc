"""NdfDatasetWriter (ndf/dataset_write.py): its arguments checked up front and named,
what it hands on to each part and to the manifest (names, labels, categories,
``before_rename``), ``write_raw``'s whole rows, and an abort that leaves nothing.

(The protocol under it, and save_ndf_dataset's failures, are tests/ndf/test_ndf_dataset.py's
and tests/reliability/test_dataset_writes.py's.)
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from exactbatch import NdfError, open_ndf_dataset
from exactbatch.ndf.dataset_write import NdfDatasetWriter

ROWS = np.arange(21.0).reshape(7, 3)  # 7 rows of d=2, l=1


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((-1, 1, 5), "d must be >= 0; got d=-1"),
        ((2, -1, 5), "l must be >= 0; got l=-1"),
        ((2, 1, 0), "part_rows must be >= 1; got part_rows=0"),
    ],
)
def test_a_bad_width_or_part_size_is_a_value_error_naming_it(tmp_path, args, says):
    with pytest.raises(ValueError, match="^" + says.replace("+", r"\+")):
        NdfDatasetWriter(tmp_path / "ds", *args)
    assert not (tmp_path / "ds").exists()


def test_no_features_and_one_row_parts_are_allowed(tmp_path):
    """d=0 (labels only) and part_rows=1 (a part a row) are the smallest legal values."""
    y = np.arange(3.0).reshape(3, 1)
    with NdfDatasetWriter(tmp_path / "ds", 0, 1, 1) as w:
        w.write(y)
    with open_ndf_dataset(tmp_path / "ds") as ds:
        assert (ds.n, ds.d, ds.l, len(ds.parts)) == (3, 0, 1, 3)
        np.testing.assert_array_equal(ds.read_rows(np.arange(3))[1], y)


def test_a_row_count_no_file_can_hold_is_refused_before_anything_is_written(tmp_path):
    path = tmp_path / "ds"
    with pytest.raises(NdfError, match=f"^{path}: impossible shape n={2**63}"):
        NdfDatasetWriter(path, 2, 1, 5, n=2**63)
    assert not path.exists()


def test_bad_names_and_categories_name_the_manifest(tmp_path):
    manifest = str(tmp_path / "ds" / "manifest.json")
    with pytest.raises(ValueError, match=f"^{manifest}: features names 1 columns"):
        NdfDatasetWriter(tmp_path / "ds", 2, 1, 5, features=["a"])
    with pytest.raises(ValueError, match=f"^{manifest}: categories name column"):
        NdfDatasetWriter(
            tmp_path / "ds", 2, 1, 5, features=["a", "b"], labels=["y"], categories={"c": [1]}
        )


def test_a_file_where_the_folder_should_be_is_named(tmp_path):
    (tmp_path / "ds").write_bytes(b"x")
    with pytest.raises(NdfError, match=f"^{tmp_path / 'ds'}: not a dataset"):
        NdfDatasetWriter(tmp_path / "ds", 2, 1, 5)


def test_names_labels_and_categories_reach_the_manifest(tmp_path):
    cats = {"b": ["lo", "hi"]}
    with NdfDatasetWriter(
        tmp_path / "ds", 2, 1, 5, features=["a", "b"], labels=["y"], categories=cats
    ) as w:
        w.write(ROWS % 2)
    manifest = json.loads((tmp_path / "ds" / "manifest.json").read_text())
    assert (manifest["features"], manifest["labels"], manifest["categories"]) == (
        ["a", "b"],
        ["y"],
        cats,
    )
    with open_ndf_dataset(tmp_path / "ds") as ds:
        assert (ds.features, ds.labels, ds.categories) == (("a", "b"), ("y",), cats)


def test_before_rename_runs_before_each_part_and_the_manifest(tmp_path):
    """7 rows in parts of 5: the first part, the second, then the manifest; each call
    comes before its file is in place."""
    path = tmp_path / "ds"
    seen = []

    def before_rename():
        seen.append(sorted(n for n in os.listdir(path) if not n.startswith(".")))

    with NdfDatasetWriter(path, 2, 1, 5, before_rename=before_rename) as w:
        w.write(ROWS)
    assert [len(s) for s in seen] == [0, 1, 2]
    assert all(n.startswith("part-") for n in seen[-1])
    assert "manifest.json" in os.listdir(path)


def test_a_before_rename_that_raises_leaves_nothing(tmp_path):
    def stop():
        raise KeyboardInterrupt

    with (
        pytest.raises(KeyboardInterrupt),
        NdfDatasetWriter(tmp_path / "ds", 2, 1, 5, before_rename=stop) as w,
    ):
        w.write(ROWS)
    assert not (tmp_path / "ds").exists()


def test_write_raw_takes_whole_rows_only(tmp_path):
    path = tmp_path / "ds"
    w = NdfDatasetWriter(path, 1, 0, 5)
    w.write_raw(np.arange(7.0).tobytes())
    assert w.rows == 7 and type(w.rows) is int
    with pytest.raises(ValueError, match=f"^{path}: 3 bytes is not a whole number of rows"):
        w.write_raw(b"123")
    w.commit()
    with open_ndf_dataset(path) as ds:
        assert ds.n == 7 and [p.n for p in ds.parts] == [5, 2]


def test_write_raw_of_rows_with_no_values_is_a_clear_error(tmp_path):
    """d = l = 0: no byte count is a number of rows (not a ZeroDivisionError)."""
    w = NdfDatasetWriter(tmp_path / "ds", 0, 0, 5)
    with pytest.raises(ValueError, match="is not a whole number of rows"):
        w.write_raw(b"")
    w.abort()


def test_abort_twice_is_harmless_and_leaves_no_parts(tmp_path):
    w = NdfDatasetWriter(tmp_path / "ds", 2, 1, 5)
    w.write(ROWS)  # one part whole, the second begun
    w.abort()
    w.abort()
    assert w.parts == []
    assert not (tmp_path / "ds").exists()
