"""exactbatch convert: Parquet, CSV and .npy to .ndf, .ndf to Parquet; streamed and atomic."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from exactbatch import open_ndf, save_ndf
from exactbatch.cli import main

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def run(*args, check=None, timeout=120):
    p = subprocess.run(
        [sys.executable, "-m", "exactbatch.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def read_ndf(path):
    with open_ndf(path) as f:
        return f.read_rows(np.arange(f.n))


def leftovers(folder, keep):
    """Files in ``folder`` other than ``keep`` (temporary files would show up here)."""
    return sorted(set(os.listdir(folder)) - set(keep))


def test_parquet_file_to_ndf_in_a_subprocess(tmp_path):
    """Columns by name, in the order asked; values as float64; a progress bar on stderr."""
    t = pa.table(
        {
            "t": np.arange(1000.0),
            "u": np.arange(1000, dtype=np.int64) * 2,
            "flag": np.arange(1000) % 3 == 0,
            "note": ["x"] * 1000,
        }
    )
    pq.write_table(t, tmp_path / "d.parquet", row_group_size=128)
    p = run(
        "convert",
        tmp_path / "d.parquet",
        tmp_path / "d.ndf",
        "--features",
        "u,t",
        "--labels",
        "flag",
        check=0,
    )
    assert "1,000 rows" in p.stdout
    assert "convert d.parquet" in p.stderr and "100%" in p.stderr  # the tqdm bar
    x, y = read_ndf(tmp_path / "d.ndf")
    assert np.array_equal(x, np.column_stack([np.arange(1000) * 2.0, np.arange(1000.0)]))
    assert np.array_equal(y[:, 0], (np.arange(1000) % 3 == 0).astype(float))


def test_parquet_folder_to_ndf_keeps_file_then_row_group_order(tmp_path, capsys):
    folder = tmp_path / "parts"
    folder.mkdir()
    for k in range(3):
        ids = np.arange(k * 700, (k + 1) * 700, dtype=np.float64)
        pq.write_table(
            pa.table({"id": ids, "y": -ids}), folder / f"p{k}.parquet", row_group_size=300
        )
    assert (
        main(["convert", str(folder), str(tmp_path / "all.ndf"), "--labels", "y", "--json", "-q"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert (out["rows"], out["features"], out["labels"]) == (2100, ["id"], ["y"])
    x, y = read_ndf(tmp_path / "all.ndf")
    assert np.array_equal(x[:, 0], np.arange(2100.0)) and np.array_equal(y[:, 0], -x[:, 0])


def test_parquet_nulls_become_nan_and_non_numeric_is_refused(tmp_path, capsys):
    t = pa.table(
        {
            "a": pa.array([1.0, None, 3.0]),
            "b": pa.array([1, 2, None]),
            "s": pa.array(["p", "q", "r"]),
        }
    )
    pq.write_table(t, tmp_path / "n.parquet")
    assert main(["convert", str(tmp_path / "n.parquet"), str(tmp_path / "n.ndf"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "s (string)" in err and "--features" in err
    assert not (tmp_path / "n.ndf").exists()
    assert (
        main(
            [
                "convert",
                str(tmp_path / "n.parquet"),
                str(tmp_path / "n.ndf"),
                "-q",
                "--features",
                "a,b",
            ]
        )
        == 0
    )
    x, _ = read_ndf(tmp_path / "n.ndf")
    assert np.array_equal(x, [[1, 1], [np.nan, 2], [3, np.nan]], equal_nan=True)


def test_csv_to_ndf_with_header_and_without(tmp_path, capsys):
    """CSV columns by name (or position with --no-header); empty cells become NaN."""
    (tmp_path / "a.csv").write_text("when,value,label\n1,0.5,1\n2,,0\n3,1e3,1\n")
    assert (
        main(
            ["convert", str(tmp_path / "a.csv"), str(tmp_path / "a.ndf"), "--labels", "label", "-q"]
        )
        == 0
    )
    x, y = read_ndf(tmp_path / "a.ndf")
    assert np.array_equal(x, [[1, 0.5], [2, np.nan], [3, 1000]], equal_nan=True)
    assert np.array_equal(y[:, 0], [1, 0, 1])
    (tmp_path / "b.csv").write_text("1;2;3\n4;5;6\n")
    assert (
        main(
            [
                "convert",
                str(tmp_path / "b.csv"),
                str(tmp_path / "b.ndf"),
                "--no-header",
                "--delimiter",
                ";",
                "--features",
                "2,0",
                "--labels",
                "-2",
                "-q",
            ]
        )
        == 0
    )
    x, y = read_ndf(tmp_path / "b.ndf")
    assert np.array_equal(x, [[3, 1], [6, 4]]) and np.array_equal(y[:, 0], [2, 5])
    capsys.readouterr()


def test_large_csv_is_streamed_in_blocks(tmp_path, capsys):
    """A CSV of several pyarrow blocks converts whole, rows in order, n counted at the end."""
    n = 60_000  # about 1.5 MB: more than one 1 MiB block
    ids = np.arange(n)
    with open(tmp_path / "big.csv", "w") as f:
        f.write("id,twice,label\n")
        f.writelines(f"{i},{2 * i},{i % 2}\n" for i in ids)
    assert (
        main(
            [
                "convert",
                str(tmp_path / "big.csv"),
                str(tmp_path / "big.ndf"),
                "--labels",
                "label",
                "-q",
            ]
        )
        == 0
    )
    with open_ndf(tmp_path / "big.ndf") as f:
        assert (f.n, f.d, f.l) == (n, 2, 1)
    x, y = read_ndf(tmp_path / "big.ndf")
    assert np.array_equal(x[:, 0], ids) and np.array_equal(x[:, 1], 2 * ids)
    assert np.array_equal(y[:, 0], ids % 2)


def test_npy_to_ndf_labels_by_position(tmp_path, capsys):
    a = np.arange(40, dtype=np.int32).reshape(10, 4)
    np.save(tmp_path / "a.npy", a)
    assert (
        main(["convert", str(tmp_path / "a.npy"), str(tmp_path / "a.ndf"), "--labels", "-1", "-q"])
        == 0
    )
    x, y = read_ndf(tmp_path / "a.ndf")
    assert np.array_equal(x, a[:, :3]) and np.array_equal(y[:, 0], a[:, 3])
    np.save(tmp_path / "f.npy", np.asfortranarray(a))
    assert (
        main(
            ["convert", str(tmp_path / "f.npy"), str(tmp_path / "f.ndf"), "--features", "3,1", "-q"]
        )
        == 0
    )
    x, y = read_ndf(tmp_path / "f.ndf")
    assert np.array_equal(x, a[:, [3, 1]]) and y.shape == (10, 0)
    np.save(tmp_path / "s.npy", np.array([("a", 1)], dtype=[("k", "U1"), ("v", "i4")]))
    assert main(["convert", str(tmp_path / "s.npy"), str(tmp_path / "s.ndf"), "-q"]) == 2
    assert "s.npy" in capsys.readouterr().err


def test_ndf_to_parquet_and_back_keeps_rows_and_the_label_split(tmp_path, capsys):
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((5000, 3)), rng.standard_normal((5000, 2))
    save_ndf(tmp_path / "a.ndf", (x, y))
    assert (
        main(
            [
                "convert",
                str(tmp_path / "a.ndf"),
                str(tmp_path / "a.parquet"),
                "--row-group-rows",
                "1000",
                "-q",
            ]
        )
        == 0
    )
    md = pq.ParquetFile(tmp_path / "a.parquet").metadata
    assert md.num_rows == 5000 and md.num_row_groups == 5
    t = pq.read_table(tmp_path / "a.parquet")
    assert t.column_names == ["x0", "x1", "x2", "y0", "y1"]
    assert np.array_equal(t.column("x2").to_numpy(), x[:, 2])
    assert main(["convert", str(tmp_path / "a.parquet"), str(tmp_path / "b.ndf"), "-q"]) == 0
    x2, y2 = read_ndf(tmp_path / "b.ndf")
    assert np.array_equal(x2, x) and np.array_equal(y2, y)
    assert (
        main(
            [
                "convert",
                str(tmp_path / "a.ndf"),
                str(tmp_path / "n.parquet"),
                "-q",
                "--names",
                "a,b,c,p,q",
            ]
        )
        == 0
    )
    assert pq.read_schema(tmp_path / "n.parquet").names == ["a", "b", "c", "p", "q"]
    assert main(["convert", str(tmp_path / "n.parquet"), str(tmp_path / "n.ndf"), "-q"]) == 0
    assert (open_ndf(tmp_path / "n.ndf").d, open_ndf(tmp_path / "n.ndf").l) == (3, 2)
    assert (
        main(
            [
                "convert",
                str(tmp_path / "a.ndf"),
                str(tmp_path / "m.parquet"),
                "-q",
                "--names",
                "a,b",
            ]
        )
        == 2
    )
    assert "--names needs 5 distinct names" in capsys.readouterr().err


def test_existing_output_needs_force(tmp_path, capsys):
    np.save(tmp_path / "a.npy", np.ones((3, 2)))
    (tmp_path / "a.ndf").write_bytes(b"old")
    assert main(["convert", str(tmp_path / "a.npy"), str(tmp_path / "a.ndf"), "-q"]) == 2
    assert "--force" in capsys.readouterr().err
    assert (tmp_path / "a.ndf").read_bytes() == b"old"
    assert main(["convert", str(tmp_path / "a.npy"), str(tmp_path / "a.ndf"), "-q", "--force"]) == 0
    assert open_ndf(tmp_path / "a.ndf").n == 3


def test_bad_value_in_a_late_row_leaves_no_output(tmp_path):
    """Atomic: a conversion that fails mid-way (after blocks were written) leaves no file,
    and an existing destination keeps its old bytes."""
    n = 300_000  # about 4 MB: the bad value is several 1 MiB blocks in
    with open(tmp_path / "bad.csv", "w") as f:
        f.write("a,b\n")
        f.writelines(f"{i},{i}\n" for i in range(n - 10))
        f.write("1,oops\n")
        f.writelines(f"{i},{i}\n" for i in range(9))
    p = run("convert", tmp_path / "bad.csv", tmp_path / "out.ndf", "-q")
    assert p.returncode == 2, p.stderr
    assert "bad.csv" in p.stderr and "oops" in p.stderr and "Traceback" not in p.stderr
    assert re.search(r"after [1-9][0-9,]* rows", p.stderr), p.stderr  # failed mid-way
    assert leftovers(tmp_path, ["bad.csv"]) == []
    (tmp_path / "out.ndf").write_bytes(b"precious")
    p = run("convert", tmp_path / "bad.csv", tmp_path / "out.ndf", "-q", "--force")
    assert p.returncode == 2
    assert (tmp_path / "out.ndf").read_bytes() == b"precious"
    assert leftovers(tmp_path, ["bad.csv", "out.ndf"]) == []


def written(folder) -> int:
    """Bytes in the files of ``folder`` (0 for a file renamed or removed meanwhile)."""
    total = 0
    for name in os.listdir(folder):
        try:
            total += os.path.getsize(os.path.join(folder, name))
        except FileNotFoundError:
            pass
    return total


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_interrupted_conversion_leaves_no_output(tmp_path, sig):
    """Ctrl-C (or SIGTERM) mid-way: exit 130, no file at DST and no temporary file left."""
    src = tmp_path / "huge.npy"
    big = np.lib.format.open_memmap(src, mode="w+", dtype=np.float64, shape=(200_000_000, 4))
    del big  # a sparse 6.4 GB file: zeros, cheap to create, slow enough to convert
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "exactbatch.cli", "convert", str(src), str(out_dir / "h.ndf")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A test run started in the background by a shell inherits SIGINT ignored, and
        # Python then installs no KeyboardInterrupt handler: give the child the default.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        deadline = time.monotonic() + 60
        while written(out_dir) < 16 << 20:  # mid-way: the temporary file holds 16 MiB
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert proc.poll() is None, "finished before it could be interrupted"
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert os.listdir(out_dir) == []


_PEAK_SCRIPT = """
import json, sys, tracemalloc
import exactbatch.cli, exactbatch.tools.convert
import pyarrow, pyarrow.csv, pyarrow.parquet  # imported before the baseline

pool = pyarrow.default_memory_pool()
base = pool.max_memory()
tracemalloc.start()
rc = exactbatch.cli.main(["convert", sys.argv[1], sys.argv[2], "-q"])
peak = tracemalloc.get_traced_memory()[1]
print(json.dumps({"rc": rc, "extra": peak + pool.max_memory() - base}))
"""


@pytest.mark.parametrize("kind", ["npy", "parquet"])
def test_conversion_memory_is_bounded(tmp_path, kind):
    """Streamed: converting 384 MiB of float64 rows holds far less than the data at its
    peak (what NumPy and Python allocate, by tracemalloc, plus pyarrow's memory pool's
    peak: exact, whatever the allocator keeps resident): a .npy a few slabs, Parquet
    pyarrow's read-ahead and one batch."""
    rows, d = 12 << 20, 4  # 384 MiB as float64
    src = tmp_path / f"zeros.{kind}"
    if kind == "npy":
        zeros = np.lib.format.open_memmap(src, mode="w+", dtype=np.float64, shape=(rows, d))
        del zeros  # a sparse file of zeros
        bound = 64 << 20
    else:
        part = pa.table({f"c{j}": np.zeros(1 << 20) for j in range(d)})
        with pq.ParquetWriter(src, part.schema) as w:
            for _ in range(rows >> 20):
                w.write_table(part)  # one row group of 1 Mi rows (32 MiB) each
        bound = rows * d * 8 // 2
    p = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(src), str(tmp_path / "o.ndf")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["rc"] == 0
    assert r["extra"] < bound, f"peak grew by {r['extra'] / 2**20:.0f} MiB"
    assert os.path.getsize(tmp_path / "o.ndf") == 28 + rows * d * 8
