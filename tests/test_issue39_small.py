"""Issue 39, the smaller items: each a clear error naming the argument or file, or the
expected result."""

from __future__ import annotations

import numpy as np
import pytest

import exactbatch
from exactbatch import DataLoader

X = np.arange(40.0).reshape(20, 2)


@pytest.mark.parametrize("name", ["batch_size", "total_size", "buffer_size", "threads", "prefetch"])
@pytest.mark.parametrize("value", [2**63, 2**64])
def test_an_int_argument_past_int64_is_a_value_error_naming_it(name, value):
    args = {"batch_size": 4, name: value}
    with pytest.raises(ValueError, match=f"^{name} must be <= "):
        list(DataLoader(X, **args))


def test_a_seed_of_any_size_is_still_a_seed():
    a = [b[0] for b in DataLoader(X, 4, seed=2**64 + 3)]
    assert np.array_equal(np.sort(np.concatenate(a), axis=0), X)


def test_prefetch_is_bounded_not_allocated():
    """prefetch=2**40 would queue 2**40 places: refused, naming it."""
    with pytest.raises(ValueError, match=r"^prefetch must be <= 1024; got prefetch=1099511627776"):
        DataLoader(X, 10, prefetch=2**40)
    assert len(list(DataLoader(X, 10, prefetch=1024))) == 2


@pytest.mark.parametrize("how", ["split", "kfold"])
def test_split_and_kfold_take_a_polars_data_frame(how):
    pl = pytest.importorskip("polars")
    df = pl.DataFrame({"a": X[:, 0], "g": np.arange(20) % 4})
    if how == "split":
        parts = exactbatch.split(df, (0.5, 0.5), groups="g")
        assert sorted(np.concatenate(parts).tolist()) == list(range(20))
    else:
        folds = exactbatch.kfold(df, 2)
        assert all(len(tr) + len(te) == 20 for tr, te in folds)


def test_certify_names_the_state_file_an_error_is_about(tmp_path, capsys):
    import json

    from exactbatch.cli import main

    loader = DataLoader(X, 5)
    for _ in loader:
        pass
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps(loader.state_dict()))
    state = loader.state_dict()
    state["history"] = "lost"
    bad.write_text(json.dumps(state))
    assert main(["certify", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert f"{bad}: the state['history'] must be a list" in err and str(good) not in err


@pytest.mark.parametrize("name", ["out.parquet", "out.csv", "out.npy"])
def test_shuffle_refuses_an_output_named_for_another_format(tmp_path, capsys, name):
    from exactbatch.cli import main

    exactbatch.save_ndf(tmp_path / "a.ndf", X)
    assert main(["shuffle", str(tmp_path / "a.ndf"), str(tmp_path / name)]) == 2
    assert f"{tmp_path / name}: shuffle writes an .ndf file" in capsys.readouterr().err
    assert not (tmp_path / name).exists()


def test_a_hive_key_past_int32_is_an_integer_key(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    for key in (3_000_000_000, 5):
        (tmp_path / f"id={key}").mkdir()
        pq.write_table(pa.table({"a": [1.0, 2.0]}), tmp_path / f"id={key}" / "p.parquet")
    source = exactbatch.parquet_source(tmp_path)
    x = np.concatenate([b[0] for b in DataLoader(source, 4, shuffle=False)])
    assert source.features == ("a", "id") and x[:, 1].tolist() == [3e9, 3e9, 5, 5]


@pytest.mark.parametrize("stats", [True, False], ids=["footer", "read"])
def test_a_partition_key_held_in_the_files_must_agree_with_the_path(tmp_path, stats):
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    (tmp_path / "year=2024").mkdir()
    path = tmp_path / "year=2024" / "p.parquet"
    pq.write_table(pa.table({"a": [1.0, 2.0], "year": [2023, 2024]}), path, write_statistics=stats)
    with pytest.raises(ValueError, match=r"p.parquet: the partition key 'year' is also a column"):
        exactbatch.parquet_source(tmp_path)
    pq.write_table(pa.table({"a": [1.0, 2.0], "year": [2024, 2024]}), path, write_statistics=stats)
    assert exactbatch.parquet_source(tmp_path).n_rows == 2


@pytest.mark.parametrize("lazy", [False, True], ids=["DataFrame", "LazyFrame"])
def test_polars_source_on_an_int128_column_names_it(lazy):
    pl = pytest.importorskip("polars")
    pytest.importorskip("pyarrow")
    df = pl.DataFrame({"a": [1.0, 2.0], "big": pl.Series([1, 2], dtype=pl.Int128)})
    with pytest.raises(ValueError, match=r"column\(s\) \['big \(Int128\)'\] have a type Arrow"):
        exactbatch.polars_source(df.lazy() if lazy else df)
