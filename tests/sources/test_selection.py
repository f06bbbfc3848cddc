"""DataLoader(..., features=, labels=): a column selection on every kind of source.

The laws over the selection run in tests/test_law_matrix.py (its columns axis);
here: what is chosen (names, positions, roles), the kinds opened with the
selection, the errors, and the fingerprint that refuses a state of another
selection.
"""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest
from doubles import ChunksDouble

import exactbatch
from exactbatch import DataLoader, open_ndf, save_ndf
from exactbatch.ndf import NdfWriter
from exactbatch.sources.selection import select_columns

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


# -- what a selection says of itself (select_columns directly): the loader's fingerprint
# and categories are made of these


def test_a_selected_files_identity_is_its_files_and_the_chosen_columns(ndf_file):
    s = select_columns(ndf_file, features=["tenure", "age"])
    want = {"features": [3, 0], "labels": [4], "names": [["tenure", "age"], ["churned"]]}
    assert (s.features, s.labels, s.selection) == (["tenure", "age"], ["churned"], want)
    about = s.identity()
    assert (about["kind"], about["path"]) == ("ndf", ndf_file.path)
    assert about["size"] == os.path.getsize(ndf_file.path)
    assert "sample" not in about  # (the loader samples the selected rows itself)
    assert about["names"] == {"features": ["tenure", "age"], "labels": ["churned"]}
    assert about["selection"] == want


def test_arrays_selected_are_named_by_their_kind_and_positions():
    x, y = _data()
    s = select_columns((x, y), features=[3, 4], labels=[0])
    assert s.identity() == {
        "kind": "memory",
        "names": None,
        "selection": {"features": [3, 4], "labels": [0]},
    }


def test_only_the_chosen_coded_columns_keep_their_vocabularies(tmp_path):
    x, y = _data()
    x[:, 2] = np.arange(len(x)) % 2  # customer_id, coded
    path = tmp_path / "coded.ndf"
    cats = {"customer_id": ["a", "b"]}
    with NdfWriter(path, 4, 1, features=NAMES[0], labels=NAMES[1], categories=cats) as w:
        w.write(np.hstack([x, y]))
    with open_ndf(path) as f:
        assert select_columns(f, features=["customer_id", "age"]).categories == cats
        assert select_columns(f, features=["age"]).categories == {}


def test_a_selected_sharded_datasets_blocks_say_what_they_read(tmp_path):
    x, y = _data()
    path = tmp_path / "ds"
    exactbatch.save_ndf_dataset(
        path, [(x[:9], y[:9]), (x[9:], y[9:])], features=NAMES[0], labels=NAMES[1]
    )
    with exactbatch.open_ndf_dataset(path) as ds:
        blocks = exactbatch.ndf_blocks(ds, 5)
        s = select_columns(blocks, features=["tenure"], labels=["age"])
        assert (s.d, s.l, s.features, s.labels) == (1, 1, ["tenure"], ["age"])
        assert s.will_need == blocks.will_need
        want = {"features": [3], "labels": [0], "names": [["tenure"], ["age"]]}
        assert s.selection == want
        about = s.identity()
        assert (about["kind"], about["selection"]) == ("ndf dataset", want)
        assert about["names"] == {"features": ["tenure"], "labels": ["age"]}
        gx, gy = s.read_chunk(0)
        np.testing.assert_array_equal(gx, x[:5, [3]])
        np.testing.assert_array_equal(gy, x[:5, [0]])


def test_a_stream_without_widths_records_its_arguments_until_its_first_chunk():
    x, y = _data()

    def chunks():
        yield x[:10], y[:10]
        yield x[10:], y[10:]

    s = select_columns(chunks, features=[3])
    given = {"features": [3], "labels": None}
    assert (s.selection, s.features, s.labels) == (given, None, None)
    assert s.identity() == {"kind": "stream", "names": None, "rows": None, "selection": given}
    gx = np.concatenate([c[0] for c in s()])
    np.testing.assert_array_equal(gx, x[:, [3]])
    assert s.selection == {"features": [3], "labels": [4]}
    assert s.identity()["selection"] == {"features": [3], "labels": [4]}
    s = select_columns(chunks, features=[3], labels=[0])
    assert s.selection == {"features": [3], "labels": [0]}


def test_a_selected_list_of_chunks_keeps_its_sample():
    """A re-iterable of chunks is named by a sample of its rows: two lists of other rows
    are two sources, under the same selection."""
    x, y = _data()
    a = select_columns([(x[:10], y[:10]), (x[10:], y[10:])], features=[3]).identity()
    b = select_columns([(x[:10], y[:10]), (x[10:] + 1, y[10:])], features=[3]).identity()
    assert a["kind"] == b["kind"] == "chunks"
    assert re.fullmatch("[0-9a-f]{32}", a["sample"]) and a["sample"] != b["sample"]


def test_a_bad_chunk_under_a_selection_is_named_by_its_place():
    x, y = _data()

    def chunks():
        yield x[:10], y[:10]
        yield x[10:, :3], y[10:]

    with pytest.raises(ValueError, match="chunk 1"):
        list(select_columns(chunks, features=[0])())


def test_a_chunk_indexed_sources_bad_chunk_is_named_by_its_index():
    """A chunk read by its index (a shard's, in a shuffled order) is named by that index
    when its widths disagree with the first chunk read."""
    x, y = _data()
    source = ChunksDouble(x, y, [5, 5, 5, 8])
    s = select_columns(source, features=[3])
    gx, _ = s.read_chunk(1)
    np.testing.assert_array_equal(gx, x[5:10, [3]])
    source.x = x[:, :3]  # the chunks read from now on are one column short
    with pytest.raises(ValueError, match=r"^chunk 2: expected x of shape \(rows, 4\)"):
        s.read_chunk(2)


def test_a_repeated_or_shared_column_is_shown_by_name_or_position(ndf_file):
    with pytest.raises(ValueError, match=re.escape("more than once: ['age', 'age']")):
        select_columns(ndf_file, features=["age", "age"])
    with pytest.raises(ValueError, match=re.escape("column(s) ['churned'] are chosen both")):
        select_columns(ndf_file, features=["age", "churned"])
    x, y = _data()
    with pytest.raises(ValueError, match=re.escape("more than once: [1, 1]")):
        select_columns((x, y), features=[1, 1])


def test_a_label_column_among_the_features_with_no_labels():
    """features=[0, 4], labels=(): every chosen column a feature, one of them the
    source's label (the take joins x and y)."""
    x, y = _data()
    s = select_columns((x, y), features=[0, 4], labels=())
    out_x, out_y = np.empty((23, 2)), np.empty((23, 0))
    s.open_reader().read(slice(0, 23), out_x, out_y)
    np.testing.assert_array_equal(out_x, np.column_stack([x[:, 0], y[:, 0]]))


def test_every_reader_of_a_selection_reads_the_same_rows(ndf_file):
    x, _ = _data()
    s = select_columns(ndf_file, features=["tenure"], labels=())
    for _ in range(2):  # the first reader is the one opened; the second opens its own
        out_x, out_y = np.empty((4, 1)), np.empty((4, 0))
        s.open_reader().read(np.array([0, 5, 6, 22]), out_x, out_y)
        np.testing.assert_array_equal(out_x, x[[0, 5, 6, 22]][:, [3]])
