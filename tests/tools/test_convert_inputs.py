"""The inputs of exactbatch convert, one by one (tools/convert_inputs.py): a .npy's
headers, shapes, dtypes and slabs; Parquet's recorded labels, unreadable files and
columns; an .ndf's names and slabs; the reused block buffer; the column checks."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import fifo, write_ndf_dataset

from exactbatch import save_ndf
from exactbatch.tools import convert_inputs
from exactbatch.tools.common import CliError
from exactbatch.tools.convert_inputs import (
    Blocks,
    NdfInput,
    NpyInput,
    ParquetInput,
    categorical_columns,
    read_errors,
    refuse_non_numeric,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def all_blocks(inp, *a):
    """Every block (a copy: the buffer is reused) and its progress advance."""
    return [(np.array(b), adv) for b, adv in inp.blocks(*a)]


def rows_of(blocks) -> np.ndarray:
    return np.concatenate([b for b, _ in blocks])


# -- .npy -------------------------------------------------------------------------------


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("cols", [None, "2,0"], ids=["whole", "chosen"])
def test_a_npy_is_read_in_slabs_of_rows(tmp_path, monkeypatch, order, cols):
    """C or Fortran order, whole or some columns: slabs of SLAB_BYTES (8 bytes a value
    at least), each advancing the bar by its rows, the values cast to float64."""
    a = np.asarray(np.arange(15, dtype=np.int16).reshape(5, 3) * 3 - 7, order=order)
    np.save(tmp_path / "a.npy", a)
    monkeypatch.setattr(convert_inputs, "SLAB_BYTES", 48)  # 2 rows of 3 values
    inp = NpyInput(tmp_path / "a.npy", cols, None)
    assert (inp.n, inp.d, inp.l, inp.total, inp.unit, inp.names) == (
        5,
        3 if cols is None else 2,
        0,
        5,
        "rows",
        None,
    )
    assert inp.path == str(tmp_path / "a.npy")
    blocks = all_blocks(inp)
    assert [(b.shape[0], adv) for b, adv in blocks] == [(2, 2), (2, 2), (1, 1)]
    assert all(b.dtype == np.float64 for b, _ in blocks)
    want = a if cols is None else a[:, [2, 0]]
    assert np.array_equal(rows_of(blocks), want)


@pytest.mark.parametrize("order", ["C", "F"])
def test_a_two_column_or_one_row_npy_and_one_columns_slabs(tmp_path, monkeypatch, order):
    """The edges of the slabs: two columns in Fortran order (read from the map, not as
    C rows), one row, and one column's slab of SLAB_BYTES // 8 rows."""
    a = np.asarray(np.arange(10.0).reshape(5, 2) - 3, order=order)
    np.save(tmp_path / "a.npy", a)
    assert np.array_equal(rows_of(all_blocks(NpyInput(tmp_path / "a.npy", None, None))), a)
    np.save(tmp_path / "one.npy", np.asarray([[4.0, -1.5, 2.0]], order=order))
    blocks = all_blocks(NpyInput(tmp_path / "one.npy", None, None))
    assert [adv for _, adv in blocks] == [1]
    assert np.array_equal(rows_of(blocks), [[4.0, -1.5, 2.0]])
    monkeypatch.setattr(convert_inputs, "SLAB_BYTES", 16)  # 2 rows of one value
    np.save(tmp_path / "v.npy", np.arange(5, dtype=np.int32))
    blocks = all_blocks(NpyInput(tmp_path / "v.npy", None, None))
    assert [(len(b), adv) for b, adv in blocks] == [(2, 2), (2, 2), (1, 1)]
    assert np.array_equal(rows_of(blocks)[:, 0], np.arange(5.0))


def test_a_npy_that_is_no_file_or_a_column_out_of_range_is_named(tmp_path):
    """A FIFO named .npy is refused without waiting on it, saying what was expected; a
    position past the last column names the file."""
    f = tmp_path / "f.npy"
    with fifo(f), pytest.raises(CliError) as e:
        NpyInput(f, None, None)
    assert str(e.value) == (
        f"{f}: cannot read as .npy ({f}: not a regular file: expected a .npy file, "
        "found a FIFO (named pipe))"
    )
    np.save(tmp_path / "a.npy", np.ones((2, 3)))
    with pytest.raises(CliError) as e:
        NpyInput(tmp_path / "a.npy", "5", None)
    assert str(e.value) == (
        f"{tmp_path / 'a.npy'}: column 5 (--features) out of range: the data has 3 columns"
    )


def test_npy_columns_are_positions_labels_last(tmp_path):
    a = np.arange(12.0).reshape(3, 4)
    np.save(tmp_path / "a.npy", a)
    inp = NpyInput(tmp_path / "a.npy", None, "-1,1", "0")
    assert (inp.columns, inp.cols, inp.d, inp.l) == (["2", "3", "1"], [2, 3, 1], 1, 2)
    assert np.array_equal(rows_of(all_blocks(inp)), a[:, [2, 3, 1]])


@pytest.mark.parametrize(
    "dtype", [np.bool_, np.int8, np.uint16, np.int64, np.float32, np.uint64], ids=str
)
def test_every_numeric_dtype_converts_exactly(tmp_path, dtype):
    a = (np.arange(8) % 3).astype(dtype).reshape(4, 2)
    np.save(tmp_path / "a.npy", a)
    assert np.array_equal(rows_of(all_blocks(NpyInput(tmp_path / "a.npy", None, None))), a)


def test_a_one_column_npy_and_a_version_2_header(tmp_path):
    """A 1-D array is one column; a version 2.0 header reads as 1.0's; a Fortran array
    of one column is read as C (the same bytes)."""
    np.save(tmp_path / "v.npy", np.arange(5.0))
    inp = NpyInput(tmp_path / "v.npy", None, None)
    assert (inp.shape, inp.columns) == ((5, 1), ["0"])
    assert np.array_equal(rows_of(all_blocks(inp))[:, 0], np.arange(5.0))
    a = np.arange(6.0).reshape(3, 2)
    with open(tmp_path / "v2.npy", "wb") as f:
        np.lib.format.write_array(f, a, version=(2, 0))
    inp = NpyInput(tmp_path / "v2.npy", None, None)
    assert inp.offset % 64 == 0 and inp.offset > 0
    assert np.array_equal(rows_of(all_blocks(inp)), a)
    np.save(tmp_path / "f.npy", np.asfortranarray(np.arange(4.0).reshape(4, 1)))
    assert np.array_equal(
        rows_of(all_blocks(NpyInput(tmp_path / "f.npy", None, None)))[:, 0], [0, 1, 2, 3]
    )


def test_npy_files_that_cannot_be_converted(tmp_path):
    """Each refusal names the file: a version 3.0 header, no .npy at all, a shape not of
    rows and columns, a dtype not of numbers; a .npy of no rows gives no block."""
    with open(tmp_path / "v3.npy", "wb") as f:
        np.lib.format.write_array(f, np.ones((2, 2)), version=(3, 0))
    with pytest.raises(CliError) as e:
        NpyInput(tmp_path / "v3.npy", None, None)
    assert str(e.value) == (
        f"{tmp_path / 'v3.npy'}: cannot read as .npy (unsupported .npy format version (3, 0))"
    )
    (tmp_path / "x.npy").write_bytes(b"not a npy file at all")
    with pytest.raises(CliError, match=r"x\.npy: cannot read as \.npy \("):
        NpyInput(tmp_path / "x.npy", None, None)
    for a, shown in (
        (np.ones((2, 2, 2)), "shape (2, 2, 2), dtype float64"),
        (np.ones((2, 2), dtype=complex), "shape (2, 2), dtype complex128"),
        (np.array([["a"]]), "shape (1, 1), dtype <U1"),
        (np.float64(3.0), "shape (), dtype float64"),
    ):
        np.save(tmp_path / "b.npy", a)
        with pytest.raises(CliError) as e:
            NpyInput(tmp_path / "b.npy", None, None)
        assert str(e.value) == (
            f"{tmp_path / 'b.npy'}: expected a 2-D array of numbers (rows, columns); found " + shown
        )
    np.save(tmp_path / "e.npy", np.zeros((0, 2)))
    assert all_blocks(NpyInput(tmp_path / "e.npy", None, None)) == []
    np.save(tmp_path / "ef.npy", np.asfortranarray(np.zeros((0, 2))))
    assert all_blocks(NpyInput(tmp_path / "ef.npy", None, None)) == []


# -- Parquet ----------------------------------------------------------------------------


def test_parquet_labels_default_to_those_recorded(tmp_path):
    """Without --labels, the labels the schema records (as convert writes them from an
    .ndf), less those chosen as features; the columns keep their names and the input
    counts rows."""
    t = pa.table({"a": [1.0, 2.0], "b": [3, 4], "y": [5.0, 6.0], "z": [7.0, 8.0]})
    t = t.replace_schema_metadata({b"exactbatch.labels": b"y,z"})
    pq.write_table(t, tmp_path / "t.parquet")
    inp = ParquetInput(tmp_path / "t.parquet", None, None)
    assert (inp.columns, inp.d, inp.l, inp.n, inp.total, inp.unit) == (
        ["a", "b", "y", "z"],
        2,
        2,
        2,
        2,
        "rows",
    )
    assert (inp.names, inp.categories, inp.path) == (True, {}, tmp_path / "t.parquet")
    inp = ParquetInput(tmp_path / "t.parquet", "a,z", None)
    assert (inp.columns, inp.d, inp.l) == (["a", "z", "y"], 2, 1)
    inp = ParquetInput(tmp_path / "t.parquet", "y,z", None)  # every recorded label a feature
    assert (inp.columns, inp.d, inp.l) == (["y", "z"], 2, 0)
    inp = ParquetInput(tmp_path / "t.parquet", "1", None)  # by position too
    assert (inp.columns, inp.l) == (["b", "y", "z"], 2)
    inp = ParquetInput(tmp_path / "t.parquet", None, "a")
    assert (inp.columns, inp.d, inp.l) == (["b", "y", "z", "a"], 3, 1)
    assert np.array_equal(rows_of(all_blocks(inp)), [[3, 5, 7, 1], [4, 6, 8, 2]])


def test_parquet_blocks_are_slabs_of_rows(tmp_path, monkeypatch):
    pq.write_table(pa.table({"a": np.arange(7.0), "b": np.arange(7) * 2}), tmp_path / "t.parquet")
    monkeypatch.setattr(convert_inputs, "SLAB_BYTES", 48)  # 3 rows of 2 values
    blocks = all_blocks(ParquetInput(tmp_path / "t.parquet", None, None))
    assert [(len(b), adv) for b, adv in blocks] == [(3, 3), (3, 3), (1, 1)]
    assert np.array_equal(rows_of(blocks), np.column_stack([np.arange(7.0), np.arange(7) * 2]))
    pq.write_table(pa.table({"a": np.arange(5.0)}), tmp_path / "one.parquet")
    monkeypatch.setattr(convert_inputs, "SLAB_BYTES", 16)  # 2 rows of one value
    blocks = all_blocks(ParquetInput(tmp_path / "one.parquet", None, None))
    assert [(len(b), adv) for b, adv in blocks] == [(2, 2), (2, 2), (1, 1)]


def test_parquet_inputs_that_are_refused(tmp_path):
    """A file that is not Parquet; a folder whose files lack a chosen column (the message
    says how to choose columns); a categorical column outside those chosen."""
    (tmp_path / "x.parquet").write_bytes(b"PAR1 but nothing more")
    with pytest.raises(CliError) as e:
        ParquetInput(tmp_path / "x.parquet", None, None)
    assert str(e.value).startswith(f"{tmp_path / 'x.parquet'}: not a readable Parquet file (")
    folder = tmp_path / "f"
    folder.mkdir()
    pq.write_table(pa.table({"a": [1.0], "b": [2.0]}), folder / "p0.parquet")
    pq.write_table(pa.table({"a": [1.0]}), folder / "p1.parquet")
    with pytest.raises(CliError) as e:
        ParquetInput(folder, None, None)
    assert "p1.parquet" in str(e.value)
    assert str(e.value).endswith(" (choose columns with --features/--labels/--exclude)")
    assert ParquetInput(folder, "a", None).n == 2
    with pytest.raises(CliError, match=r"--categorical names column\(s\) \['b'\]"):
        ParquetInput(folder, "a", None, None, "b")
    for feat, says in (
        ("z", "no column 'z' (--features); columns are ['a', 'b']"),
        ("7", "column 7 (--features) out of range: the data has 2 columns"),
    ):
        with pytest.raises(CliError) as e:  # read before the recorded labels are
            ParquetInput(folder / "p0.parquet", feat, None)
        assert str(e.value) == f"{folder / 'p0.parquet'}: {says}"

    pq.write_table(pa.table({"a": [1.0], "b": [2.0], "s": ["x"]}), tmp_path / "s.parquet")
    t = tmp_path / "s.parquet"
    assert ParquetInput(t, None, None, "s").columns == ["a", "b"]  # --exclude
    for args, says in (
        (("a", "z"), "no column 'z' (--labels); columns are ['a', 'b', 's']"),
        (
            (None, None),
            "non-numeric column(s) ['s (string)']; code them as integers with --categorical "
            "s, leave them out with --exclude s, or choose columns with --features/--labels",
        ),
        (
            ("a", None, None, "b"),
            "--categorical names column(s) ['b'] that are not converted (columns converted: "
            "['a']); name existing columns, not --exclude'd ones",
        ),
    ):
        with pytest.raises(CliError) as e:
            ParquetInput(t, *args)
        assert str(e.value) == f"{t}: {says}"


def test_bad_hive_partitions_are_one_cli_error(tmp_path, monkeypatch):
    from exactbatch.tools import convert_inputs as mod

    folder = tmp_path / "h" / "k=1"
    folder.mkdir(parents=True)
    pq.write_table(pa.table({"a": [1.0]}), folder / "p.parquet")

    def bad(base, files):
        raise ValueError(f"{base}: cannot read its Hive partitions (oops)")

    monkeypatch.setattr(mod, "hive_partitions", bad)
    with pytest.raises(CliError) as e:
        ParquetInput(tmp_path / "h", None, None)
    assert str(e.value) == f"{tmp_path / 'h'}: cannot read its Hive partitions (oops)"


def test_a_parquet_file_is_not_read_for_hive_keys(tmp_path, monkeypatch):
    """Only a folder has partitions: a file under a key=value folder is read alone, its
    folder's key not a column."""
    from exactbatch.tools import convert_inputs as mod

    folder = tmp_path / "k=1"
    folder.mkdir()
    pq.write_table(pa.table({"a": [1.0]}), folder / "p.parquet")
    monkeypatch.setattr(mod, "hive_partitions", lambda *a: pytest.fail("a file has no keys"))
    assert ParquetInput(folder / "p.parquet", None, None).columns == ["a"]


# -- .ndf and sharded datasets ------------------------------------------------------------


def test_an_ndf_input_names_its_columns_and_reads_slabs(tmp_path, monkeypatch):
    x = np.arange(10.0).reshape(5, 2)
    save_ndf(tmp_path / "a.ndf", (x, -x[:, :1]))
    inp = NdfInput(tmp_path / "a.ndf")
    assert (inp.n, inp.d, inp.l, inp.total, inp.unit, inp.names) == (5, 2, 1, 5, "rows", None)
    assert inp.columns == ["x0", "x1", "y0"]
    monkeypatch.setattr(convert_inputs, "SLAB_BYTES", 48)  # 2 rows of 3 values
    blocks = all_blocks(inp)
    assert [(len(b), adv) for b, adv in blocks] == [(2, 2), (2, 2), (1, 1)]
    assert np.array_equal(rows_of(blocks), np.column_stack([x, -x[:, 0]]))
    assert [len(b) for b, _ in all_blocks(inp, 4)] == [4, 1]
    save_ndf(tmp_path / "n.ndf", (x, -x[:, :1]), features=["p", "q"])
    inp = NdfInput(tmp_path / "n.ndf")
    assert (inp.names, inp.columns) == (True, ["p", "q", "y0"])
    save_ndf(tmp_path / "l.ndf", (x, -x[:, :1]), labels=["t"])
    assert (NdfInput(tmp_path / "l.ndf").names, NdfInput(tmp_path / "l.ndf").columns) == (
        True,
        ["x0", "x1", "t"],
    )
    save_ndf(tmp_path / "one.ndf", np.arange(5.0)[:, None])  # one column: 8 bytes a row
    monkeypatch.setattr(convert_inputs, "SLAB_BYTES", 16)
    blocks = all_blocks(NdfInput(tmp_path / "one.ndf"))
    assert [(len(b), adv) for b, adv in blocks] == [(2, 2), (2, 2), (1, 1)]
    assert np.array_equal(rows_of(blocks), np.arange(5.0)[:, None])


def test_a_dataset_input_reads_its_parts_in_turn(tmp_path):
    ds = write_ndf_dataset(tmp_path / "ds", [3, 0, 4], d=2, l=0)
    inp = NdfInput(ds)
    assert (inp.n, inp.d, inp.l, inp.columns) == (7, 2, 0, ["x0", "x1"])
    assert rows_of(all_blocks(inp, 2))[:, 0].tolist() == list(range(7))
    with pytest.raises(CliError) as e:
        NdfInput(write_ndf_dataset(tmp_path / "empty", [0]))
    assert str(e.value) == f"{tmp_path / 'empty'}: no rows of data to convert"


# -- the block buffer and the column checks ------------------------------------------------


def test_blocks_reuse_one_buffer_grown_as_needed():
    to_block = Blocks(2)
    assert to_block.buf.shape == (0, 2)
    cols = [pa.array([1.0, 2.0, 3.0]), pa.array([4, 5, 6])]
    b = to_block(cols)
    assert b.tolist() == [[1, 4], [2, 5], [3, 6]] and to_block.buf.shape == (3, 2)
    b = to_block([pa.array([7.0]), pa.array([8])])
    assert b.tolist() == [[7, 8]] and to_block.buf.shape == (3, 2)  # reused
    assert np.shares_memory(b, to_block.buf)
    b = to_block([pa.array(np.arange(4.0)), pa.array(np.arange(4.0))])
    assert to_block.buf.shape == (6, 2) and b.shape == (4, 2)  # twice what it had
    b = to_block([pa.array(np.arange(13.0)), pa.array(np.arange(13.0))])
    assert to_block.buf.shape == (13, 2) and b[:, 1].tolist() == list(range(13))
    b = to_block([pa.array(np.ones(13)), pa.array(np.ones(13))])  # as many rows: reused
    assert to_block.buf.shape == (13, 2) and np.shares_memory(b, to_block.buf)
    assert Blocks(0)([]).shape == (0, 0)  # no columns: no rows


def test_categorical_columns_are_chosen_ones_named_once():
    assert categorical_columns(None, ["a"], "p") == []
    assert categorical_columns(" b , a ,,b", ["a", "b"], "p") == ["b", "a"]
    with pytest.raises(CliError) as e:
        categorical_columns("a,c,d", ["a", "b"], "p.csv")
    assert str(e.value) == (
        "p.csv: --categorical names column(s) ['c', 'd'] that are not converted (columns "
        "converted: ['a', 'b']); name existing columns, not --exclude'd ones"
    )


def test_only_numbers_pass_unless_categorical():
    types = {
        "i": pa.int8(),
        "f": pa.float32(),
        "b": pa.bool_(),
        "n": pa.null(),
        "s": pa.string(),
        "t": pa.timestamp("s"),
    }
    refuse_non_numeric("p", {k: v for k, v in types.items() if k in "ifbn"}, [])
    refuse_non_numeric("p", types, ["s", "t"])
    with pytest.raises(CliError) as e:
        refuse_non_numeric("p.csv", types, ["t"])
    assert str(e.value) == (
        "p.csv: non-numeric column(s) ['s (string)']; code them as integers with --categorical "
        "s, leave them out with --exclude s, or choose columns with --features/--labels"
    )
    with pytest.raises(CliError, match=r"\['s \(string\)', 't \(timestamp\[s\]\)'\]; .* s,t,"):
        refuse_non_numeric("p.csv", types, [])


def test_no_pyarrow_is_a_cli_error_saying_what_to_install(monkeypatch):
    import sys

    from exactbatch.tools.convert_inputs import arrow

    monkeypatch.setitem(sys.modules, "pyarrow", None)  # as if not installed
    with pytest.raises(CliError) as e:
        arrow()
    assert str(e.value) == "reading Parquet and CSV needs pyarrow: pip install pyarrow"


def test_read_errors_are_arrows_and_the_os():
    assert read_errors() == (pa.ArrowException, OSError, ValueError)
