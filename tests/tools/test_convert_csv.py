"""The CSV inputs of exactbatch convert, one by one (tools/convert_csv.py): which names
are CSV, how several files are found and ordered, each file's delimiter and header,
what the bar counts, the types a column is read as, and the errors of one file among
several."""

from __future__ import annotations

import gzip
import os

import numpy as np
import pytest
from helpers import fifo

from exactbatch.errors import NdfError
from exactbatch.tools.common import CliError
from exactbatch.tools.convert_csv import (
    CsvInput,
    _folder_csvs,
    _is_csv_name,
    csv_inputs,
    csv_schema,
)

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def blocks(inp):
    return [(np.array(b), adv) for b, adv in inp.blocks()]


def write(folder, named: dict) -> list[str]:
    out = []
    for name, text in named.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if name.endswith(".gz"):
            path.write_bytes(gzip.compress(text.encode()))
        else:
            path.write_text(text)
        out.append(str(path))
    return out


@pytest.mark.parametrize(
    ("name", "csv"),
    [
        ("a.csv", True),
        ("a.TSV", True),
        ("a.tab", True),
        ("a.csv.gz", True),
        ("a.tsv.BZ2", True),
        ("a.csv.zst", True),
        ("a.tab.lz4", True),
        ("a.txt", False),
        ("a.gz", False),
        ("a.csv.zip", False),
        ("csv", False),
        ("a.parquet", False),
    ],
)
def test_which_names_are_csv(name, csv):
    assert _is_csv_name(name) is csv


def test_a_folders_csvs_at_any_depth_by_path_hidden_ones_skipped(tmp_path):
    """Sorted by the path's parts (a folder's files together, before a longer name that
    sorts after it as text), compressed ones too, hidden files and folders skipped, a
    file reached twice (a link) once."""
    write(
        tmp_path,
        {
            "a-b.csv": "",
            "a/x.csv": "",
            "a/y.tsv.gz": "",
            "b.txt": "",
            ".hidden.csv": "",
            ".git/c.csv": "",
            "z/.h/d.csv": "",
            "z/e.TAB": "",
        },
    )
    os.symlink(tmp_path / "z" / "e.TAB", tmp_path / "z" / "f.csv")
    got = [os.path.relpath(p, tmp_path) for p in _folder_csvs(str(tmp_path))]
    assert got == ["a/x.csv", "a/y.tsv.gz", "a-b.csv", "z/e.TAB"]


def test_what_csv_inputs_makes_of_each_source(tmp_path):
    b, a = write(tmp_path / "in", {"b.csv": "x\n1\n", "a.csv": "x\n2\n"})
    assert csv_inputs([b]) == (b, None)  # one file: read by its format
    assert csv_inputs((a,)) == (a, None)
    assert csv_inputs([b, a, b]) == (f"{b} {a} {b}", [a, b])  # sorted, once each
    assert csv_inputs([tmp_path / "in" / "b.csv", a]) == (f"{b} {a}", [a, b])
    assert csv_inputs(tmp_path / "in") == (str(tmp_path / "in"), [a, b])
    assert csv_inputs(str(tmp_path / "in" / "*.csv")) == (str(tmp_path / "in" / "*.csv"), [a, b])
    deep = write(tmp_path / "in", {"sub/c.csv": "x\n3\n"})
    assert csv_inputs(str(tmp_path / "in" / "**" / "*.csv"))[1] == [a, b, *deep]
    assert csv_inputs(b) == (b, None)
    assert csv_inputs(tmp_path / "nope.csv") == (str(tmp_path / "nope.csv"), None)
    odd = write(tmp_path, {"f[1].csv": "x\n1\n"})[0]  # an existing name with glob signs
    assert csv_inputs(odd) == (odd, None)
    with pytest.raises(CliError, match="^no input files given$"):
        csv_inputs([])


def test_folders_of_parquet_or_parts_are_not_csv_inputs(tmp_path):
    (tmp_path / "p").mkdir()
    pq.write_table(pa.table({"a": [1.0]}), tmp_path / "p" / "x.parquet")
    assert csv_inputs(tmp_path / "p") == (str(tmp_path / "p"), None)
    write(tmp_path / "p", {"deep/x.csv": "a\n1\n"})  # Parquet beside: a Parquet folder
    assert csv_inputs(tmp_path / "p") == (str(tmp_path / "p"), None)
    from exactbatch import save_ndf_dataset

    save_ndf_dataset(tmp_path / "ds", [np.ones((2, 1))])
    assert csv_inputs(tmp_path / "ds") == (str(tmp_path / "ds"), None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(CliError) as e:
        csv_inputs(tmp_path / "empty")
    assert str(e.value) == (
        f"{tmp_path / 'empty'}: the folder holds no CSV files (.csv, .tsv, .tab, compressed "
        "too, at any depth), no Parquet files and no .ndf dataset"
    )


def test_several_inputs_must_all_be_csv_files(tmp_path):
    a, b = write(tmp_path, {"a.csv": "x\n1\n", "b.csv": "x\n1\n"})
    (tmp_path / "d.csv").mkdir()
    with pytest.raises(CliError) as e:
        csv_inputs([a, str(tmp_path / "d.csv"), b])
    assert str(e.value) == (
        f"{tmp_path / 'd.csv'}: not a CSV file; several inputs are converted together only as "
        "CSV files (got 3 inputs)"
    )
    np.save(tmp_path / "n.npy", np.ones(2))
    with pytest.raises(CliError, match=r"n\.npy: not a CSV file; .* \(got 2 inputs\)"):
        csv_inputs(str(tmp_path / "[an].*"))
    with pytest.raises(CliError) as e:
        csv_inputs(str(tmp_path / "z*.csv"))
    assert str(e.value) == f"{tmp_path / 'z*.csv'}: no files match this pattern"


def test_csv_schema_names_and_types_or_a_clear_refusal(tmp_path):
    (tmp_path / "a.tsv").write_text("p\tq,r\n1\tx,y\n")
    schema = csv_schema(tmp_path / "a.tsv")
    assert schema.names == ["p", "q,r"] and schema.field("p").type == pa.int64()
    assert csv_schema(tmp_path / "a.tsv", ",").names == ["p\tq", "r"]
    assert csv_schema(tmp_path / "a.tsv", header=False).names == ["f0", "f1"]
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(CliError) as e:
        csv_schema(tmp_path / "e.csv")
    assert str(e.value).startswith(f"{tmp_path / 'e.csv'}: cannot read as CSV (")
    assert "Empty CSV file" in str(e.value)
    with (
        fifo(tmp_path / "f.csv"),
        pytest.raises(NdfError, match="expected a CSV file, found a FIFO"),
    ):
        csv_schema(tmp_path / "f.csv")  # refused, never waited on


def test_a_csv_without_a_header_has_positions_for_names(tmp_path):
    (tmp_path / "a.csv").write_text("1,2,3\n4,5,6\n")
    inp = CsvInput(str(tmp_path / "a.csv"), "2,0", "1", None, False)
    assert (inp.columns, inp.d, inp.l, inp.n, inp.names) == (["f2", "f0", "f1"], 2, 1, None, True)
    assert np.concatenate([b for b, _ in blocks(inp)]).tolist() == [[3, 1, 2], [6, 4, 5]]


def test_the_bar_counts_bytes_of_plain_files_and_rows_of_compressed_ones(tmp_path, monkeypatch):
    """Plain files: the total is their bytes, each block advancing by the bytes read in its
    file (the whole of every file in the end); compressed: rows, no total."""
    from exactbatch.tools import convert_csv

    monkeypatch.setattr(convert_csv, "_CSV_BLOCK_BYTES", 16)  # several blocks a file
    text = "a,b\n" + "".join(f"{i},{i * 2}\n" for i in range(20))
    files = write(tmp_path, {"p1.csv": text, "p2.tsv": text.replace(",", "\t")})
    inp = CsvInput(files, None, None, None, True)
    assert (inp.compressed, inp.unit) == (False, "B")
    assert inp.total == sum(os.path.getsize(p) for p in files)
    got = blocks(inp)
    assert len(got) > 4 and sum(adv for _, adv in got) == inp.total
    assert all(adv >= 0 for _, adv in got)
    x = np.concatenate([b for b, _ in got])
    assert x[:, 0].tolist() == list(range(20)) * 2 and np.array_equal(x[:, 1], 2 * x[:, 0])
    files = write(tmp_path, {"c1.csv.gz": text, "c2.csv": text})
    inp = CsvInput(files, None, None, None, True)
    assert (inp.compressed, inp.total, inp.unit) == (True, None, "rows")
    got = blocks(inp)
    assert [adv for _, adv in got] == [len(b) for b, _ in got] and sum(len(b) for b, _ in got) == 40


@pytest.mark.parametrize("case", [str.lower, str.upper], ids=["lower", "upper"])
@pytest.mark.parametrize(
    ("ext", "codec"), [("gz", "gzip"), ("bz2", "bz2"), ("zst", "zstd"), ("lz4", "lz4")]
)
def test_every_compressed_kind_is_read_as_rows(tmp_path, ext, codec, case):
    """Each compression pyarrow knows by its name (in capitals too) is decompressed, its bar
    counting rows (its bytes say nothing of the text's)."""
    path = str(tmp_path / case(f"a.csv.{ext}"))
    with pa.CompressedOutputStream(path, codec) as f:
        f.write(b"a,b\n1,2\n3,4\n")
    inp = CsvInput(path, None, None, None, True)
    assert (inp.compressed, inp.total, inp.unit) == (True, None, "rows")
    assert [(b.tolist(), adv) for b, adv in blocks(inp)] == [([[1, 2], [3, 4]], 2)]


def test_a_column_left_out_is_not_read(tmp_path, monkeypatch):
    """Only the chosen columns are parsed: one left out may hold a value past the first
    block that is no number of the type inferred there."""
    from exactbatch.tools import convert_csv

    monkeypatch.setattr(convert_csv, "_CSV_BLOCK_BYTES", 16)
    (tmp_path / "a.csv").write_text("a,c\n" + "1,2\n" * 20 + "3,x\n")
    for inp in (
        CsvInput(str(tmp_path / "a.csv"), None, None, None, True, "c"),
        CsvInput(str(tmp_path / "a.csv"), "a", None, None, True),
    ):
        x = np.concatenate([b for b, _ in blocks(inp)])
        assert x[:, 0].tolist() == [1] * 20 + [3] and x.shape == (21, 1)


def test_columns_are_read_as_numbers_bools_or_coded_strings(tmp_path):
    """A chosen numeric column is parsed as float64 (a value past the first block's type
    too), a boolean one as 0 and 1; a categorical column keeps its inferred type: strings
    stay strings, "01" is not 1."""
    (tmp_path / "a.csv").write_text("i,b,k,n\n1,true,01,1\n2,false,x,\n3,true,01,2.5\n")
    inp = CsvInput(str(tmp_path / "a.csv"), None, None, None, True, None, "k")
    assert inp.types == {"i": pa.float64(), "b": pa.bool_(), "k": pa.string(), "n": pa.float64()}
    assert inp.categories == {"k": ["01", "x"]} and inp.cats == ["k"]
    x = np.concatenate([b for b, _ in blocks(inp)])
    assert np.array_equal(x, [[1, 1, 0, 1], [2, 0, 1, np.nan], [3, 1, 0, 2.5]], equal_nan=True)
    inp = CsvInput(str(tmp_path / "a.csv"), None, None, None, True, "k")
    assert inp.columns == ["i", "b", "n"] and inp.vocab == {} and inp.categories == {}


def test_each_file_is_split_by_its_own_delimiter_unless_one_is_given(tmp_path):
    files = write(tmp_path, {"a.csv": "p,q\n1,2\n", "b.tsv": "p\tq\n3\t4\n"})
    x = np.concatenate([b for b, _ in blocks(CsvInput(files, None, None, None, True))])
    assert x.tolist() == [[1, 2], [3, 4]]
    files = write(tmp_path, {"c.csv": "p;q\n1;2\n", "d.tsv": "p;q\n3;4\n"})
    x = np.concatenate([b for b, _ in blocks(CsvInput(files, None, None, ";", True))])
    assert x.tolist() == [[1, 2], [3, 4]]


def test_a_bad_file_among_several_is_named(tmp_path, monkeypatch):
    """A value that is no number past the block the types were inferred from: in one
    file, the reader's own error; in one of several, the file's path first."""
    from exactbatch.tools import convert_csv

    monkeypatch.setattr(convert_csv, "_CSV_BLOCK_BYTES", 16)
    files = write(tmp_path, {"a.csv": "p\n1\n", "b.csv": "p\n" + "1\n" * 20 + "x\n"})
    with pytest.raises(ValueError) as e:
        blocks(CsvInput(files, None, None, None, True))
    said = " ".join(str(e.value.__cause__).split())  # the reader's error on one line
    assert "x" in said and str(e.value) == f"{files[1]}: {said}"
    with pytest.raises(pa.ArrowInvalid) as e:
        blocks(CsvInput(files[1:], None, None, None, True))
    assert not str(e.value).startswith(files[1])


def test_every_file_is_checked_against_the_first_and_refusals_name_it(tmp_path):
    """The second file's columns too (without a header: positions, the same for all);
    each refusal of a column names the first file, in full."""
    files = write(tmp_path, {"a.csv": "a,b,s\n1,2,x\n", "b.csv": "a,c,s\n3,4,y\n"})
    with pytest.raises(CliError) as e:
        CsvInput(files, None, None, None, True, None, "s")
    assert str(e.value) == (
        f"{files[1]}: its columns ['a', 'c', 's'] differ from those of {files[0]} "
        "['a', 'b', 's']; every file converted together must have the same columns, in the "
        "same order"
    )
    inp = CsvInput(files, None, None, None, False, None, "f0,f1,f2")  # no header: positions
    assert inp.columns == ["f0", "f1", "f2"]
    for args, says in (
        (("z", None), "no column 'z' (--features); columns are ['a', 'b', 's']"),
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
            CsvInput(files[:1], args[0], args[1], None, True, *args[2:])
        assert str(e.value) == f"{files[0]}: {says}"


def test_a_value_outside_the_vocabulary_past_the_first_block_names_its_row(tmp_path, monkeypatch):
    """Rows are counted through every block of the file (from 0 at each file's start)."""
    from exactbatch.tools import convert_csv

    monkeypatch.setattr(convert_csv, "_CSV_BLOCK_BYTES", 16)  # several blocks a file
    text = "k,n\n" + "u,1\nv,2\n" * 10
    files = write(tmp_path, {"a.csv": text, "b.csv": text})
    inp = CsvInput(files, None, None, None, True, None, "k")
    write(tmp_path, {"b.csv": "k,n\n" + "u,1\nv,2\n" * 6 + "w,3\n"})
    with pytest.raises(ValueError) as e:
        blocks(inp)
    assert str(e.value).startswith(f"{files[1]}: column 'k' holds 'w' (row 12), which is not")


def test_a_value_outside_the_vocabulary_is_named_by_its_row_in_its_file(tmp_path):
    """A file changed between the vocabulary's pass and the conversion's: the error names
    the file and the value's row in that file (not in all the files read before it)."""
    files = write(tmp_path, {"a.csv": "k\nu\nv\n", "b.csv": "k\nu\nv\n"})
    inp = CsvInput(files, None, None, None, True, None, "k")
    write(tmp_path, {"b.csv": "k\nv\nw\n"})
    with pytest.raises(ValueError) as e:
        blocks(inp)
    assert str(e.value).startswith(f"{files[1]}: column 'k' holds 'w' (row 1), which is not")
