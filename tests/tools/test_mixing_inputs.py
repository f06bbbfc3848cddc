"""exactbatch mixing's inputs (tools/mixing_inputs.py): the chunks with each row's file
position appended, the columns chosen and skipped (and why), the stratum, and each
refusal by its message, for an .ndf and for Parquet."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from exactbatch import open_ndf, save_ndf
from exactbatch.cli import main
from exactbatch.tools.common import CliError
from exactbatch.tools.mixing_inputs import (
    MAX_COLUMNS,
    Tagged,
    _read_columns,
    _skipped,
    _stratum,
    ndf_input,
    parquet_input,
)

N = 60


def test_tagged_appends_each_rows_file_position():
    """Chunk i's rows [a, b) are read as read(i, a, b), the file position a float64 last
    column; the chunks' rows are counted as int64."""
    calls = []

    def read(i, a, b):
        calls.append((i, a, b))
        return np.full((b - a, 2), float(i))

    t = Tagged([2, 3, 0, 4], read)
    assert len(t) == 4 and t.n_rows == 9
    assert t.chunk_rows.dtype == np.int64 and t.chunk_rows.tolist() == [2, 3, 0, 4]
    got = t.read_chunk(1)
    assert calls == [(1, 2, 5)]
    np.testing.assert_array_equal(got, [[1, 1, 2], [1, 1, 3], [1, 1, 4]])
    assert got.dtype == np.float64
    assert t.read_chunk(2).shape == (0, 3)
    np.testing.assert_array_equal(t.read_chunk(3)[:, -1], [5, 6, 7, 8])


@pytest.fixture
def wide(tmp_path):
    """An .ndf of 10 features and 2 labels, named; column j holds 100 * j + row."""
    x = np.arange(N, dtype=np.float64)[:, None] + 100 * np.arange(12.0)
    names = [f"f{j}" for j in range(10)]
    save_ndf(tmp_path / "wide.ndf", (x[:, :10], x[:, 10:]), features=names, labels=["a", "b"])
    return tmp_path / "wide.ndf"


def test_an_ndf_input_without_columns_examines_the_first_eight(wide):
    with open_ndf(wide) as f:
        inp = ndf_input(f, "W", None, None, None)
        assert inp.names == [f"f{j}" for j in range(MAX_COLUMNS)] and MAX_COLUMNS == 8
        assert inp.width == 12 and inp.chunk_rows == 65536 and len(inp.tagged) == 1
        assert inp.stratum is None and inp.stratum_at is None  # two labels: no default
        why = "over the 8 examined without --columns"
        assert inp.skipped == [{"name": c, "reason": why} for c in ("f8", "f9", "a", "b")]
        rows = inp.tagged.read_chunk(0)
        want = np.arange(N)[:, None] + 100 * np.arange(8.0)
        np.testing.assert_array_equal(rows, np.column_stack((want, np.arange(N))))


def test_an_ndf_input_reads_the_chosen_columns_and_the_stratum_after_them(wide):
    """--columns in its order; the stratum, when not chosen, read after them; chunks of
    chunk_rows rows, each row's position last."""
    with open_ndf(wide) as f:
        inp = ndf_input(f, "W", "f3,a", 25, "b")
        assert inp.names == ["f3", "a"] and inp.stratum == "b" and inp.stratum_at == 2
        assert inp.chunk_rows == 25 and inp.tagged.chunk_rows.tolist() == [25, 25, 10]
        assert [c["name"] for c in inp.skipped] == [*(f"f{j}" for j in range(10) if j != 3), "b"]
        assert {c["reason"] for c in inp.skipped} == {"not in --columns"}
        rows = inp.tagged.read_chunk(1)
        r = np.arange(25, 50)
        np.testing.assert_array_equal(rows, np.column_stack((300 + r, 1000 + r, 1100 + r, r)))
        inside = ndf_input(f, "W", "f3,a", 25, "a")  # the stratum among the chosen
        assert inside.stratum_at == 1 and inside.tagged.read_chunk(0).shape == (25, 3)
        by_position = ndf_input(f, "W", "-1", None, "0")
        assert by_position.names == ["b"] and by_position.stratum == "f0"


def test_an_ndf_input_names_its_file_in_each_refusal(wide, tmp_path):
    with open_ndf(wide) as f:
        with pytest.raises(CliError, match=r"^W: no column 'nope' \(--columns\)"):
            ndf_input(f, "W", "nope", None, None)
        with pytest.raises(CliError, match=r"^W: no column 'nope' \(--stratum\)"):
            ndf_input(f, "W", None, None, "nope")
    save_ndf(tmp_path / "pair.ndf", (np.ones((5, 1)), np.zeros((5, 1))))  # d = l: read
    with open_ndf(tmp_path / "pair.ndf") as f:
        assert ndf_input(f, "P", None, None, None).names == ["x0", "y0"]
    save_ndf(tmp_path / "none.ndf", (np.empty((5, 0)), np.empty((5, 0))))
    with open_ndf(tmp_path / "none.ndf") as f:
        with pytest.raises(CliError, match=r"^N: no columns to examine \(d = l = 0\)$"):
            ndf_input(f, "N", None, None, None)
    save_ndf(tmp_path / "empty.ndf", (np.empty((0, 2)), np.empty((0, 1))))
    with open_ndf(tmp_path / "empty.ndf") as f:
        with pytest.raises(CliError, match=r"^E: no rows$"):
            ndf_input(f, "E", None, None, None)


def test_the_stratum_is_the_one_given_else_the_one_label():
    names = ["x", "y", "z"]
    assert _stratum(None, names, ["y"], "P") == "y"
    assert _stratum(None, names, ["y", "z"], "P") is None
    assert _stratum(None, names, [], "P") is None
    assert _stratum("z", names, ["y"], "P") == "z"
    assert _stratum("0", names, ["y"], "P") == "x"
    with pytest.raises(CliError, match=r"^P: --stratum takes one column; got 'x,z'$"):
        _stratum("x,z", names, [], "P")
    with pytest.raises(CliError, match=r"^P: --stratum takes one column; got ''$"):
        _stratum("", names, [], "P")
    with pytest.raises(CliError, match=r"^P: no column 'w' \(--stratum\)"):
        _stratum("w", names, [], "P")


def test_the_columns_read_and_the_columns_skipped():
    names = ["a", "b", "c", "d"]
    assert _read_columns(names, ["c", "a"], None) == ([2, 0], None)
    assert _read_columns(names, ["c", "a"], "a") == ([2, 0], 1)
    assert _read_columns(names, ["c", "a"], "d") == ([2, 0, 3], 2)
    assert _skipped(names, ["b"], "b") == [
        {"name": c, "reason": "not in --columns"} for c in ("a", "c", "d")
    ]
    why = "over the 8 examined without --columns"
    assert _skipped(names, ["a", "b"], None) == [{"name": c, "reason": why} for c in "cd"]


@pytest.fixture
def table(tmp_path):
    """Parquet of a numeric time, a string, a flag, a recorded label; 3 row groups."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from exactbatch.sources.parquet import LABELS_METADATA_KEY

    t = np.arange(N, dtype=np.float64)
    tab = pa.table({"t": t, "city": ["a", "b", "c"] * (N // 3), "flag": t > 10, "y": t % 2})
    tab = tab.replace_schema_metadata({LABELS_METADATA_KEY: b"y"})
    pq.write_table(tab, tmp_path / "ev.parquet", row_group_size=N // 3)
    return str(tmp_path / "ev.parquet")


def test_a_parquet_input_reads_numeric_columns_by_row_group(table):
    """The recorded label is the stratum by default; non-numeric columns are skipped
    with their type; each row group a chunk, the label read as a column of x."""
    inp = parquet_input(table, None, None, None)
    assert inp.names == ["t", "flag", "y"] and inp.width == 3 and inp.chunk_rows is None
    assert inp.stratum == "y" and inp.stratum_at == 2
    assert inp.skipped == [{"name": "city", "reason": "non-numeric: string"}]
    assert inp.tagged.chunk_rows.tolist() == [20, 20, 20]
    r = np.arange(20.0, 40.0)
    np.testing.assert_array_equal(inp.tagged.read_chunk(1), np.column_stack((r, r > 10, r % 2, r)))
    chosen = parquet_input(table, "flag", None, None)  # the label read after the chosen
    assert chosen.names == ["flag"] and chosen.stratum_at == 1
    np.testing.assert_array_equal(
        chosen.tagged.read_chunk(0)[:3], [[0, 0, 0], [0, 1, 1], [0, 0, 2]]
    )
    assert chosen.skipped == [
        {"name": "city", "reason": "non-numeric: string"},
        {"name": "t", "reason": "not in --columns"},
        {"name": "y", "reason": "not in --columns"},
    ]
    other = parquet_input(table, "t", None, "flag")
    assert other.stratum == "flag" and other.stratum_at == 1


def test_a_parquet_input_refuses_by_name(table, tmp_path, monkeypatch):
    with pytest.raises(CliError, match=r"--chunk-rows is for .ndf files$") as e:
        parquet_input(table, None, 100, None)
    assert str(e.value) == f"{table}: Parquet is read by row group; --chunk-rows is for .ndf files"
    with pytest.raises(CliError, match=r"no column 'nope' \(--columns\)") as e:
        parquet_input(table, "nope", None, None)
    assert str(e.value).startswith(f"{table}: ")
    with pytest.raises(CliError, match=r"no column 'nope' \(--stratum\)") as e:
        parquet_input(table, None, None, "nope")
    assert str(e.value).startswith(f"{table}: ")
    with pytest.raises(CliError) as e:
        parquet_input(table, None, None, "city")
    assert str(e.value) == f"{table}: --stratum city is string; mixing reads numeric columns"
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"s": ["a", "b"]}), tmp_path / "text.parquet")
    with pytest.raises(CliError) as e:
        parquet_input(str(tmp_path / "text.parquet"), None, None, None)
    assert str(e.value) == f"{tmp_path / 'text.parquet'}: no numeric columns to examine"
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if not installed
    with pytest.raises(CliError) as e:
        parquet_input(table, None, None, None)
    assert str(e.value) == "reading Parquet needs pyarrow: pip install pyarrow"


def test_the_command_refuses_chunk_rows_for_parquet(table, capsys):
    assert main(["mixing", table, "--batch-size", "10", "--chunk-rows", "5", "-q"]) == 2
    assert "Parquet is read by row group; --chunk-rows is for .ndf files" in capsys.readouterr().err


def test_a_parquet_input_reads_no_label_it_did_not_choose(tmp_path):
    """A recorded label that is a string: not the stratum (not numeric), skipped, and
    never read (the loader's source takes the chosen columns as features, no labels)."""
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from exactbatch.sources.parquet import LABELS_METADATA_KEY

    tab = pa.table({"t": np.arange(6.0), "city": ["a", "b"] * 3})
    tab = tab.replace_schema_metadata({LABELS_METADATA_KEY: b"city"})
    pq.write_table(tab, tmp_path / "s.parquet", row_group_size=3)
    inp = parquet_input(str(tmp_path / "s.parquet"), None, None, None)
    assert inp.names == ["t"] and inp.stratum is None
    np.testing.assert_array_equal(inp.tagged.read_chunk(1), [[3, 3], [4, 4], [5, 5]])


def test_the_command_reads_parquet_with_its_stratum(table, capsys):
    import json

    argv = ["mixing", table, "--batch-size", "10", "--stratum", "flag", "--json", "-q"]
    assert main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["entropy"]["column"] == "flag" and r["entropy"]["classes"] == 2


@pytest.mark.parametrize("kind", ["ndf", "dataset"])
def test_mixing_at_an_s3_url_uses_its_storage_options(kind, tmp_path, s3_server):
    """An .ndf or a sharded dataset at an S3 URL that needs storage options (the local
    server's endpoint and keys) is examined with them, at its format's check and at
    its opening, and gives the figures its local copy gives."""
    from exactbatch.ndf.dataset_write import NdfDatasetWriter
    from exactbatch.tools.mixing import mixing

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((N, 3)), np.sort(rng.standard_normal((N, 1)), axis=0)
    local = tmp_path / ("m.ndf" if kind == "ndf" else "mds")
    if kind == "ndf":
        save_ndf(local, (x, y))
    else:
        with NdfDatasetWriter(local, 3, 1, 20) as w:
            w.write(np.hstack([x, y]))
    url = f"s3://{s3_server.bucket}/mixing-{kind}/{local.name}"
    s3_server.fs.put(str(local), url, recursive=local.is_dir())
    kw = dict(batch_size=8, buffer_size=16, chunk_rows=20, bar=False, replicates=19)
    want = mixing(local, **kw)
    got = mixing(url, storage_options=s3_server.so, **kw)
    assert got.keys() == want.keys()
    for key in want.keys() - {"src", "path"}:
        np.testing.assert_equal(got[key], want[key], err_msg=key)
