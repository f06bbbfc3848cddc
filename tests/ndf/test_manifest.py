"""ndf/manifest.py on its own: part names, each rule a manifest's parts must pass and its
message, the bytes written, the errors of a folder that is not a dataset."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from exactbatch import NdfError
from exactbatch.ndf.format import MAX_ROWS
from exactbatch.ndf.manifest import (
    FORMAT,
    MANIFEST,
    VERSION,
    Manifest,
    PartInfo,
    file_not_dataset,
    no_manifest,
    part_name,
    read_manifest,
    write_manifest,
)

WID = "0123abcd-42-deadbeef"


def _p(name="p.ndf", n=2, width=3):
    return (name, n, 28 + 8 * n * width)


def test_part_name():
    assert part_name(0) == "part-00000.ndf"
    assert part_name(42, WID) == f"part-00042-{WID}.ndf"
    assert part_name(123456) == "part-123456.ndf"
    assert part_name(np.int64(7)) == "part-00007.ndf"
    with pytest.raises(ValueError, match="index"):
        part_name(-1)
    for bad in ("x", "0123abcd-42-deadbeef-", 5):
        with pytest.raises(ValueError) as e:
            part_name(1, bad)
        assert str(e.value) == f"write_id must be a write id from start_dataset; got {bad!r}"


def test_write_manifest_writes_and_returns_it(tmp_path):
    parts = [PartInfo("a.ndf", 2, 28 + 48), {"name": "b.ndf", "n": 0, "nbytes": 28}]
    man = write_manifest(
        tmp_path,
        iter(parts),
        2,
        1,
        features=["f", "g"],
        labels=["t"],
        categories={"g": ["lo", "hi"]},
    )
    assert man == Manifest(
        (PartInfo("a.ndf", 2, 76), PartInfo("b.ndf", 0, 28)),
        2,
        1,
        ("f", "g"),
        ("t",),
        {"g": ["lo", "hi"]},
    )
    assert man.n == 2
    text = (tmp_path / MANIFEST).read_text()
    assert json.loads(text) == {
        "format": FORMAT,
        "version": VERSION,
        "n": 2,
        "d": 2,
        "l": 1,
        "features": ["f", "g"],
        "labels": ["t"],
        "categories": {"g": ["lo", "hi"]},
        "parts": [
            {"name": "a.ndf", "n": 2, "nbytes": 76},
            {"name": "b.ndf", "n": 0, "nbytes": 28},
        ],
    }
    # one part a line, and the file ends with a newline
    assert '\n  {"name": "a.ndf", "n": 2, "nbytes": 76},\n' in text and text.endswith("]\n}\n")
    assert read_manifest(tmp_path) == man
    assert [e for e in os.listdir(tmp_path) if e != MANIFEST] == []


def test_write_manifest_without_names_or_categories(tmp_path):
    man = write_manifest(str(tmp_path), [_p()], 3, 0)
    assert (man.features, man.labels, man.categories) == (None, None, None)
    doc = json.loads((tmp_path / MANIFEST).read_text())
    assert sorted(doc) == ["d", "format", "l", "n", "parts", "version"]
    assert read_manifest(tmp_path) == man
    man = write_manifest(tmp_path, [_p()], 2, 1, labels=["t"])
    assert (man.features, man.labels) == (None, ("t",))
    doc = json.loads((tmp_path / MANIFEST).read_text())
    assert "features" not in doc and doc["labels"] == ["t"]
    back = read_manifest(tmp_path)
    assert back.features is None and back.labels == ("t",)
    man = write_manifest(tmp_path, [_p()], 2, 1, features=["a", "b"])
    back = read_manifest(tmp_path)
    assert back.features == ("a", "b") and back.labels is None


def test_write_manifest_checks_its_widths(tmp_path):
    with pytest.raises(ValueError, match="d"):
        write_manifest(tmp_path, [], -1, 0)
    with pytest.raises(NdfError) as e:
        write_manifest(tmp_path, [], 2**31 - 1, 1)
    assert str(e.value) == (
        f"{tmp_path / MANIFEST}: d=2147483647, l=1: at most 2147483647 (2**31 - 1) values a row "
        "(d + l)"
    )
    write_manifest(tmp_path, [], 2**31 - 2, 1)  # at the limit
    assert os.listdir(tmp_path) == [MANIFEST]


@pytest.mark.parametrize(
    "part, message",
    [
        ("xy", "part 0 must be (name, n, nbytes); got 'xy'"),
        (5, "part 0 must be (name, n, nbytes); got 5"),
        (("", 0, 28), "part 0 has no plain file name: ''"),
        ((".", 0, 28), "part 0 has no plain file name: '.'"),
        (("..", 0, 28), "part 0 has no plain file name: '..'"),
        (("a/b", 0, 28), "part 0 has no plain file name: 'a/b'"),
        ((7, 0, 28), "part 0 has no plain file name: 7"),
        (("a\\b", 0, 28), "part 0 has a file name a part cannot have: 'a\\\\b'"),
        ((MANIFEST, 0, 28), "part 0 has a file name a part cannot have: 'manifest.json'"),
        (("a\0b", 0, 28), "part 0 has a file name a part cannot have: 'a\\x00b'"),
        (("a\ud800", 0, 28), "part 0 has a file name a part cannot have: 'a\\ud800'"),
        (("p", -1, 28), "part p: n must be an integer >= 0 (at most 9223372036854775807); got -1"),
        (
            ("p", True, 28),
            "part p: n must be an integer >= 0 (at most 9223372036854775807); got True",
        ),
        (("p", 1.0, 28), "part p: n must be an integer >= 0"),
        (("p", 0, -1), "part p: nbytes must be an integer >= 0 (at most"),
        (("p", 0, np.bool_(True)), "part p: nbytes must be an integer >= 0"),
        (
            ("p", 1, 28),
            "part p: nbytes=28 does not match n=1, d=2, l=1 (a part of n rows is "
            "28 + 8*n*(d+l) = 52 bytes)",
        ),
        (("p", MAX_ROWS, 28), "part p: no part can have n=9223372036854775807, d=2, l=1: "),
    ],
)
def test_each_bad_part_is_an_error_naming_it(tmp_path, part, message):
    with pytest.raises(NdfError) as e:
        write_manifest(tmp_path, [part], 2, 1)
    assert str(e.value).startswith(f"{tmp_path / MANIFEST}: {message}"), str(e.value)
    assert os.listdir(tmp_path) == []


def test_parts_listed_twice_and_counted_in_numpy(tmp_path):
    with pytest.raises(NdfError, match=r": part p is listed twice$"):
        write_manifest(tmp_path, [("p", 0, 28), ("q", 0, 28), ("p", 0, 28)], 2, 1)
    with pytest.raises(NdfError, match=r": part 1 has no plain file name"):
        write_manifest(tmp_path, [("p", 0, 28), ("", 0, 28)], 2, 1)
    man = write_manifest(tmp_path, [("p", np.int64(1), np.uint64(52))], 2, 1)
    assert man.parts == (PartInfo("p", 1, 52),)
    assert type(man.parts[0].n) is int and type(man.parts[0].nbytes) is int


def test_parts_holding_too_many_rows_in_all(tmp_path):
    half = MAX_ROWS // 2 + 1
    parts = [("a", half, 28), ("b", half, 28), ("c", 0, 28)]
    with pytest.raises(NdfError) as e:
        write_manifest(tmp_path, parts, 0, 0)
    assert str(e.value) == (
        f"{tmp_path / MANIFEST}: the parts up to b hold {2 * half} rows in all; a dataset "
        f"holds at most {MAX_ROWS} (2**63 - 1)"
    )
    man = write_manifest(tmp_path, [("a", MAX_ROWS, 28)], 0, 0)  # exactly the limit
    assert man.n == MAX_ROWS


def _write_doc(folder, **doc) -> str:
    base = {"format": FORMAT, "version": 1, "d": 2, "l": 1, "parts": []}
    base.update(doc)
    (folder / MANIFEST).write_text(json.dumps({k: v for k, v in base.items() if v != "-"}))
    return str(folder / MANIFEST)


def test_read_manifest_rules(tmp_path):
    where = _write_doc(tmp_path, parts=[{"name": "p", "n": 1, "nbytes": 52}])
    assert read_manifest(tmp_path).parts == (PartInfo("p", 1, 52),)
    where = _write_doc(tmp_path, parts=[{"name": "p", "n": 1, "nbytes": 52}], n=1)
    assert read_manifest(tmp_path).n == 1
    cases = [
        (
            {"n": 2, "parts": [{"name": "p", "n": 1, "nbytes": 52}]},
            f"{where}: n=2 but the parts' n add up to 1",
        ),
        ({"parts": "-"}, f"{where}: 'parts' must be a list of parts; got None"),
        ({"parts": {"a": 1}}, f"{where}: 'parts' must be a list of parts; got {{'a': 1}}"),
        ({"format": "other"}, f"{where}: not a dataset manifest: expected format "),
        (
            {"version": 2},
            f"{where}: a dataset manifest version 2; this exactbatch reads version "
            "1 only, an integer (upgrade exactbatch, or write the dataset again)",
        ),
        ({"d": 2**31 - 1}, f"{where}: d=2147483647, l=1: at most"),
        ({"l": "-"}, f"{where}: 'l' must be an integer in [0, 2147483647]; found nothing"),
        ({"n": -1}, f"{where}: 'n' must be an integer in [0, 9223372036854775807]; found -1"),
        ({"categories": {"x": ["a"]}}, where),
    ]
    for change, message in cases:
        _write_doc(tmp_path, **change)
        with pytest.raises(NdfError) as e:
            read_manifest(tmp_path)
        assert str(e.value).startswith(message), (change, str(e.value))


def test_read_manifest_of_what_is_not_a_dataset(tmp_path):
    with pytest.raises(NdfError) as e:
        read_manifest(tmp_path)
    assert str(e.value) == str(no_manifest(str(tmp_path)))
    assert str(e.value) == (
        f"{tmp_path}: not a dataset: the folder holds no manifest.json (a dataset's manifest "
        "is written last: was its write interrupted?)"
    )
    f = tmp_path / "x.ndf"
    f.write_bytes(b"")
    with pytest.raises(NdfError) as e:
        read_manifest(f)
    assert str(e.value) == str(file_not_dataset(str(f)))
    assert str(e.value) == (
        f"{f}: not a dataset: expected a folder holding manifest.json, found a file "
        "(open a single .ndf file with open_ndf)"
    )
    with pytest.raises(FileNotFoundError) as e:
        read_manifest(tmp_path / "missing")
    assert e.value.filename == str(tmp_path / "missing")
    assert "no such dataset folder" in str(e.value)
