"""DataLoader(..., features=, labels=): a column selection on every kind of source.

The laws over the selection run in tests/test_law_matrix.py (its columns axis);
here: what is chosen (names, positions, roles), the kinds opened with the
selection, the errors, and the fingerprint that refuses a state of another
selection.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import exactbatch
from exactbatch import DataLoader, open_ndf, save_ndf

NAMES = (["age", "income", "customer_id", "tenure"], ["churned"])


def _data(n: int = 23):
    rng = np.random.default_rng(3)
    return rng.normal(size=(n, 4)), rng.integers(0, 2, size=(n, 1)).astype(np.float64)


def _one_epoch(loader):
    xs, ys = zip(*[(b[0], b[1]) for b in loader], strict=True)
    return np.concatenate(xs), np.concatenate(ys)


@pytest.fixture
def ndf_file(tmp_path):
    path = tmp_path / "churn.ndf"
    save_ndf(path, _data(), features=NAMES[0], labels=NAMES[1])
    with open_ndf(path) as f:
        yield f


def test_a_group_column_left_out_of_the_features_keeps_the_labels(ndf_file):
    x, y = _data()
    loader = DataLoader(ndf_file, 5, shuffle=False, features=["age", "income", "tenure"])
    assert (loader.d, loader.l) == (3, 1)
    gx, gy = _one_epoch(loader)
    np.testing.assert_array_equal(gx, x[:, [0, 1, 3]])
    np.testing.assert_array_equal(gy, y)


def test_roles_swap_and_order_follows_the_arguments(ndf_file):
    x, y = _data()
    loader = DataLoader(ndf_file, 7, shuffle=False, features=["churned", "age"], labels=["tenure"])
    gx, gy = _one_epoch(loader)
    np.testing.assert_array_equal(gx, np.column_stack([y[:, 0], x[:, 0]]))
    np.testing.assert_array_equal(gy, x[:, [3]])
    # labels=[name]: the features are the source's others (its label dropped from them)
    gx, gy = _one_epoch(DataLoader(ndf_file, 7, shuffle=False, labels="income"))
    np.testing.assert_array_equal(gx, x[:, [0, 2, 3]])
    np.testing.assert_array_equal(gy, x[:, [1]])


def test_positions_on_sources_without_names():
    x, y = _data()
    for source in ((x, y), exactbatch.Dataset(x, y), [(x[:10], y[:10]), (x[10:], y[10:])]):
        loader = DataLoader(source, 6, shuffle=False, features=[3, 4], labels=[0], total_size=23)
        gx, gy = _one_epoch(loader)
        np.testing.assert_array_equal(gx, np.column_stack([x[:, 3], y[:, 0]]))
        np.testing.assert_array_equal(gy, x[:, [0]])


def test_a_selected_sharded_dataset_and_ndf_blocks(tmp_path):
    x, y = _data()
    path = tmp_path / "ds"
    exactbatch.save_ndf_dataset(path, [(x[:9], y[:9]), (x[9:], y[9:])])
    want = x[:, [2, 0]]
    with exactbatch.open_ndf_dataset(path) as ds:
        gx, _ = _one_epoch(DataLoader(ds, 4, shuffle=False, features=[2, 0]))
        np.testing.assert_array_equal(gx, want)
        blocks = exactbatch.ndf_blocks(ds, 5)
    loader = DataLoader(blocks, 4, shuffle=True, seed=3, features=[2, 0], with_rows=True)
    got = sorted((int(r), tuple(v)) for b in loader for r, v in zip(b[2], b[0], strict=True))
    assert got == [(i, tuple(want[i])) for i in range(23)]


def test_dataframes_by_name():
    pd = pytest.importorskip("pandas")
    x, _ = _data()
    frame = pd.DataFrame(x, columns=NAMES[0])
    gx, gy = _one_epoch(DataLoader(frame, 5, shuffle=False, features=["tenure"], labels=["age"]))
    np.testing.assert_array_equal(gx, x[:, [3]])
    np.testing.assert_array_equal(gy, x[:, [0]])


def _table():
    pa = pytest.importorskip("pyarrow")
    x, y = _data()
    cols = dict(zip(NAMES[0], x.T, strict=True))
    return pa.table({**cols, "city": ["a"] * len(x), "churned": y[:, 0]})


@pytest.mark.parametrize("kind", ["table", "polars", "lazyframe", "duckdb", "hf"])
def test_arrow_native_kinds_are_opened_with_the_selection(kind, recwarn):
    """A pyarrow Table, polars frame, DuckDB relation or HF Dataset given to the loader
    as it is reads only the chosen columns: the string column left out warns nothing."""
    table = _table()
    if kind in ("polars", "lazyframe"):
        pl = pytest.importorskip("polars")
        table = pl.from_arrow(table)
        table = table.lazy() if kind == "lazyframe" else table
    elif kind == "duckdb":
        duckdb = pytest.importorskip("duckdb")
        con = duckdb.connect()
        con.register("t", table)
        table = con.sql("SELECT * FROM t")
    elif kind == "hf":
        datasets = pytest.importorskip("datasets")
        table = datasets.Dataset(table)
    x, y = _data()
    # positions count the columns the loader reads unselected: a polars DataFrame's all
    # of them (city at 4), the others' the numeric ones (city left out)
    churned = 5 if kind == "polars" else 4
    for feats, labs in ((["tenure", "age"], ["churned"]), ([3, 0], [churned])):
        loader = DataLoader(table, 6, shuffle=False, features=feats, labels=labs, total_size=23)
        gx, gy = _one_epoch(loader)
        np.testing.assert_array_equal(gx, x[:, [3, 0]])
        np.testing.assert_array_equal(gy, y)
    assert not [w for w in recwarn if "city" in str(w.message) and feats != [3, 0]]


def test_parquet_and_arrow_sources_select_among_their_columns(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    table = _table().drop_columns(["city"])
    pq.write_table(table, tmp_path / "a.parquet", row_group_size=5)
    x, y = _data()
    for source in (
        exactbatch.parquet_source(tmp_path / "a.parquet", labels=["churned"]),
        exactbatch.arrow_source(table, labels=["churned"]),
        exactbatch.arrow_source(lambda: pa.RecordBatchReader.from_batches(
            table.schema, table.to_batches(max_chunksize=4)), labels=["churned"]),
    ):  # fmt: skip
        loader = DataLoader(source, 6, shuffle=False, features=["income"], total_size=23)
        gx, gy = _one_epoch(loader)
        np.testing.assert_array_equal(gx, x[:, [1]])
        np.testing.assert_array_equal(gy, y)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"features": ["nope"]}, ValueError, "features: no column 'nope'"),
        ({"features": [7]}, ValueError, "position 7 is out of range"),
        ({"labels": [-1]}, ValueError, "labels: column position -1"),
        ({"features": ["age", "age"]}, ValueError, "more than once"),
        ({"features": ["age", "churned"]}, ValueError, "both as features and as labels"),
        ({"features": [1.0]}, TypeError, "features entries must be"),
        ({"labels": [True]}, TypeError, "labels entries must be"),
        ({"features": {"age": 1}}, TypeError, "features must be a list"),
    ],
)
def test_bad_selections_name_the_argument(ndf_file, kwargs, error, words):
    with pytest.raises(error, match=words):
        DataLoader(ndf_file, 4, **kwargs)


def test_names_on_a_source_without_names():
    with pytest.raises(ValueError, match="features: 'age' names a column, but this source has no"):
        DataLoader(np.zeros((5, 3)), 2, features=["age"])


def test_a_state_of_another_selection_is_refused(ndf_file):
    def loader(**kw):
        return DataLoader(ndf_file, 4, seed=1, **kw)

    a = loader(features=["age", "tenure"])
    it = iter(a)
    next(it)
    state = json.loads(json.dumps(a.state_dict()))
    assert state["fingerprint"]["selection"]["features"] == [0, 3]
    same = loader(features=[0, 3])  # the same columns, by position
    same.load_state_dict(state)
    rest = _one_epoch(same)[0]
    np.testing.assert_array_equal(rest, np.concatenate([b[0] for b in it]))
    for other in (loader(features=["tenure", "age"]), loader(features=["age", "income"])):
        with pytest.raises(ValueError, match="selection"):
            other.load_state_dict(state)
    with pytest.raises(ValueError, match="d=2"):
        loader().load_state_dict(state)
    with pytest.raises(ValueError, match="selection"):  # every column, chosen: differs
        loader(features=[0, 1, 2, 3]).load_state_dict(loader().state_dict())


def test_a_transform_meets_the_chosen_columns_by_name(ndf_file):
    x, _ = _data()
    stats = {"names": NAMES[0][::-1], "mean": [4.0, 3.0, 2.0, 1.0], "sd": [1.0, 1.0, 1.0, 2.0]}
    t = exactbatch.Standardize(stats)
    loader = DataLoader(ndf_file, 5, shuffle=False, features=["tenure", "age"], transform=t)
    gx, _ = _one_epoch(loader)
    np.testing.assert_allclose(gx, np.column_stack([x[:, 3] - 4.0, (x[:, 0] - 1.0) / 2.0]))
