"""The command line over sharded datasets: info checks every part, convert --part-rows
writes one, shuffle of a dataset writes a new one (in external memory as for a file)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from helpers import make_data, part_file, run_cli, write_ndf_dataset

from exactbatch import open_ndf, open_ndf_dataset, save_ndf
from exactbatch.cli import main

SIZES = [7, 0, 20, 3, 11]
N = sum(SIZES)


@pytest.fixture
def ds(tmp_path):
    return write_ndf_dataset(tmp_path / "ds", SIZES, d=3, l=1)


def all_rows(path):
    with open_ndf_dataset(path) if os.path.isdir(path) else open_ndf(path) as f:
        x, y = f.read_rows(np.arange(f.n))
    return np.hstack([x, y])


def part_ns(path) -> list[int]:
    with open_ndf_dataset(path) as d:
        return [p.n for p in d.parts]


# -- info ----------------------------------------------------------------------------------


def test_info_checks_every_part_with_a_progress_bar(ds):
    p = run_cli("info", ds, check=0)
    assert "sharded .ndf dataset" in p.stdout
    for line in (f"n             {N}", "d             3", "l             1", "parts         5"):
        assert line in p.stdout
    assert "valid         yes" in p.stdout
    assert "check ds" in p.stderr and "5/5" in p.stderr  # the tqdm bar over the parts


def test_info_json(ds, capsys):
    assert main(["info", ds, "--json", "-q"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["format"] == "dataset" and report["valid"] is True
    assert (report["n"], report["d"], report["l"], report["parts"]) == (N, 3, 1, 5)
    assert report["part_rows"] == {"min": 0, "median": 7, "max": 20}
    assert report["size_bytes"] == sum(28 + 32 * s for s in SIZES)


def test_info_names_every_bad_part_and_exits_1(ds, capsys):
    """A missing part and a truncated one: both named, exit status 1."""
    two, four = os.path.basename(part_file(ds, 2)), os.path.basename(part_file(ds, 4))
    os.unlink(os.path.join(ds, two))
    with open(os.path.join(ds, four), "r+b") as f:
        f.truncate(100)
    assert main(["info", ds, "-q"]) == 1
    out, err = capsys.readouterr()
    assert "NO: 2 of 5 parts failed" in out
    assert two in out and "missing" in out
    assert four in out and "file too short" in out
    assert two in err


def test_info_on_a_bad_manifest(ds, capsys):
    with open(os.path.join(ds, "manifest.json"), "w") as f:
        json.dump({"format": "exactbatch-ndf-dataset", "version": 9}, f)
    assert main(["info", ds, "-q"]) == 1
    out, err = capsys.readouterr()
    assert "NO: the manifest failed" in out and "manifest version 9" in err


# -- convert --part-rows -------------------------------------------------------------------


def test_convert_parquet_to_a_dataset_in_a_subprocess(tmp_path):
    """Parquet -> a dataset of 8-row parts (the last shorter); names kept in the manifest."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    t = pa.table({"a": np.arange(30.0), "b": np.arange(30.0) * 2, "t": np.arange(30) % 2})
    pq.write_table(t, tmp_path / "d.parquet", row_group_size=7)
    out = tmp_path / "out"
    p = run_cli("convert", tmp_path / "d.parquet", out, "--labels", "t", "--part-rows", 8, check=0)
    assert "30 rows" in p.stdout
    assert part_ns(out) == [8, 8, 8, 6]
    with open_ndf_dataset(out) as d:
        assert d.features == ("a", "b") and d.labels == ("t",)
        x, y = d.read_rows(np.arange(30))
    np.testing.assert_array_equal(x[:, 1], np.arange(30.0) * 2)
    np.testing.assert_array_equal(y[:, 0], np.arange(30) % 2)


def test_convert_ndf_to_dataset_and_back(tmp_path, ds, capsys):
    """A dataset reads like an .ndf: to another dataset (cut anew), to one .ndf."""
    assert main(["convert", ds, str(tmp_path / "re"), "--part-rows", "10", "-q"]) == 0
    assert part_ns(tmp_path / "re") == [10, 10, 10, 10, 1]
    assert main(["convert", ds, str(tmp_path / "one.ndf"), "-q"]) == 0
    np.testing.assert_array_equal(all_rows(str(tmp_path / "one.ndf")), all_rows(ds))
    assert (
        main(["convert", str(tmp_path / "one.ndf"), str(tmp_path / "cut"), "--part-rows", "25"])
        == 0
    )
    assert part_ns(tmp_path / "cut") == [25, 16]
    np.testing.assert_array_equal(all_rows(str(tmp_path / "cut")), all_rows(ds))
    assert "41 rows" in capsys.readouterr().out


def test_convert_npy_and_dataset_to_parquet(tmp_path, capsys):
    pq = pytest.importorskip("pyarrow.parquet")
    np.save(tmp_path / "a.npy", np.arange(12.0).reshape(6, 2))
    assert (
        main(["convert", str(tmp_path / "a.npy"), str(tmp_path / "n"), "--part-rows", "4", "-q"])
        == 0
    )
    assert part_ns(tmp_path / "n") == [4, 2]
    with open_ndf_dataset(tmp_path / "n") as d:
        assert d.manifest.features is None and d.features == ("x0", "x1")  # .npy: no names
    assert main(["convert", str(tmp_path / "n"), str(tmp_path / "n.parquet"), "-q"]) == 0
    t = pq.read_table(tmp_path / "n.parquet")
    assert t.column_names == ["x0", "x1"] and t.num_rows == 6


def test_convert_refuses_a_non_empty_folder_without_force(tmp_path, ds, capsys):
    np.save(tmp_path / "a.npy", np.ones((4, 2)))
    assert main(["convert", str(tmp_path / "a.npy"), ds, "--part-rows", "2", "-q"]) == 2
    assert "not empty (pass --force" in capsys.readouterr().err
    assert part_ns(ds) == SIZES  # untouched
    assert main(["convert", str(tmp_path / "a.npy"), ds, "--part-rows", "2", "--force"]) == 0
    new = [os.path.basename(part_file(ds, k)) for k in range(2)]
    assert sorted(os.listdir(ds)) == ["manifest.json", *new]  # the old parts removed
    save_ndf(tmp_path / "f.ndf", np.ones((2, 2)))
    assert (
        main(["convert", str(tmp_path / "a.npy"), str(tmp_path / "f.ndf"), "--part-rows", "2"]) == 2
    )
    assert "is a file" in capsys.readouterr().err


def test_a_convert_that_fails_midway_leaves_no_dataset(tmp_path, capsys):
    """A bad value after the first parts are written: no manifest, no part, exit 2."""
    pytest.importorskip("pyarrow")
    lines = ["a,b"] + [f"{i},{i}" for i in range(200_000)] + ["x,1"]  # past the first block
    (tmp_path / "d.csv").write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    assert main(["convert", str(tmp_path / "d.csv"), str(out), "--part-rows", "1000", "-q"]) == 2
    assert "nothing written" in capsys.readouterr().err
    assert not out.exists()  # the folder it made, the parts, no manifest: all gone
    out.mkdir()
    assert main(["convert", str(tmp_path / "d.csv"), str(out), "--part-rows", "1000", "-q"]) == 2
    assert os.listdir(out) == []  # a folder that was there stays, empty


def test_convert_refuses_columns_of_an_ndf(tmp_path, ds, capsys):
    assert main(["convert", ds, str(tmp_path / "x"), "--part-rows", "3", "--labels", "y0"]) == 2
    assert "--features/--labels choose columns" in capsys.readouterr().err


# -- shuffle ------------------------------------------------------------------------------


@pytest.mark.parametrize("memory", ["1GB", "300"], ids=["in-memory", "two-passes"])
def test_shuffle_of_a_dataset_is_the_shuffle_of_its_rows(tmp_path, ds, memory, capsys):
    """A dataset shuffled (in memory, or through bucket files) gives the rows, in the
    order, of the same shuffle of one .ndf holding them; parts of the largest part's size."""
    one = str(tmp_path / "one.ndf")
    assert main(["convert", ds, one, "-q"]) == 0
    out = str(tmp_path / "shuf")
    assert main(["shuffle", ds, out, "--seed", "3", "--memory", memory, "-q"]) == 0
    assert main(["shuffle", one, str(tmp_path / "s.ndf"), "--seed", "3", "--memory", memory]) == 0
    assert part_ns(out) == [20, 20, 1]
    got, want = all_rows(out), all_rows(str(tmp_path / "s.ndf"))
    np.testing.assert_array_equal(got, want)
    assert sorted(got[:, 0].tolist()) == list(range(N))
    assert not (got[:, 0] == np.arange(N)).all()
    assert "41 rows in 3 parts" in capsys.readouterr().out


def test_shuffle_part_rows_and_output_checks(tmp_path, ds, capsys):
    """--part-rows: a dataset from an .ndf too; an existing dataset needs --force."""
    x, y = make_data(9, 2, 1)
    save_ndf(tmp_path / "a.ndf", (x, y))
    out = str(tmp_path / "o")
    assert main(["shuffle", str(tmp_path / "a.ndf"), out, "--part-rows", "4", "-q"]) == 0
    assert part_ns(out) == [4, 4, 1]
    assert main(["shuffle", ds, out, "-q"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert main(["shuffle", ds, out, "--force", "--part-rows", "30", "-q"]) == 0
    assert part_ns(out) == [30, 11]
    new = [os.path.basename(part_file(out, k)) for k in range(2)]
    assert sorted(os.listdir(out)) == ["manifest.json", *new]


def test_shuffle_of_a_damaged_dataset_names_the_part(tmp_path, ds, capsys):
    three = part_file(ds, 3)
    os.unlink(three)
    assert main(["shuffle", ds, str(tmp_path / "o"), "-q"]) == 2
    assert os.path.basename(three) in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "o")


@pytest.mark.parametrize("command", ["convert", "shuffle"])
def test_ctrl_c_midway_leaves_no_dataset(tmp_path, ds, command, monkeypatch, capsys):
    """A Ctrl-C while the third part is written: exit 130, and neither a part, a temporary
    file nor a manifest is left (the folder the command made is removed too)."""
    from exactbatch.ndf import write as write_mod

    real, calls = write_mod.NdfWriter.write_raw, []

    def interrupted(self, rows):
        calls.append(self.path)
        if len({os.path.basename(p) for p in calls}) == 3:
            raise KeyboardInterrupt
        return real(self, rows)

    monkeypatch.setattr(write_mod.NdfWriter, "write_raw", interrupted)
    monkeypatch.setattr(write_mod.NdfWriter, "write", lambda self, b: interrupted(self, b))
    out = str(tmp_path / "out")
    args = [command, ds, out, "--part-rows", "5", "-q"]
    assert main(args) == 130
    assert "interrupted; no partial output was left" in capsys.readouterr().err
    assert not os.path.exists(out)
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []


def test_info_on_parts_without_a_manifest(ds, capsys):
    """A folder of parts whose manifest is missing is reported as not a dataset (exit 1)."""
    os.unlink(os.path.join(ds, "manifest.json"))
    assert main(["info", ds, "-q"]) == 1
    assert "not a dataset: the folder holds no manifest.json" in capsys.readouterr().err


def test_convert_reports_the_bytes_of_its_own_parts(tmp_path, capsys):
    """The summary's size is that of the parts this write made, not of whatever else the
    folder holds (another file; another writer's parts, which may vanish as they are
    counted)."""
    from exactbatch.tools.convert import convert

    np.save(tmp_path / "a.npy", np.ones((10, 3)))
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "notes.txt").write_text("not part of the dataset")
    out = convert(tmp_path / "a.npy", tmp_path / "ds", part_rows=4, force=True, bar=False)
    assert out["parts"] == 3 and out["size_bytes"] == 3 * 28 + 8 * 10 * 3
