"""The Arrow-native sources: Arrow IPC files, pyarrow tables and readers, polars frames,
Hugging Face datasets and DuckDB relations (exactbatch.sources.arrow_columns and one
module per kind).

Laws: every kind hands out exactly its rows' values (every column type read as
float64, a null as NaN, a boolean as 0/1), through any record-batch layout; columns
are chosen by name, and bad ones are a ValueError naming them; a one-pass reader is
a TypeError naming the fix. The loader's laws over each kind: tests/test_law_matrix.py.
"""

from __future__ import annotations

import itertools
import os
import pickle
import sys
import warnings

import numpy as np
import pytest
from helpers import Closable
from hypothesis import given, settings
from hypothesis import strategies as st

import exactbatch
from exactbatch import DataLoader
from exactbatch.sources.arrow_columns import ArrowColumnsReader

pa = pytest.importorskip("pyarrow")


def table(n: int = 23, chunks=(5, 0, 9, 9)) -> pa.Table:
    """x0 = the row id (float64), x1 int32, x2 bool, s a string, y float64; record
    batches of ``chunks`` rows."""
    ids = np.arange(n, dtype=np.float64)
    t = pa.table(
        {
            "x0": ids,
            "x1": (ids * 2).astype(np.int32),
            "x2": ids % 3 == 0,
            "s": [f"r{i}" for i in range(n)],
            "y": -ids - 0.5,
        }
    )
    bounds = np.cumsum([0, *chunks])
    batches = [b for a, z in itertools.pairwise(bounds) for b in t.slice(a, z - a).to_batches()]
    return pa.Table.from_batches(batches or t.to_batches(), t.schema)


def want(rows) -> tuple[np.ndarray, np.ndarray]:
    ids = np.asarray(rows, dtype=np.float64)
    return np.stack([ids, ids * 2, (ids % 3 == 0)], 1), (-ids - 0.5).reshape(-1, 1)


FEATURES = {"features": ["x0", "x1", "x2"], "labels": "y"}


def all_rows(source, **kw):
    """Every row of one unshuffled epoch, as (x, y)."""
    batches = list(DataLoader(source, 4, shuffle=False, **kw))
    return np.concatenate([b[0] for b in batches]), np.concatenate([b[1] for b in batches])


def write_file(path, t, **options):
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, t.schema, **options) as w:
        for batch in t.to_batches():
            w.write_batch(batch)
    return path


# -- every kind reads its rows exactly --------------------------------------------------------


def sources(tmp_path):
    """(name, source) of every kind over ``table()``, features x0..x2 and label y."""
    t = table()
    out = [
        ("arrow_file", exactbatch.arrow_file(write_file(tmp_path / "t.arrow", t), **FEATURES)),
        ("arrow_table", exactbatch.arrow_source(t, **FEATURES)),
        (
            "arrow_stream",
            exactbatch.arrow_source(
                lambda: pa.RecordBatchReader.from_batches(t.schema, t.to_batches()), **FEATURES
            ),
        ),
    ]
    try:
        import polars as pl

        frame = pl.from_arrow(t, rechunk=False)
        out.append(("polars", exactbatch.polars_source(frame, **FEATURES)))
        out.append(("lazyframe", exactbatch.polars_source(frame.lazy(), batch_rows=4, **FEATURES)))
    except ImportError:
        pass
    try:
        import datasets

        out.append(("hf", exactbatch.hf_source(datasets.Dataset(t), **FEATURES)))
    except ImportError:
        pass
    try:
        import duckdb

        con = duckdb.connect()
        con.register("t", t)
        con.execute("CREATE TABLE rows AS SELECT * FROM t ORDER BY x0")
        out.append(
            ("duckdb", exactbatch.duckdb_source(con.table("rows"), batch_rows=5, **FEATURES))
        )
    except ImportError:
        pass
    return out


def test_every_kind_hands_out_every_row_with_its_values_in_order(tmp_path):
    made = sources(tmp_path)
    assert {"arrow_file", "arrow_table", "arrow_stream"} <= {name for name, _ in made}
    for name, source in made:
        x, y = all_rows(source, total_size=23)
        wx, wy = want(range(23))
        np.testing.assert_array_equal(x, wx, err_msg=name)
        np.testing.assert_array_equal(y, wy, err_msg=name)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_every_kind_shuffled_is_a_permutation_of_exact_rows(tmp_path, dtype):
    for name, source in sources(tmp_path):
        loader = DataLoader(source, 5, seed=3, buffer_size=8, dtype=dtype, total_size=23)
        got = list(loader)
        x = np.concatenate([b[0] for b in got])
        y = np.concatenate([b[1] for b in got])
        assert x.dtype == dtype, name
        order = x[:, 0].astype(int)
        assert sorted(order) == list(range(23)), name
        wx, wy = want(order)
        np.testing.assert_array_equal(x, wx.astype(dtype), err_msg=name)
        np.testing.assert_array_equal(y, wy.astype(dtype), err_msg=name)


# -- the reader over any layout ---------------------------------------------------------------

TYPES = [pa.int8(), pa.uint16(), pa.int32(), pa.int64(), pa.float16(), pa.float32(), pa.float64()]


@st.composite
def columns(draw):
    n = draw(st.integers(0, 40))
    cols = []
    for _ in range(draw(st.integers(1, 4))):
        typ = draw(st.sampled_from([*TYPES, pa.bool_()]))
        values = draw(st.lists(st.one_of(st.none(), st.integers(0, 100)), min_size=n, max_size=n))
        if typ == pa.bool_():
            values = [None if v is None else bool(v % 2) for v in values]
        arr = pa.array(values, type=typ)
        cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
        bounds = [0, *cuts, n]
        cols.append(
            pa.chunked_array([arr.slice(a, z - a) for a, z in itertools.pairwise(bounds)], typ)
        )
    return cols


def reference(cols) -> np.ndarray:
    """Each column as float64 through pyarrow's own conversion, nulls as NaN."""
    out = [np.asarray(c.cast(pa.float64()).to_pylist(), dtype=object).astype(float) for c in cols]
    return np.stack(out, 1) if out else np.empty((0, 0))


@settings(max_examples=150, deadline=None)
@given(cols=columns(), data=st.data())
def test_reader_reads_any_rows_of_any_layout_as_pyarrow_converts_them(cols, data):
    """Conservation: read(rows) == the columns' float64 values at rows, for any rows (a
    slice or an int array, repeats allowed) of any chunk layout, nulls NaN."""
    n = len(cols[0])
    d = data.draw(st.integers(0, len(cols)))
    reader = ArrowColumnsReader(cols, d)
    assert (reader.n, reader.d, reader.l) == (n, d, len(cols) - d)
    ref = reference(cols).reshape(n, len(cols))
    if data.draw(st.booleans()) or n == 0:
        a = data.draw(st.integers(0, n))
        rows = slice(a, data.draw(st.integers(a, n)))
        picked = ref[rows]
    else:
        rows = np.asarray(data.draw(st.lists(st.integers(0, n - 1), max_size=30)), np.int64)
        picked = ref[rows]
    out_x, out_y = np.empty((len(picked), d)), np.empty((len(picked), len(cols) - d))
    reader.read(rows, out_x, out_y)
    np.testing.assert_array_equal(np.concatenate([out_x, out_y], 1), picked)


def test_a_reader_closed_during_a_read_finishes_that_read(monkeypatch):
    """close() from another thread while a batch is being read (here: at its first
    column): that read still completes from the columns it began with."""
    import exactbatch.sources.arrow_columns as ac

    reader = ArrowColumnsReader([pa.chunked_array([[1.0, 2.0]]), pa.chunked_array([[3.0, 4.0]])], 1)
    take = ac._Part.take

    def closing(self, src):
        reader.close()
        return take(self, src)

    monkeypatch.setattr(ac._Part, "take", closing)
    out_x, out_y = np.empty((2, 1)), np.empty((2, 1))
    reader.read(slice(0, 2), out_x, out_y)
    assert out_x[:, 0].tolist() == [1.0, 2.0] and out_y[:, 0].tolist() == [3.0, 4.0]


def test_a_closed_reader_refuses_to_read():
    reader = ArrowColumnsReader([pa.chunked_array([[1.0, 2.0]])], 1)
    reader.close()
    reader.close()  # idempotent
    with pytest.raises(ValueError) as e:
        reader.read(slice(0, 1), np.empty((1, 1)), np.empty((1, 0)))
    assert str(e.value) == "read from a closed DataLoader"


def test_columns_of_layouts_apart_are_read_in_order_column_by_column(monkeypatch):
    """Features 0 and 2 share a chunking, feature 1 and label 1 another, label 0 a third:
    the first layout's outputs are not consecutive (copied column by column), the
    second's are (copied whole into output column 1 of either side), and so is the
    third's label: one columns_into a side a chunk, none for the first layout."""
    import exactbatch.sources.arrow_columns as ac

    copies = []
    whole_copy = ac.columns_into

    def recording(values, start, out):
        copies.append((len(values), start, out.shape))
        whole_copy(values, start, out)

    monkeypatch.setattr(ac, "columns_into", recording)

    def split(v):
        return pa.chunked_array([[v + 1.0, v + 2.0], [v + 3.0, v + 4.0]])

    def whole(v):
        return pa.chunked_array([[v + 1.0, v + 2.0, v + 3.0, v + 4.0]])

    third = pa.chunked_array([[31.0], [32.0, 33.0, 34.0]])
    reader = ArrowColumnsReader([split(0), whole(10), split(20), third, whole(40)], 3)
    for dtype in (np.float64, np.float32):
        out_x, out_y = np.full((3, 3), np.nan, dtype), np.full((3, 2), np.nan, dtype)
        reader.read(slice(1, 4), out_x, out_y)
        assert out_x.tolist() == [[2, 12, 22], [3, 13, 23], [4, 14, 24]]
        assert out_y.tolist() == [[32, 42], [33, 43], [34, 44]]
        # (the third layout's second chunk from its row 0; the second's only chunk from 1)
        assert sorted(copies) == [(1, 0, (3, 1)), (1, 1, (3, 1)), (1, 1, (3, 1))]
        copies.clear()
    # integers past 32 bits and half floats, no nulls: not copied whole (the fused copy
    # takes float64, float32 and integers of at most 32 bits), read value by value
    big = pa.chunked_array([pa.array([2**40, -(2**40), 7], pa.int64())])
    half = pa.chunked_array([pa.array([0.5, 1.5, -2.0], pa.float16())])
    reader = ArrowColumnsReader([big, half], 1)
    out_x, out_y = np.empty((3, 1)), np.empty((3, 1))
    reader.read(slice(0, 3), out_x, out_y)
    assert out_x[:, 0].tolist() == [2**40, -(2**40), 7] and out_y[:, 0].tolist() == [0.5, 1.5, -2]


def test_a_reader_prefetches_only_a_mapped_files_large_batches():
    from exactbatch.sources.arrow_columns import PREFETCH_MIN_BYTES

    cols = [pa.chunked_array([[1.0, 2.0]])]
    assert ArrowColumnsReader(cols, 1).prefetch_default(PREFETCH_MIN_BYTES) == 0
    mapped = ArrowColumnsReader(cols, 1, mapped=True)
    assert mapped.prefetch_default(PREFETCH_MIN_BYTES) == 2
    assert mapped.prefetch_default(PREFETCH_MIN_BYTES - 1) == 0


def test_nulls_are_nan_and_booleans_zero_or_one():
    t = pa.table({"a": pa.array([1, None, 3], pa.int64()), "b": [True, None, False]})
    x, y = all_rows(exactbatch.arrow_source(t))
    np.testing.assert_array_equal(x, [[1, 1], [np.nan, np.nan], [3, 0]])
    assert y.shape == (3, 0)


# -- columns: chosen by name, bad ones named -------------------------------------------------


def every_kind_over(t, tmp_path):
    """Builders of every kind over the table ``t``: kind -> f(**columns)."""
    out = {
        "arrow_file": lambda **kw: exactbatch.arrow_file(write_file(tmp_path / "b.arrow", t), **kw),
        "arrow_table": lambda **kw: exactbatch.arrow_source(t, **kw),
        "arrow_stream": lambda **kw: exactbatch.arrow_source(
            lambda: pa.RecordBatchReader.from_batches(t.schema, t.to_batches()), **kw
        ),
    }
    try:
        import polars as pl

        out["polars"] = lambda **kw: exactbatch.polars_source(pl.from_arrow(t), **kw)
        out["lazyframe"] = lambda **kw: exactbatch.polars_source(pl.from_arrow(t).lazy(), **kw)
    except ImportError:
        pass
    try:
        import datasets

        out["hf"] = lambda **kw: exactbatch.hf_source(datasets.Dataset(t), **kw)
    except ImportError:
        pass
    try:
        import duckdb

        def duck(**kw):
            con = duckdb.connect()
            con.register("t", t)
            con.execute("CREATE TABLE rows AS SELECT * FROM t")
            return exactbatch.duckdb_source(con.table("rows"), **kw)

        out["duckdb"] = duck
    except ImportError:
        pass
    return out


KINDS = ["arrow_file", "arrow_table", "arrow_stream", "polars", "lazyframe", "hf", "duckdb"]


def make(kind, tmp_path, t=None):
    builders = every_kind_over(table() if t is None else t, tmp_path)
    if kind not in builders:
        pytest.skip(f"{kind} needs a package that is not installed")
    return builders[kind]


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_column_is_a_value_error_naming_it(kind, tmp_path):
    build = make(kind, tmp_path)
    with pytest.raises(ValueError, match=r"missing column\(s\) \['nope'\]"):
        build(features=["x0", "nope"], labels="y")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['lab'\]"):
        build(features=["x0"], labels="lab")


OWNERS = {
    "arrow_table": "the pyarrow Table",
    "arrow_stream": "the reader",
    "polars": "the polars DataFrame",
    "lazyframe": "the LazyFrame",
    "hf": "the Hugging Face Dataset",
    "duckdb": "the DuckDB relation",
}


@pytest.mark.parametrize("kind", KINDS)
def test_a_missing_column_names_what_it_is_missing_from(kind, tmp_path):
    """The message starts with the source's owner (an Arrow file's path) and ends with
    the columns there are."""
    build = make(kind, tmp_path)
    owner = OWNERS.get(kind, str(tmp_path / "b.arrow"))
    with pytest.raises(ValueError) as e:
        build(features=["nope"])
    assert str(e.value) == (
        f"{owner}: missing column(s) ['nope']; its columns are ['x0', 'x1', 'x2', 's', 'y']"
    )


@pytest.mark.parametrize("kind", KINDS)
def test_a_string_column_named_is_a_value_error_naming_it(kind, tmp_path):
    build = make(kind, tmp_path)
    with pytest.raises(ValueError, match=r"non-numeric column\(s\) \['s \((large_)?string\)'\]"):
        build(features=["x0", "s"], labels="y")
    with pytest.raises(ValueError, match=r"non-numeric column\(s\) \['s "):
        build(features=["x0"], labels="s")


@pytest.mark.parametrize("kind", KINDS)
def test_unnamed_features_are_the_numeric_columns_the_rest_left_out_with_a_warning(kind, tmp_path):
    build = make(kind, tmp_path)
    with pytest.warns(UserWarning, match=r"non-numeric column\(s\) \['s .*left out"):
        source = build(labels="y")
    assert source.features == ("x0", "x1", "x2") and source.labels == ("y",)
    x, y = all_rows(source, total_size=23)
    np.testing.assert_array_equal(x, want(range(23))[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no column left out: no warning
        build(features=["x1"])


@pytest.mark.parametrize("kind", KINDS)
def test_a_column_named_twice_or_in_both_is_a_value_error(kind, tmp_path):
    build = make(kind, tmp_path)
    with pytest.raises(ValueError, match="more than once"):
        build(features=["x0", "x0"])
    with pytest.raises(ValueError, match="label leakage"):
        build(features=["x0", "y"], labels="y")
    with pytest.raises(TypeError, match="features must be column names"):
        build(features=[0])


def test_a_column_named_twice_or_in_both_is_refused_in_full():
    """The messages say which argument names a column twice, or that a label among the
    features leaks the answer (every Arrow-backed kind's rule: check_names)."""
    t = table()
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_source(t, features=["x1", "x0", "x1"])
    assert str(e.value) == "features names column(s) ['x1'] more than once; name each once"
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_source(t, features=["x0"], labels=["y", "y"])
    assert str(e.value) == "labels names column(s) ['y'] more than once; name each once"
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_source(t, features=["x0", "y"], labels="y")
    assert str(e.value) == (
        "column(s) ['y'] are named both in features and in labels: a label among the "
        "features hands the model its answer (label leakage); name each in one only"
    )


def test_columns_named_badly_are_refused_in_full():
    """What features= or labels= must be, and a categorical column the source lacks."""
    t = table()
    with pytest.raises(TypeError) as e:
        exactbatch.arrow_source(t, features=5)
    assert str(e.value) == "features must be a column name or a list of names; got 5"
    with pytest.raises(TypeError) as e:
        exactbatch.arrow_source(t, features=["x0"], labels=[1.5])
    assert str(e.value) == "labels must be column names (str); got [1.5]"
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_source(t, features=["x0", "s"], categorical=["s", "nope"])
    assert str(e.value) == "the pyarrow Table: categorical names missing column(s) ['nope']"
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_source(t, features=["x0", "s"])
    assert str(e.value) == (
        "the pyarrow Table: non-numeric column(s) ['s (string)']; features and labels must "
        "be integer, floating or boolean columns: leave them out, or encode them as numbers "
        "first"
    )
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_source(t, features=["x0"], labels="y", categorical=["s"])
    assert str(e.value) == (
        "the pyarrow Table: categorical names column(s) ['s'] that are neither features nor "
        "labels; name them in features= or labels= too"
    )


def test_columns_left_out_are_named_in_a_warning_at_the_callers_line():
    """features=None: the numeric columns; the others named in a warning that points at
    the line that made the source (stacklevel), not into exactbatch."""
    with pytest.warns(UserWarning) as caught:
        exactbatch.arrow_source(table(), labels="y")
    (w,) = caught
    assert str(w.message) == (
        "the pyarrow Table: non-numeric column(s) ['s (string)'] left out of the features; "
        "name the features (features=[...]) to choose them yourself"
    )
    if "mutmut" not in sys.modules:  # (under `make mutants`, its trampolines add frames)
        assert w.filename == __file__


def test_a_name_twice_in_a_table_is_refused_only_where_chosen():
    """Columns sharing a name are ambiguous only when one of them is asked for: the
    others are read as usual."""
    t = pa.Table.from_arrays(
        [pa.array([1.0, 2.0]), pa.array([3.0, 4.0]), pa.array([5.0, 6.0])], names=["a", "a", "b"]
    )
    for labels in ((), "b"):  # every column a feature, or every one but the label
        with pytest.raises(ValueError) as e:
            exactbatch.arrow_source(t, labels=labels)
        assert str(e.value) == "the pyarrow Table: column name(s) ['a'] appear more than once"
    source = exactbatch.arrow_source(t, features=["b"])
    assert source.features == ("b",)
    x, _ = all_rows(source)
    np.testing.assert_array_equal(x, [[5.0], [6.0]])
    with pytest.raises(ValueError, match=r"\['a'\] appear more than once"):
        exactbatch.arrow_source(t, features=["b", "a"])


@pytest.mark.parametrize("kind", KINDS)
def test_an_empty_table_gives_empty_epochs(kind, tmp_path):
    """No rows: the loader hands out no batch (as for an empty array); N is 0."""
    build = make(kind, tmp_path, table(0, chunks=()))
    loader = DataLoader(build(**FEATURES), 4, total_size=0)
    assert list(loader) == [] and list(loader) == []


@pytest.mark.parametrize("kind", KINDS)
def test_a_table_without_a_numeric_column_is_a_value_error(kind, tmp_path):
    build = make(kind, tmp_path, pa.table({"s": ["a", "b"]}))
    with pytest.raises(ValueError, match="no numeric column"), pytest.warns(UserWarning):
        build()


# -- each kind's own ways ----------------------------------------------------------------------


def test_an_arrow_file_is_mapped_and_pickles_by_its_path(tmp_path):
    path = write_file(tmp_path / "t.arrow", table())
    source = exactbatch.arrow_file(path, **FEATURES)
    assert not source.compressed and source.batches == 3  # the empty batch is not written
    again = pickle.loads(pickle.dumps(source))
    assert (again.path, again.features, again.labels) == (str(path), source.features, ("y",))
    np.testing.assert_array_equal(all_rows(again)[0], want(range(23))[0])


def test_a_compressed_arrow_file_is_read_and_says_so(tmp_path):
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    path = write_file(tmp_path / "z.arrow", table(), options=options)
    source = exactbatch.arrow_file(path, **FEATURES)
    assert source.compressed
    np.testing.assert_array_equal(all_rows(source)[1], want(range(23))[1])


def test_arrow_file_errors_name_the_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        exactbatch.arrow_file(tmp_path / "none.arrow")
    bad = tmp_path / "bad.arrow"
    bad.write_bytes(b"not arrow at all")
    with pytest.raises(ValueError, match="bad.arrow: not an Arrow IPC file"):
        exactbatch.arrow_file(bad)
    stream = tmp_path / "s.arrows"
    t = table()
    with pa.OSFile(str(stream), "wb") as f, pa.ipc.new_stream(f, t.schema) as w:
        w.write_table(t)
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_file(stream)
    message = str(e.value)
    assert message.startswith(f"{stream}: not an Arrow IPC file (Feather v2) (")
    assert message.endswith(
        "); an IPC stream (.arrows) is read with arrow_source(lambda: pa.ipc.open_stream(path))"
    )


@pytest.mark.parametrize("compression", [None, "zstd"])
def test_an_arrow_file_of_one_record_batch_is_read_whole(tmp_path, compression):
    """The first batch tells a compressed file (read into memory) from a mapped one."""
    options = pa.ipc.IpcWriteOptions(compression=compression)
    t = table(chunks=(23,))
    path = write_file(tmp_path / "one.arrow", t, options=options)
    source = exactbatch.arrow_file(path, **FEATURES)
    assert source.batches == 1 and source.compressed == (compression is not None)
    x, y = all_rows(source)
    np.testing.assert_array_equal(x, want(range(23))[0])
    np.testing.assert_array_equal(y, want(range(23))[1])


def test_a_bare_record_batch_reader_is_a_type_error_naming_the_fix():
    t = table()
    for give in (
        lambda r: DataLoader(r, 4),
        lambda r: exactbatch.arrow_source(r),
    ):
        reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches())
        with pytest.raises(TypeError, match="read only once.*zero-argument function"):
            give(reader)
    with pytest.raises(TypeError, match="data must be a pyarrow Table"):
        exactbatch.arrow_source(42)
    with pytest.raises(TypeError, match="must return a RecordBatchReader"):
        exactbatch.arrow_source(lambda: 42)


def test_arrow_source_refusals_are_named_in_full():
    """An iterator of batches (one pass, like a reader), something else, a bad
    categorical: each message in full."""
    t = table()
    with pytest.raises(TypeError) as e:
        exactbatch.arrow_source(iter(t.to_batches()))
    assert str(e.value) == (
        "a pyarrow RecordBatchReader (list_iterator) can be read only once, but every epoch "
        "must read the stream again: pass a zero-argument function that returns a fresh "
        "reader, e.g. arrow_source(lambda: pa.ipc.open_stream(path)), or a pyarrow Table "
        "(random access)"
    )
    with pytest.raises(TypeError) as e:
        exactbatch.arrow_source(42)
    assert str(e.value) == (
        "data must be a pyarrow Table or RecordBatch, or a zero-argument function "
        "returning a fresh RecordBatchReader; got int"
    )
    with pytest.raises(TypeError) as e:
        exactbatch.arrow_source(lambda: t, categorical=[3])
    assert str(e.value) == (
        "arrow_source: categorical must be a list of column names or a dict "
        "{column: [values]}; got [3]"
    )


def test_a_bare_reader_given_to_the_loader_gets_the_arrow_fix_in_full():
    t = table()
    with pytest.raises(TypeError) as e:
        DataLoader(pa.RecordBatchReader.from_batches(t.schema, t.to_batches()), 4)
    assert str(e.value).startswith(
        "a pyarrow RecordBatchReader (RecordBatchReader) can be read only once, but every "
        "epoch must read the stream again: pass a zero-argument function that returns a "
        "fresh reader, e.g. arrow_source(lambda: pa.ipc.open_stream(path))"
    )


def test_a_record_batch_is_a_table_source_kept_with_its_owner_in_its_messages():
    t = pa.table({"c": ["a", "b", "z"], "x": [1.0, 2.0, 3.0]})
    batch = t.to_batches()[0]
    source = exactbatch.arrow_source(batch, features=["x"])
    assert source.table is batch and source.n == 3
    np.testing.assert_array_equal(all_rows(source)[0][:, 0], [1.0, 2.0, 3.0])
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_source(t, features=["c", "x"], categorical={"c": ["a", "b"]})
    assert str(e.value).startswith("the pyarrow Table: column 'c' holds 'z' (row 2), which ")
    with pytest.raises(TypeError) as e:
        exactbatch.arrow_source(t, categorical=[3])
    assert str(e.value).startswith("the pyarrow Table: categorical must be a list of column")


def test_a_reader_factory_may_return_an_iterable_of_batches_or_a_table():
    t = table()
    for factory in (lambda: iter(t.to_batches()), lambda: t):
        x, _ = all_rows(exactbatch.arrow_source(factory, **FEATURES), total_size=23)
        np.testing.assert_array_equal(x, want(range(23))[0])


def test_bare_arrow_objects_are_sources_of_their_numeric_columns(tmp_path):
    """A pyarrow Table, an HF Dataset, a LazyFrame, a DuckDB relation passed as they are:
    every numeric column a feature, no labels (a string column left out, with a note)."""
    t = table()
    given = [t]
    if (pl := _maybe("polars")) is not None:
        given.append(pl.from_arrow(t).lazy())
    if (datasets := _maybe("datasets")) is not None:
        given.append(datasets.Dataset(t))
    if (duckdb := _maybe("duckdb")) is not None:
        con = duckdb.connect()
        con.register("t", t)
        given.append(con.sql("SELECT * FROM t ORDER BY x0"))
    for obj in given:
        with pytest.warns(UserWarning, match="left out"):
            loader = DataLoader(obj, 4, shuffle=False, total_size=23)
        x = np.concatenate([xb for xb, _ in loader])
        wx, wy = want(range(23))
        np.testing.assert_array_equal(x, np.concatenate([wx, wy], 1), err_msg=type(obj).__name__)


def _maybe(name):
    try:
        return __import__(name)
    except ImportError:
        return None


def test_a_polars_data_frame_bare_stays_an_array_like():
    """One way per kind: a bare DataFrame is read as np.asarray of it (exactbatch.arrays),
    non-numeric columns refused; polars_source names columns and reads via Arrow."""
    pl = pytest.importorskip("polars")
    frame = pl.from_arrow(table())
    with pytest.raises(TypeError, match="non-numeric column"):
        DataLoader(frame, 4)
    with pytest.raises(ValueError, match="n_rows applies to a LazyFrame"):
        exactbatch.polars_source(frame, n_rows=3)
    with pytest.raises(TypeError, match="frame must be a polars DataFrame or LazyFrame"):
        exactbatch.polars_source(table())
    with pytest.raises(ValueError, match="batch_rows must be >= 1"):
        exactbatch.polars_source(frame.lazy(), batch_rows=0)


def test_a_lazy_frame_runs_its_query_again_each_pass():
    pl = pytest.importorskip("polars")
    runs = []

    def count(s):
        runs.append(1)
        return s

    lf = pl.from_arrow(table()).lazy().with_columns(pl.col("x0").map_batches(count))
    loader = DataLoader(exactbatch.polars_source(lf, **FEATURES, n_rows=23), 5, seed=1)
    assert loader.total_size == 23
    first, second = list(loader), list(loader)
    assert len(runs) >= 2 and len(first) == len(second) == 5


def test_an_hf_dataset_reads_through_its_index_mapping():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset(table()).shuffle(seed=4).select(range(3, 13))
    x, y = all_rows(exactbatch.hf_source(ds, features="x0", labels="y"))
    np.testing.assert_array_equal(x[:, 0], ds["x0"][:])
    np.testing.assert_array_equal(y[:, 0], ds["y"][:])
    with pytest.raises(TypeError, match=r"pass one split, e.g. hf_source\(ds\['train'\]\)"):
        exactbatch.hf_source(datasets.DatasetDict({"train": ds}))
    with pytest.raises(TypeError, match="must be a datasets.Dataset"):
        exactbatch.hf_source(table())


def test_hf_source_refuses_a_dict_of_splits_streamed_or_not_and_names_the_fix():
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset(table())
    splits = {"train": ds, "test": ds}
    iterable = {k: v.to_iterable_dataset() for k, v in splits.items()}
    for splits_of in (datasets.DatasetDict(splits), datasets.IterableDatasetDict(iterable)):
        with pytest.raises(TypeError) as e:
            exactbatch.hf_source(splits_of)
        assert str(e.value) == (
            "dataset is a DatasetDict of splits ['train', 'test']; pass one split, "
            "e.g. hf_source(ds['train'])"
        )
    with pytest.raises(TypeError) as e:
        exactbatch.hf_source(iterable["train"])
    assert str(e.value) == (
        "dataset must be a datasets.Dataset; got IterableDataset (an IterableDataset is a "
        "stream: pass arrow_source(lambda: ds.with_format('arrow').iter(batch_size=4096)))"
    )


def test_an_hf_dataset_saved_to_disk_is_read_from_its_mapped_cache_files(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset(table()).save_to_disk(str(tmp_path / "ds"))
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    x, y = all_rows(exactbatch.hf_source(ds.select(range(22, -1, -1)), **FEATURES))
    wx, wy = want(range(22, -1, -1))
    np.testing.assert_array_equal(x, wx)
    np.testing.assert_array_equal(y, wy)


def test_an_hf_class_label_column_is_an_integer_label():
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"f": datasets.Value("float32"), "c": datasets.ClassLabel(names=["a", "b", "c"])}
    )
    ds = datasets.Dataset.from_dict({"f": [0.5, 1.5, 2.5], "c": [2, 0, 1]}, features=features)
    x, y = all_rows(exactbatch.hf_source(ds, labels="c"))
    np.testing.assert_array_equal(y[:, 0], [2, 0, 1])
    np.testing.assert_array_equal(x[:, 0], [0.5, 1.5, 2.5])


def test_a_duckdb_table_is_counted_a_query_is_not():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.execute("CREATE TABLE t AS SELECT range::DOUBLE AS a, range % 2 AS b FROM range(30)")
    assert exactbatch.duckdb_source(con.table("t")).n_rows == 30
    query = con.sql("SELECT * FROM t WHERE a < 20 ORDER BY a")
    assert exactbatch.duckdb_source(query).n_rows is None
    assert exactbatch.duckdb_source(query, n_rows=20).n_rows == 20
    with pytest.warns(UserWarning, match="counted its rows with one full pass"):
        loader = DataLoader(exactbatch.duckdb_source(query, labels="b"), 6)
    assert loader.total_size == 20
    with pytest.raises(TypeError, match="relation must be a DuckDB relation"):
        exactbatch.duckdb_source(table())
    dec = con.sql("SELECT 1.5 AS p")  # DECIMAL: not a float
    with pytest.raises(ValueError, match=r"non-numeric column\(s\) \['p \(decimal"):
        exactbatch.duckdb_source(dec, features="p")


def test_an_arrow_file_unpickled_keeps_its_columns_and_refuses_a_changed_file(tmp_path):
    from exactbatch.errors import NdfError

    path = write_file(tmp_path / "t.arrow", table())
    source = exactbatch.arrow_file(path, features=["x1"], labels="x0")
    again = pickle.loads(pickle.dumps(source))
    assert (again.features, again.labels) == (("x1",), ("x0",))
    x, y = all_rows(again)
    np.testing.assert_array_equal(x[:, 0], 2 * np.arange(23))
    np.testing.assert_array_equal(y[:, 0], np.arange(23))
    raw = pickle.dumps(source)
    st_ = path.stat()
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    with pytest.raises(NdfError, match="t.arrow: the file changed between pickling"):
        pickle.loads(raw)


def test_a_bare_reader_refusal_reads_in_full():
    t = table()
    reader = pa.RecordBatchReader.from_batches(t.schema, t.to_batches())
    with pytest.raises(TypeError) as e:
        exactbatch.arrow_source(reader)
    assert str(e.value) == (
        f"a pyarrow RecordBatchReader ({type(reader).__name__}) can be read only once, "
        "but every epoch must read the stream again: pass a zero-argument function that "
        "returns a fresh reader, e.g. arrow_source(lambda: pa.ipc.open_stream(path)), "
        "or a pyarrow Table (random access)"
    )


def test_a_stream_says_its_kind_and_columns_and_iterates_as_arrays():
    t = table()
    stream = exactbatch.arrow_source(lambda: t.to_batches(), features=["x1", "x0"], labels="y")
    assert stream.identity() == {
        "kind": "arrow stream (the reader)",
        "names": {"features": ["x1", "x0"], "labels": ["y"]},
    }
    assert repr(stream) == (
        "ArrowStream(the reader, features=['x1', 'x0'], labels=['y'], n_rows=None)"
    )
    chunks = list(stream)  # one (x, y) of NumPy arrays a record batch
    assert [len(x) for x, _ in chunks] == [len(b) for b in t.to_batches()]
    assert all(type(x) is np.ndarray and type(y) is np.ndarray for x, y in chunks)
    x, y = np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])
    wx, wy = want(range(23))
    np.testing.assert_array_equal(x, wx[:, [1, 0]])
    np.testing.assert_array_equal(y, wy)


def test_a_streams_bad_batch_is_named_with_the_source_and_its_row():
    """A value outside a given vocabulary names the stream, the column and its row among
    the pass's rows (across batches); a later batch lacking a column names them."""
    t = table()  # record batches of 5, 0, 9 and 9 rows; s is "r{row}"
    vocab = [f"r{i}" for i in range(23) if i != 16]  # row 16: in the third batch
    stream = exactbatch.arrow_source(
        lambda: t.to_batches(), features=["x0", "s"], categorical={"s": vocab}
    )
    with pytest.raises(ValueError) as e:
        list(stream)
    assert str(e.value) == (
        "the reader: a batch: column 's' holds 'r16' (row 16), which is not in its vocabulary "
        "of 22 value(s) (a value takes the code of the entry equal to it); add it to "
        "categorical={'s': [...]}, or let the vocabulary be learned (categorical=[...])"
    )
    first, second = t.slice(0, 5), t.slice(5).drop_columns(["x1"])
    lacking = exactbatch.arrow_source(
        lambda: [*first.to_batches(), *second.to_batches()], features=["x0", "x1"]
    )
    with pytest.raises(ValueError) as e:
        list(lacking)
    assert str(e.value) == "the reader: a batch lacks column(s) ['x1']"


def test_a_pass_stopped_early_closes_what_its_batches_came_from():
    """A pass left before its end (a loader closed, an epoch cut short) closes the
    iterable ``batches()`` returned (a reader's file, a query's cursor), at once."""
    t = table()
    made: list = []

    def batches():
        return Closable(t.to_batches(), made)

    stream = exactbatch.arrow_source(batches, features=["x0"], labels="y")
    chunks = stream.column_chunks()
    next(chunks)
    assert not made[-1].closed
    chunks.close()
    assert made[-1].closed


def _hide(monkeypatch, package):
    """``import package`` (and its submodules) fails from now on in this test."""
    import sys

    for name in [m for m in sys.modules if m == package or m.startswith(package + ".")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, package, None)


def _missing_cases():
    from exactbatch.sources import parquet_urls

    def lazy(_):
        pl = pytest.importorskip("polars")
        return exactbatch.polars_source(pl.LazyFrame({"a": [1.0]}))

    def parquet(p):
        return exactbatch.parquet_source(p / "a.parquet")

    def duck(_):
        duckdb = pytest.importorskip("duckdb")
        return exactbatch.duckdb_source(duckdb.connect().sql("SELECT 1.0 AS a"))

    return [
        ("pyarrow", lambda p: exactbatch.arrow_source(None), "arrow_source", "arrow"),
        ("pyarrow", lambda p: exactbatch.arrow_file(p / "a.arrow"), "arrow_file", "arrow"),
        ("pyarrow", parquet, "parquet_source", "parquet"),
        ("pyarrow", lambda p: parquet_urls._pq(), "parquet_source", "parquet"),
        ("pyarrow", lazy, "polars_source", "polars"),
        ("polars", lambda p: exactbatch.polars_source(None), "polars_source", "polars"),
        ("pyarrow", duck, "duckdb_source", "duckdb"),
        ("duckdb", lambda p: exactbatch.duckdb_source(None), "duckdb_source", "duckdb"),
        ("datasets", lambda p: exactbatch.hf_source(None), "hf_source", "hf"),
    ]


@pytest.mark.parametrize("case", range(9))
def test_a_missing_package_is_an_import_error_naming_the_extra(tmp_path, monkeypatch, case):
    package, call, by, extra = _missing_cases()[case]
    (tmp_path / "a.parquet").write_bytes(b"")
    (tmp_path / "a.arrow").write_bytes(b"")
    _hide(monkeypatch, package)
    name = {"pyarrow": "pyarrow", "polars": "polars", "duckdb": "duckdb", "datasets": "datasets"}
    with pytest.raises(ImportError) as e:
        call(tmp_path)
    assert str(e.value) == f"{by} needs {name[package]}: pip install 'exactbatch[{extra}]'"


def test_a_factory_returning_no_batches_is_a_type_error_in_full():
    """At construction (its first reader: no batch, or things without a schema), and at a
    later pass (something not iterable)."""
    for first in ([], [1, 2]):
        with pytest.raises(TypeError) as e:
            exactbatch.arrow_source(lambda first=first: first)
        assert str(e.value) == (
            "the function passed to arrow_source must return a RecordBatchReader or an "
            "iterable of record batches; it returned list"
        )
    t, calls = table(), []

    def factory():
        calls.append(1)
        return t if len(calls) == 1 else 42

    stream = exactbatch.arrow_source(factory, **FEATURES)
    with pytest.raises(TypeError) as e:
        list(stream)
    assert str(e.value) == (
        "the function passed to arrow_source must return a RecordBatchReader; it returned int"
    )


def _rewrite_in_place(path, t):
    """``path`` written again with ``t``, in place (same inode), its mtime moved on."""
    st_ = path.stat()
    with open(path, "r+b") as f:
        f.write(write_file(path.with_suffix(".tmp"), t).read_bytes())
    os.utime(path, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))


def test_an_arrow_file_rewritten_in_place_is_refused_at_the_next_batch(tmp_path):
    """A mapped file is checked after every batch (module docs); a compressed one, read
    into memory at open, reads on from memory."""
    from exactbatch.errors import NdfError

    path = write_file(tmp_path / "t.arrow", table())
    source = exactbatch.arrow_file(path, **FEATURES)
    reader = source.open_reader()
    assert reader.mapped and reader.prefetch_default(256 << 10) == 2
    assert reader.prefetch_default((256 << 10) - 1) == 0
    out_x, out_y = np.empty((3, 3)), np.empty((3, 1))
    reader.read(slice(0, 3), out_x, out_y)
    _rewrite_in_place(path, table())
    with pytest.raises(NdfError, match="t.arrow: the file changed while open"):
        reader.read(slice(0, 3), out_x, out_y)
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    zpath = write_file(tmp_path / "z.arrow", table(), options=options)
    zsource = exactbatch.arrow_file(zpath, **FEATURES)
    zreader = zsource.open_reader()
    assert zreader.mapped
    _rewrite_in_place(zpath, table())
    zreader.read(slice(0, 3), out_x, out_y)
    np.testing.assert_array_equal(out_x, want(range(3))[0])


def test_each_random_access_kind_says_its_kind_and_columns(tmp_path):
    path = write_file(tmp_path / "t.arrow", table())
    names = {"features": ["x1", "x0"], "labels": ["y"]}
    ident = exactbatch.arrow_file(path, features=["x1", "x0"], labels="y").identity()
    st_ = path.stat()
    assert ident == {
        "kind": "arrow_file",
        "names": names,
        "path": str(path),
        "size": st_.st_size,
        "mtime": st_.st_mtime_ns,
    }
    source = exactbatch.arrow_source(table(), features=["x1", "x0"], labels="y")
    assert source.identity() == {"kind": "arrow table (the pyarrow Table)", "names": names}
    assert repr(source) == "ArrowTableSource(n=23, d=2, l=1)"
    if (pl := _maybe("polars")) is not None:
        frame = exactbatch.polars_source(pl.from_arrow(table()), features=["x1", "x0"], labels="y")
        assert frame.identity()["kind"] == "arrow table (the polars DataFrame)"
    if (datasets := _maybe("datasets")) is not None:
        ds = datasets.Dataset(table())
        hf = exactbatch.hf_source(ds, features=["x1", "x0"], labels="y")
        assert hf.identity() == {"kind": "hf_dataset", "names": names}
        assert hf.dataset is ds
        assert repr(hf) == "HfDatasetSource(n=23, d=2, l=1)"


def test_a_polars_column_arrow_cannot_hold_is_a_value_error_naming_it():
    pl = pytest.importorskip("polars")
    frame = pl.DataFrame(
        {"a": [1.0, 2.0], "big": [1, 2]}, schema={"a": pl.Float64, "big": pl.Int128}
    )
    for data, owner in ((frame, "the polars DataFrame"), (frame.lazy(), "the LazyFrame")):
        with pytest.raises(ValueError) as e:
            exactbatch.polars_source(data, features="a")
        message = str(e.value)
        assert message.startswith(f"{owner}: column(s) ['big (Int128)'] have a type Arrow ")
        assert message.endswith(
            "; cast them first (e.g. pl.col(name).cast(pl.Float64)), or drop them"
        )
        assert e.value.__cause__ is None
    with pytest.raises(ValueError, match=r"n_rows must be >= 0"):
        exactbatch.polars_source(frame.lazy().select("a"), n_rows=-1)


def test_polars_source_refusals_name_the_argument_in_full():
    pl = pytest.importorskip("polars")
    with pytest.raises(ValueError) as e:
        exactbatch.polars_source(pl.from_arrow(table()), n_rows=23)
    assert str(e.value) == "n_rows applies to a LazyFrame; a DataFrame knows its rows"
    with pytest.raises(TypeError) as e:
        exactbatch.polars_source(table())
    assert str(e.value) == "frame must be a polars DataFrame or LazyFrame; got Table"
    with pytest.raises(TypeError) as e:
        exactbatch.polars_source(pl.from_arrow(table()).lazy(), categorical=[3])
    assert str(e.value) == (
        "polars_source: categorical must be a list of column names or a dict "
        "{column: [values]}; got [3]"
    )


def test_a_lazyframe_is_a_stream_of_batch_rows_chunks_its_n_rows_as_given():
    pl = pytest.importorskip("polars")
    lf = pl.from_arrow(table()).lazy()
    source = exactbatch.polars_source(lf, features="x0", labels="y", batch_rows=5, n_rows=23)
    assert source.n_rows == 23
    assert repr(source) == "ArrowStream(the LazyFrame, features=['x0'], labels=['y'], n_rows=23)"
    assert [len(x) for x, _ in source] == [5, 5, 5, 5, 3]
    assert np.concatenate([x for x, _ in source])[:, 0].tolist() == list(range(23))


def test_a_duckdb_column_is_named_as_written_quotes_and_all():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    con.execute('CREATE TABLE t AS SELECT range::DOUBLE AS "a""b", -range AS "c d" FROM range(7)')
    source = exactbatch.duckdb_source(con.table("t"), features='a"b', labels="c d", batch_rows=3)
    assert source.n_rows == 7 and (source.features, source.labels) == (('a"b',), ("c d",))
    x, y = all_rows(source)
    np.testing.assert_array_equal(x[:, 0], np.arange(7))
    np.testing.assert_array_equal(y[:, 0], -np.arange(7))
    assert [len(xb) for xb, _ in source] == [3, 3, 1]  # batch_rows rows a chunk
    for bad, says in (({"batch_rows": 0}, "batch_rows must be >= 1"), ({"n_rows": -1}, "n_rows")):
        with pytest.raises(ValueError, match=says):
            exactbatch.duckdb_source(con.table("t"), **bad)


def test_an_hf_cache_file_rewritten_in_place_is_refused_at_the_next_batch(tmp_path):
    datasets = pytest.importorskip("datasets")
    from exactbatch.errors import NdfError

    datasets.Dataset(table()).save_to_disk(str(tmp_path / "ds"))
    ds = datasets.load_from_disk(str(tmp_path / "ds"))
    reader = exactbatch.hf_source(ds, **FEATURES).open_reader()
    out_x, out_y = np.empty((2, 3)), np.empty((2, 1))
    reader.read(slice(0, 2), out_x, out_y)
    cache = ds.cache_files[0]["filename"]
    st_ = os.stat(cache)
    os.utime(cache, ns=(st_.st_atime_ns, st_.st_mtime_ns + 10**9))
    with pytest.raises(NdfError, match="the file changed while open"):
        reader.read(slice(0, 2), out_x, out_y)
    in_memory = exactbatch.hf_source(datasets.Dataset(table()), **FEATURES).open_reader()
    assert in_memory._check is None  # no cache file: nothing to watch


def test_an_hf_cache_file_that_is_no_longer_a_file_is_named_as_what_was_expected(tmp_path):
    datasets = pytest.importorskip("datasets")
    from exactbatch.errors import NdfError

    datasets.Dataset(table()).save_to_disk(str(tmp_path / "ds"))
    ds = datasets.load_from_disk(str(tmp_path / "ds"))  # mapped: its file may go
    cache = ds.cache_files[0]["filename"]
    os.unlink(cache)
    os.mkfifo(cache)
    with pytest.raises(NdfError) as e:
        exactbatch.hf_source(ds, **FEATURES)
    assert str(e.value) == (
        f"{cache}: not a regular file: expected a Hugging Face dataset's Arrow cache file, "
        "found a FIFO (named pipe)"
    )


def test_duckdb_source_refusals_name_the_argument_in_full_and_n_rows_may_be_0():
    duckdb = pytest.importorskip("duckdb")
    con = duckdb.connect()
    query = con.sql("SELECT range::DOUBLE AS a FROM range(0)")
    empty = exactbatch.duckdb_source(query, n_rows=0)
    assert repr(empty) == "ArrowStream(the DuckDB relation, features=['a'], labels=[], n_rows=0)"
    with pytest.raises(ValueError) as e:
        exactbatch.duckdb_source(query, n_rows=-1)
    assert str(e.value) == "n_rows must be >= 0; got n_rows=-1"
    with pytest.raises(TypeError) as e:
        exactbatch.duckdb_source(table())
    assert str(e.value) == (
        "relation must be a DuckDB relation (con.table(...), con.sql(...)); got Table"
    )
    with pytest.raises(TypeError) as e:
        exactbatch.duckdb_source(query, categorical=[3])
    assert str(e.value) == (
        "duckdb_source: categorical must be a list of column names or a dict "
        "{column: [values]}; got [3]"
    )


def test_a_duckdb_reader_is_made_by_to_arrow_reader_or_before_duckdb_1_4_its_old_name():
    from exactbatch.sources.duckdb_relations import _reader

    class New:
        def to_arrow_reader(self, rows):
            return ("new", rows)

    class Old:
        def fetch_arrow_reader(self, rows):
            return ("old", rows)

    class Both(New, Old):
        pass

    assert _reader(New(), 5) == ("new", 5)
    assert _reader(Old(), 6) == ("old", 6)
    assert _reader(Both(), 7) == ("new", 7)


def test_the_reader_made_for_the_schema_is_closed_when_read_and_when_refused():
    """arrow_source's first reader is made only for its schema: it holds a file or a
    query, closed at once, also when what it gave has no schema (the refusal)."""
    t = table()

    class Held:
        closed = 0

        def __init__(self, batches):
            self.batches = batches

        def __iter__(self):
            return iter(self.batches)

        def close(self):
            Held.closed += 1

    exactbatch.arrow_source(lambda: Held(t.to_batches()), **FEATURES)
    assert Held.closed == 1
    with pytest.raises(TypeError, match="iterable of record batches; it returned Held"):
        exactbatch.arrow_source(lambda: Held([1, 2]))
    assert Held.closed == 2


def test_a_streams_missing_column_is_named_as_the_readers():
    """A function's first reader is checked as a table is, its errors naming "the reader"."""
    table = pa.table({"x0": [1.0, 2.0], "y": [0.0, 1.0]})
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_source(lambda: table.to_reader(), features=["x0", "x9"], labels="y")
    assert str(e.value) == "the reader: missing column(s) ['x9']; its columns are ['x0', 'y']"


def test_an_arrow_files_refusals_name_the_file_and_what_was_expected(tmp_path):
    """A folder is not an Arrow IPC file; a missing column is named with the file's path."""
    with pytest.raises(IsADirectoryError) as e:
        exactbatch.arrow_file(str(tmp_path), labels="y")
    assert e.value.strerror == "expected an Arrow IPC file, found a folder"
    path = str(tmp_path / "t.arrow")
    schema = pa.schema([("x0", pa.float64())])
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_file(sink, schema) as w:
        w.write_table(pa.table({"x0": [1.0, 2.0]}))
    with pytest.raises(ValueError) as e:
        exactbatch.arrow_file(path, features=["x0"], labels="y")
    assert str(e.value) == f"{path}: missing column(s) ['y']; its columns are ['x0']"


def test_a_column_of_one_full_chunk_and_empty_ones_is_held_as_a_view_of_its_buffer():
    """A polars LazyFrame's batches end their columns in an empty chunk ([n, 0]): such a
    column is held as its one full chunk's buffer, not a float64 copy; two full chunks
    are copied."""
    from exactbatch.sources.arrow import column_chunk

    data = pa.array(np.arange(5, dtype=np.int32))
    empty = data.slice(0, 0)
    for chunks in ([data], [data, empty], [empty, data], [data, empty, empty]):
        held = column_chunk([pa.chunked_array(chunks, pa.int32())], 5).cols[0]
        assert held.dtype == np.int32 and held.ctypes.data == data.buffers()[1].address
        assert held.tolist() == list(range(5))
    part = column_chunk([data.slice(1, 3)], 3).cols[0]  # a slice: its own values only
    assert part.dtype == np.int32 and part.tolist() == [1, 2, 3]
    copied = column_chunk([pa.chunked_array([data, data])], 10).cols[0]
    assert copied.dtype == np.float64 and copied.tolist() == list(range(5)) * 2
