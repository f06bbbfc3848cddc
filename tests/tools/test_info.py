"""``exactbatch info``'s report as printed (exactbatch.tools.info.render), line by line,
for each format: an .ndf, a sharded dataset (valid, parts failed, the manifest failed),
Parquet, .npy, and the --stats table."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch.tools.info import render

STATS = [
    {"name": "x0", "count": 10, "nan": 0, "mean": 1.5, "sd": 0.25, "min": -2.0, "max": 1234567.0},
    {"name": "a_long_name", "count": 10, "nan": 1234, "mean": None, "sd": None, "min": None,
     "max": None},
]  # fmt: skip
STATS_LINES = [
    "  statistics (sd with divisor n; NaN left out):",
    "    column               mean            sd           min           max  nan",
    "    x0                    1.5          0.25            -2   1.23457e+06  0",
    "    a_long_name             -             -             -             -  1,234",
]


def test_an_ndf():
    report = {
        "path": "d/a.ndf",
        "format": "ndf",
        "size_bytes": 2076,
        "n": 1000,
        "d": 2,
        "l": 1,
        "expected_bytes": 24028,
        "features": ["x0", "x1"],
        "features_more": 1500,
        "labels": [],
        "valid": False,
        "error": "file is truncated",
        "stats": STATS,
    }
    assert render(report).splitlines() == [
        "d/a.ndf: .ndf file",
        "  n             1,000",
        "  d             2",
        "  l             1",
        "  size          2,076 bytes (2.0 KiB)",
        "  expected size 24,028 bytes (28 + 8*n*(d+l))",
        "  features      x0, x1, ... (1,500 more)",
        "  labels        -",
        "  valid         NO: file is truncated",
        *STATS_LINES,
    ]


def test_an_ndf_whose_header_could_not_be_read():
    report = {"path": "b.ndf", "format": "ndf", "size_bytes": 3, "valid": True, "stats": []}
    assert render(report).splitlines() == [
        "b.ndf: .ndf file",
        "  size          3 bytes (3 B)",
        "  valid         yes",
        "  statistics    none (no rows, or no numeric columns)",
    ]


def test_a_dataset():
    report = {
        "path": "ds",
        "format": "dataset",
        "n": 12000,
        "d": 3,
        "l": 1,
        "parts": 4,
        "size_bytes": 4 << 20,
        "part_rows": {"min": 1000, "median": 3000, "max": 5000},
        "features": ["a", "b", "c"],
        "labels": ["y"],
        "valid": True,
        "stats": STATS,
    }
    assert render(report).splitlines() == [
        "ds: sharded .ndf dataset",
        "  n             12,000",
        "  d             3",
        "  l             1",
        "  parts         4",
        "  part rows     min 1,000, median 3,000, max 5,000",
        "  size          4,194,304 bytes (4.0 MiB) in parts",
        "  features      a, b, c",
        "  labels        y",
        "  valid         yes: every part matches the manifest",
        *STATS_LINES,
    ]


def test_a_dataset_with_bad_parts():
    report = {
        "path": "ds",
        "format": "dataset",
        "n": 5,
        "d": 1,
        "l": 0,
        "parts": 3,
        "size_bytes": 40,
        "features": ["a"],
        "labels": [],
        "valid": False,
        "bad_parts": 2,
        "error": "2 parts failed; first: part 0 is short",
        "errors": ["part 0 is short", "part 2 is missing"],
    }
    assert render(report).splitlines() == [
        "ds: sharded .ndf dataset",
        "  n             5",
        "  d             1",
        "  l             0",
        "  parts         3",
        "  size          40 bytes (40 B) in parts",
        "  features      a",
        "  labels        ",
        "  valid         NO: 2 of 3 parts failed",
        "    part 0 is short",
        "    part 2 is missing",
    ]


def test_a_dataset_whose_manifest_failed():
    report = {"path": "ds", "format": "dataset", "valid": False, "error": "no manifest.json"}
    assert render(report).splitlines() == [
        "ds: sharded .ndf dataset",
        "  valid         NO: the manifest failed",
        "    no manifest.json",
    ]


def test_parquet():
    report = {
        "path": "pq",
        "format": "parquet",
        "rows": 1234567,
        "files": 2,
        "row_groups": 3,
        "size_bytes": 5 << 30,
        "columns": [
            {"name": "a", "type": "double"},
            {"name": "year", "type": "int32", "partition_key": True},
        ],
        "files_with_another_schema": ["pq/b.parquet", "pq/c.parquet"],
        "row_group_rows": {"min": 1, "median": 2000, "max": 30000},
        "note": "a note",
        "stats": STATS,
    }
    assert render(report).splitlines() == [
        "pq: parquet",
        "  rows            1,234,567",
        "  files           2",
        "  row groups      3",
        "  size            5,368,709,120 bytes (5.0 GiB)",
        "  files with another schema pq/b.parquet, pq/c.parquet",  # a space kept
        "  row group rows  min 1, median 2,000, max 30,000",
        "  note            a note",
        "  columns (2):",
        "    a     double",
        "    year  int32  (partition key)",
        *STATS_LINES,
    ]


def test_parquet_with_one_schema_and_npy():
    report = {
        "path": "one.parquet",
        "format": "parquet",
        "rows": 0,
        "files_with_another_schema": [],
        "columns": [],
    }
    assert render(report).splitlines() == [
        "one.parquet: parquet",
        "  rows            0",
        "  columns (0):",
    ]
    report = {
        "path": "a.npy",
        "format": "npy",
        "shape": [3, 2],
        "dtype": "float32",
        "fortran_order": False,
        "size_bytes": 152,
    }
    assert render(report).splitlines() == [
        "a.npy: npy",
        "  shape           [3, 2]",
        "  dtype           float32",
        "  fortran order   False",  # a bool as it is, not 0
        "  size            152 bytes (152 B)",
    ]


def test_the_stats_table_is_as_wide_as_the_longest_name():
    from exactbatch.tools.info import _stats_lines

    rows = [{"name": "x", "count": 1, "nan": 0, "mean": np.float64(0.5), "sd": 0.0, "min": 0.5,
             "max": 0.5}]  # fmt: skip
    assert _stats_lines({"stats": rows})[1:] == [
        "    column          mean            sd           min           max  nan",
        "    x                0.5             0           0.5           0.5  0",
    ]
    assert _stats_lines({}) == []


def test_parquet_stats_of_features_and_recorded_labels_with_a_bar(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from exactbatch.sources.parquet import LABELS_METADATA_KEY
    from exactbatch.tools.info import _parquet_stats

    t = pa.table({"y": [0.0, 2.0, 4.0], "s": ["a", "b", "c"], "x": [1.0, 2.0, 3.0]})
    pq.write_table(t.replace_schema_metadata({LABELS_METADATA_KEY: b"y"}), tmp_path / "a.parquet")
    rows = _parquet_stats(str(tmp_path / "a.parquet"), "parquet", True)
    assert [(r["name"], r["count"], r["mean"]) for r in rows] == [("x", 3, 2.0), ("y", 3, 2.0)]
    err = capsys.readouterr().err  # the bar, by file, in rows
    assert "stats a.parquet: 100%" in err and "rows/s" in err
    assert _parquet_stats(str(tmp_path / "a.parquet"), "parquet", False) == rows
    assert capsys.readouterr().err == ""  # no bar


def test_the_report_of_a_npy(tmp_path):
    from exactbatch.tools.info import _npy

    for name, arr, fortran in [
        ("c.npy", np.zeros((3, 2), np.float32), False),
        ("f.npy", np.asfortranarray(np.zeros((3, 2))), True),
        ("one.npy", np.zeros((3, 1)), False),  # both C and Fortran order: stored as C
    ]:
        np.save(tmp_path / name, arr)
        path = str(tmp_path / name)
        assert _npy(path) == {
            "path": path,
            "format": "npy",
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "fortran_order": fortran,
            "size_bytes": (tmp_path / name).stat().st_size,
        }


def test_a_npy_of_objects_is_refused(tmp_path):
    from exactbatch.tools.common import CliError
    from exactbatch.tools.info import _npy

    path = str(tmp_path / "o.npy")
    np.save(path, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    with pytest.raises(CliError) as e:  # never unpickled: loading it could run code
        _npy(path)
    assert str(e.value) == (
        f"{path}: cannot read as .npy (Array can't be memory-mapped: Python objects in dtype.)"
    )


def test_the_report_of_a_parquet_folder(tmp_path, monkeypatch):
    """`_parquet` of a Hive folder of two files, the second of another schema: its rows,
    files, row groups (min, median, max of their rows), bytes, columns with the partition
    key last and marked, the file of another schema; a damaged file and a missing pyarrow
    refused by name."""
    import sys

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from exactbatch.tools.common import CliError
    from exactbatch.tools.info import _parquet

    folder = tmp_path / "pq"
    one, two = folder / "year=2023" / "a.parquet", folder / "year=2024" / "b.parquet"
    one.parent.mkdir(parents=True), two.parent.mkdir(parents=True)
    pq.write_table(pa.table({"x": np.arange(7.0)}), one, row_group_size=4)
    pq.write_table(pa.table({"x": np.arange(2, dtype=np.int32)}), two)
    report = _parquet(str(folder))
    assert report == {
        "path": str(folder),
        "format": "parquet",
        "rows": 9,
        "files": 2,
        "row_groups": 3,
        "size_bytes": one.stat().st_size + two.stat().st_size,
        "columns": [
            {"name": "x", "type": "double"},
            {"name": "year", "type": "int32", "partition_key": True},
        ],
        "files_with_another_schema": [str(two)],
        "row_group_rows": {"min": 2, "median": 3, "max": 4},  # groups of 4, 3 and 2
    }
    bad = tmp_path / "bad.parquet"
    bad.write_bytes(b"PAR1 not a footer")
    with pytest.raises(CliError) as e:
        _parquet(str(bad))
    assert str(e.value).startswith(f"{bad}: not a readable Parquet file (")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if not installed
    with pytest.raises(CliError) as e:
        _parquet(str(folder))
    assert str(e.value) == f"{folder}: reading Parquet needs pyarrow: pip install pyarrow"


def test_the_report_of_a_csv(tmp_path):
    """`_csv`'s report in full: the columns and the types pyarrow infers, the size, the
    note that rows are not counted."""
    pytest.importorskip("pyarrow")
    from exactbatch.tools.info import _csv

    path = tmp_path / "a.csv"
    path.write_text("p,q,s\n1,2.5,a\n3,4,b\n")
    assert _csv(str(path)) == {
        "path": str(path),
        "format": "csv",
        "size_bytes": path.stat().st_size,
        "columns": [
            {"name": "p", "type": "int64"},
            {"name": "q", "type": "double"},
            {"name": "s", "type": "string"},
        ],
        "note": "types inferred from the first block; rows are not counted",
    }


@pytest.mark.parametrize("size", [999, 1000, 1001, 2500])
def test_default_names_past_the_first_thousand_are_counted_not_listed(size):
    """`_list_names`: default names (x0.., y0..) listed up to 1,000 a side, the rest
    counted in ``features_more``/``labels_more`` (no such key at 1,000 or fewer); stored
    names listed all, however many."""
    from exactbatch.ndf.names import DefaultNames
    from exactbatch.tools.info import _list_names

    out: dict = {}
    _list_names(out, DefaultNames("x", size), DefaultNames("y", 2))
    listed = min(size, 1000)
    want = {"features": [f"x{j}" for j in range(listed)], "labels": ["y0", "y1"]}
    if size > 1000:
        want["features_more"] = size - 1000
    assert out == want and type(out["features"]) is list and type(out["labels"]) is list
    out = {}
    stored = [f"c{j}" for j in range(size)]
    _list_names(out, (), stored)
    assert out == {"features": [], "labels": stored}


def test_info_by_default_has_a_bar_and_no_statistics_and_names_a_bad_flag(tmp_path, capsys):
    """`info(path)`: no statistics and a progress bar unless asked otherwise; a flag that is
    no bool refused naming it."""
    from exactbatch import save_ndf_dataset
    from exactbatch.tools.info import info

    save_ndf_dataset(tmp_path / "ds", [(np.zeros((2, 1)), np.zeros((2, 0)))])
    report = info(tmp_path / "ds")
    assert "stats" not in report and report["valid"] is True
    assert "check ds: 100%" in capsys.readouterr().err
    assert "stats" not in info(tmp_path / "ds", bar=False)
    assert capsys.readouterr().err == ""
    for name in ("stats", "bar"):
        with pytest.raises(TypeError) as e:
            info(tmp_path / "ds", **{name: "yes"})
        assert str(e.value) == f"{name} must be a bool; got 'yes'"


@pytest.mark.parametrize(
    ("slab_bytes", "d", "l", "cuts", "reads"),
    [
        (96, 2, 1, [0, 10], [(0, 4), (4, 4), (8, 2)]),  # 4 rows of 3 columns a slab
        (96, 1, 0, [0, 30], [(0, 12), (12, 12), (24, 6)]),  # 12 rows of 1 column
        (8, 1, 0, [0, 3], [(0, 1), (1, 1), (2, 1)]),  # a slab of one row
        (16, 3, 0, [0, 2], [(0, 1), (1, 1)]),  # a row wider than a slab: one row a read
        (96, 2, 1, [0, 5, 5, 12], [(0, 4), (4, 1), (5, 3), (8, 4)]),  # parts of 5, 0, 7
        (96, 2, 1, [0, 5, 12], [(0, 4), (4, 1), (5, 3), (8, 4)]),  # parts of 5 and 7
    ],
)
def test_the_statistics_read_slab_by_slab_never_across_two_parts(
    tmp_path,
    monkeypatch,
    slab_bytes,
    d,
    l,  # noqa: E741
    cuts,
    reads,
):
    """`_ndf_stats` reads ``SLAB_BYTES // (8 * (d + l))`` rows at a time (at least one),
    each slab within one part of a dataset, and sums the same statistics as NumPy."""
    from exactbatch import NdfFile, save_ndf, save_ndf_dataset
    from exactbatch.ndf import NdfDataset
    from exactbatch.tools import info as info_module

    rng = np.random.default_rng(5)
    n = cuts[-1]
    x, y = rng.standard_normal((n, d)), rng.standard_normal((n, l))
    if len(cuts) == 2:
        path, fmt, cls = tmp_path / "a.ndf", "ndf", NdfFile
        save_ndf(path, (x, y))
    else:
        path, fmt, cls = tmp_path / "ds", "dataset", NdfDataset
        save_ndf_dataset(path, [(x[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)])
    seen = []
    read = cls.read_block_into

    def spy(self, start, out):
        seen.append((start, len(out)))
        read(self, start, out)

    monkeypatch.setattr(cls, "read_block_into", spy)
    monkeypatch.setattr(info_module, "SLAB_BYTES", slab_bytes)
    rows = info_module._ndf_stats(str(path), fmt, False)
    assert seen == reads
    both = np.concatenate((x, y), axis=1)
    np.testing.assert_allclose([r["mean"] for r in rows], both.mean(0), rtol=1e-12)
    assert [r["max"] for r in rows] == list(both.max(0))


def test_the_statistics_bar_counts_the_rows_read(tmp_path, capsys, monkeypatch):
    """`_ndf_stats`' bar: by file, in rows, to the total (slabs of 4 rows: 4, 4, 2); none
    with ``bar=False``."""
    from exactbatch import save_ndf
    from exactbatch.tools import info as info_module
    from exactbatch.tools.info import _ndf_stats

    monkeypatch.setattr(info_module, "SLAB_BYTES", 64)

    save_ndf(tmp_path / "a.ndf", (np.arange(10.0)[:, None], np.zeros((10, 1))))
    rows = _ndf_stats(str(tmp_path / "a.ndf"), "ndf", True)
    err = capsys.readouterr().err
    assert "stats a.ndf: 100%" in err and "| 10.0/10.0 [" in err and "rows/s]" in err
    assert _ndf_stats(str(tmp_path / "a.ndf"), "ndf", False) == rows
    assert capsys.readouterr().err == ""


def test_statistics_are_asked_of_valid_data_only_and_have_a_bar_by_default(tmp_path, capsys):
    """`info(stats=True)` of a malformed .ndf: the report says why, with no statistics
    (reading its rows would fail); of Parquet: the statistics with their bar."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from exactbatch import save_ndf
    from exactbatch.tools.info import info

    save_ndf(tmp_path / "a.ndf", np.zeros((4, 2)))
    raw = (tmp_path / "a.ndf").read_bytes()
    (tmp_path / "a.ndf").write_bytes(raw[:-8])  # a row short
    report = info(tmp_path / "a.ndf", stats=True)
    assert report["valid"] is False and "stats" not in report
    save_ndf(tmp_path / "b.ndf", np.ones((4, 2)))
    capsys.readouterr()
    assert [r["mean"] for r in info(tmp_path / "b.ndf", stats=True)["stats"]] == [1.0, 1.0]
    assert "stats b.ndf: 100%" in capsys.readouterr().err
    pq.write_table(pa.table({"x": [1.0, 3.0]}), tmp_path / "a.parquet")
    capsys.readouterr()
    report = info(tmp_path / "a.parquet", stats=True)
    assert [(r["name"], r["mean"]) for r in report["stats"]] == [("x", 2.0)]
    assert "stats a.parquet: 100%" in capsys.readouterr().err


def test_the_median_row_group_is_the_upper_middle_one(tmp_path):
    """`_parquet`'s row groups' median: of 4 groups (1, 2, 3, 4 rows), the third smallest."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from exactbatch.tools.info import _parquet

    path = tmp_path / "a.parquet"
    with pq.ParquetWriter(path, pa.schema([("x", pa.float64())])) as w:
        for k in (4, 1, 3, 2):
            w.write_table(pa.table({"x": np.zeros(k)}))
    report = _parquet(str(path))
    assert (report["rows"], report["row_groups"]) == (10, 4)
    assert report["row_group_rows"] == {"min": 1, "median": 3, "max": 4}


def _cut_a_row(path):
    raw = path.read_bytes()
    path.write_bytes(raw[:-8])


def test_the_report_of_a_dataset(tmp_path, capsys):
    """`_dataset` in full: n, d, l, the parts, their bytes and rows (min, the upper middle,
    max), the names, each part checked under a bar in parts; a bad part's error as it is,
    several counted and the first 20 listed."""
    from exactbatch import save_ndf_dataset
    from exactbatch.tools.info import _dataset

    ds = tmp_path / "ds"
    parts = [(np.zeros((k, 2)), np.ones((k, 1))) for k in (3, 1, 4, 2)]
    save_ndf_dataset(ds, parts, features=["a", "b"], labels=["y"])
    files = sorted(ds.glob("part-*.ndf"))
    report = _dataset(str(ds), True)
    assert report == {
        "path": str(ds),
        "format": "dataset",
        "n": 10,
        "d": 2,
        "l": 1,
        "parts": 4,
        "size_bytes": sum(f.stat().st_size for f in files),
        "part_rows": {"min": 1, "median": 3, "max": 4},
        "features": ["a", "b"],
        "labels": ["y"],
        "valid": True,
    }
    err = capsys.readouterr().err
    assert "check ds: 100%" in err and "| 4/4 [" in err and "parts/s]" in err
    _cut_a_row(files[2])
    report = _dataset(str(ds), False)
    assert capsys.readouterr().err == ""
    assert (report["valid"], report["bad_parts"]) == (False, 1)
    assert report["error"].startswith(f"part 2 ({files[2].name}) of the dataset {ds}: ")
    assert report["errors"] == [report["error"]]
    many = tmp_path / "many"
    save_ndf_dataset(many, [(np.zeros((1, 1)), np.zeros((1, 0)))] * 22)
    for f in sorted(many.glob("part-*.ndf")):
        _cut_a_row(f)
    report = _dataset(str(many), False)
    assert (report["valid"], report["bad_parts"], len(report["errors"])) == (False, 22, 20)
    assert [e.split(" (")[0] for e in report["errors"]] == [f"part {k}" for k in range(20)]
    assert report["error"] == f"22 parts failed; first: {report['errors'][0]}"


def test_the_rows_of_row_groups_are_shown_after_an_empty_list_of_other_schemas():
    """`render` skips an empty ``files_with_another_schema`` and goes on with the keys after
    it (`_parquet` puts ``row_group_rows`` there)."""
    report = {
        "path": "a.parquet",
        "format": "parquet",
        "rows": 3,
        "files_with_another_schema": [],
        "row_group_rows": {"min": 3, "median": 3, "max": 3},
    }
    assert render(report).splitlines() == [
        "a.parquet: parquet",
        "  rows            3",
        "  row group rows  min 3, median 3, max 3",
    ]
