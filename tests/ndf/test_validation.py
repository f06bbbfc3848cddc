"""One validation pass over every header, manifest and names sidecar (issue 27, item 2).

* Limits: a header, a manifest or a writer with more than 2**31 - 1 values a
  row (d + l), more than 2**63 - 1 rows, or parts whose rows add up to more
  (summed as Python ints: 4 parts of 2**62 rows once wrapped to n = 0) is an
  ``NdfError`` naming the file.
* Default names ``x0..``/``y0..`` are made when used, never all at once: a
  28-byte header of no rows and 2**31 - 1 columns costs nothing to open or
  to name.
* One ``validate_names`` for every writer and reader of names: duplicates,
  empty names, NUL characters and a feature named like a label are refused
  by ``save_ndf``, ``save_ndf_dataset``, ``NdfDatasetWriter``,
  ``write_manifest``, and by the readers of manifests and sidecars.
* Malformed JSON in a manifest or a sidecar is an ``NdfError`` naming it and
  what was expected, whatever the bytes: ``true`` and ``1.0`` are not
  integers, deep nesting and 5,000-digit integers are not Python errors.
* Non-regular files (a FIFO) are refused at once, never waited on: as an
  ``.ndf``, a dataset's part, its manifest, a names sidecar.
"""

from __future__ import annotations

import json
import os
import re
import stat
import struct
import tracemalloc

import numpy as np
import pytest
from helpers import fifo, part_file

from exactbatch import NdfError, open_ndf, save_ndf
from exactbatch.ndf import NdfWriter, open_ndf_dataset, save_ndf_dataset
from exactbatch.ndf.dataset_write import NdfDatasetWriter
from exactbatch.ndf.format import MAX_ROWS, MAX_WIDTH
from exactbatch.ndf.manifest import write_manifest
from exactbatch.ndf.names import DefaultNames, default_names, read_sidecar

HEADER = struct.Struct("<4sQQQ")
MANIFEST = {"format": "exactbatch-ndf-dataset", "version": 1, "d": 2, "l": 1}
SIDECAR = {"format": "exactbatch.ndf.names", "version": 1, "n": 3, "d": 2, "l": 1}


def _part(name="part-00000.ndf", n=3, nbytes=None, width=3):
    return {"name": name, "n": n, "nbytes": 28 + 8 * n * width if nbytes is None else nbytes}


# -- limits and lazy names ------------------------------------------------------------------


def test_default_names_are_made_one_by_one():
    """A DefaultNames of 2**31 - 1 names answers len, index, in and equality in O(1)
    (or over the names compared), and equals the tuple of the same names."""
    fx, fy = default_names(MAX_WIDTH, 2)
    assert len(fx) == MAX_WIDTH and fx[-1] == f"x{MAX_WIDTH - 1}" and fx[5] == "x5"
    assert "x123456789" in fx and "x01" not in fx and "y0" not in fx and "x" not in fx
    assert f"x{MAX_WIDTH}" not in fx and "x" + "9" * 5000 not in fx
    assert fx.index("x77") == 77 and fx.count("x3") == 1 and fx.count("a") == 0
    with pytest.raises(ValueError):
        fx.index("a")
    assert fy == ("y0", "y1") and fy == ["y0", "y1"] and ("y0", "y1") == fy
    assert fy != ("y0",) and fx != fy and fx[1:3] == ("x1", "x2")
    assert default_names(0, 0) == ((), ()) and hash(fy) == hash(("y0", "y1"))
    assert repr(fx) == f"('x0', 'x1', ..., 'x{MAX_WIDTH - 1}')" and repr(fy) == "('y0', 'y1')"
    assert list(DefaultNames("x", 3)) == ["x0", "x1", "x2"]


def test_a_header_of_no_rows_and_many_columns_costs_nothing_to_name(tmp_path):
    """n = 0, d = 2**20: open, features and a dataset's names allocate almost nothing
    (before, all 2**20 names were made: with d = 2**40 the process ran out of memory)."""
    d = 1 << 20
    path = tmp_path / "wide.ndf"
    path.write_bytes(HEADER.pack(b"NDF1", 0, d, 1))
    folder = tmp_path / "ds"
    folder.mkdir()
    manifest = {**MANIFEST, "d": d, "parts": [_part(n=0)]}
    (folder / "manifest.json").write_text(json.dumps(manifest))
    tracemalloc.start()
    try:
        with open_ndf(path) as f:
            assert len(f.features) == d and f.features[-1] == f"x{d - 1}" and f.labels == ("y0",)
        ds = open_ndf_dataset(folder)
        assert len(ds.features) == d and ds.n == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 1 << 20, f"naming {d} columns allocated {peak} bytes"


@pytest.mark.parametrize(
    "d, l, parts, message",
    [
        (2**40, 0, [], "'d' must be an integer in \\[0, 2147483647\\]"),
        (2**30, 2**30, [], "at most 2147483647 \\(2\\*\\*31 - 1\\) values a row"),
        (0, 0, [{"name": f"p{k}", "n": 2**62, "nbytes": 28} for k in range(4)], "2\\*\\*63 - 1"),
        (0, 0, [{"name": f"p{k}", "n": 2**62, "nbytes": 28} for k in range(3)], "2\\*\\*63 - 1"),
        (0, 0, [{"name": "p", "n": 2**63, "nbytes": 28}], "n must be an integer >= 0"),
        (1, 0, [{"name": "p", "n": 2**62, "nbytes": 28 + 2**65}], "nbytes must be an integer"),
    ],
    ids=["d-2^40", "d+l-2^31", "4x2^62-rows", "3x2^62-rows", "n-2^63", "nbytes-2^65"],
)
def test_a_manifest_past_the_limits_is_an_ndf_error(tmp_path, d, l, parts, message):  # noqa: E741
    """Counts and widths are bounded, and the parts' rows summed in Python ints (4 parts
    of 2**62 rows opened as n = 0 before, 3 as a negative n)."""
    (tmp_path / "manifest.json").write_text(
        json.dumps({**MANIFEST, "d": d, "l": l, "parts": parts})
    )
    with pytest.raises(NdfError, match=message) as info:
        open_ndf_dataset(tmp_path)
    assert os.fspath(tmp_path / "manifest.json") in str(info.value)
    if parts and d == 0:
        with pytest.raises(NdfError, match=message):
            write_manifest(tmp_path / "out", parts, d, l)


def test_writers_refuse_data_no_reader_would_open(tmp_path):
    """More than 2**31 - 1 values a row: refused before anything is written (an .ndf of
    no rows and 2**31 columns was written before, and then opened)."""
    wide = np.empty((0, MAX_WIDTH + 1))
    with pytest.raises(NdfError, match="2\\*\\*31 - 1"):
        save_ndf(tmp_path / "w.ndf", wide)
    with pytest.raises(NdfError, match="2\\*\\*31 - 1"):
        NdfWriter(tmp_path / "w.ndf", MAX_WIDTH, 1)
    with pytest.raises(NdfError, match="2\\*\\*63 - 1"):
        NdfWriter(tmp_path / "w.ndf", 0, 0, n=MAX_ROWS + 1)
    with pytest.raises(NdfError, match="2\\*\\*31 - 1"):
        save_ndf_dataset(tmp_path / "ds", [wide])
    with pytest.raises(NdfError, match="2\\*\\*31 - 1"):
        NdfDatasetWriter(tmp_path / "ds2", MAX_WIDTH, 1, 10)
    assert sorted(os.listdir(tmp_path)) == []


# -- names: one check for every writer and reader -----------------------------------------

BAD_NAMES = [
    (["a", "a"], ["t"], "used more than once"),
    (["a", ""], ["t"], "non-empty text"),
    (["a", "b\0c"], ["t"], "without NUL"),
    (["a", "b"], ["a"], "used more than once"),
    (["y0", "b"], None, "used more than once"),  # a feature named like the default label
    (["a", "\ud800"], ["t"], "non-empty text"),  # a lone surrogate: no file can hold it
]
BAD_IDS = ["twice", "empty", "nul", "feature-is-label", "like-default-label", "surrogate"]


@pytest.mark.parametrize("features, labels, message", BAD_NAMES, ids=BAD_IDS)
def test_every_writer_refuses_bad_names_before_writing(tmp_path, features, labels, message):
    """save_ndf refused these; save_ndf_dataset, NdfDatasetWriter and write_manifest
    accepted them (and a dataset reader then too)."""
    data = (np.zeros((3, 2)), np.zeros((3, 1)))
    writers = [
        lambda: save_ndf(tmp_path / "a.ndf", data, features=features, labels=labels),
        lambda: save_ndf_dataset(tmp_path / "ds", [data], features=features, labels=labels),
        lambda: NdfDatasetWriter(tmp_path / "ds", 2, 1, 5, features=features, labels=labels),
        lambda: write_manifest(tmp_path, [], 2, 1, features=features, labels=labels),
    ]
    for write in writers:
        with pytest.raises(ValueError, match=message):
            write()
        assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("features, labels, message", BAD_NAMES, ids=BAD_IDS)
def test_every_reader_refuses_bad_names(tmp_path, features, labels, message):
    """A manifest or a names sidecar holding names save_ndf would refuse: an NdfError
    naming it (before, the dataset opened and `convert DS out.ndf` failed later)."""
    save_ndf(tmp_path / "part-00000.ndf", (np.zeros((3, 2)), np.zeros((3, 1))))
    doc = {**MANIFEST, "parts": [_part()], "features": features}
    if labels is not None:
        doc["labels"] = labels
    (tmp_path / "manifest.json").write_text(json.dumps(doc))
    with pytest.raises(NdfError, match=message) as info:
        open_ndf_dataset(tmp_path)
    assert "manifest.json" in str(info.value)
    side = {**SIDECAR, "features": features, "labels": labels}
    (tmp_path / "part-00000.ndf.json").write_text(json.dumps(side))
    with pytest.raises(NdfError, match=message) as info:
        read_sidecar(tmp_path / "part-00000.ndf", 3, 2, 1)
    assert "part-00000.ndf.json" in str(info.value)


# -- malformed JSON: an NdfError naming the file, whatever the bytes -------------------------


def _manifest_text(**change) -> str:
    return json.dumps({**MANIFEST, "parts": [_part()], **change})


MALFORMED = {
    "features-5": (_manifest_text(features=5), "features must be a list of column names"),
    "d-2^70": (_manifest_text(d=2**70), "not valid JSON \\(an integer of 22 digits"),
    "deep": ('{"format": ' + "[" * 100_000, "nested too deep"),
    "5000-digits": (_manifest_text()[:-1] + ', "x": ' + "9" * 5000 + "}", "5000 digits"),
    "version-true": (_manifest_text(version=True), "version True"),
    "version-1.0": (_manifest_text(version=1.0), "version 1.0"),
    "d-true": (_manifest_text(d=True), "'d' must be an integer"),
    "d-float": (_manifest_text(d=2.0), "'d' must be an integer"),
    "n-float": (_manifest_text(n=3.0), "'n' must be an integer"),
    "nan": (_manifest_text().replace('"d": 2', '"d": NaN'), "NaN is not JSON"),
    "key-twice": (_manifest_text()[:-1] + ', "d": 2}', "given more than once"),
    "list": ("[1, 2]", "expected a JSON object, found list"),
    "part-name-nul": (_manifest_text(parts=[_part(name="a\0b")]), "a part cannot have"),
}


@pytest.mark.parametrize("case", list(MALFORMED))
def test_a_malformed_manifest_is_an_ndf_error_naming_it(tmp_path, case):
    text, message = MALFORMED[case]
    (tmp_path / "manifest.json").write_text(text)
    with pytest.raises(NdfError, match=message) as info:
        open_ndf_dataset(tmp_path)
    assert os.fspath(tmp_path / "manifest.json") in str(info.value)


SIDECARS = {
    "d-2^70": ({**SIDECAR, "d": 2**70}, "an integer of 22 digits"),
    "d-true": ({**SIDECAR, "l": True}, "'l' must be an integer"),
    "n-float": ({**SIDECAR, "n": 3.0}, "'n' must be an integer"),
    "version-true": ({**SIDECAR, "version": True}, "version True"),
    "deep": ('{"format": ' + "[" * 100_000, "nested too deep"),
    "5000-digits": ('{"n": ' + "9" * 5000 + "}", "5000 digits"),
    "format-list": ({**SIDECAR, "format": [1]}, "found format \\[1\\]"),
}


@pytest.mark.parametrize("case", list(SIDECARS))
def test_a_malformed_sidecar_is_an_ndf_error_naming_it(tmp_path, case):
    doc, message = SIDECARS[case]
    save_ndf(tmp_path / "a.ndf", (np.zeros((3, 2)), np.zeros((3, 1))))
    (tmp_path / "a.ndf.json").write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with open_ndf(tmp_path / "a.ndf") as f:
        with pytest.raises(NdfError, match=message) as info:
            _ = f.features
    assert os.fspath(tmp_path / "a.ndf.json") in str(info.value)


# -- FIFOs: refused at once ----------------------------------------------------------------


def test_fifos_are_refused_without_blocking(tmp_path):
    """open_ndf of a FIFO, a dataset whose part or manifest is one, a sidecar that is one:
    an NdfError naming it ("not a regular file") at once; before, each blocked forever."""
    not_regular = "not a regular file: expected .* found a FIFO"
    with fifo(tmp_path / "pipe.ndf") as p, pytest.raises(NdfError, match=not_regular) as e:
        open_ndf(p)
    assert os.fspath(tmp_path / "pipe.ndf") in str(e.value)
    ds = tmp_path / "ds"
    save_ndf_dataset(ds, [np.zeros((3, 2)), np.zeros((2, 2))])
    part = part_file(ds, 1)
    os.unlink(part)
    with fifo(part):
        d = open_ndf_dataset(ds)
        assert d.read_rows([0])[0].shape == (1, 2)
        with pytest.raises(NdfError, match=re.escape(part) + ": " + not_regular):
            d.read_rows([4])
    os.unlink(ds / "manifest.json")
    with fifo(ds / "manifest.json"), pytest.raises(NdfError, match="manifest.json: " + not_regular):
        open_ndf_dataset(ds)
    save_ndf(tmp_path / "a.ndf", np.zeros((3, 2)))
    with fifo(tmp_path / "a.ndf.json"), open_ndf(tmp_path / "a.ndf") as f:
        with pytest.raises(NdfError, match="a.ndf.json: " + not_regular):
            _ = f.features
        save_ndf(tmp_path / "a.ndf", np.zeros((3, 2)))  # a rewrite leaves the FIFO alone
    assert stat.S_ISFIFO(os.stat(tmp_path / "a.ndf.json").st_mode)
