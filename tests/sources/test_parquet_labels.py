"""parquet_source honours the label columns recorded in the files' schema metadata
(``exactbatch.labels``, written by ``exactbatch convert`` from an .ndf) when ``labels``
is not given (issue 15, item 3): a round trip .ndf -> Parquet -> loader keeps the split
instead of handing the labels to the model as features."""

from __future__ import annotations

import inspect

import numpy as np
import pytest

from exactbatch import DataLoader, parquet_source, save_ndf
from exactbatch.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def recorded(tmp_path):
    """A Parquet file written by `exactbatch convert` from a named .ndf: a, b | t."""
    x = np.arange(200.0).reshape(100, 2)
    save_ndf(tmp_path / "a.ndf", (x, -x[:, 0]), features=["a", "b"], labels=["t"])
    assert main(["convert", str(tmp_path / "a.ndf"), str(tmp_path / "a.parquet"), "-q"]) == 0
    return tmp_path / "a.parquet"


def test_labels_not_given_come_from_the_metadata(recorded):
    src = parquet_source(recorded)
    assert (src.features, src.labels, src.d, src.l) == (("a", "b"), ("t",), 2, 1)
    xb, yb = next(iter(DataLoader(src, 100, shuffle=False)))
    assert np.array_equal(yb[:, 0], -xb[:, 0])


def test_explicit_labels_win_and_empty_means_none(recorded):
    assert parquet_source(recorded, labels=()).features == ("a", "b", "t")
    assert parquet_source(recorded, labels=()).l == 0
    assert parquet_source(recorded, labels="b").features == ("a", "t")


def test_features_given_take_their_columns_out_of_the_recorded_labels(recorded):
    src = parquet_source(recorded, features=["a", "t"])
    assert (src.features, src.labels) == (("a", "t"), ())
    src = parquet_source(recorded, features=["a"])
    assert (src.features, src.labels) == (("a",), ("t",))


def test_files_without_metadata_have_no_labels(tmp_path):
    pq.write_table(pa.table({"p": [1.0, 2.0], "q": [3.0, 4.0]}), tmp_path / "b.parquet")
    src = parquet_source(tmp_path / "b.parquet")
    assert (src.features, src.labels) == (("p", "q"), ())


def test_recorded_labels_missing_from_the_file_are_a_clear_error(tmp_path):
    schema = pa.schema([("p", pa.float64())], metadata={b"exactbatch.labels": b"gone"})
    pq.write_table(pa.table({"p": [1.0]}, schema=schema), tmp_path / "c.parquet")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['gone'\]"):
        parquet_source(tmp_path / "c.parquet")


def test_the_signature_still_reads_labels_empty():
    assert repr(inspect.signature(parquet_source).parameters["labels"].default) == "()"


def test_several_recorded_labels_are_split_at_commas(tmp_path):
    """The metadata is the label names joined by commas (empty names dropped)."""
    t = pa.table({"a": [1.0, 2.0], "t": [3.0, 4.0], "u": [5.0, 6.0]})
    t = t.replace_schema_metadata({b"exactbatch.labels": b"t,u,"})
    pq.write_table(t, tmp_path / "two.parquet")
    src = parquet_source(tmp_path / "two.parquet")
    assert (src.features, src.labels) == (("a",), ("t", "u"))
