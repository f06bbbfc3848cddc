"""The exactbatch command: help, light imports, info, one-line errors, bench.

Each subcommand runs at least once in a subprocess, as a user runs it
(``python -m exactbatch.cli`` or the installed ``exactbatch`` script); the
rest call ``main(argv)`` in-process, which is the same code path.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import fifo
from helpers import run_cli as run

from exactbatch import open_ndf, save_ndf
from exactbatch.cli import main

COMMANDS = ("info", "convert", "shuffle", "mixing", "bench")
SCRIPT = Path(sys.executable).with_name("exactbatch")


def one_line_error(p, *names):
    """Exit status 2, one line on stderr naming the files, no traceback."""
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = [s for s in p.stderr.splitlines() if s.strip()]
    assert len(lines) == 1, p.stderr
    assert "Traceback" not in p.stderr
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


@pytest.fixture
def small_ndf(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((1000, 3)), rng.integers(0, 2, 1000)
    path = tmp_path / "small.ndf"
    save_ndf(path, (x, y))
    return path


@pytest.fixture
def small_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    folder = tmp_path / "pq"
    folder.mkdir()
    for k in range(2):
        t = pa.table(
            {
                "a": np.arange(500.0) + 500 * k,
                "b": np.ones(500, dtype=np.int32),
                "name": ["z"] * 500,
                "label": np.arange(500) % 2 == 0,
            }
        )
        pq.write_table(t, folder / f"part-{k}.parquet", row_group_size=200)
    return folder


# -- help and imports ----------------------------------------------------------------


def test_help_lists_every_command_via_the_installed_script():
    """`exactbatch --help` (the console script) names every subcommand and exits 0."""
    if not SCRIPT.exists():
        pytest.skip("the exactbatch script is not installed (pip install -e .)")
    p = subprocess.run([str(SCRIPT), "--help"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    for cmd in COMMANDS:
        assert cmd in p.stdout


@pytest.mark.parametrize("cmd", COMMANDS)
def test_each_command_has_help(cmd, capsys):
    """`exactbatch CMD --help` prints that command's usage and exits 0."""
    assert main([cmd, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: exactbatch {cmd}")
    assert "%%" not in out  # a description is printed as written: "5%", not "5%%"


def test_no_command_prints_usage_and_exits_2(capsys):
    assert main([]) == 2
    assert "usage: exactbatch" in capsys.readouterr().err


def test_usage_error_exits_2(capsys):
    """A bad option value is argparse's usage error: exit 2, not a traceback."""
    assert main(["shuffle", "a.ndf", "b.ndf", "--memory", "lots"]) == 2
    assert "expected a size" in capsys.readouterr().err


def test_importing_the_cli_stays_light():
    """`import exactbatch` and `import exactbatch.cli` load no pyarrow, matplotlib or tqdm."""
    code = (
        "import sys, exactbatch, exactbatch.cli\n"
        "exactbatch.cli._parser()\n"
        "heavy = [m for m in ('pyarrow', 'matplotlib', 'tqdm', 'exactbatch.tools.mixing')"
        " if m in sys.modules]\n"
        "assert not heavy, heavy\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# -- info ---------------------------------------------------------------------------


def test_info_ndf_in_a_subprocess(small_ndf):
    """info on a valid .ndf: n, d, l, the size and that it checks out."""
    p = run("info", small_ndf, check=0)
    assert "1,000" in p.stdout and "valid" in p.stdout and "yes" in p.stdout
    p = run("info", small_ndf, "--json", check=0)
    report = json.loads(p.stdout)
    assert report["n"] == 1000 and report["d"] == 3 and report["l"] == 1
    assert report["size_bytes"] == report["expected_bytes"] == 28 + 8 * 1000 * 4
    assert report["valid"] is True


@pytest.mark.parametrize("damage", ["truncated", "magic", "short-header"])
def test_info_reports_a_malformed_ndf_and_exits_1(small_ndf, damage, capsys):
    """A malformed .ndf: the NdfError message is reported and the exit status is non-zero."""
    raw = small_ndf.read_bytes()
    small_ndf.write_bytes(
        {"truncated": raw[:-5], "magic": b"XXXX" + raw[4:], "short-header": raw[:10]}[damage]
    )
    assert main(["info", str(small_ndf), "--json"]) == 1
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["valid"] is False
    assert str(small_ndf) in report["error"] and str(small_ndf) in captured.err
    with pytest.raises(ValueError) as caught:
        open_ndf(small_ndf)
    assert report["error"] == str(caught.value)
    assert main(["info", str(small_ndf)]) == 1
    assert "NO" in capsys.readouterr().out


def test_info_parquet_folder(small_parquet, capsys):
    """info on a Parquet folder: rows, files, row groups, columns and types, from metadata."""
    assert main(["info", str(small_parquet), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert (r["rows"], r["files"], r["row_groups"]) == (1000, 2, 6)
    assert [c["name"] for c in r["columns"]] == ["a", "b", "name", "label"]
    assert [c["type"] for c in r["columns"]] == ["double", "int32", "string", "bool"]
    assert main(["info", str(small_parquet / "part-1.parquet")]) == 0
    out = capsys.readouterr().out
    assert "row groups" in out and "500" in out and "int32" in out


def test_info_npy_and_csv(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    np.save(tmp_path / "a.npy", np.zeros((7, 3), dtype=np.float32))
    assert main(["info", str(tmp_path / "a.npy"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["shape"] == [7, 3] and r["dtype"] == "float32"
    (tmp_path / "a.csv").write_text("p,q\n1,2.5\n3,4\n")
    assert main(["info", str(tmp_path / "a.csv"), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert [c["name"] for c in r["columns"]] == ["p", "q"]


# -- errors: one line, naming the file, exit 2 ------------------------------------------


def test_missing_file_is_one_line_in_a_subprocess(tmp_path):
    missing = tmp_path / "nope.ndf"
    one_line_error(run("info", missing), missing)


@pytest.mark.parametrize(
    "argv",
    [
        ["info", "{missing}"],
        ["info", "{junk}"],
        ["convert", "{missing}", "{tmp}/out.ndf"],
        ["convert", "{junk}", "{tmp}/out.ndf"],
        ["convert", "{ndf}", "{tmp}/out.xyz"],
        ["convert", "{ndf}", "{tmp}/no-such-folder/out.parquet"],
        ["shuffle", "{missing}", "{tmp}/out.ndf"],
        ["shuffle", "{junk}", "{tmp}/out.ndf"],
        ["shuffle", "{ndf}", "{ndf}"],
        ["mixing", "{missing}", "--batch-size", "8"],
        ["mixing", "{junk}", "--batch-size", "8"],
        ["mixing", "{ndf}", "--batch-size", "8", "--plot", "{tmp}/plot.txt"],
        ["bench", "{missing}"],
        ["bench", "{bad_ndf}"],
    ],
    ids=lambda a: "-".join(a[:2]).replace("{", "").replace("}", ""),
)
def test_bad_paths_and_formats_are_one_line_errors(argv, tmp_path, small_ndf, capsys):
    """Bad paths and formats: one line on stderr naming the file, exit 2, no traceback."""
    (tmp_path / "junk.txt").write_bytes(b"hello, not data\n")
    bad = tmp_path / "bad.ndf"
    bad.write_bytes(b"NDF1" + bytes(10))
    names = {
        "missing": tmp_path / "nope.ndf",
        "junk": tmp_path / "junk.txt",
        "ndf": small_ndf,
        "tmp": tmp_path,
        "bad_ndf": bad,
    }
    argv = [a.format(**names) for a in argv]
    assert main([*argv, "-q"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"exactbatch {argv[0]}: error: ")
    mentioned = [a for a in argv[1:] if a.startswith(str(tmp_path))]
    assert any(a in err or os.path.dirname(a) in err for a in mentioned), err


ON_A_DATASET = {
    "info": ["{ds}"],
    "convert": ["{ds}", "{tmp}/out.ndf"],
    "shuffle": ["{ds}", "{tmp}/out"],
    "mixing": ["{ds}", "--batch-size", "2"],
    "bench": ["{ds}"],
}


@pytest.mark.parametrize("cmd", sorted(ON_A_DATASET))
def test_a_malformed_manifest_is_one_line_for_every_command(cmd, tmp_path, capsys):
    """Whatever a malformed manifest raises inside a command (here "features": 5), the
    command ends with one line on stderr naming the dataset, exit 1 or 2, no traceback."""
    from exactbatch import save_ndf_dataset

    save_ndf_dataset(tmp_path / "ds", [np.ones((3, 2))])
    with open(tmp_path / "ds" / "manifest.json") as f:
        m = json.load(f)
    m["features"] = 5
    with open(tmp_path / "ds" / "manifest.json", "w") as f:
        json.dump(m, f)
    argv = [a.format(ds=tmp_path / "ds", tmp=tmp_path) for a in ON_A_DATASET[cmd]]
    assert main([cmd, *argv, "-q"]) in (1, 2)
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"exactbatch {cmd}: ") and str(tmp_path / "ds") in err


def test_an_unexpected_error_is_one_line_and_debug_shows_its_traceback(
    small_ndf, monkeypatch, capsys
):
    """An exception of a type no input error is expected to raise is funnelled too: one
    line naming the input and the type, exit 2; --debug prints the traceback first."""
    from exactbatch.tools import info

    def deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(info, "info", deep)
    assert main(["info", str(small_ndf)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err
        == f"exactbatch info: error: {small_ndf}: RecursionError: maximum recursion depth exceeded"
    )
    assert main(["info", str(small_ndf), "--debug"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("Traceback") and "in deep" in err
    assert err.splitlines()[-1].startswith("exactbatch info: error: ")


URLS = [
    ("convert", ["s3://bucket/in.parquet", "{tmp}/out.ndf"], "reading"),
    ("convert", ["{ndf}", "s3://bucket/out.ndf"], "writing"),
    ("convert", ["{ndf}", "s3://bucket/ds", "--part-rows", "10"], "writing"),
    ("shuffle", ["s3://bucket/in.ndf", "{tmp}/out.ndf"], "reading"),
    ("shuffle", ["{ndf}", "s3://bucket/out.ndf"], "writing"),
    ("shuffle", ["{ndf}", "{tmp}/out.ndf", "--tmp-dir", "s3://bucket/tmp"], "writing"),
    ("mixing", ["{ndf}", "--batch-size", "8", "--plot", "s3://bucket/p.png"], "writing"),
]


@pytest.mark.parametrize("cmd, argv, doing", URLS, ids=[f"{c}-{d}" for c, _, d in URLS])
def test_commands_that_cannot_read_urls_say_so(cmd, argv, doing, tmp_path, small_ndf, capsys):
    """convert and shuffle read and write local paths only, and mixing writes its plot
    to one: a URL there is one line saying so and naming it (not "No such file or
    directory"), before any work. (mixing and bench read what info reads, URLs too.)"""
    argv = [a.format(tmp=tmp_path, ndf=small_ndf) for a in argv]
    assert main([cmd, *argv, "-q"]) == 2
    err = capsys.readouterr().err.strip()
    url = next(a for a in argv if a.startswith("s3://"))
    assert err.startswith(f"exactbatch {cmd}: error: {doing} URLs is not supported"), err
    assert len(err.splitlines()) == 1 and url in err
    assert not os.path.exists(tmp_path / "out.ndf")


# -- bench ----------------------------------------------------------------------------


def test_bench_ndf_in_a_subprocess(small_ndf):
    """bench: rows/s and peak memory per batch size, ratios to the bare read of the file."""
    p = run("bench", small_ndf, "--batch-sizes", "16,256", "--json", "-q", check=0)
    r = json.loads(p.stdout)
    runs = r["runs"]
    assert [(x["path"], x["batch"]) for x in runs] == [
        ("bare read (readinto)", None),
        ("loader", 16),
        ("loader", 256),
    ]
    assert all(x["rows"] == 1000 and x["rows_per_s"] > 0 for x in runs)
    assert runs[0]["ratio"] == 1.0
    for x in runs[1:]:  # each loader run's stats(): the rows and bytes it handed out
        assert (x["stats"]["rows"], x["stats"]["bytes"]) == (1000, 1000 * 8 * (r["d"] + r["l"]))
        assert x["stats"]["reads"] >= 1 and x["stats"]["read_latency_s"]["p50"] > 0
    if sys.platform.startswith("linux"):
        assert all(x["peak_rss"] > 10 << 20 for x in runs)
    p = run("bench", small_ndf, "--batch-sizes", "100", "--max-rows", "300", "-q", check=0)
    assert "bare read" in p.stdout and "x bare" in p.stdout and "peak RSS" in p.stdout
    assert "where the loader's time went" in p.stdout and "read ms p50/p90/p99" in p.stdout


def test_bench_parquet(small_parquet, capsys):
    assert (
        main(
            [
                "bench",
                str(small_parquet),
                "--features",
                "a,b",
                "--labels",
                "label",
                "--batch-sizes",
                "64",
                "--json",
                "-q",
            ]
        )
        == 0
    )
    r = json.loads(capsys.readouterr().out)
    assert (r["n"], r["d"], r["l"]) == (1000, 2, 1)
    assert [x["rows"] for x in r["runs"]] == [1000, 1000]
    assert r["runs"][0]["path"] == "bare read (pyarrow)"


def test_bench_and_mixing_refuse_rows_of_no_columns(tmp_path, capsys):
    """An .ndf of d = l = 0 (valid, 28 bytes, any n): nothing to time or examine, said
    at once (with n = 2**63 - 1 an epoch would never end)."""
    from exactbatch.ndf.format import HEADER, MAGIC

    for n in (10, 2**63 - 1):
        (tmp_path / "empty.ndf").write_bytes(HEADER.pack(MAGIC, n, 0, 0))
        assert main(["bench", str(tmp_path / "empty.ndf"), "-q"]) == 2
        assert "no columns to read (d = l = 0)" in capsys.readouterr().err
        assert main(["mixing", str(tmp_path / "empty.ndf"), "--batch-size", "4", "-q"]) == 2
        assert "no columns to examine (d = l = 0)" in capsys.readouterr().err


# -- the docs ---------------------------------------------------------------------------


def _cli_docs() -> str:
    """The docs page of the command, docs/cli.md ("From your data to batches")."""
    return (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()


def test_the_documented_session_runs(tmp_path, monkeypatch):
    """Every `$ exactbatch ...` line of the CLI docs runs as shown, after the docs' Python
    block has made the data; the documented tables are what the commands print."""
    import re

    pytest.importorskip("pyarrow")
    pytest.importorskip("matplotlib")
    doc = _cli_docs()
    monkeypatch.chdir(tmp_path)
    for code in re.findall(r"```python\n(.*?)```", doc, flags=re.S):
        exec(compile(code, "docs/cli.md", "exec"), {"__name__": "__docs__"})
    sessions = re.findall(r"```sh\n(\$ .*?)```", doc, flags=re.S)
    assert sessions
    for session in sessions:
        for cmd, shown in re.findall(r"^\$ (.*)\n((?:(?!\$ ).*\n)*)", session, flags=re.M):
            args = cmd.split(" | ")[0].split()
            assert args[0] == "exactbatch"
            p = run(*args[1:], "-q", check=0)
            if args[1] in ("info", "mixing") and "| tail" not in cmd:  # deterministic output
                assert p.stdout.strip() == shown.strip(), cmd
    assert Path("mixing.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize(
    "argv",
    [
        ["info", "{p}"],
        ["info", "--stats", "{p}"],
        ["convert", "{p}", "{o}.parquet"],
        ["shuffle", "{p}", "{o}.ndf"],
        ["mixing", "{p}", "--batch-size", "4"],
        ["bench", "{p}"],
        ["certify", "{p}"],
    ],
    ids=lambda a: "-".join(a[:2]).replace("-{p}", ""),
)
def test_a_fifo_is_refused_at_once(tmp_path, argv, capsys):
    """A FIFO (named pipe) as input: one line naming it, exit 2, never a wait for a
    writer (each command blocked forever before)."""
    with fifo(tmp_path / "pipe.ndf") as p:
        args = [a.format(p=p, o=tmp_path / "out") for a in argv]
        assert main([*args, "-q"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'pipe.ndf'}: not a regular file" in err and "FIFO" in err


def test_a_header_of_endless_rows_of_nothing(tmp_path):
    """n = 2**63 - 1 rows of no values (a valid 28-byte file): mixing and bench say there
    is nothing to examine (mixing hung before: a chunk list of n / 65,536 entries; bench
    ran a loader over 2**63 empty rows), and shuffle copies it (NumPy refused the shape)."""
    path = tmp_path / "endless.ndf"
    path.write_bytes(struct.pack("<4sQQQ", b"NDF1", 2**63 - 1, 0, 0))
    for argv, said in (
        (["mixing", path, "--batch-size", "4"], "examine"),
        (["bench", path], "read"),
    ):
        p = run(*argv, "-q", timeout=60)
        assert one_line_error(p, path).endswith(f"no columns to {said} (d = l = 0)")
    # shuffle writes them (NumPy shapes at most 2**59 float64 rows, even empty ones)
    assert main(["shuffle", str(path), str(tmp_path / "out.ndf"), "-q"]) == 0
    assert (tmp_path / "out.ndf").read_bytes() == path.read_bytes()


def test_info_lists_the_first_thousand_default_names(tmp_path, capsys):
    """A header of no rows and 2**31 - 1 values a row: info names the first 1,000 and counts
    the rest (before, it listed them all: out of memory for the 2**40 columns a header
    could claim then)."""
    path = tmp_path / "wide.ndf"
    path.write_bytes(struct.pack("<4sQQQ", b"NDF1", 0, 2**31 - 3, 2))
    assert main(["info", str(path), "--json", "-q"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert len(r["features"]) == 1000 and r["features"][-1] == "x999"
    assert r["features_more"] == 2**31 - 3 - 1000
    assert r["labels"] == ["y0", "y1"] and "labels_more" not in r and r["valid"]
    assert main(["info", str(path), "-q"]) == 0
    assert "x998, x999, ... (2,147,482,645 more)" in capsys.readouterr().out


# -- many columns: messages and summaries stay short, and never hide a name (issue 43) ----


def _wide(tmp_path, d=3000):
    x = np.zeros((4, d))
    names = [f"c{i}" for i in range(d - 1)] + ["price_usd"]
    save_ndf(tmp_path / "wide.ndf", (x, np.zeros((4, 1))), features=names, labels=["y"])
    return tmp_path / "wide.ndf"


def test_a_column_not_found_among_many_names_the_closest(tmp_path, capsys):
    path = _wide(tmp_path)
    assert main(["mixing", str(path), "--batch-size", "2", "--columns", "price"]) == 2
    err = capsys.readouterr().err
    assert "3001 in all" in err and "closest to 'price': ['price_usd']" in err
    assert len(err) < 600


def test_convert_summary_abbreviates_thousands_of_column_names(tmp_path, capsys):
    path = tmp_path / "wide.csv"
    names = [f"c{i}" for i in range(3000)]
    path.write_text(",".join(names) + "\n" + ",".join("1" for _ in names) + "\n")
    assert main(["convert", str(path), str(tmp_path / "out.ndf"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "3000 features" in out and "(3000 in all)" in out and len(out) < 800


def test_info_of_a_folder_above_the_data_stops_instead_of_walking_the_disk(
    tmp_path, capsys, monkeypatch
):
    """`info /` walked the whole filesystem: a search past MAX_WALK files and folders
    stops with one line naming the folder (the bound lowered here to 50)."""
    from exactbatch import urls

    monkeypatch.setattr(urls, "MAX_WALK", 50)
    for i in range(60):
        (tmp_path / f"d{i}").mkdir()
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: more than 50 files and folders" in err and "Traceback" not in err
