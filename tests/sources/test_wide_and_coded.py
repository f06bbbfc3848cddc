"""Wide sources and coded columns (issue 39, items 4 and 5).

Laws: checking the chosen columns against a schema is linear in the column count
(counted as name comparisons: a file of thousands of columns costs a pass over
its names, not one per name); ``polars_source``, ``duckdb_source`` and
``arrow_source`` code ``categorical=`` columns by the rule of
:mod:`exactbatch.sources.categorical`, as ``parquet_source`` does; the statistics
of a subset of a Dask collection's rows are those of the rows themselves.
"""

from __future__ import annotations

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from exactbatch import DataLoader, arrow_source, parquet_source  # noqa: E402

K = 1500  # columns: the old checks made ~K**2 / 2 = 1.1M comparisons


class _Counted(str):
    """A column name that counts the comparisons made with it."""

    calls = 0

    def __eq__(self, other):
        _Counted.calls += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def _names() -> list[str]:
    return [_Counted(f"c{i}") for i in range(K)]


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_column_checks_are_linear_in_the_column_count(tmp_path, kind):
    table = pa.table({f"c{i}": np.zeros(3) for i in range(K)})
    pq.write_table(table, tmp_path / "w.parquet")
    names = _names()
    _Counted.calls = 0
    if kind == "parquet":
        src = parquet_source(tmp_path / "w.parquet", features=names, labels=())
        src.read_chunk(0)
    else:
        src = arrow_source(table, features=names)
    assert src.d == K
    assert _Counted.calls < 20 * K, f"{_Counted.calls} name comparisons for {K} columns"


def _frame_data():
    rng = np.random.default_rng(3)
    cities = np.array(["oslo", "lima", "baku", "nuuk"])
    return {
        "city": cities[rng.integers(0, 4, 40)].tolist(),
        "x": rng.normal(size=40),
        "y": rng.integers(0, 2, 40).astype(np.float64),
    }


def _expected(data, vocab):
    codes = np.array([vocab.index(c) for c in data["city"]], dtype=np.float64)
    return np.column_stack([codes, data["x"]])


def _all(src) -> np.ndarray:
    return np.concatenate([b for b, _ in DataLoader(src, 16, shuffle=False, total_size=40)])


@pytest.mark.parametrize("kind", ["polars frame", "polars lazy", "duckdb", "arrow", "arrow stream"])
def test_frame_sources_code_categorical_columns(kind):
    data = _frame_data()
    if kind.startswith("polars"):
        pl = pytest.importorskip("polars")
        from exactbatch import polars_source

        frame = pl.DataFrame(data)

        def make(cats):
            obj = frame if kind == "polars frame" else frame.lazy()
            return polars_source(obj, labels="y", categorical=cats)

    elif kind == "duckdb":
        duckdb = pytest.importorskip("duckdb")
        from exactbatch import duckdb_source

        con = duckdb.connect()
        con.register("t", pa.table(data))

        def make(cats):
            return duckdb_source(con.table("t"), labels="y", categorical=cats)

    elif kind == "arrow stream":  # a function's reader: its schema checked with the codes

        def make(cats):
            return arrow_source(lambda: pa.table(data).to_reader(), labels="y", categorical=cats)

    else:

        def make(cats):
            return arrow_source(pa.table(data), labels="y", categorical=cats)

    learned = make(["city"])
    assert learned.features == ("city", "x") and learned.labels == ("y",)
    assert learned.categories == {"city": ["baku", "lima", "nuuk", "oslo"]}
    np.testing.assert_array_equal(_all(learned), _expected(data, sorted(set(data["city"]))))
    given = ["nuuk", "oslo", "lima", "baku"]
    np.testing.assert_array_equal(_all(make({"city": given})), _expected(data, given))
    with pytest.raises(ValueError, match="'oslo'|'lima'|'baku'|'nuuk'"):
        _all(make({"city": ["nuuk"]}))


def test_column_stats_of_a_subset_are_the_subsets():
    pd = pytest.importorskip("pandas")
    dd = pytest.importorskip("dask.dataframe")
    from exactbatch.dask import column_stats

    rng = np.random.default_rng(4)
    x = rng.normal(size=(90, 2)) * [1.0, 10.0]
    ids = rng.choice(90, 25, replace=False)
    ddf = dd.from_pandas(pd.DataFrame(x, columns=["p", "q"]), npartitions=4)
    for coll in (ddf, ddf[ddf.p > -100]):  # lengths known, then unknown (counted)
        stats = column_stats(coll, rows=ids)
        assert [s["name"] for s in stats] == ["p", "q"]
        np.testing.assert_allclose([s["mean"] for s in stats], x[ids].mean(axis=0))
        np.testing.assert_allclose([s["sd"] for s in stats], x[ids].std(axis=0))
        assert [s["count"] for s in stats] == [25, 25]
    with pytest.raises(IndexError, match="rows"):
        column_stats(ddf, rows=[90])


def test_a_name_twice_in_a_table_is_refused_naming_it():
    t = pa.Table.from_arrays([pa.array([1.0]), pa.array([2.0])], names=["a", "a"])
    with pytest.raises(ValueError, match=r"\['a'\] appear more than once"):
        arrow_source(t)
