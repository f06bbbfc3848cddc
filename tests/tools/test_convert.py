"""exactbatch convert: Parquet, CSV and .npy to .ndf, .ndf to Parquet; streamed and atomic."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from helpers import run_cli as run

from exactbatch import open_ndf, save_ndf
from exactbatch.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def read_ndf(path):
    with open_ndf(path) as f:
        return f.read_rows(np.arange(f.n))


def leftovers(folder, keep):
    """Files in ``folder`` other than ``keep`` (temporary files would show up here)."""
    return sorted(set(os.listdir(folder)) - set(keep))


def test_parquet_file_to_ndf_in_a_subprocess(tmp_path):
    """Columns by name, in the order asked; values as float64; a progress bar on stderr."""
    t = pa.table(
        {
            "t": np.arange(1000.0),
            "u": np.arange(1000, dtype=np.int64) * 2,
            "flag": np.arange(1000) % 3 == 0,
            "note": ["x"] * 1000,
        }
    )
    pq.write_table(t, tmp_path / "d.parquet", row_group_size=128)
    p = run(
        "convert",
        tmp_path / "d.parquet",
        tmp_path / "d.ndf",
        "--features",
        "u,t",
        "--labels",
        "flag",
        check=0,
    )
    assert "1,000 rows" in p.stdout
    assert "convert d.parquet" in p.stderr and "100%" in p.stderr  # the tqdm bar
    x, y = read_ndf(tmp_path / "d.ndf")
    assert np.array_equal(x, np.column_stack([np.arange(1000) * 2.0, np.arange(1000.0)]))
    assert np.array_equal(y[:, 0], (np.arange(1000) % 3 == 0).astype(float))


def test_parquet_folder_to_ndf_keeps_file_then_row_group_order(tmp_path, capsys):
    folder = tmp_path / "parts"
    folder.mkdir()
    for k in range(3):
        ids = np.arange(k * 700, (k + 1) * 700, dtype=np.float64)
        pq.write_table(
            pa.table({"id": ids, "y": -ids}), folder / f"p{k}.parquet", row_group_size=300
        )
    assert (
        main(["convert", str(folder), str(tmp_path / "all.ndf"), "--labels", "y", "--json", "-q"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert (out["rows"], out["features"], out["labels"]) == (2100, ["id"], ["y"])
    x, y = read_ndf(tmp_path / "all.ndf")
    assert np.array_equal(x[:, 0], np.arange(2100.0)) and np.array_equal(y[:, 0], -x[:, 0])


def test_parquet_nulls_become_nan_and_non_numeric_is_refused(tmp_path, capsys):
    t = pa.table(
        {
            "a": pa.array([1.0, None, 3.0]),
            "b": pa.array([1, 2, None]),
            "s": pa.array(["p", "q", "r"]),
        }
    )
    pq.write_table(t, tmp_path / "n.parquet")
    assert main(["convert", str(tmp_path / "n.parquet"), str(tmp_path / "n.ndf"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "s (string)" in err and "--features" in err
    assert not (tmp_path / "n.ndf").exists()
    assert (
        main(
            [
                "convert",
                str(tmp_path / "n.parquet"),
                str(tmp_path / "n.ndf"),
                "-q",
                "--features",
                "a,b",
            ]
        )
        == 0
    )
    x, _ = read_ndf(tmp_path / "n.ndf")
    assert np.array_equal(x, [[1, 1], [np.nan, 2], [3, np.nan]], equal_nan=True)


def test_csv_to_ndf_with_header_and_without(tmp_path, capsys):
    """CSV columns by name (or position with --no-header); empty cells become NaN."""
    (tmp_path / "a.csv").write_text("when,value,label\n1,0.5,1\n2,,0\n3,1e3,1\n")
    assert (
        main(
            ["convert", str(tmp_path / "a.csv"), str(tmp_path / "a.ndf"), "--labels", "label", "-q"]
        )
        == 0
    )
    x, y = read_ndf(tmp_path / "a.ndf")
    assert np.array_equal(x, [[1, 0.5], [2, np.nan], [3, 1000]], equal_nan=True)
    assert np.array_equal(y[:, 0], [1, 0, 1])
    (tmp_path / "b.csv").write_text("1;2;3\n4;5;6\n")
    assert (
        main(
            [
                "convert",
                str(tmp_path / "b.csv"),
                str(tmp_path / "b.ndf"),
                "--no-header",
                "--delimiter",
                ";",
                "--features",
                "2,0",
                "--labels",
                "-2",
                "-q",
            ]
        )
        == 0
    )
    x, y = read_ndf(tmp_path / "b.ndf")
    assert np.array_equal(x, [[3, 1], [6, 4]]) and np.array_equal(y[:, 0], [2, 5])
    capsys.readouterr()


def test_large_csv_is_streamed_in_blocks(tmp_path, capsys):
    """A CSV of several pyarrow blocks converts whole, rows in order, n counted at the end."""
    n = 60_000  # about 1.5 MB: more than one 1 MiB block
    ids = np.arange(n)
    with open(tmp_path / "big.csv", "w") as f:
        f.write("id,twice,label\n")
        f.writelines(f"{i},{2 * i},{i % 2}\n" for i in ids)
    assert (
        main(
            [
                "convert",
                str(tmp_path / "big.csv"),
                str(tmp_path / "big.ndf"),
                "--labels",
                "label",
                "-q",
            ]
        )
        == 0
    )
    with open_ndf(tmp_path / "big.ndf") as f:
        assert (f.n, f.d, f.l) == (n, 2, 1)
    x, y = read_ndf(tmp_path / "big.ndf")
    assert np.array_equal(x[:, 0], ids) and np.array_equal(x[:, 1], 2 * ids)
    assert np.array_equal(y[:, 0], ids % 2)


def test_npy_to_ndf_labels_by_position(tmp_path, capsys):
    a = np.arange(40, dtype=np.int32).reshape(10, 4)
    np.save(tmp_path / "a.npy", a)
    assert (
        main(["convert", str(tmp_path / "a.npy"), str(tmp_path / "a.ndf"), "--labels", "-1", "-q"])
        == 0
    )
    x, y = read_ndf(tmp_path / "a.ndf")
    assert np.array_equal(x, a[:, :3]) and np.array_equal(y[:, 0], a[:, 3])
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    assert (
        main(
            ["convert", str(tmp_path / "f.npy"), str(tmp_path / "f.ndf"), "--features", "3,1", "-q"]
        )
        == 0
    )
    x, y = read_ndf(tmp_path / "f.ndf")
    assert np.array_equal(x, a[:, [3, 1]]) and y.shape == (10, 0)
    np.save(tmp_path / "s.npy", np.array([("a", 1)], dtype=[("k", "U1"), ("v", "i4")]))
    assert main(["convert", str(tmp_path / "s.npy"), str(tmp_path / "s.ndf"), "-q"]) == 2
    assert "s.npy" in capsys.readouterr().err


def test_ndf_to_parquet_and_back_keeps_rows_and_the_label_split(tmp_path, capsys):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((5000, 3)), rng.standard_normal((5000, 2))
    save_ndf(tmp_path / "a.ndf", (x, y))
    assert (
        main(
            [
                "convert",
                str(tmp_path / "a.ndf"),
                str(tmp_path / "a.parquet"),
                "--row-group-rows",
                "1000",
                "-q",
            ]
        )
        == 0
    )
    md = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert md.num_rows == 5000 and md.num_row_groups == 5
    t = pq.read_table(tmp_path / "a.parquet")
    assert t.column_names == ["x0", "x1", "x2", "y0", "y1"]
    assert np.array_equal(t.column("x2").to_numpy(), x[:, 2])
    assert main(["convert", str(tmp_path / "a.parquet"), str(tmp_path / "b.ndf"), "-q"]) == 0
    x2, y2 = read_ndf(tmp_path / "b.ndf")
    assert np.array_equal(x2, x) and np.array_equal(y2, y)
    assert (
        main(
            [
                "convert",
                str(tmp_path / "a.ndf"),
                str(tmp_path / "n.parquet"),
                "-q",
                "--names",
                "a,b,c,p,q",
            ]
        )
        == 0
    )
    assert pq.read_schema(tmp_path / "n.parquet").names == ["a", "b", "c", "p", "q"]
    assert main(["convert", str(tmp_path / "n.parquet"), str(tmp_path / "n.ndf"), "-q"]) == 0
    assert (open_ndf(tmp_path / "n.ndf").d, open_ndf(tmp_path / "n.ndf").l) == (3, 2)
    assert (
        main(
            [
                "convert",
                str(tmp_path / "a.ndf"),
                str(tmp_path / "m.parquet"),
                "-q",
                "--names",
                "a,b",
            ]
        )
        == 2
    )
    assert "--names needs 5 distinct names" in capsys.readouterr().err


def test_existing_output_needs_force(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.ones((3, 2)))
    (tmp_path / "a.ndf").write_bytes(b"old")
    assert main(["convert", str(tmp_path / "a.npy"), str(tmp_path / "a.ndf"), "-q"]) == 2
    assert "--force" in capsys.readouterr().err
    assert (tmp_path / "a.ndf").read_bytes() == b"old"
    assert main(["convert", str(tmp_path / "a.npy"), str(tmp_path / "a.ndf"), "-q", "--force"]) == 0
    assert open_ndf(tmp_path / "a.ndf").n == 3


def test_convert_by_default_keeps_an_existing_output_and_draws_its_bar(tmp_path, capsys):
    """convert()'s defaults: force=False (an existing output is refused, kept), bar=True."""
    pytest.importorskip("tqdm")
    from exactbatch.tools.common import CliError
    from exactbatch.tools.convert import convert

    np.save(tmp_path / "a.npy", np.ones((3, 2)))
    (tmp_path / "a.ndf").write_bytes(b"old")
    with pytest.raises(CliError, match="--force"):
        convert(tmp_path / "a.npy", tmp_path / "a.ndf")
    assert (tmp_path / "a.ndf").read_bytes() == b"old"
    capsys.readouterr()
    convert(tmp_path / "a.npy", tmp_path / "b.ndf")
    assert "convert a.npy:" in capsys.readouterr().err


def _write_parquet(names, rows=2):
    def write(path):
        arrays = [pa.array(np.arange(rows, dtype=np.float64) + k) for k in range(len(names))]
        pq.write_table(pa.Table.from_arrays(arrays, names=names), path)

    return write


def _write_text(text):
    return lambda path: path.write_text(text)


BAD_INPUTS = {
    # name: (file name, writer, extra arguments, what the one-line error must say)
    "csv-repeated-column": (
        "in.csv",
        _write_text("a,b,a\n1,2,3\n4,5,6\n"),
        [],
        ["['a']", "more than once"],
    ),
    "csv-repeated-label": (
        "in.csv",
        _write_text("x,y,y\n1,2,3\n"),
        ["--labels", "y"],
        ["['y']", "more than once"],
    ),
    "parquet-repeated-column": (
        "in.parquet",
        _write_parquet(["a", "b", "a"]),
        [],
        ["['a']", "more than once"],
    ),
    "csv-empty-header-cell": (
        "in.csv",
        _write_text("a,,c\n1,2,3\n"),
        [],
        ["position(s) [1]", "no name"],
    ),
    "csv-pandas-index": ("in.csv", _write_text(",a,b\n0,1,2\n1,3,4\n"), [], ["[0]", "no name"]),
    "csv-header-all-empty": ("in.csv", _write_text(",\n1,2\n"), [], ["[0, 1]", "no name"]),
    "parquet-unnamed-column": ("in.parquet", _write_parquet(["a", ""]), [], ["[1]", "no name"]),
    "csv-header-only": ("in.csv", _write_text("a,b,c\n"), [], ["no rows"]),
    "parquet-no-rows": ("in.parquet", _write_parquet(["a"], rows=0), [], ["no rows"]),
    "npy-no-rows": ("in.npy", lambda path: np.save(path, np.zeros((0, 3))), [], ["no rows"]),
    "csv-non-numeric-cells": (
        "in.csv",
        _write_text("a,b\n1,x\n2,y\n"),
        [],
        ["b (string)", "non-numeric"],
    ),
    "csv-non-numeric-label": (
        "in.csv",
        _write_text("a,b\n1,2\n2,yes\n"),
        ["--labels", "b"],
        ["b (string)"],
    ),
    "csv-ragged-row": ("in.csv", _write_text("a,b\n1,2\n3\n"), [], ["Expected 2 columns"]),
    "csv-empty-file": ("in.csv", _write_text(""), [], ["Empty CSV"]),
    "csv-no-columns-chosen": (
        "in.csv",
        _write_text("a,b\n1,2\n"),
        ["--features", ","],
        ["no columns"],
    ),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_is_a_one_line_error(tmp_path, capsys, case):
    """Repeated or unnamed columns, no rows, non-numeric cells, ragged rows: one line on
    stderr naming the file and what is wrong, exit status 2, no file written."""
    name, write, extra, says = BAD_INPUTS[case]
    src = tmp_path / name
    write(src)
    assert main(["convert", str(src), str(tmp_path / "out.ndf"), "-q", *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"exactbatch convert: error: {src}: "), err
    assert all(s in err for s in says), err
    assert leftovers(tmp_path, [name]) == []


def test_a_repeated_or_unnamed_column_can_be_left_out(tmp_path, capsys):
    """Only the columns chosen must have a name of their own: the others may repeat."""
    (tmp_path / "a.csv").write_text("a,b,a,\n1,2,3,4\n5,6,7,8\n")
    out = tmp_path / "a.ndf"
    assert main(["convert", str(tmp_path / "a.csv"), str(out), "-q", "--features", "b"]) == 0
    assert np.array_equal(read_ndf(out)[0], [[2], [6]])
    _write_parquet(["a", "b", "a"])(tmp_path / "p.parquet")
    args = ["convert", str(tmp_path / "p.parquet"), str(out), "-q", "--force", "--labels", "b"]
    assert main([*args, "--features", "-1"]) == 2  # position 2 is an "a" too
    assert "more than once" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["info", "convert"])
def test_an_object_npy_is_a_one_line_error(tmp_path, capsys, command):
    src = tmp_path / "obj.npy"
    np.save(src, np.array([[1, "a"]], dtype=object), allow_pickle=True)
    argv = [command, str(src)] + ([str(tmp_path / "o.ndf")] if command == "convert" else [])
    assert main([*argv, "-q"] if command == "convert" else argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"exactbatch {command}: error: {src}: ") and "\n" not in err, err


@pytest.mark.parametrize("delimiter", [";;", "", '"', "\n"])
def test_a_delimiter_must_be_one_character(tmp_path, capsys, delimiter):
    (tmp_path / "a.csv").write_text("a;b\n1;2\n")
    argv = ["convert", str(tmp_path / "a.csv"), str(tmp_path / "a.ndf"), "-q"]
    assert main([*argv, f"--delimiter={delimiter}"]) == 2
    err = capsys.readouterr().err
    assert "--delimiter" in err and "one character" in err and "Traceback" not in err


def test_a_typed_backslash_t_is_a_tab(tmp_path, capsys):
    (tmp_path / "a.tsv").write_text("a\tb\n1\t2\n")
    out = tmp_path / "a.ndf"
    assert main(["convert", str(tmp_path / "a.tsv"), str(out), "-q", "--delimiter", "\\t"]) == 0
    assert np.array_equal(read_ndf(out)[0], [[1, 2]])


def test_arrow_buffers_to_float64_keep_nulls_offsets_and_types():
    """The Arrow -> float64 copy reads the buffers directly: sliced arrays (an offset
    into the buffers), nulls at any bit, integers, booleans and all-null columns."""
    from exactbatch.sources.arrow import fill_float64 as _fill_float64

    cases = [
        pa.array([1.5, None, 3.0, 4.0, None, 6.0, 7.0, 8.0, 9.0, None]).slice(3, 6),
        pa.array(list(range(20)), pa.int32()).slice(5, 9),
        pa.array([True, None, False, True] * 5).slice(7, 11),
        pa.array([None] * 4, pa.null()),
        pa.array([None, 2.0], pa.float64()),
        pa.array([], pa.float64()),
    ]
    for arr in cases:
        out = np.full(len(arr), -1.0)
        _fill_float64(arr, out)
        expect = [np.nan if v is None else float(v) for v in arr.to_pylist()]
        assert np.array_equal(out, expect, equal_nan=True), (arr, out)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_arrow_columns_fill_rows_as_column_by_column(dtype):
    """fill_columns (a blocked copy from the columns' buffers into the rows, cast as
    copied): the same values as each column filled on its own, whatever the column (one
    chunk of float64 read in place, with an offset; nulls; other types; several
    chunks; all null), into every column of a row-major output."""
    from exactbatch.sources import arrow

    n = 11
    cases = [
        pa.array(np.arange(30.0)).slice(4, n),  # float64, no nulls, an offset: a view
        pa.array([1.5, None] * 8).slice(1, n),
        pa.array(list(range(n)), pa.int16()),
        pa.array([True, False, None] * 4).slice(0, n),
        pa.chunked_array([pa.array(np.arange(5.0)), pa.array(np.arange(6.0) + 0.5)]),
        pa.chunked_array([pa.array(np.arange(n) * 2.0)]),
        pa.array([None] * n, pa.null()),
    ]
    want = np.full((n, len(cases)), -1.0)
    for j, col in enumerate(cases):
        arrow.fill_float64(col, want[:, j])
    out = np.full((n, len(cases) + 2), -1.0, dtype=dtype)  # two more columns beside
    arrow.fill_columns(cases, out[:, 1:-1])
    assert np.array_equal(out[:, 1:-1], want.astype(dtype), equal_nan=True)
    assert (out[:, [0, -1]] == -1).all()  # nothing written beside the columns
    arrow.fill_columns([], np.empty((n, 0), dtype=dtype))  # no columns: nothing to do


def test_bad_value_in_a_late_row_leaves_no_output(tmp_path):
    """Atomic: a conversion that fails mid-way (after blocks were written) leaves no file,
    and an existing destination keeps its old bytes."""
    n = 300_000  # about 4 MB: the bad value is several 1 MiB blocks in
    with open(tmp_path / "bad.csv", "w") as f:
        f.write("a,b\n")
        f.writelines(f"{i},{i}\n" for i in range(n - 10))
        f.write("1,oops\n")
        f.writelines(f"{i},{i}\n" for i in range(9))
    p = run("convert", tmp_path / "bad.csv", tmp_path / "out.ndf", "-q")
    assert p.returncode == 2, p.stderr
    assert "bad.csv" in p.stderr and "oops" in p.stderr and "Traceback" not in p.stderr
    assert re.search(r"after [1-9][0-9,]* rows", p.stderr), p.stderr  # failed mid-way
    assert leftovers(tmp_path, ["bad.csv"]) == []
    (tmp_path / "out.ndf").write_bytes(b"precious")
    p = run("convert", tmp_path / "bad.csv", tmp_path / "out.ndf", "-q", "--force")
    assert p.returncode == 2
    assert (tmp_path / "out.ndf").read_bytes() == b"precious"
    assert leftovers(tmp_path, ["bad.csv", "out.ndf"]) == []


_PEAK_SCRIPT = """
import json, sys, tracemalloc
import exactbatch.cli, exactbatch.tools.convert
import pyarrow, pyarrow.csv, pyarrow.parquet  # imported before the baseline

pool = pyarrow.default_memory_pool()
base = pool.max_memory()
tracemalloc.start()
rc = exactbatch.cli.main(["convert", sys.argv[1], sys.argv[2], "-q"])
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"rc": rc, "extra": peak + pool.max_memory() - base}))
"""


@pytest.mark.parametrize("kind", ["npy", "parquet"])
def test_conversion_memory_is_bounded(tmp_path, kind):
    """Streamed: converting 384 MiB of float64 rows holds far less than the data at its
    peak (what NumPy and Python allocate, by tracemalloc, plus pyarrow's memory pool's
    peak: exact, whatever the allocator keeps resident): a .npy a few slabs, Parquet
    pyarrow's read-ahead and one batch."""
    rows, d = 12 << 20, 4  # 384 MiB as float64
    src = tmp_path / f"zeros.{kind}"
    if kind == "npy":
        zeros = np.lib.format.open_memmap(src, mode="w+", dtype=np.float64, shape=(rows, d))
        del zeros  # a sparse file of zeros
        bound = 64 << 20
    else:
        part = pa.table({f"c{j}": np.zeros(1 << 20) for j in range(d)})
        with pq.ParquetWriter(src, part.schema) as w:
            for _ in range(rows >> 20):
                w.write_table(part)  # one row group of 1 Mi rows (32 MiB) each
        bound = rows * d * 8 // 2
    p = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(src), str(tmp_path / "o.ndf")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["rc"] == 0
    assert r["extra"] < bound, f"peak grew by {r['extra'] / 2**20:.0f} MiB"
    assert os.path.getsize(tmp_path / "o.ndf") == 28 + rows * d * 8


@pytest.mark.parametrize("name", ["a.tsv", "a.TAB", "a.tsv.gz"])
def test_tab_separated_files_default_to_tabs(tmp_path, capsys, name):
    """.tsv and .tab (compressed too) are split on tabs without --delimiter, in convert and
    info; a --delimiter given still wins."""
    text = "a\tb,c\n1\t2\n3\t4\n"
    if name.endswith(".gz"):
        import gzip

        (tmp_path / name).write_bytes(gzip.compress(text.encode()))
    else:
        (tmp_path / name).write_text(text)
    src, out = str(tmp_path / name), tmp_path / "a.ndf"
    assert main(["convert", src, str(out), "-q", "--labels", "-1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["labels"] == ["b,c"]
    x, y = read_ndf(out)
    assert np.array_equal(x, [[1], [3]]) and np.array_equal(y, [[2], [4]])
    assert main(["info", src, "--json"]) == 0
    assert [c["name"] for c in json.loads(capsys.readouterr().out)["columns"]] == ["a", "b,c"]
    # a comma given is a comma: "a\tb" and "c" (a header of two names, rows of one field)
    assert main(["convert", src, str(out), "-q", "--force", "--delimiter", ","]) == 2
    assert "Expected 2 columns" in capsys.readouterr().err


def test_a_partitioned_parquet_folder_converts_every_partition(tmp_path, capsys):
    """A Hive-style folder (year=/month= subfolders, no file at its top) is converted
    whole, its files in the order of their paths."""
    folder = tmp_path / "parts"
    first = 0
    for rel in ("year=2024/month=01/p.parquet", "year=2024/month=02/p.parquet", "z.parquet"):
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        ids = np.arange(first, first + 30, dtype=np.float64)
        pq.write_table(pa.table({"id": ids}), folder / rel, row_group_size=7)
        first += 30
    assert main(["convert", str(folder), str(tmp_path / "all.ndf"), "--json", "-q"]) == 0
    assert json.loads(capsys.readouterr().out)["rows"] == 90
    assert np.array_equal(read_ndf(tmp_path / "all.ndf")[0][:, 0], np.arange(90.0))


def test_local_names_with_colons_are_local_files_both_ways(tmp_path, monkeypatch, capsys):
    """Relative names with ':' or '::' (which pyarrow alone would take for URIs) are read
    and written as the local files they are: CSV, .ndf, Parquet, and info on each."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data::v2.csv").write_text("a,b\n1,2\n3,4\n")
    assert main(["convert", "data::v2.csv", "data::v2.ndf", "-q", "--labels", "b"]) == 0
    assert main(["convert", "data::v2.ndf", "pq::v2.parquet", "-q"]) == 0
    assert main(["convert", "pq::v2.parquet", "s3::back.ndf", "-q"]) == 0
    x, y = read_ndf("s3::back.ndf")
    assert np.array_equal(x, [[1], [3]]) and np.array_equal(y, [[2], [4]])
    capsys.readouterr()
    for name in ("data::v2.csv", "pq::v2.parquet", "s3::back.ndf"):
        assert main(["info", name, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["path"] == name


# -- convert's arguments, what it returns and says, its names and its bar -----------------


def _convert(src, dst, **kw):
    from exactbatch.tools.convert import convert

    return convert(src, dst, bar=kw.pop("bar", False), **kw)


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"force": "yes"}, "force must be a bool"),
        ({"header": 1}, "header must be a bool"),
        ({"bar": None}, "bar must be a bool"),
        ({"row_group_rows": 0}, "row_group_rows "),
        ({"part_rows": 0}, "part_rows "),
    ],
    ids=["force", "header", "bar", "row-group-rows", "part-rows"],
)
def test_convert_checks_its_arguments(tmp_path, kw, says):
    np.save(tmp_path / "a.npy", np.ones((3, 2)))
    with pytest.raises((TypeError, ValueError), match=f"^{says}"):  # named as the argument
        _convert(tmp_path / "a.npy", tmp_path / "a.ndf", **kw)
    assert leftovers(tmp_path, ["a.npy"]) == []


def test_convert_refuses_what_it_cannot_do_by_name(tmp_path):
    """Each refusal names the input and what to do instead; nothing is written."""
    from exactbatch.tools.common import CliError

    np.save(tmp_path / "a.npy", np.ones((3, 2)))
    save_ndf(tmp_path / "a.ndf", np.ones((3, 2)))
    pq.write_table(pa.table({"a": [1.0]}), tmp_path / "a.parquet")
    npy, ndf, parquet = (str(tmp_path / n) for n in ("a.npy", "a.ndf", "a.parquet"))
    cases = [
        (npy, "o.parquet", {"names": "a,b"}, "--names only names the columns of an .ndf written as Parquet"),  # noqa: E501
        (npy, "o.ndf", {"names": "a,b"}, "--names only names the columns of an .ndf written as Parquet"),  # noqa: E501
        (ndf, "o.ndf", {"names": "a,b"}, "--names only names the columns of an .ndf written as Parquet"),  # noqa: E501
        (ndf, "o.ndf", {}, "already an .ndf file (to reorder it: exactbatch shuffle; to cut it into parts: --part-rows)"),  # noqa: E501
        (ndf, "o.ndf", {"labels": "0"}, "already an .ndf file"),
        (ndf, "ds", {"part_rows": 2, "features": "0"}, "--features/--labels choose columns of Parquet, CSV, .npy (and so do --exclude and --categorical); an .ndf is converted whole"),  # noqa: E501
        (ndf, "ds", {"part_rows": 2, "labels": "0"}, "an .ndf is converted whole"),
        (ndf, "ds", {"part_rows": 2, "exclude": "0"}, "an .ndf is converted whole"),
        (ndf, "ds", {"part_rows": 2, "categorical": "0"}, "an .ndf is converted whole"),
        (ndf, "o.parquet", {"exclude": "0"}, "--exclude/--categorical choose columns of Parquet, CSV, .npy"),  # noqa: E501
        (ndf, "o.parquet", {"categorical": "0"}, "--exclude/--categorical choose columns"),
        (parquet, "o.parquet", {}, "can only convert parquet to .ndf; name the output .ndf"),
        (npy, "o.parquet", {}, "can only convert npy to .ndf; name the output .ndf"),
    ]  # fmt: skip
    for src, dst, kw, says in cases:
        with pytest.raises(CliError) as e:
            _convert(src, tmp_path / dst, **kw)
        assert str(e.value).startswith(f"{src}: ") and says in str(e.value), (kw, str(e.value))
    with pytest.raises(CliError, match="cannot tell what to write: name it .ndf or .parquet"):
        _convert(npy, tmp_path / "o.csv")
    assert leftovers(tmp_path, ["a.npy", "a.ndf", "a.parquet"]) == []


def test_convert_returns_what_it_wrote(tmp_path):
    """The summary: rows, widths, columns, the codes, the paths and formats, the bytes of
    the output (a file's size; a dataset's parts'), how many files were read together."""
    np.save(tmp_path / "a.npy", np.arange(12.0).reshape(4, 3))
    out = _convert(tmp_path / "a.npy", tmp_path / "a.ndf", labels="-1")
    assert out.pop("seconds") >= 0
    assert out == {
        "rows": 4,
        "d": 2,
        "l": 1,
        "features": ["0", "1"],
        "labels": ["2"],
        "categories": {},
        "src": str(tmp_path / "a.npy"),
        "dst": str(tmp_path / "a.ndf"),
        "src_format": "npy",
        "dst_format": "ndf",
        "size_bytes": 28 + 4 * 3 * 8,
    }
    out = _convert(tmp_path / "a.ndf", tmp_path / "ds", part_rows=3)
    assert (out["src_format"], out["dst_format"], out["parts"]) == ("ndf", "dataset", 2)
    assert out["size_bytes"] == 2 * 28 + 4 * 3 * 8 and "files" not in out
    out = _convert(tmp_path / "ds", tmp_path / "b.parquet")
    assert (out["src_format"], out["dst_format"], out["rows"], out["d"], out["l"]) == (
        "dataset",
        "parquet",
        4,
        2,
        1,
    )
    assert out["size_bytes"] == os.path.getsize(tmp_path / "b.parquet")
    assert (out["features"], out["labels"]) == (["x0", "x1"], ["y0"])
    (tmp_path / "c1.csv").write_text("a,b\n1,2\n")
    (tmp_path / "c2.csv").write_text("a,b\n3,4\n")
    out = _convert([tmp_path / "c2.csv", tmp_path / "c1.csv"], tmp_path / "c.ndf")
    assert (out["files"], out["src"], out["src_format"]) == (
        2,
        f"{tmp_path / 'c2.csv'} {tmp_path / 'c1.csv'}",
        "csv",
    )
    assert np.array_equal(read_ndf(tmp_path / "c.ndf")[0], [[1, 2], [3, 4]])


def test_the_summary_gives_the_seconds_taken_to_the_millisecond(tmp_path, monkeypatch):
    """``seconds``: the conversion's wall time, a float rounded to the millisecond."""
    from types import SimpleNamespace

    from exactbatch.tools import convert as module

    np.save(tmp_path / "a.npy", np.arange(6.0).reshape(3, 2))
    clock = iter([100.0, 101.23456])  # the start, then the end
    monkeypatch.setattr(module, "time", SimpleNamespace(perf_counter=lambda: next(clock)))
    out = _convert(tmp_path / "a.npy", tmp_path / "a.ndf")
    assert type(out["seconds"]) is float and out["seconds"] == 1.235


def test_a_parquet_input_leaves_out_the_excluded_columns(tmp_path):
    """convert() hands ``exclude`` to a Parquet input: the column is not written."""
    table = pa.table({"a": [1.0, 2.0], "b": [3.0, 4.0], "c": [5.0, 6.0]})
    pq.write_table(table, tmp_path / "t.parquet")
    out = _convert(tmp_path / "t.parquet", tmp_path / "t.ndf", labels="c", exclude="b")
    assert (out["features"], out["labels"]) == (["a"], ["c"])
    x, y = read_ndf(tmp_path / "t.ndf")
    assert x.tolist() == [[1.0], [2.0]] and y.tolist() == [[5.0], [6.0]]


def test_render_says_what_was_written():
    from exactbatch.tools.convert import render

    out = {
        "dst": "o.ndf",
        "rows": 1234,
        "d": 2,
        "l": 1,
        "features": ["a", "b"],
        "labels": ["y"],
        "size_bytes": 123456,
        "seconds": 1.26,
    }
    assert render(out) == (
        "wrote o.ndf: 1,234 rows, 2 features ['a', 'b'], 1 labels ['y']; 123,456 bytes in 1.3 s"
    )
    out.update(files=3, categories={"a": ["p", "q"], "b": [1, 2, 3]})
    assert render(out) == (
        "wrote o.ndf from 3 files: 1,234 rows, 2 features ['a', 'b'], 1 labels ['y']; coded "
        "as integers: a (2 values), b (3 values); 123,456 bytes in 1.3 s"
    )


def test_names_go_beside_the_file_where_the_input_has_some(tmp_path):
    """CSV and Parquet columns' names go to the .ndf's sidecar; a .npy's positions do not
    (no sidecar), nor do an .ndf's default names when it is cut into parts."""
    (tmp_path / "a.csv").write_text("p,q,r\n1,2,3\n")
    _convert(tmp_path / "a.csv", tmp_path / "c.ndf", labels="p")
    with open_ndf(tmp_path / "c.ndf") as f:
        assert (f.features, f.labels) == (("q", "r"), ("p",))
    np.save(tmp_path / "a.npy", np.ones((2, 2)))
    _convert(tmp_path / "a.npy", tmp_path / "n.ndf")
    assert not (tmp_path / "n.ndf.json").exists()
    _convert(tmp_path / "c.ndf", tmp_path / "ds", part_rows=1)
    from exactbatch import open_ndf_dataset

    with open_ndf_dataset(tmp_path / "ds") as ds:
        assert (ds.features, ds.labels) == (("q", "r"), ("p",))
    _convert(tmp_path / "n.ndf", tmp_path / "ds2", part_rows=1)
    with open_ndf_dataset(tmp_path / "ds2") as ds:
        assert ds.manifest.features is None and ds.manifest.labels is None


def test_any_arrow_error_of_a_read_is_one_line_and_an_ndf_needs_no_pyarrow(tmp_path, monkeypatch):
    """An Arrow error of any kind from a CSV or Parquet read (a codec pyarrow was built
    without: ArrowNotImplementedError) is a CliError; an .ndf cut into parts needs no
    pyarrow (nor its errors)."""
    from exactbatch.tools import convert_csv, convert_inputs
    from exactbatch.tools.common import CliError

    def no_codec(self):
        raise pa.ArrowNotImplementedError("Support for codec 'lz4' not built")
        yield

    (tmp_path / "a.csv").write_text("a,b\n1,2\n")
    monkeypatch.setattr(convert_csv.CsvInput, "blocks", no_codec)
    with pytest.raises(CliError) as e:
        _convert(tmp_path / "a.csv", tmp_path / "a.ndf")
    assert str(e.value) == (
        f"{tmp_path / 'a.csv'}: Support for codec 'lz4' not built (after 0 rows; nothing "
        f"written to {tmp_path / 'a.ndf'})"
    )

    def no_pyarrow():
        raise CliError("pyarrow is not installed")

    monkeypatch.setattr(convert_inputs, "arrow", no_pyarrow)
    save_ndf(tmp_path / "x.ndf", np.arange(6.0).reshape(3, 2))
    assert _convert(tmp_path / "x.ndf", tmp_path / "ds", part_rows=2)["rows"] == 3


def test_a_failed_read_says_how_many_rows_were_written(tmp_path, monkeypatch):
    """A bad value mid-way: the input, the reader's message on one line, the rows written
    before it, and that nothing was written; no file left."""
    from exactbatch.tools import convert_inputs
    from exactbatch.tools.common import CliError

    monkeypatch.setattr(convert_inputs, "SLAB_BYTES", 16)  # a slab of one 2-column row

    (tmp_path / "one.csv").write_text("a,b\n1,2\n")
    (tmp_path / "two.csv").write_text("a,b\n3,4\n5,x\n")
    with pytest.raises(CliError) as e:
        _convert([tmp_path / "one.csv", tmp_path / "two.csv"], tmp_path / "o.ndf")
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / 'one.csv'} {tmp_path / 'two.csv'}: {tmp_path / 'two.csv'}:")
    assert "\n" not in msg and "  " not in msg
    assert msg.endswith(f"(after 1 rows; nothing written to {tmp_path / 'o.ndf'})")
    assert leftovers(tmp_path, ["one.csv", "two.csv"]) == []
    # a .npy cut short: the file's own error, after the rows read
    np.save(tmp_path / "s.npy", np.ones((4, 2)))
    with open(tmp_path / "s.npy", "r+b") as f:
        f.truncate(os.path.getsize(tmp_path / "s.npy") - 20)
    with pytest.raises(CliError) as e:
        _convert(tmp_path / "s.npy", tmp_path / "s.ndf")
    assert "file ended early" in str(e.value)  # 44 of 64 bytes: two whole rows
    assert str(e.value).endswith(f"(after 2 rows; nothing written to {tmp_path / 's.ndf'})")
    assert not (tmp_path / "s.ndf").exists()


def test_the_bar_names_the_input_or_how_many_files(tmp_path, capsys):
    pytest.importorskip("tqdm")
    (tmp_path / "a.csv").write_text("a,b\n1,2\n")
    (tmp_path / "b.csv").write_text("a,b\n3,4\n")
    _convert(tmp_path / "a.csv", tmp_path / "a.ndf", bar=True)
    err = capsys.readouterr().err
    assert "convert a.csv:" in err and "B/s" in err  # a CSV's bar counts bytes
    assert "8.00/8.00" in err  # of all it has
    _convert([tmp_path / "a.csv", tmp_path / "b.csv"], tmp_path / "b.ndf", bar=True)
    assert "convert 2 CSV files:" in capsys.readouterr().err
    _convert(tmp_path / "b.ndf", tmp_path / "b.parquet", bar=True)
    err = capsys.readouterr().err
    assert "convert b.ndf:" in err and "2.00/2.00" in err and "rows/s" in err
    _convert(tmp_path / "a.csv", tmp_path / "c.ndf")  # bar=False: none drawn, each way
    _convert([tmp_path / "a.csv", tmp_path / "b.csv"], tmp_path / "d.ndf")
    _convert(tmp_path / "b.ndf", tmp_path / "c.parquet")
    assert capsys.readouterr().err == ""


# -- .ndf to Parquet: the columns chosen, named, and the labels recorded ----------------------


def test_ndf_to_parquet_chooses_and_names_columns(tmp_path):
    """--features/--labels choose an .ndf's columns by its names or positions; the labels
    are recorded in the schema; --names renames what is written (stripped, one per column,
    distinct, none empty); an .ndf of no columns or no rows has nothing to write."""
    from exactbatch.sources.parquet import LABELS_METADATA_KEY
    from exactbatch.tools.common import CliError

    x = np.arange(12.0).reshape(4, 3)
    save_ndf(tmp_path / "a.ndf", (x, -x[:, :1]), features=["p", "q", "r"], labels=["t"])
    out = _convert(tmp_path / "a.ndf", tmp_path / "a.parquet", features="r,p", labels="q")
    assert (out["rows"], out["d"], out["l"], out["features"], out["labels"]) == (
        4,
        2,
        1,
        ["r", "p"],
        ["q"],
    )
    schema = pq.read_schema(tmp_path / "a.parquet")
    assert schema.names == ["r", "p", "q"]
    assert schema.metadata[LABELS_METADATA_KEY] == b"q"
    assert all(t == pa.float64() for t in schema.types)
    t = pq.read_table(tmp_path / "a.parquet")
    assert np.array_equal(np.column_stack([c.to_numpy() for c in t.columns]), x[:, [2, 0, 1]])
    out = _convert(tmp_path / "a.ndf", tmp_path / "b.parquet", labels="t")
    assert (out["features"], out["labels"]) == (["p", "q", "r"], ["t"])  # features: the rest
    out = _convert(tmp_path / "a.ndf", tmp_path / "f.parquet", features="q")
    assert (out["d"], out["l"], out["features"], out["labels"]) == (1, 0, ["q"], [])
    assert pq.read_schema(tmp_path / "f.parquet").names == ["q"]
    out = _convert(tmp_path / "a.ndf", tmp_path / "c.parquet", names=" u , v ,w,z")
    assert pq.read_schema(tmp_path / "c.parquet").names == ["u", "v", "w", "z"]
    assert (out["features"], out["labels"]) == (["u", "v", "w"], ["z"])
    assert pq.read_schema(tmp_path / "c.parquet").metadata[LABELS_METADATA_KEY] == b"z"
    for bad in ("u,v,w,w", "u,v,,z", "u,v,w"):
        with pytest.raises(CliError) as e:
            _convert(tmp_path / "a.ndf", tmp_path / "d.parquet", names=bad)
        assert str(e.value) == (
            f"{tmp_path / 'a.ndf'}: --names needs 4 distinct names (one per column written: "
            f"p, q, r, t); got {bad!r}"
        )
    with pytest.raises(CliError) as e:  # a column it does not have: the .ndf named
        _convert(tmp_path / "a.ndf", tmp_path / "d.parquet", features="s")
    assert str(e.value).startswith(f"{tmp_path / 'a.ndf'}: ")
    assert "'s'" in str(e.value)
    save_ndf(tmp_path / "w.ndf", np.zeros((3, 0)))
    with pytest.raises(CliError) as e:
        _convert(tmp_path / "w.ndf", tmp_path / "w.parquet")
    assert str(e.value) == f"{tmp_path / 'w.ndf'}: no columns to write (d = l = 0)"
    save_ndf(tmp_path / "e.ndf", np.zeros((0, 2)))
    with pytest.raises(CliError) as e:
        _convert(tmp_path / "e.ndf", tmp_path / "e.parquet")
    assert str(e.value) == f"{tmp_path / 'e.ndf'}: no rows of data to convert"
    assert not any(
        n.startswith(("d.", "w.", "e.")) and n.endswith("parquet") for n in os.listdir(tmp_path)
    )


def test_ndf_to_parquet_row_groups_are_65536_rows_by_default(tmp_path):
    save_ndf(tmp_path / "a.ndf", np.zeros((65537, 1)))
    _convert(tmp_path / "a.ndf", tmp_path / "a.parquet")
    md = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert [md.row_group(k).num_rows for k in range(md.num_row_groups)] == [65536, 1]


def test_ndf_to_parquet_writes_row_groups_of_the_size_asked(tmp_path):
    save_ndf(tmp_path / "a.ndf", np.arange(14.0).reshape(7, 2))
    assert _convert(tmp_path / "a.ndf", tmp_path / "a.parquet", row_group_rows=3)["rows"] == 7
    md = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert [md.row_group(k).num_rows for k in range(md.num_row_groups)] == [3, 3, 1]
    _convert(tmp_path / "a.ndf", tmp_path / "b.parquet", row_group_rows=1)
    assert pq.ParquetFile(tmp_path / "b.parquet").metadata.num_row_groups == 7
    t = pq.read_table(tmp_path / "b.parquet")
    assert np.array_equal(t.column("x1").to_numpy(), np.arange(1.0, 14.0, 2))


def test_row_groups_are_the_size_asked_whatever_the_read_slab(tmp_path, monkeypatch):
    """Row groups larger than a read slab, and than Parquet's own default (2**20 rows):
    each is still one group of the rows asked."""
    from exactbatch.tools import convert_inputs

    save_ndf(tmp_path / "a.ndf", np.arange(14.0).reshape(7, 2))
    monkeypatch.setattr(convert_inputs, "SLAB_BYTES", 32)  # 2 rows of 2 values
    _convert(tmp_path / "a.ndf", tmp_path / "a.parquet", row_group_rows=5)
    md = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert [md.row_group(k).num_rows for k in range(md.num_row_groups)] == [5, 2]
    monkeypatch.undo()
    n = (1 << 20) + 3
    save_ndf(tmp_path / "big.ndf", np.zeros((n, 1)))
    _convert(tmp_path / "big.ndf", tmp_path / "big.parquet", row_group_rows=n)
    md = pq.ParquetFile(tmp_path / "big.parquet").metadata
    assert (md.num_row_groups, md.row_group(0).num_rows) == (1, n)


def _interrupted():
    raise KeyboardInterrupt


def test_a_signal_noted_before_the_rename_leaves_no_output(tmp_path, monkeypatch):
    """Each writer checks for a noted Ctrl-C (one a library swallowed) before it renames
    its output into place: to .ndf, to a dataset's parts, to Parquet."""
    from exactbatch.tools import convert as mod

    np.save(tmp_path / "a.npy", np.ones((3, 2)))
    save_ndf(tmp_path / "a.ndf", np.ones((3, 2)))
    monkeypatch.setattr(mod, "check_interrupt", _interrupted)
    for src, dst, kw in (
        ("a.npy", "o.ndf", {}),
        ("a.npy", "ds", {"part_rows": 2}),
        ("a.ndf", "o.parquet", {}),
    ):
        with pytest.raises(KeyboardInterrupt):
            _convert(tmp_path / src, tmp_path / dst, **kw)
    assert leftovers(tmp_path, ["a.npy", "a.ndf"]) == []
