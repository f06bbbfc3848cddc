"""Vocabularies of coded columns (issue 30, item 5): stored beside the names, under the key
``"categories"`` of a file's names sidecar or a dataset's manifest, read back by
``exactbatch.categories(path)``; the .ndf bytes are unchanged and files without the key
read as before (``{}``)."""

from __future__ import annotations

import json

import numpy as np
import pytest

import exactbatch
from exactbatch import NdfError, open_ndf, open_ndf_dataset, save_ndf
from exactbatch.ndf import NdfWriter
from exactbatch.ndf.dataset_write import NdfDatasetWriter
from exactbatch.ndf.manifest import read_manifest

ROWS = np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 1.0], [2.0, np.nan, 0.0]])
CATS = {"city": ["Lyon", "Paris"]}


def _write(path, categories=CATS, **kw):
    with NdfWriter(path, 2, 1, features=["a", "city"], labels=["y"], categories=categories) as w:
        w.write(ROWS)


def test_a_file_keeps_its_vocabularies_beside_its_names(tmp_path):
    """The sidecar gains "categories"; categories(path), NdfFile.categories read it back;
    the .ndf's bytes are those of a file written without it."""
    coded, plain = tmp_path / "coded.ndf", tmp_path / "plain.ndf"
    _write(coded)
    save_ndf(plain, (ROWS[:, :2], ROWS[:, 2:]))
    assert coded.read_bytes() == plain.read_bytes()
    doc = json.loads((tmp_path / "coded.ndf.json").read_text())
    assert doc["categories"] == CATS and doc["version"] == 1
    assert exactbatch.categories(coded) == CATS
    with open_ndf(coded) as f:
        assert f.categories == CATS and f.features == ("a", "city")


def test_files_without_the_key_read_as_before(tmp_path):
    """A file without a sidecar, or with one written before categories, has none: {}."""
    save_ndf(tmp_path / "bare.ndf", (ROWS[:, :2], ROWS[:, 2:]))
    save_ndf(tmp_path / "named.ndf", (ROWS[:, :2], ROWS[:, 2:]), features=["a", "b"])
    for name in ("bare.ndf", "named.ndf"):
        assert exactbatch.categories(tmp_path / name) == {}
    _write(tmp_path / "none.ndf", categories=None)
    assert "categories" not in json.loads((tmp_path / "none.ndf.json").read_text())


def test_a_dataset_keeps_them_in_its_manifest(tmp_path):
    """NdfDatasetWriter(categories=) writes them to the manifest; categories(folder) and
    NdfDataset.categories read them; a manifest without the key has none."""
    path = tmp_path / "ds"
    with NdfDatasetWriter(
        path, 2, 1, 2, features=["a", "city"], labels=["y"], categories=CATS
    ) as w:
        w.write(ROWS)
    assert json.loads((path / "manifest.json").read_text())["categories"] == CATS
    assert exactbatch.categories(path) == CATS
    with open_ndf_dataset(path) as ds:
        assert ds.categories == CATS
    with NdfDatasetWriter(tmp_path / "plain", 2, 1, 2) as w:
        w.write(ROWS)
    assert exactbatch.categories(tmp_path / "plain") == {}
    assert read_manifest(tmp_path / "plain").categories is None


@pytest.mark.parametrize(
    ("categories", "says"),
    [
        ({"town": ["a"]}, "town"),  # not a column
        ({"city": ["a", "a"]}, "more than once"),
        ({"city": "ab"}, "must be a list"),
        ({"city": [["a"]]}, "strings, integers"),
        ({"city": ["a", 1]}, "strings, integers"),
        ({"city": [float("nan")]}, "strings, integers"),
    ],
    ids=["unknown-column", "repeated-value", "not-a-list", "nested", "mixed", "nan"],
)
def test_bad_vocabularies_are_refused_when_written_and_when_read(tmp_path, categories, says):
    """A writer refuses them (ValueError/TypeError naming the problem, nothing written); a
    sidecar or manifest holding them is an NdfError at read."""
    with pytest.raises((TypeError, ValueError), match=says):
        _write(tmp_path / "w.ndf", categories=categories)
    assert not (tmp_path / "w.ndf").exists()
    _write(tmp_path / "r.ndf")
    side = tmp_path / "r.ndf.json"
    doc = json.loads(side.read_text())
    doc["categories"] = categories
    side.write_text(json.dumps(doc))
    with pytest.raises(NdfError, match=f"{says}|NaN is not JSON"):
        exactbatch.categories(tmp_path / "r.ndf")


def test_categories_of_a_missing_path(tmp_path):
    with pytest.raises(FileNotFoundError):
        exactbatch.categories(tmp_path / "nope.ndf")


def test_categories_at_a_url_read_the_sidecar_or_the_manifest(tmp_path):
    """At a URL (fsspec's memory:// here) a file is told from a dataset's folder by the
    storage itself: a file's sidecar and a folder's manifest are read there."""
    fsspec = pytest.importorskip("fsspec")
    _write(tmp_path / "coded.ndf")
    with NdfDatasetWriter(
        tmp_path / "ds", 2, 1, 2, features=["a", "city"], labels=["y"], categories=CATS
    ) as w:
        w.write(ROWS)
    fs = fsspec.filesystem("memory")
    root = "/exactbatch-categories"
    for local in (tmp_path / "coded.ndf", tmp_path / "coded.ndf.json", tmp_path / "ds"):
        fs.put(str(local), f"{root}/{local.name}", recursive=local.is_dir())
    try:
        assert exactbatch.categories(f"memory://{root}/coded.ndf") == CATS
        assert exactbatch.categories(f"memory://{root}/ds") == CATS
        assert exactbatch.categories(f"memory://{root}/ds", storage_options={}) == CATS
    finally:
        fs.rm(root, recursive=True)


def test_categories_at_an_s3_url_use_its_storage_options(tmp_path, s3_server):
    """The storage options (the local S3 server's endpoint and keys) reach the reads of
    a file's sidecar and of a folder's manifest at an S3 URL."""
    _write(tmp_path / "coded.ndf")
    with NdfDatasetWriter(
        tmp_path / "ds", 2, 1, 2, features=["a", "city"], labels=["y"], categories=CATS
    ) as w:
        w.write(ROWS)
    root = f"{s3_server.bucket}/categories"
    for local in (tmp_path / "coded.ndf", tmp_path / "coded.ndf.json", tmp_path / "ds"):
        s3_server.fs.put(str(local), f"{root}/{local.name}", recursive=local.is_dir())
    so = s3_server.so
    assert exactbatch.categories(f"s3://{root}/coded.ndf", storage_options=so) == CATS
    assert exactbatch.categories(f"s3://{root}/ds", storage_options=so) == CATS
    with pytest.raises(FileNotFoundError):
        exactbatch.categories(f"s3://{root}/missing", storage_options=so)
