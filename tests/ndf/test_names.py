"""Column names of a single .ndf (issue 15, item 3): a JSON sidecar ``PATH.json`` next to
the file, written atomically with it, read back as ``NdfFile.features``/``.labels``;
the byte format of the .ndf itself is unchanged."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from exactbatch import NdfError, open_ndf, save_ndf
from exactbatch.ndf import NdfWriter
from exactbatch.ndf.names import default_names, read_sidecar, sidecar_path, validate_names


def _data(n=5, d=2, l=1):  # noqa: E741
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, d)), rng.standard_normal((n, l))


def test_names_round_trip_and_bytes_unchanged(tmp_path):
    """save_ndf with names writes PATH.json; the .ndf's bytes equal those of a save without."""
    x, y = _data()
    named, plain = tmp_path / "named.ndf", tmp_path / "plain.ndf"
    save_ndf(named, (x, y), features=["age", "income"], labels=["churned"])
    save_ndf(plain, (x, y))
    assert named.read_bytes() == plain.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["named.ndf", "named.ndf.json", "plain.ndf"]
    with open_ndf(named) as f:
        assert f.features == ("age", "income")
        assert f.labels == ("churned",)
    doc = json.loads((tmp_path / "named.ndf.json").read_text())
    assert doc["features"] == ["age", "income"] and doc["labels"] == ["churned"]
    assert (doc["n"], doc["d"], doc["l"], doc["version"]) == (5, 2, 1, 1)


def test_defaults_without_a_sidecar(tmp_path):
    x, y = _data(d=3, l=2)
    save_ndf(tmp_path / "a.ndf", (x, y))
    with open_ndf(tmp_path / "a.ndf") as f:
        assert f.features == ("x0", "x1", "x2")
        assert f.labels == ("y0", "y1")
    assert default_names(0, 0) == ((), ())


def test_one_side_named_gives_the_other_defaults(tmp_path):
    x, y = _data()
    save_ndf(tmp_path / "a.ndf", (x, y), labels=["target"])
    with open_ndf(tmp_path / "a.ndf") as f:
        assert (f.features, f.labels) == (("x0", "x1"), ("target",))


def test_writer_writes_names_at_commit(tmp_path):
    x, y = _data(n=7)
    with NdfWriter(tmp_path / "w.ndf", 2, 1, features=["a", "b"], labels=["c"]) as w:
        w.write(np.concatenate((x, y), axis=1))
        assert not (tmp_path / "w.ndf.json").exists()  # nothing before the commit
    with open_ndf(tmp_path / "w.ndf") as f:
        assert (f.n, f.features, f.labels) == (7, ("a", "b"), ("c",))


@pytest.mark.parametrize(
    "features, labels, error, match",
    [
        (["a"], None, ValueError, "features names 1 columns"),
        (["a", "b"], ["c", "d"], ValueError, "labels names 2 columns"),
        (["a", "a"], None, ValueError, "more than once"),
        (["a", "b"], ["a"], ValueError, "more than once"),
        ("ab", None, TypeError, "list of column names"),
        (["a", 3], None, TypeError, "must be strings"),
        (["a", " "], None, ValueError, "non-empty text"),
    ],
    ids=["short", "long-labels", "twice", "feature-is-label", "a-string", "not-str", "blank"],
)
def test_bad_names_write_nothing(tmp_path, features, labels, error, match):
    """Bad names are refused before anything is written (no file, no sidecar, no temp)."""
    x, y = _data()
    with pytest.raises(error, match=match):
        save_ndf(tmp_path / "a.ndf", (x, y), features=features, labels=labels)
    with pytest.raises(error, match=match):
        NdfWriter(tmp_path / "b.ndf", 2, 1, features=features, labels=labels)
    assert os.listdir(tmp_path) == []


def test_failed_write_leaves_no_sidecar(tmp_path):
    """A writer that aborts (a short input) leaves neither the file nor its sidecar."""
    with pytest.raises(ValueError, match="promised 5 rows"):
        with NdfWriter(tmp_path / "a.ndf", 2, 1, n=5, features=["a", "b"], labels=["c"]) as w:
            w.write(np.zeros((3, 3)))
    assert os.listdir(tmp_path) == []


def test_rewrite_without_names_removes_the_stale_sidecar(tmp_path):
    x, y = _data()
    p = tmp_path / "a.ndf"
    save_ndf(p, (x, y), features=["a", "b"], labels=["c"])
    save_ndf(p, (x, y))
    assert os.listdir(tmp_path) == ["a.ndf"]
    with open_ndf(p) as f:
        assert f.features == ("x0", "x1")


def test_a_foreign_json_is_not_removed(tmp_path):
    """A PATH.json that is not a names sidecar is the user's: a write without names keeps it."""
    x, y = _data()
    (tmp_path / "a.ndf.json").write_text('{"mine": 1}')
    save_ndf(tmp_path / "a.ndf", (x, y))
    assert (tmp_path / "a.ndf.json").read_text() == '{"mine": 1}'


def test_sidecar_for_other_data_is_an_error(tmp_path):
    """A sidecar whose n, d, l differ from the file's header names both; never wrong names."""
    x, y = _data()
    p = tmp_path / "a.ndf"
    save_ndf(p, (x, y), features=["a", "b"], labels=["c"])
    side = json.loads((tmp_path / "a.ndf.json").read_text())
    save_ndf(tmp_path / "b.ndf", (x[:4], y[:4]))
    (tmp_path / "b.ndf.json").write_text(json.dumps(side))
    with open_ndf(tmp_path / "b.ndf") as f, pytest.raises(NdfError, match="describes other data"):
        _ = f.features


@pytest.mark.parametrize(
    "text, match",
    [
        ("{not json", "not valid JSON"),
        ('{"format": "something"}', "not a names sidecar: expected format"),
        (
            '{"format": "exactbatch.ndf.names", "version": 99, "n": 5, "d": 2, "l": 1}',
            "version 99",
        ),
        (
            '{"format": "exactbatch.ndf.names", "version": 1, "n": 5, "d": 2, "l": 1, '
            '"features": ["a"], "labels": ["c"]}',
            "features names 1 columns",
        ),
    ],
    ids=["not-json", "foreign", "version", "short"],
)
def test_malformed_sidecar_is_an_ndf_error(tmp_path, text, match):
    x, y = _data()
    save_ndf(tmp_path / "a.ndf", (x, y))
    (tmp_path / "a.ndf.json").write_text(text)
    with open_ndf(tmp_path / "a.ndf") as f:
        with pytest.raises(NdfError, match=match) as e:
            _ = f.labels
        assert "a.ndf.json" in str(e.value)
        assert f.read_rows([0])[0].shape == (1, 2)  # the data itself still reads


def test_names_over_a_url(s3_server, tmp_path):
    """A URL's NdfFile reads the sidecar next to the object (one GET)."""
    x, y = _data()
    save_ndf(tmp_path / "a.ndf", (x, y), features=["a", "b"], labels=["c"])
    url = f"s3://{s3_server.bucket}/test_names/a.ndf"
    s3_server.fs.put(str(tmp_path / "a.ndf"), url)
    with open_ndf(url, storage_options=s3_server.so) as f:
        assert f.features == ("x0", "x1")  # no sidecar uploaded yet
    s3_server.fs.put(str(tmp_path / "a.ndf.json"), sidecar_path(url))
    with open_ndf(url, storage_options=s3_server.so) as f:
        assert (f.features, f.labels) == (("a", "b"), ("c",))


def test_validate_names_and_read_sidecar_directly(tmp_path):
    assert validate_names(None, None, 2, 1, "w") is None
    assert validate_names(["a", "b"], [], 2, 0, "w") == (("a", "b"), ())
    assert read_sidecar(tmp_path / "none.ndf", 1, 1, 1) is None
