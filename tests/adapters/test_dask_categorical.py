"""exactbatch.dask.to_ndf_dataset(categorical=) (issue 30, item 5): string (or integer)
columns of a Dask DataFrame written as integer codes of a sorted vocabulary learned in
one first pass, or given; the vocabularies in the manifest; unknown values and
uncoded strings refused, and a refused write leaves the old dataset as it was."""

from __future__ import annotations

import os

import numpy as np
import pytest

import exactbatch
from exactbatch import open_ndf_dataset

dd = pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")

from exactbatch.dask import to_ndf_dataset  # noqa: E402

FRAME = {
    "amount": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
    "city": ["Paris", "Lyon", None, "Nice", "Lyon", "Paris"],
    "store": [30, 4, 30, 100, 4, 4],
    "churn": [0, 1, 0, 1, 1, 0],
}


@pytest.fixture
def ddf():
    return dd.from_pandas(pd.DataFrame(FRAME), npartitions=3)


def test_codes_and_vocabularies_in_the_manifest(ddf, tmp_path):
    """Sorted vocabularies (strings by code point, numbers by value), missing as NaN, the
    rows in partition order; categories(path) reads them back."""
    path = tmp_path / "ds"
    to_ndf_dataset(ddf, path, labels="churn", categorical=["city", "store"])
    assert exactbatch.categories(path) == {"city": ["Lyon", "Nice", "Paris"], "store": [4, 30, 100]}
    with open_ndf_dataset(path) as ds:
        x, y = ds.read_rows(np.arange(ds.n))
        assert ds.features == ("amount", "city", "store") and ds.labels == ("churn",)
    assert np.array_equal(x[:, 1], [2, 0, np.nan, 1, 0, 2], equal_nan=True)
    assert x[:, 2].tolist() == [1, 0, 1, 2, 0, 0]
    assert y[:, 0].tolist() == FRAME["churn"]


def test_a_given_vocabulary_and_an_unknown_value(ddf, tmp_path):
    """categorical={col: values} codes in the order given; a partition holding another
    value fails the write (ValueError naming the column and the value), and the dataset
    already there is kept."""
    path = tmp_path / "ds"
    to_ndf_dataset(ddf, path, labels="churn", categorical={"city": ["Paris", "Lyon", "Nice"]})
    before = sorted(os.listdir(path))
    with open_ndf_dataset(path) as ds:
        assert ds.read_rows(np.arange(2))[0][:, 1].tolist() == [0, 1]
    with pytest.raises(ValueError, match=r"'city' holds 'Nice'.*not in its vocabulary"):
        to_ndf_dataset(ddf, path, labels="churn", categorical={"city": ["Paris", "Lyon"]})
    assert sorted(os.listdir(path)) == before


@pytest.mark.parametrize(
    ("kw", "error", "says"),
    [
        ({}, TypeError, r"non-numeric column\(s\) 'city'.*categorical="),
        ({"categorical": ["nope"]}, ValueError, "neither features nor labels"),
        ({"features": ["amount", "nope"]}, ValueError, r"\['nope'\].*its columns are"),
    ],
    ids=["string-not-coded", "categorical-not-chosen", "missing-column"],
)
def test_bad_columns(ddf, tmp_path, kw, error, says):
    with pytest.raises(error, match=says):
        to_ndf_dataset(ddf, tmp_path / "ds", labels="churn", **kw)
    assert not (tmp_path / "ds").exists()
