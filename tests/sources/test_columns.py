"""exactbatch.sources.columns on its own: a source's rows, its column names and
vocabularies, one of its columns by name. (Through split and kfold:
tests/order/test_splits.py; through a loader's features=/labels=:
tests/loader/test_by_name.py.)"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import make_data

from exactbatch import Dataset, ndf_blocks, open_ndf, save_ndf
from exactbatch.ndf import NdfWriter
from exactbatch.sources import columns
from exactbatch.sources.columns import (
    MissingColumnError,
    column_names,
    source_categories,
    source_column,
    source_size,
)
from exactbatch.sources.kinds import open_source

pd = pytest.importorskip("pandas")


class _Rows:
    """A RowSource whose reader counts its closes."""

    def __init__(self, x, y):
        self.x, self.y, self.closed = x, y, 0

    def open_reader(self):
        outer = self
        reader = open_source((self.x, self.y))
        close = reader.close

        def counted():
            outer.closed += 1
            close()

        reader.close = counted
        return reader


def test_source_size_of_each_kind_of_random_access_source(tmp_path):
    x, y = make_data(7, 3, 1)
    save_ndf(tmp_path / "a.ndf", (x, y))
    assert source_size(Dataset(x, y)) == 7
    assert source_size(open_ndf(tmp_path / "a.ndf")) == 7
    assert source_size(x) == 7 and source_size(np.zeros((0, 2))) == 0
    assert source_size(np.array(5.0)) == 0  # (no rows: a 0-d array has no shape)
    assert source_size((x, y)) == 7
    assert source_size(pd.DataFrame(x)) == 7
    rows = _Rows(x[:5], y[:5])  # no shape: opened, its n read, closed
    assert source_size(rows) == 5 and rows.closed == 1


def test_source_size_of_a_stream_is_a_type_error_naming_it():
    def chunks():
        return iter([np.zeros((3, 2))])

    with pytest.raises(TypeError) as info:
        source_size(chunks)
    assert str(info.value) == (
        "a function is a stream, read front to back: its rows have no ids to split or "
        "select. Split a random-access source (an .ndf file or dataset, arrays), or pass "
        "the row count n"
    )


def test_column_names_of_frames_files_and_sources_without_names(tmp_path):
    x, y = make_data(6, 2, 1)
    fx = pd.DataFrame(x, columns=["a", "b"])
    fy = pd.DataFrame(y, columns=["t"])
    assert column_names((fx, fy)) == (["a", "b"], ["t"])
    assert column_names(fx) == (["a", "b"], [])
    assert column_names((fx, y)) is None  # a pair of a frame and an array: no names
    save_ndf(tmp_path / "named.ndf", (x, y), features=["id", "store"], labels=["t"])
    save_ndf(tmp_path / "plain.ndf", (x, y))
    named, plain = open_ndf(tmp_path / "named.ndf"), open_ndf(tmp_path / "plain.ndf")
    assert column_names(named) == (["id", "store"], ["t"])
    assert column_names(plain) is None  # x0, x1, y0: positions, not names
    blocks = ndf_blocks(named, 2)  # the names of the file a stream reads
    assert column_names(blocks, open_source(blocks)) == (["id", "store"], ["t"])
    assert column_names(x) is None and column_names((x, y)) is None
    assert column_names(Dataset(x, y)) is None


def test_source_categories_of_a_coded_file_and_of_a_source_without_them(tmp_path):
    cats = {"city": ["Lima", "Oslo"]}
    path = tmp_path / "coded.ndf"
    with NdfWriter(path, 2, 1, features=["a", "city"], labels=["y"], categories=cats) as w:
        w.write(np.array([[1.0, 0.0, 0.0], [2.0, 1.0, 1.0]]))
    f = open_ndf(path)
    assert source_categories(f) == cats
    blocks = ndf_blocks(f, 1)
    assert source_categories(blocks, open_source(blocks)) == cats
    assert source_categories(np.zeros((2, 2))) == {}


def test_source_column_of_a_frame_is_its_values_of_any_dtype():
    df = pd.DataFrame({"id": [1.0, 2.0, 3.0], "city": ["Oslo", "Lima", "Oslo"]})
    assert source_column(df, "city").tolist() == ["Oslo", "Lima", "Oslo"]
    np.testing.assert_array_equal(source_column(df, "id"), [1.0, 2.0, 3.0])


@pytest.mark.parametrize("block_rows", [1 << 16, 4, 5, 11])
def test_source_column_of_a_file_reads_it_in_blocks_features_and_labels(
    tmp_path, monkeypatch, block_rows
):
    """A feature or a label column of an .ndf file, whatever the block: every row once."""
    monkeypatch.setattr(columns, "_BLOCK_ROWS", block_rows)
    x, y = make_data(11, 3, 2)
    save_ndf(tmp_path / "f.ndf", (x, y), features=["a", "b", "c"], labels=["s", "t"])
    f = open_ndf(tmp_path / "f.ndf")
    for j, name in enumerate(["a", "b", "c"]):
        got = source_column(f, name)
        assert got.dtype == np.float64 and got.shape == (11,)
        np.testing.assert_array_equal(got, x[:, j])
    for j, name in enumerate(["s", "t"]):
        np.testing.assert_array_equal(source_column(f, name), y[:, j])


def test_a_source_without_names_or_a_name_it_lacks_is_refused_naming_the_argument(tmp_path):
    x, y = make_data(4, 2, 1)
    with pytest.raises(TypeError) as info:
        source_column((x, y), "a", arg="stratify")
    assert str(info.value) == (
        "stratify='a' names a column, but a tuple source has no column names: pass "
        "stratify as an array of one label per row"
    )
    names = [f"c{j}" for j in range(45)]
    save_ndf(tmp_path / "wide.ndf", np.zeros((2, 45)), features=names)
    with pytest.raises(MissingColumnError) as info:
        source_column(open_ndf(tmp_path / "wide.ndf"), "zz")
    shown = names[:40] + ["..."]
    assert str(info.value) == f"groups='zz': no such column; the source has {shown}"
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
    save_ndf(tmp_path / "narrow.ndf", np.zeros((2, 40)), features=names[:40])
    with pytest.raises(MissingColumnError) as info:
        source_column(open_ndf(tmp_path / "narrow.ndf"), "zz", arg="key")
    assert str(info.value) == f"key='zz': no such column; the source has {names[:40]}"
    save_ndf(tmp_path / "forty_one.ndf", np.zeros((2, 41)), features=names[:41])
    with pytest.raises(MissingColumnError) as info:
        source_column(open_ndf(tmp_path / "forty_one.ndf"), "zz")
    assert str(info.value).endswith(f"the source has {names[:40] + ['...']}")
    assert str(MissingColumnError()) == ""


def test_a_source_with_feature_names_and_no_label_names_has_its_columns():
    """``features`` alone (``labels`` None) still names the columns."""
    x, y = make_data(6, 3, 0)

    class Named(_Rows):
        features, labels = ("a", "b", "c"), None

    src = Named(x, y)
    np.testing.assert_array_equal(source_column(src, "b"), x[:, 1])
    assert column_names(src) == (["a", "b", "c"], [])


def test_a_pyarrow_table_is_split_by_its_column_names():
    """A pyarrow Table passes for a frame (columns, [name], shape), but its .columns are
    its arrays: split and kfold look its columns up by its names (any type groups)."""
    pa = pytest.importorskip("pyarrow")
    from exactbatch import kfold, split

    t = pa.table({"a": [1.0, 2.0, 3.0, 4.0], "g": [0.0, 0.0, 1.0, 1.0], "s": list("pqpq")})
    assert source_size(t) == 4
    assert source_column(t, "s").tolist() == ["p", "q", "p", "q"]
    np.testing.assert_array_equal(source_column(t, "g"), [0.0, 0.0, 1.0, 1.0])
    parts = split(t, (0.5, 0.5), groups="s")
    assert sorted(map(list, parts)) == [[0, 2], [1, 3]]
    for _train, test in kfold(t, 2, stratify="g"):
        assert sorted(t.column("g").to_numpy()[test].tolist()) == [0.0, 1.0]
    with pytest.raises(MissingColumnError) as info:
        source_column(t, "zz")
    assert str(info.value) == "groups='zz': no such column; the source has ['a', 'g', 's']"


def test_column_names_of_a_pyarrow_table_are_its_arrow_sources():
    """A Table is read as arrow_source(table) (its numeric columns): its names are that
    source's, not every column's; a pair of tables names every column of each."""
    pa = pytest.importorskip("pyarrow")
    from exactbatch import arrow_source

    t = pa.table({"a": [1.0, 2.0], "b": [3.0, 4.0]})
    assert column_names(t) is None
    assert column_names(arrow_source(t)) == (["a", "b"], [])
    assert column_names((t, pa.table({"y": [0.0, 1.0]}))) == (["a", "b"], ["y"])


def test_names_and_vocabularies_found_only_on_what_opened_the_source():
    """A polars LazyFrame has no names of its own: its stream's source has them."""
    pl = pytest.importorskip("polars")
    from exactbatch import polars_source

    lf = pl.DataFrame({"a": [1.0, 2.0], "c": ["u", "v"], "t": [0.0, 1.0]}).lazy()
    plain = lf.select("a", "t")
    assert column_names(plain) is None
    assert column_names(plain, open_source(plain)) == (["a", "t"], [])
    coded = open_source(polars_source(lf, features=["a", "c"], labels="t", categorical=["c"]))
    assert source_categories(lf) == {}
    assert source_categories(lf, coded) == {"c": ["u", "v"]}


def test_positional_names_on_one_side_only_still_name_the_columns():
    """``x0, x1`` features with named labels: names (None only when both are positions)."""
    from exactbatch.ndf.names import DefaultNames

    class Half:
        features, labels = DefaultNames("x", 2), ("t",)

    class Other:
        features, labels = ("a",), DefaultNames("y", 1)

    assert column_names(Half()) == (["x0", "x1"], ["t"])
    assert column_names(Other()) == (["a"], ["y0"])


def test_source_size_refuses_a_tuple_of_three_and_a_chunk_source(tmp_path):
    """Only an (x, y) pair counts its x's rows; ``ndf_blocks`` (a ``d``, no ``n``) is a
    stream."""
    x, y = make_data(5, 2, 1)
    with pytest.raises(TypeError, match="^a tuple source must be an \\(x, y\\) pair; got a 3-"):
        source_size((x, y, y))
    save_ndf(tmp_path / "a.ndf", (x, y))
    with open_ndf(tmp_path / "a.ndf") as f:
        with pytest.raises(TypeError, match="^a NdfBlocks is a stream, read front to back"):
            source_size(ndf_blocks(f, 2))


def test_a_polars_lazy_frame_is_no_frame_and_its_schema_is_not_resolved():
    pl = pytest.importorskip("polars")
    lazy = pl.DataFrame({"a": [1.0, 2.0], "b": [3.0, 4.0]}).lazy()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # polars' PerformanceWarning on .columns
        assert not columns.is_frame(lazy)
        assert column_names(lazy) is None
    assert columns.is_frame(lazy.collect())
    assert columns.is_frame(pd.DataFrame({"a": [1.0]}))
    assert not columns.is_frame(np.zeros((2, 2)))
