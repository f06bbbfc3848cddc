"""Columns meet by name (issue 39, items 1-3): statistics, transforms, partition keys
and vocabularies described by one tool and consumed by another.

Laws: ``Standardize`` built from a report that names its columns standardises each
feature the loader reads with the statistics of the column of ITS name, whatever the
order of either side (a Parquet file's order, the loader's features then labels, Hive
keys last); a feature it has no statistics for, or position-only statistics of another
width, is refused naming the columns. ``info``, ``info --stats`` and ``mixing`` see a
Hive folder's partition keys where the loader reads them. A vocabulary codes a value
by the entry equal to it (never by a cast), ±0 being one value; float32 batches refuse
codes they cannot hold exactly.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from exactbatch import DataLoader, Standardize, parquet_source  # noqa: E402
from exactbatch.cli import main  # noqa: E402
from exactbatch.dataset import Dataset  # noqa: E402
from exactbatch.sources.random_access import MemoryReader  # noqa: E402
from exactbatch.tools.info import info  # noqa: E402


def _epoch(src, **kw) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = zip(*DataLoader(src, 64, shuffle=False, **kw), strict=True)
    return np.concatenate(xs), np.concatenate(ys)


def _file(tmp_path):
    """A file whose columns are in another order than the loader's (y first)."""
    rng = np.random.default_rng(0)
    t = pa.table({"y": rng.normal(200, 5, 300), "a": rng.normal(0, 1, 300)})
    t = t.append_column("b", pa.array(rng.normal(-10, 2, 300)))
    pq.write_table(t, tmp_path / "f.parquet")
    return t


def _hive(tmp_path):
    rng = np.random.default_rng(1)
    for year in (2023, 2024, 2025):
        os.makedirs(tmp_path / f"year={year}")
        t = pa.table({"a": rng.normal(3, 2, 50), "y": rng.normal(0, 1, 50)})
        pq.write_table(t, tmp_path / f"year={year}" / "p.parquet")
    return tmp_path


def test_info_stats_standardise_the_loaders_columns_by_name(tmp_path):
    t = _file(tmp_path)
    report = json.loads(json.dumps(info(tmp_path / "f.parquet", stats=True, bar=False)))
    assert [r["name"] for r in report["stats"]] == ["y", "a", "b"]  # the file's order
    src = parquet_source(tmp_path / "f.parquet", features=["a", "b"], labels=["y"])
    x, y = _epoch(src, transform=Standardize(report))
    for j, c in enumerate(["a", "b"]):
        v = t.column(c).to_numpy()
        np.testing.assert_allclose(x[:, j], (v - v.mean()) / v.std(), atol=1e-12)
    np.testing.assert_array_equal(y[:, 0], t.column("y").to_numpy())  # labels untouched


def test_a_hive_key_is_standardised_by_its_own_statistics(tmp_path):
    _hive(tmp_path)
    report = info(tmp_path, stats=True, bar=False)
    assert [r["name"] for r in report["stats"]] == ["a", "y", "year"]  # the loader's order
    x, _ = _epoch(parquet_source(tmp_path, labels=["y"]), transform=Standardize(report))
    np.testing.assert_allclose(x.mean(axis=0), 0.0, atol=1e-9)
    np.testing.assert_allclose(x.std(axis=0), 1.0, rtol=1e-9)


def test_a_frame_takes_named_statistics_in_its_own_order():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"p": [1.0, 3.0], "q": [10.0, 30.0]})
    stats = [{"name": "q", "mean": 20.0, "sd": 10.0}, {"name": "p", "mean": 2.0, "sd": 1.0}]
    x, _ = _epoch(frame, transform=Standardize(stats))
    np.testing.assert_array_equal(x, [[-1.0, -1.0], [1.0, 1.0]])


def test_statistics_that_miss_a_feature_or_disagree_in_width_name_the_columns(tmp_path):
    _file(tmp_path)
    src = parquet_source(tmp_path / "f.parquet", features=["a", "b"], labels=["y"])
    named = Standardize([{"name": "a", "mean": 0, "sd": 1}, {"name": "y", "mean": 0, "sd": 1}])
    with pytest.raises(ValueError, match=r"transform: .*feature\(s\) \['b'\]"):
        DataLoader(src, 8, transform=named)
    by_position = Standardize(([0.0] * 4, [1.0] * 4))
    with pytest.raises(ValueError, match=r"transform: .*4 columns by position.*\['a', 'b'\]"):
        next(iter(DataLoader(src, 8, transform=by_position)))  # (a stream: at its first batch)
    with pytest.raises(ValueError, match=r"column\(s\) \['a'\] have statistics twice"):
        Standardize([{"name": "a", "mean": 0, "sd": 1}, {"name": "a", "mean": 0, "sd": 1}])


# -- item 2: every tool sees the loader's columns ------------------------------------------


def test_info_and_mixing_see_a_hive_folders_partition_keys(tmp_path, capsys):
    _hive(tmp_path)
    report = info(tmp_path, bar=False)
    cols = [(c["name"], c.get("partition_key", False)) for c in report["columns"]]
    assert cols == [("a", False), ("y", False), ("year", True)]
    argv = ["mixing", str(tmp_path), "--columns", "year", "--batch-size", "10", "--json"]
    assert main([*argv, "--buffer-size", "40"]) in (0, 1)  # a verdict, not "no column"
    out = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in out["ks"]["columns"]] == ["year"]
    assert [c["name"] for c in out["skipped_columns"]] == ["a", "y"]


def test_bench_reads_a_hive_key_as_the_loader_does(tmp_path, capsys):
    _hive(tmp_path)
    argv = ["bench", str(tmp_path), "--features", "a,year", "--labels", "y"]
    assert main([*argv, "--batch-size", "50", "--json"]) == 0
    assert "loader" in capsys.readouterr().out


# -- item 3: vocabularies by equality ------------------------------------------------------


def _coded(tmp_path, table, categorical, name="c.parquet"):
    pq.write_table(table, tmp_path / name)
    src = parquet_source(tmp_path / name, features=["c"], labels=(), categorical=categorical)
    return _epoch(src)[0][:, 0], src


def test_an_int_column_takes_the_code_of_the_equal_entry_never_a_truncated_one(tmp_path):
    codes, _ = _coded(tmp_path, pa.table({"c": [0, 1, -1]}), {"c": [-0.5, 0, 1, -1.0]})
    np.testing.assert_array_equal(codes, [1, 2, 3])
    with pytest.raises(ValueError, match=r"holds 2 \(row 0\).*not in its vocabulary"):
        _coded(tmp_path, pa.table({"c": [2]}), {"c": [2.5, 1.5]}, "d.parquet")


def test_a_learned_vocabulary_with_both_zeros_codes_its_own_data(tmp_path):
    codes, src = _coded(tmp_path, pa.table({"c": [-0.0, 0.0, 1.5, np.nan]}), ["c"])
    assert src.categories == {"c": [0.0, 1.5]}  # ±0 one category, kept as 0.0
    np.testing.assert_array_equal(codes[:3], [0, 0, 1])
    assert np.isnan(codes[3])


def test_a_numpy_array_as_a_vocabulary_codes_by_its_values():
    from exactbatch import arrow_source

    def codes(values, vocabulary):
        t = pa.table({"c": values})
        src = arrow_source(t, features=["c"], labels=(), categorical={"c": vocabulary})
        return _epoch(src)[0][:, 0]

    np.testing.assert_array_equal(codes(["a", "b"], np.array(["b", "a"])), [1, 0])  # np.str_
    np.testing.assert_array_equal(codes([True, False], np.array([False, True])), [1, 0])
    np.testing.assert_array_equal(codes([0, 1], np.array([-0.5, 0, 1])), [1, 2])
    with pytest.raises(ValueError, match="holds 1 "):  # an np.bool_ is not the number 1 either
        codes([1, 0], np.array([False, True]))


def test_numbers_strings_and_booleans_are_distinct_categories(tmp_path):
    with pytest.raises(ValueError, match="holds 1 "):
        _coded(tmp_path, pa.table({"c": [1, 0]}), {"c": [False, True]})
    with pytest.raises(ValueError, match="holds '1' "):
        _coded(tmp_path, pa.table({"c": ["1"]}), {"c": [1, 2]}, "s.parquet")
    big = [2**53, 2**53 + 1]  # one float64 apart from none: coded exactly
    codes, _ = _coded(tmp_path, pa.table({"c": big[::-1]}), {"c": big}, "b.parquet")
    np.testing.assert_array_equal(codes, [1, 0])


def test_the_vocabulary_is_not_hashed_again_per_batch(tmp_path, monkeypatch):
    import pyarrow.compute as pc

    values = np.arange(5000)
    pq.write_table(pa.table({"c": values[::-1].astype(str)}), tmp_path / "v.parquet")
    pq.write_table(pa.table({"c": values[::-1]}), tmp_path / "w.parquet", row_group_size=500)
    for f in ("v.parquet", "w.parquet"):
        src = parquet_source(tmp_path / f, features=["c"], labels=(), categorical=["c"])

        def whole(*a, **k):  # hashes its whole value_set each call
            raise AssertionError("the vocabulary was hashed for a batch")

        monkeypatch.setattr(pc, "index_in", whole)
        x, _ = _epoch(src)
        monkeypatch.undo()
        order = np.argsort(values.astype(str)) if f == "v.parquet" else values
        np.testing.assert_array_equal(np.sort(x[:, 0]), np.arange(5000))
        assert np.array_equal(x[:, 0], np.argsort(order)[values[::-1]])


class _Coded:
    """A RowSource whose one column is coded against a vocabulary of ``k`` values."""

    features, labels = ("c",), ()

    def __init__(self, k: int):
        self.categories = {"c": range(k)}

    def open_reader(self):
        return MemoryReader(Dataset(np.zeros((4, 1))))


def test_float32_batches_refuse_codes_they_cannot_hold():
    with pytest.raises(ValueError, match=r"dtype=float32: column 'c' has 16,777,218 categ"):
        DataLoader(_Coded(2**24 + 2), 2, dtype=np.float32)
    DataLoader(_Coded(2**24 + 1), 2, dtype=np.float32)  # codes up to 2**24: exact
    DataLoader(_Coded(2**24 + 2), 2, dtype=np.float64)


def test_a_nan_error_names_the_feature():
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"p": [1.0, 2.0], "q": [3.0, np.nan]})
    with pytest.raises(ValueError, match=r"row 1 has NaN in feature column 1 \('q'\)"):
        _epoch(frame, nan="error")
