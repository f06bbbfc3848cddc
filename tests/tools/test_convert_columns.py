"""exactbatch convert with real tables (issue 30, items 5 and 7): --exclude and
--categorical, several CSV files (a folder, a glob, a list) into one .ndf in sorted path
order, Hive-partitioned Parquet; no column ever coerced silently, and a failed
conversion leaves nothing at the destination."""

from __future__ import annotations

import os

import numpy as np
import pytest

import exactbatch
from exactbatch import open_ndf, open_ndf_dataset
from exactbatch.cli import main
from exactbatch.tools.common import CliError
from exactbatch.tools.convert import convert

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

HEAD = "amount,city,customer,churn\n"
MONTHS = {  # in sorted path order: 01, 02, sub/03
    "m01.csv": "1.5,Paris,c1,0\n2.5,Lyon,c2,1\n",
    "m02.csv": "3.5,Nice,c3,1\n",
    os.path.join("sub", "m03.csv"): "4.5,Paris,c4,0\n,Lyon,c5,\n",
}
CITIES = ["Lyon", "Nice", "Paris"]


def rows(path):
    with open_ndf(path) as f:
        x, y = f.read_rows(np.arange(f.n))
    return np.concatenate([x, y], axis=1)


@pytest.fixture
def months(tmp_path):
    folder = tmp_path / "in"
    for name in reversed(list(MONTHS)):  # written out of order: the paths decide
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(HEAD + MONTHS[name])
    return folder


WANT = np.array(
    [[1.5, 2, 0], [2.5, 0, 1], [3.5, 1, 1], [4.5, 2, 0], [np.nan, 0, np.nan]]
)  # amount, city code, churn


def test_a_folder_of_csvs_is_one_ndf_in_sorted_path_order(months, tmp_path):
    """Every CSV at any depth, by path; --exclude drops the id, --categorical codes the
    city by its sorted vocabulary, kept in the sidecar."""
    dst = tmp_path / "out.ndf"
    out = convert(months, dst, labels="churn", exclude="customer", categorical="city", bar=False)
    assert (out["rows"], out["files"], out["features"]) == (5, 3, ["amount", "city"])
    assert out["categories"] == {"city": CITIES}
    assert np.array_equal(rows(dst), WANT, equal_nan=True)
    assert exactbatch.categories(dst) == {"city": CITIES}
    with open_ndf(dst) as f:
        assert f.features == ("amount", "city") and f.labels == ("churn",)


def test_a_glob_and_a_list_give_the_same_rows(months, tmp_path, capsys):
    """A quoted glob (the command's one SRC) and a list of files (the shell's expansion:
    several SRC) are read in sorted path order too, whatever order they are given in."""
    files = [str(months / n) for n in MONTHS]
    args = ["--labels", "churn", "--exclude", "customer", "--categorical", "city", "-q"]
    assert main(["convert", str(months / "**" / "*.csv"), str(tmp_path / "g.ndf"), *args]) == 0
    assert main(["convert", *reversed(files), str(tmp_path / "l.ndf"), *args]) == 0
    assert "from 3 files" in capsys.readouterr().out
    for name in ("g.ndf", "l.ndf"):
        assert np.array_equal(rows(tmp_path / name), WANT, equal_nan=True)


def test_to_a_sharded_dataset_the_manifest_keeps_the_vocabulary(months, tmp_path):
    dst = tmp_path / "ds"
    convert(
        months, dst, labels="churn", exclude="customer", categorical="city", part_rows=2, bar=False
    )
    assert exactbatch.categories(dst) == {"city": CITIES}
    with open_ndf_dataset(dst) as ds:
        assert len(ds.parts) == 3 and ds.categories == {"city": CITIES}


def test_non_numeric_columns_are_refused_with_the_options(months, tmp_path, capsys):
    """No silent coercion: the default features hold two string columns; the one-line
    error names both and the options --categorical, --exclude; nothing is written."""
    assert main(["convert", str(months), str(tmp_path / "o.ndf"), "--labels", "churn"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    for says in (
        "city (string)",
        "customer (string)",
        "--categorical city,customer",
        "--exclude city,customer",
    ):
        assert says in err, err
    assert os.listdir(tmp_path) == ["in"]


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"features": "amount,nope"}, r"no column 'nope' \(--features\); columns are"),
        ({"exclude": "nope"}, r"no column 'nope' \(--exclude\)"),
        ({"categorical": "nope", "exclude": "customer,city"}, r"--categorical names.*'nope'"),
        ({"features": "amount,customer", "exclude": "customer"}, "both chosen and given to"),
    ],
    ids=["missing-feature", "missing-excluded", "missing-categorical", "chosen-and-excluded"],
)
def test_bad_columns_are_a_value_error_naming_them(months, tmp_path, kw, says):
    """From Python, convert's errors are ValueErrors (CliError) naming the column and the
    columns there are."""
    with pytest.raises(ValueError, match=says):
        convert(months / "m01.csv", tmp_path / "o.ndf", labels="churn", bar=False, **kw)
    assert issubclass(CliError, ValueError)
    assert not (tmp_path / "o.ndf").exists()


def test_a_numeric_column_may_be_categorical(tmp_path):
    """Integer store ids: codes by their sorted values, the vocabulary as numbers."""
    (tmp_path / "s.csv").write_text("store,y\n30,1\n4,0\n100,1\n4,1\n")
    convert(tmp_path / "s.csv", tmp_path / "s.ndf", labels="y", categorical="store", bar=False)
    assert exactbatch.categories(tmp_path / "s.ndf") == {"store": [4, 30, 100]}
    assert rows(tmp_path / "s.ndf")[:, 0].tolist() == [1, 0, 2, 0]


def test_files_must_agree_on_columns(months, tmp_path, capsys):
    """A file with other columns: a one-line error naming it; nothing written."""
    (months / "m04.csv").write_text("amount,city\n1,Paris\n")
    assert main(["convert", str(months), str(tmp_path / "o.ndf"), "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{months / 'm04.csv'}: its columns ['amount', 'city'] differ" in err
    assert os.listdir(tmp_path) == ["in"]


def test_a_bad_value_in_a_later_file_leaves_no_partial_file(months, tmp_path, capsys):
    """The write is atomic across files: a bad cell in the last file (after rows of the
    others were written) leaves no .ndf, no sidecar, no temporary file."""
    (months / "sub" / "m03.csv").write_text(HEAD + "oops,Paris,c9,0\n")
    args = ["--labels", "churn", "--exclude", "customer", "--categorical", "city", "-q"]
    assert main(["convert", str(months), str(tmp_path / "o.ndf"), *args]) == 2
    err = capsys.readouterr().err
    assert "m03.csv" in err and "nothing written" in err, err
    assert os.listdir(tmp_path) == ["in"]


def _files(named: dict):
    def setup(folder):
        for name, text in named.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)

    return setup


@pytest.mark.parametrize(
    ("setup", "src", "says"),
    [
        (_files({"docs/a.txt": "x"}), "docs", "the folder holds no CSV files"),
        (_files({}), "none-*.csv", "no files match this pattern"),
        (_files({"a.csv": "a\n1\n", "b.npy": "x"}), ["a.csv", "b.npy"], "not a CSV file"),
    ],
    ids=["folder-without-csvs", "glob-matching-nothing", "list-not-all-csv"],
)
def test_inputs_that_are_not_csv_files(tmp_path, setup, src, says):
    setup(tmp_path)
    src = [str(tmp_path / s) for s in src] if isinstance(src, list) else str(tmp_path / src)
    with pytest.raises(CliError, match=says):
        convert(src, tmp_path / "o.ndf", bar=False)
    assert not (tmp_path / "o.ndf").exists()


def test_a_hive_partitioned_parquet_folder(tmp_path):
    """Partition keys are columns: year numeric, region coded with --categorical."""
    root = tmp_path / "pq"
    for year, region, v in ((2024, "us", 1.0), (2024, "eu", 2.0), (2025, "eu", 3.0)):
        folder = root / f"year={year}" / f"region={region}"
        folder.mkdir(parents=True)
        pq.write_table(pa.table({"v": [v], "y": [v > 1]}), folder / "part-0.parquet")
    out = convert(root, tmp_path / "h.ndf", labels="y", categorical="region", bar=False)
    assert out["features"] == ["v", "year", "region"]
    assert exactbatch.categories(tmp_path / "h.ndf") == {"region": ["eu", "us"]}
    assert rows(tmp_path / "h.ndf").tolist() == [
        [2.0, 2024, 0, 1],
        [1.0, 2024, 1, 0],
        [3.0, 2025, 0, 1],
    ]  # sorted paths: region=eu before region=us


def test_a_npy_converts_without_its_excluded_columns_and_refuses_categorical(tmp_path):
    """A .npy's columns are its positions: --exclude drops them by position (the rest
    keep their order, the labels last); --categorical is refused by name (a .npy holds
    numbers only) and nothing is written."""
    src, dst = tmp_path / "a.npy", tmp_path / "a.ndf"
    a = np.arange(20, dtype=np.float64).reshape(5, 4)
    np.save(src, a)
    out = convert(src, dst, labels="3", exclude="1", bar=False)
    assert (out["rows"], out["features"]) == (5, ["0", "2"])
    assert np.array_equal(rows(dst), a[:, [0, 2, 3]])
    bad = tmp_path / "b.ndf"
    with pytest.raises(CliError, match=r"a\.npy: --categorical codes Parquet and CSV columns"):
        convert(src, bad, categorical="1", bar=False)
    assert not bad.exists()
