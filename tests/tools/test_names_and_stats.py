"""Column names travel with the data through the command (issue 15, item 3), and
``exactbatch info --stats`` gives per-column mean, sd, min and max in one pass."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from exactbatch import open_ndf, parquet_source, save_ndf
from exactbatch.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def run_json(*argv, capsys, status=0) -> dict:
    assert main([*map(str, argv), "--json", "-q"]) == status
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def named_parquet(tmp_path):
    rng = np.random.default_rng(3)
    t = pa.table(
        {
            "age": rng.integers(18, 90, 3000),
            "income": rng.lognormal(10, 1, 3000),
            "note": ["n"] * 3000,
            "churned": rng.random(3000) < 0.2,
        }
    )
    pq.write_table(t, tmp_path / "users.parquet", row_group_size=700)
    return tmp_path / "users.parquet"


def _convert_named(parquet, tmp_path, capsys):
    """`convert` the users table to users.ndf, choosing columns by name."""
    ndf = tmp_path / "users.ndf"
    args = ("--features", "age,income", "--labels", "churned")
    run_json("convert", parquet, ndf, *args, capsys=capsys)
    return ndf


def test_convert_writes_names_and_they_survive_a_round_trip(named_parquet, tmp_path, capsys):
    """Parquet -> .ndf writes the names sidecar; .ndf -> Parquet names its columns from it
    and records the labels; parquet_source and convert read the split back."""
    ndf = _convert_named(named_parquet, tmp_path, capsys)
    with open_ndf(ndf) as f:
        assert (f.features, f.labels) == (("age", "income"), ("churned",))
    back = tmp_path / "back.parquet"
    run_json("convert", ndf, back, capsys=capsys)
    assert pq.read_schema(back).names == ["age", "income", "churned"]
    src = parquet_source(back)  # labels not given: the recorded ones
    assert (src.features, src.labels) == (("age", "income"), ("churned",))
    again = tmp_path / "again.ndf"
    out = run_json("convert", back, again, capsys=capsys)
    assert (out["features"], out["labels"]) == (["age", "income"], ["churned"])
    with open_ndf(again) as f, open_ndf(ndf) as g:
        assert (f.features, f.labels) == (g.features, g.labels)
        assert np.array_equal(f.read_rows(np.arange(f.n))[1], g.read_rows(np.arange(g.n))[1])


def test_convert_selects_ndf_columns_by_their_names(named_parquet, tmp_path, capsys):
    ndf = _convert_named(named_parquet, tmp_path, capsys)
    out = run_json(
        "convert",
        ndf,
        tmp_path / "inc.parquet",
        "--features",
        "income",
        "--labels",
        "churned",
        capsys=capsys,
    )
    assert (out["features"], out["labels"]) == (["income"], ["churned"])
    assert pq.read_schema(tmp_path / "inc.parquet").names == ["income", "churned"]


def test_npy_has_no_names_to_write(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.arange(12.0).reshape(4, 3))
    run_json("convert", tmp_path / "a.npy", tmp_path / "a.ndf", "--labels", "-1", capsys=capsys)
    assert not (tmp_path / "a.ndf.json").exists()
    with open_ndf(tmp_path / "a.ndf") as f:
        assert (f.features, f.labels) == (("x0", "x1"), ("y0",))


def test_shuffle_keeps_the_names(tmp_path, capsys):
    x = np.arange(2000.0).reshape(1000, 2)
    save_ndf(tmp_path / "a.ndf", (x, -x[:, :1]), features=["t", "u"], labels=["v"])
    save_ndf(tmp_path / "plain.ndf", (x, -x[:, :1]))
    run_json("shuffle", tmp_path / "a.ndf", tmp_path / "s.ndf", "--memory", "4KB", capsys=capsys)
    with open_ndf(tmp_path / "s.ndf") as f:
        assert (f.features, f.labels) == (("t", "u"), ("v",))
        xs, ys = f.read_rows(np.arange(f.n))
    assert np.array_equal(np.sort(xs[:, 0]), x[:, 0]) and np.array_equal(ys[:, 0], -xs[:, 0])
    run_json("shuffle", tmp_path / "plain.ndf", tmp_path / "p.ndf", capsys=capsys)
    assert not (tmp_path / "p.ndf.json").exists()


def test_mixing_shows_the_names(tmp_path, capsys):
    rng = np.random.default_rng(0)
    save_ndf(
        tmp_path / "a.ndf",
        (rng.random((4000, 2)), rng.random(4000)),
        features=["temp", "wind"],
        labels=["rain"],
    )
    r = run_json("mixing", tmp_path / "a.ndf", "--batch-size", "100", capsys=capsys)
    assert [c["name"] for c in r["ks"]["columns"]] == ["temp", "wind", "rain"]
    assert (
        main(["mixing", str(tmp_path / "a.ndf"), "--batch-size", "100", "--columns", "rain", "-q"])
        == 0
    )
    out = capsys.readouterr().out
    assert "rain" in out and "x0" not in out


def test_info_shows_the_names(tmp_path, capsys):
    save_ndf(tmp_path / "a.ndf", (np.zeros((3, 2)), np.zeros(3)), features=["a", "b"])
    r = run_json("info", tmp_path / "a.ndf", capsys=capsys)
    assert (r["features"], r["labels"], r["valid"]) == (["a", "b"], ["y0"], True)
    assert "stats" not in r


def test_info_with_a_stale_sidecar_exits_1(tmp_path, capsys):
    save_ndf(tmp_path / "a.ndf", (np.zeros((3, 2)), np.zeros(3)), features=["a", "b"])
    side = (tmp_path / "a.ndf.json").read_text()
    save_ndf(tmp_path / "a.ndf", (np.zeros((4, 2)), np.zeros(4)))
    (tmp_path / "a.ndf.json").write_text(side)
    r = run_json("info", tmp_path / "a.ndf", capsys=capsys, status=1)
    assert r["valid"] is False and "describes other data" in r["error"]


def test_info_stats_of_an_ndf_match_numpy(tmp_path, capsys):
    """Mean, sd (divisor n), min and max per named column; the pass runs in many slabs
    (d = 700 makes a slab about 1500 rows) and stays exact at a large offset."""
    rng = np.random.default_rng(5)
    x = 1e9 + rng.standard_normal((5000, 700))
    y = rng.standard_normal((5000, 1))
    x[7, 3] = np.nan
    save_ndf(tmp_path / "a.ndf", (x, y), labels=["target"])
    r = run_json("info", tmp_path / "a.ndf", "--stats", capsys=capsys)
    rows = r["stats"]
    assert [s["name"] for s in rows[:2]] == ["x0", "x1"] and rows[-1]["name"] == "target"
    both = np.concatenate((x, y), axis=1)
    assert [s["count"] for s in rows[2:5]] == [5000, 4999, 5000]
    assert rows[3]["nan"] == 1
    # x - 1e9 is exact, and NumPy's sums of it are accurate: the reference
    offset = np.concatenate((np.full(700, 1e9), [0.0]))
    np.testing.assert_allclose(
        [s["mean"] for s in rows], offset + np.nanmean(both - offset, 0), rtol=3e-16, atol=1e-12
    )
    np.testing.assert_allclose([s["sd"] for s in rows], np.nanstd(both - offset, 0), rtol=1e-8)
    assert [s["min"] for s in rows] == list(np.nanmin(both, 0))
    assert [s["max"] for s in rows] == list(np.nanmax(both, 0))


def test_info_stats_table_and_parquet(named_parquet, tmp_path, capsys):
    assert main(["info", "--stats", str(named_parquet), "-q"]) == 0
    out = capsys.readouterr().out
    assert "statistics" in out and "income" in out
    t = pq.read_table(named_parquet)
    r = run_json("info", "--stats", named_parquet, capsys=capsys)
    by = {s["name"]: s for s in r["stats"]}
    assert set(by) == {"age", "income", "churned"}  # numeric columns: note is not
    assert by["age"]["mean"] == pytest.approx(np.mean(t.column("age").to_numpy()), rel=1e-12)
    assert by["churned"]["max"] == 1.0


def test_info_stats_refuses_csv_and_handles_empty(tmp_path, capsys):
    (tmp_path / "a.csv").write_text("a,b\n1,2\n")
    assert main(["info", "--stats", str(tmp_path / "a.csv"), "-q"]) == 2
    assert "--stats reads .ndf or Parquet" in capsys.readouterr().err
    save_ndf(tmp_path / "e.ndf", np.zeros((0, 2)))
    r = run_json("info", "--stats", tmp_path / "e.ndf", capsys=capsys)
    assert r["stats"] == []  # no rows: nothing made per column (a header may claim 2**31 - 1)
    assert main(["info", "--stats", str(tmp_path / "e.ndf"), "-q"]) == 0
    assert "statistics    none (no rows" in capsys.readouterr().out


def test_info_stats_in_a_subprocess(tmp_path):
    from helpers import run_cli

    save_ndf(tmp_path / "a.ndf", np.arange(10.0).reshape(5, 2), features=["p", "q"])
    p = run_cli("info", "--stats", tmp_path / "a.ndf", check=0)
    line = next(s for s in p.stdout.splitlines() if s.strip().startswith("p "))
    assert line.split()[1:5] == ["4", "2.82843", "0", "8"]
    assert os.listdir(tmp_path) == ["a.ndf", "a.ndf.json"] or sorted(os.listdir(tmp_path)) == [
        "a.ndf",
        "a.ndf.json",
    ]


def test_info_stats_of_a_sharded_dataset(tmp_path, capsys):
    """The same statistics as the rows in one array, with the manifest's names; slabs never
    straddle two parts (parts of 0, 1 and many rows)."""
    from exactbatch import save_ndf_dataset

    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((3001, 2)) + 50, rng.standard_normal((3001, 1))
    cuts = [0, 1000, 1000, 1001, 3001]
    parts = [(x[a:b], y[a:b]) for a, b in zip(cuts[:-1], cuts[1:], strict=True)]
    save_ndf_dataset(tmp_path / "ds", parts, features=["p", "q"], labels=["r"])
    r = run_json("info", "--stats", tmp_path / "ds", capsys=capsys)
    assert (r["format"], r["n"], r["parts"], r["valid"]) == ("dataset", 3001, 4, True)
    assert [s["name"] for s in r["stats"]] == ["p", "q", "r"]
    both = np.concatenate((x, y), axis=1)
    np.testing.assert_allclose([s["mean"] for s in r["stats"]], both.mean(0), rtol=1e-13)
    np.testing.assert_allclose([s["sd"] for s in r["stats"]], both.std(0), rtol=1e-12)
    assert [s["max"] for s in r["stats"]] == list(both.max(0))


def test_names_go_from_a_sidecar_into_a_dataset_and_back(tmp_path, capsys):
    """A named .ndf cut into a dataset (convert or shuffle --part-rows) keeps its names in
    the manifest; the dataset converted back to Parquet names its columns from them."""
    from exactbatch import open_ndf_dataset

    x = np.arange(600.0).reshape(300, 2)
    save_ndf(tmp_path / "a.ndf", (x, -x[:, :1]), features=["t", "u"], labels=["v"])
    run_json("convert", tmp_path / "a.ndf", tmp_path / "ds", "--part-rows", "100", capsys=capsys)
    run_json("shuffle", tmp_path / "a.ndf", tmp_path / "sh", "--part-rows", "64", capsys=capsys)
    for name in ("ds", "sh"):
        with open_ndf_dataset(tmp_path / name) as ds:
            assert (ds.features, ds.labels) == (("t", "u"), ("v",))
    run_json("convert", tmp_path / "ds", tmp_path / "b.parquet", capsys=capsys)
    assert pq.read_schema(tmp_path / "b.parquet").names == ["t", "u", "v"]


@pytest.mark.parametrize(
    "names",
    [{"features": ["t", "t"]}, {"features": ["t", ""]}, {"features": ["v", "u"], "labels": ["v"]}],
    ids=["twice", "empty", "feature-is-label"],
)
def test_a_dataset_with_bad_names_is_refused_by_info_and_convert(tmp_path, capsys, names):
    """Names save_ndf refuses, written into a manifest: info calls the dataset invalid
    and convert says why in one line (it called it valid, and convert ended in a
    traceback, before)."""
    from exactbatch.ndf import save_ndf_dataset

    save_ndf_dataset(tmp_path / "ds", [(np.zeros((3, 2)), np.zeros((3, 1)))])
    path = tmp_path / "ds" / "manifest.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **names}))
    r = run_json("info", tmp_path / "ds", capsys=capsys, status=1)
    assert r["valid"] is False and os.fspath(path) in r["error"]
    assert main(["convert", str(tmp_path / "ds"), str(tmp_path / "out.ndf"), "-q"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and os.fspath(path) in err
    assert not (tmp_path / "out.ndf").exists()
