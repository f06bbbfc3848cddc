"""``exactbatch bench`` (exactbatch.tools.bench) in this process: the bare reads' rows,
each run's fields, and the table printed (tests/tools/test_cli.py runs the command in a
subprocess, where no mutant reaches)."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest
from helpers import make_data, write_ndf_dataset

from exactbatch import save_ndf
from exactbatch.tools import bench as tool
from exactbatch.tools.common import CliError


class Count:
    """A progress bar that adds up its steps."""

    def __init__(self):
        self.n, self.steps = 0, []

    def update(self, k=1):
        self.n += k
        self.steps.append(k)


def test_bench_of_an_ndf(tmp_path):
    save_ndf(tmp_path / "a.ndf", make_data(300, 3, 1))
    t0 = time.perf_counter()
    r = tool.bench(tmp_path / "a.ndf", batch_sizes=[64, 7], seed=5, max_rows=200, bar=False)
    took = time.perf_counter() - t0
    assert (r["src"], r["format"], r["n"], r["d"], r["l"]) == (
        str(tmp_path / "a.ndf"),
        "ndf",
        300,
        3,
        1,
    )
    assert (r["rows_per_run"], r["shuffle"], r["seed"], r["buffer_size"]) == (200, True, 5, None)
    runs = r["runs"]
    assert [(x["path"], x["batch"]) for x in runs] == [
        ("bare read (readinto)", None),
        ("loader", 64),
        ("loader", 7),
    ]
    assert runs[0]["rows"] == 200 and "stats" not in runs[0]
    assert [x["rows"] for x in runs[1:]] == [256, 203]  # whole batches, up to the limit
    assert runs[0]["ratio"] == 1.0
    for x in runs:
        assert x["seconds"] > 0 and x["rows_per_s"] == x["rows"] / x["seconds"]
        assert x["seconds"] < took  # each run timed within the call
        assert isinstance(x["peak_rss"], int) and x["peak_rss"] > 0  # (Linux: VmHWM)
        assert x["ratio"] == pytest.approx(x["rows_per_s"] / runs[0]["rows_per_s"])
        assert isinstance(x["peak_reset"], bool)
    for x, b in zip(runs[1:], (64, 7), strict=True):
        assert x["stats"]["rows"] == x["rows"] and x["stats"]["bytes"] == x["rows"] * 32
        assert x["batch"] == b
    whole = tool.bench(tmp_path / "a.ndf", batch_sizes=[300], shuffle=False, bar=False)
    assert whole["rows_per_run"] == 300 and not whole["shuffle"] and whole["seed"] == 0
    assert [x["rows"] for x in whole["runs"]] == [300, 300]


def test_bench_of_datasets_local_and_at_a_url(tmp_path, monkeypatch):
    fsspec = pytest.importorskip("fsspec")
    local = write_ndf_dataset(tmp_path / "ds", [40, 0, 35], d=2, l=1)
    asked, run = [], tool._loader_run

    def spy(source, batch, limit, shuffle, seed, buffer_size, pb, out):
        asked.append((batch, limit, shuffle, seed, buffer_size))
        return run(source, batch, limit, shuffle, seed, buffer_size, pb, out)

    monkeypatch.setattr(tool, "_loader_run", spy)
    r = tool.bench(local, batch_sizes=[16, 8], seed=3, buffer_size=32, bar=False)
    assert asked == [(16, 75, True, 3, 32), (8, 75, True, 3, 32)]  # as asked, each size
    monkeypatch.setattr(tool, "_loader_run", run)
    assert r["format"] == "dataset" and r["n"] == 75 and r["buffer_size"] == 32
    assert r["runs"][0]["path"] == "bare read (readinto)" and r["runs"][0]["rows"] == 75
    fs = fsspec.filesystem("memory")
    try:
        url = write_ndf_dataset("memory://benchds/ds", [40, 35], d=2, l=1)
        r = tool.bench(url, batch_sizes=[16], max_rows=50, bar=False)
        assert r["format"] == "dataset" and r["rows_per_run"] == 50
        assert r["runs"][0]["path"] == "bare read (ranged)" and r["runs"][0]["rows"] == 50
    finally:
        fs.rm("/benchds", recursive=True)


def test_bench_refusals(tmp_path):
    save_ndf(tmp_path / "a.ndf", make_data(10, 2, 1))
    with pytest.raises(CliError) as e:
        tool.bench(tmp_path / "a.ndf", labels="y0", bar=False)
    assert str(e.value) == (
        f"{tmp_path / 'a.ndf'}: --features/--labels choose Parquet columns; an .ndf has its own"
    )
    np.save(tmp_path / "a.npy", np.zeros((3, 2)))
    with pytest.raises(CliError) as e:
        tool.bench(tmp_path / "a.npy", bar=False)
    assert str(e.value) == (
        f"{tmp_path / 'a.npy'}: bench reads an .ndf, a sharded dataset or Parquet; "
        "convert npy first"
    )
    save_ndf(tmp_path / "none.ndf", make_data(3, 0, 0))
    with pytest.raises(CliError) as e:
        tool.bench(tmp_path / "none.ndf", bar=False)
    assert str(e.value) == f"{tmp_path / 'none.ndf'}: no columns to read (d = l = 0)"
    save_ndf(tmp_path / "even.ndf", make_data(3, 1, 1))  # d == l: columns to read
    assert tool.bench(tmp_path / "even.ndf", batch_sizes=[3], bar=False)["runs"][1]["rows"] == 3
    save_ndf(tmp_path / "empty.ndf", make_data(0, 2, 1))
    with pytest.raises(CliError) as e:
        tool.bench(tmp_path / "empty.ndf", bar=False)
    assert str(e.value) == f"{tmp_path / 'empty.ndf'}: no rows to read"


def test_the_bare_ndf_read_stops_at_the_limit(tmp_path):
    save_ndf(tmp_path / "a.ndf", make_data(50, 3, 1))
    regions = [(str(tmp_path / "a.ndf"), 28, 50)]
    pb = Count()
    assert tool._bare_ndf(regions, 3, 1, 50, pb) == 50 and pb.n == 50
    pb = Count()
    assert tool._bare_ndf(regions, 3, 1, 20, pb) == 20 and pb.n == 20
    pb = Count()
    assert tool._bare_ndf(regions, 0, 0, 20, pb) == 20 and pb.n == 0  # rows of no bytes


def test_the_bare_ndf_read_is_blocks_of_about_8_mib(tmp_path, monkeypatch):
    save_ndf(tmp_path / "a.ndf", make_data(50, 3, 1))
    regions = [(str(tmp_path / "a.ndf"), 28, 50)]
    monkeypatch.setattr(tool, "_READ_BYTES", 32 * 8)  # 8 rows of 32 bytes
    pb = Count()
    assert tool._bare_ndf(regions, 3, 1, 50, pb) == 50
    assert pb.steps == [8] * 6 + [2]
    pb = Count()
    assert tool._bare_ndf(regions, 3, 1, 20, pb) == 20 and pb.steps == [8, 8, 4]
    monkeypatch.setattr(tool, "_READ_BYTES", 1)  # at least a row a block
    pb = Count()
    assert tool._bare_ndf(regions, 3, 1, 3, pb) == 3 and pb.steps == [1, 1, 1]


def test_the_bare_parquet_read_is_row_groups_up_to_the_limit(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    from exactbatch.sources.parquet import parquet_source

    for k in (1, 2):  # two files of two row groups of 10 rows, a Hive key in their path
        (tmp_path / f"k={k}").mkdir()
        t = pa.table({"a": np.arange(20.0), "b": np.ones(20), "c": np.zeros(20)})
        pq.write_table(t, tmp_path / f"k={k}" / "part.parquet", row_group_size=10)
    source = parquet_source(tmp_path, features=["a", "k"], labels=["b"])
    pb = Count()
    assert tool._bare_parquet(source, 100, pb) == 40 and pb.steps == [10] * 4
    pb = Count()
    assert tool._bare_parquet(source, 20, pb) == 20 and pb.steps == [10, 10]  # at a group's end
    pb = Count()
    assert tool._bare_parquet(source, 15, pb) == 20 and pb.steps == [10, 10]  # whole groups


def test_the_bare_url_read_is_ranged_blocks_up_to_the_limit(monkeypatch):
    pytest.importorskip("fsspec")
    from exactbatch.ndf import open_ndf_dataset

    url = write_ndf_dataset("memory://benchurl/ds", [10, 7], d=3, l=1)
    try:
        with open_ndf_dataset(url) as ds:
            pb = Count()
            assert tool._bare_url(ds, 17, pb) == 17 and pb.steps == [10, 7]
            monkeypatch.setattr(tool, "_READ_BYTES", 32 * 4)
            pb = Count()
            assert tool._bare_url(ds, 17, pb) == 17 and pb.steps == [4, 4, 2, 4, 3]
            pb = Count()
            assert tool._bare_url(ds, 9, pb) == 9 and pb.steps == [4, 4, 1]
            pb = Count()
            assert tool._bare_url(ds, 8, pb) == 8 and pb.steps == [4, 4]
            monkeypatch.setattr(tool, "_READ_BYTES", 1)
            pb = Count()
            assert tool._bare_url(ds, 2, pb) == 2 and pb.steps == [1, 1]
        one = write_ndf_dataset("memory://benchurl/one", [5], d=1, l=0)
        with open_ndf_dataset(one) as ds:  # rows of one column: 8 bytes each
            monkeypatch.setattr(tool, "_READ_BYTES", 8 * 2)
            pb = Count()
            assert tool._bare_url(ds, 5, pb) == 5 and pb.steps == [2, 2, 1]
    finally:
        import fsspec

        fsspec.filesystem("memory").rm("/benchurl", recursive=True)


def _run(path, batch, rows_per_s, ratio, peak, reset=True, stats=None):
    out = {"path": path, "batch": batch, "rows": 1000, "seconds": 0.5}
    out.update(rows_per_s=rows_per_s, peak_rss=peak, peak_reset=reset, ratio=ratio)
    return {**out, "stats": stats} if stats else out


REPORT = {
    "src": "d/a.ndf",
    "format": "ndf",
    "n": 12345,
    "d": 3,
    "l": 1,
    "rows_per_run": 10000,
    "shuffle": True,
    "seed": 7,
    "buffer_size": None,
}
STATS = {
    "reads": 1234,
    "read_latency_s": {"p50": 0.0001234, "p90": 0.002, "p99": 0.5},
    "wait_s": 0.125,
    "bytes": 10**12,
}


def test_render_is_a_table_of_the_runs():
    runs = [
        _run("bare read (readinto)", None, 2.5e6, 1.0, 50 << 20),
        _run("loader", 4096, 1.2e6, 0.48, None),
        _run("loader", 64, 99_999.0, 0.04, 3 << 30, stats=STATS),
    ]
    assert tool.render({**REPORT, "runs": runs}) == "\n".join(
        [
            "d/a.ndf: ndf, n=12,345 rows, d=3, l=1; 10,000 rows per run, shuffled, seed 7",
            "  path                      batch      rows/s   x bare     peak RSS",
            "  bare read (readinto)          -      2.50 M    1.00x     50.0 MiB",
            "  loader                    4,096      1.20 M    0.48x          n/a",
            "  loader                       64     100.0 k    0.04x      3.0 GiB",
            "  where the loader's time went (loader.stats()):",
            "    batch    reads     read ms p50/p90/p99   waited   MB out",
            "       64    1,234             0.123/2/500     25% 1000000.0",
        ]
    )


def test_render_marks_a_peak_it_could_not_reset():
    runs = [
        _run("bare read (pyarrow)", None, 100_000.0, 1.0, 1 << 20, reset=False),
        _run("loader", 16, 1500.0, 0.015, None, reset=False),
    ]
    lines = tool.render({**REPORT, "shuffle": False, "runs": runs}).splitlines()
    assert lines[0].endswith("10,000 rows per run, in file order, seed 7")
    assert lines[2] == "  bare read (pyarrow)           -      0.10 M    1.00x     1.0 MiB*"
    assert lines[3] == "  loader                       16       1.5 k    0.01x          n/a"
    assert lines[4:] == ["  * peak since the process started (this system cannot reset it)"]


def test_where_time_went_of_a_run_of_no_time():
    run = _run("loader", 8, 1.0, 1.0, None, stats={**STATS, "wait_s": 3.0})
    run["seconds"] = 0.0
    assert tool._where_time_went([run])[-1] == (
        "        8    1,234             0.123/2/500      0% 1000000.0"
    )
    assert tool._where_time_went([_run("loader", 8, 1.0, 1.0, None)]) == []
    lat = {"p50": None, "p90": None, "p99": None}
    run = _run("loader", 8, 1.0, 1.0, None, stats={**STATS, "read_latency_s": lat})
    assert tool._where_time_went([run])[-1].split()[2] == "-/-/-"


@pytest.mark.parametrize(
    ("v", "want"),
    [
        (1e5, "0.10 M"),
        (99_999.0, "100.0 k"),
        (2.5e7, "25.00 M"),
        (1e12, "1000000.00 M"),
        (0.0, "0.0 k"),
    ],
)
def test_rate(v, want):
    assert tool._rate(v) == want


def test_ms():
    assert tool._ms(None) == "-" and tool._ms(0.0123456) == "12.3" and tool._ms(1.5) == "1.5e+03"


def test_peak_rss():
    import sys

    peak = tool.peak_rss()
    if sys.platform.startswith("linux"):
        assert peak > 1 << 20 and peak % 1024 == 0
    else:
        assert peak is None


def test_reset_peak(monkeypatch):
    import os

    if os.path.exists("/proc/self/clear_refs"):  # Linux: the peak is reset to what is held now
        assert tool._reset_peak() is True
    else:
        assert tool._reset_peak() is False

    def refused(*args, **kw):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tool, "open", refused, raising=False)  # a kernel that refuses it
    assert tool._reset_peak() is False


@pytest.mark.parametrize("shuffle,buffer_size", [(True, 96), (False, None)])
def test_a_loader_run_builds_the_loader_asked_for_and_stops_at_its_limit(
    shuffle, buffer_size, monkeypatch
):
    """`_loader_run` hands the loader its batch size, shuffle, seed and buffer_size as
    given, counts every row handed out and the bar's steps batch by batch, stops at the
    first batch that reaches the limit (not before it), and keeps the run's stats."""
    import exactbatch

    made = []

    class Loader:  # a stand-in: 10 batches of 4 rows, then 2
        def __init__(self, source, batch, **kw):
            made.append((source, batch, kw))
            self.closed = False

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.closed = True

        def __iter__(self):
            for _ in range(10):
                yield np.zeros((4, 1)), None
            yield np.zeros((2, 1)), None

        def stats(self):
            return {"run": {"batches": 3}}

    class Bar:
        def __init__(self):
            self.steps = []

        def update(self, n):
            self.steps.append(n)

    monkeypatch.setattr(exactbatch, "DataLoader", Loader)
    for limit, want in ((9, 12), (8, 8), (1_000, 42)):
        out, pb = {}, Bar()
        assert tool._loader_run("src", 4, limit, shuffle, 7, buffer_size, pb, out) == want
        assert pb.steps == [4] * min(10, want // 4) + [2] * (want == 42)
        assert out == {"stats": {"batches": 3}}
    assert made == [("src", 4, {"shuffle": shuffle, "seed": 7, "buffer_size": buffer_size})] * 3


def test_bench_checks_its_arguments_by_name(tmp_path, capsys):
    """`bench`'s arguments from Python: each refusal names the argument, before the path
    is looked at (here it does not exist); the least each takes (a batch of 1, a buffer of
    1, 1 row, seed 0 or any larger int) runs; its bars are on by default."""
    path = tmp_path / "a.ndf"
    save_ndf(path, make_data(8, 2, 1))
    for kw, err, want in [
        (dict(batch_sizes=[4, 0]), ValueError, "batch_sizes[1] must be >= 1; got batch_sizes[1]=0"),
        (dict(bar="yes"), TypeError, "bar must be a bool; got 'yes'"),
        (dict(shuffle=1), TypeError, "shuffle must be a bool; got 1"),
        (dict(seed=-1), ValueError, "seed must be >= 0; got seed=-1"),
        (dict(buffer_size=0), ValueError, "buffer_size must be >= 1; got buffer_size=0"),
        (dict(max_rows=0), ValueError, "max_rows must be >= 1; got max_rows=0"),
    ]:  # fmt: skip
        with pytest.raises(err) as e:
            tool.bench(tmp_path / "missing.ndf", **{"bar": False, **kw})
        assert str(e.value) == want
    r = tool.bench(path, batch_sizes=[1], seed=2**64, buffer_size=1, max_rows=3)
    assert (r["seed"], r["buffer_size"], r["rows_per_run"]) == (2**64, 1, 3)
    assert [x["rows"] for x in r["runs"]] == [3, 3]
    err = capsys.readouterr().err.replace("\r", "\n")  # each bar's last state: to 3 rows
    for what in ("warm-up", "bare read (readinto)", "loader"):
        assert re.search(rf"^{re.escape(what)} a.ndf: 100%\S* 3.00/3.00 \[.*rows/s\]$", err, re.M)
    tool.bench(path, batch_sizes=[1], max_rows=1, bar=False)
    assert capsys.readouterr().err == ""  # no bar at all


def test_bench_at_a_url_takes_its_storage_options_and_names_itself(tmp_path, s3_server):
    """An .ndf at a URL that needs storage options (the tests' S3 server) is benched with
    them; what bench cannot read at a URL is refused naming bench; options for a local
    path are refused."""
    fsspec = pytest.importorskip("fsspec")
    save_ndf(tmp_path / "a.ndf", make_data(5, 2, 1))
    url = f"s3://{s3_server.bucket}/bench/a.ndf"
    s3_server.fs.put(str(tmp_path / "a.ndf"), url)
    r = tool.bench(url, batch_sizes=[2], storage_options=s3_server.so, bar=False)
    assert (r["format"], r["n"], r["runs"][0]["path"]) == ("ndf", 5, "bare read (ranged)")
    assert [x["rows"] for x in r["runs"]] == [5, 5]
    fs = fsspec.filesystem("memory")
    try:
        fs.pipe("/benchtxt/notes.txt", b"hello")
        with pytest.raises(CliError) as e:
            tool.bench("memory://benchtxt/notes.txt", bar=False)
        assert str(e.value) == (
            "memory://benchtxt/notes.txt: at a URL bench reads .ndf files and sharded "
            "datasets; found first bytes b'hell'"
        )
    finally:
        fs.rm("/benchtxt", recursive=True)
    with pytest.raises(CliError) as e:
        tool.bench(tmp_path / "a.ndf", storage_options={}, bar=False)
    assert (
        str(e.value)
        == f"{tmp_path / 'a.ndf'}: storage options apply only to URLs (s3://..., gs://...)"
    )


def test_bench_of_parquet_names_its_path_and_pyarrow(tmp_path, monkeypatch):
    """Parquet: the columns chosen (features and labels by name), a column not there
    refused naming the path, and a missing pyarrow by name."""
    import sys

    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    path = tmp_path / "a.parquet"
    pq.write_table(pa.table({"a": np.arange(6.0), "b": np.ones(6), "c": np.zeros(6)}), path)
    r = tool.bench(path, batch_sizes=[4], features="a", labels="c", bar=False)
    assert (r["format"], r["n"], r["d"], r["l"]) == ("parquet", 6, 1, 1)
    assert [(x["path"], x["rows"]) for x in r["runs"]] == [
        ("bare read (pyarrow)", 6),
        ("loader", 6),
    ]
    with pytest.raises(CliError) as e:
        tool.bench(path, features="nope", bar=False)
    assert str(e.value).startswith(f"{path}: no column 'nope' (--features); columns are ")
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if not installed
    with pytest.raises(CliError) as e:
        tool.bench(path, bar=False)
    assert str(e.value) == "reading Parquet needs pyarrow: pip install pyarrow"


def test_a_run_timed_at_zero_seconds_is_infinitely_fast(tmp_path, monkeypatch):
    """A clock that does not move (a coarse one, a tiny file): rows/s is infinite, not a
    division by zero."""

    class Still:
        @staticmethod
        def perf_counter():
            return 12.5

    save_ndf(tmp_path / "a.ndf", make_data(4, 1, 0))
    monkeypatch.setattr(tool, "time", Still)
    r = tool.bench(tmp_path / "a.ndf", batch_sizes=[2], bar=False)
    assert [(x["seconds"], x["rows_per_s"]) for x in r["runs"]] == [(0.0, np.inf)] * 2
