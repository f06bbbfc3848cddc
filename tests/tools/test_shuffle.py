"""exactbatch shuffle: the one-time shuffle on disk - every row once, uniform, bounded memory."""

from __future__ import annotations

import itertools
import json
import math
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from exactbatch import open_ndf, save_ndf
from exactbatch.cli import main
from exactbatch.ndf.write import NdfWriter
from exactbatch.tools.shuffle import external_shuffle, shuffle_rng

# Upper 0.1% points of the chi-square distribution (scipy.stats.chi2.ppf(0.999, df)).
CHI2_999 = {23: 49.728, 49: 85.351}


def rows_of(ids) -> tuple[np.ndarray, np.ndarray]:
    """Rows whose every value is a known function of the row id (x[:, 0] = id)."""
    i = np.asarray(ids, dtype=np.float64).reshape(-1, 1)
    return np.hstack([i, 2 * i + 0.5, -i]), 1000 - i


def write_ids(path, n, d=3, l=1):  # noqa: E741
    x, y = rows_of(np.arange(n))
    save_ndf(path, (x[:, :d], y[:, :l]))


def shuffled_ids(n, seed, memory, workdir) -> np.ndarray:
    """The order external_shuffle puts rows 0..n-1 of a one-column file in."""
    path = os.path.join(workdir, f"ids-{n}.ndf")
    if not os.path.exists(path):
        save_ndf(path, np.arange(n, dtype=np.float64).reshape(n, 1))
    out = []
    external_shuffle(
        path,
        28,
        n,
        8,
        lambda v: out.append(np.frombuffer(v.tobytes(), "<f8")),
        shuffle_rng(seed),
        memory,
        workdir,
    )
    return np.concatenate(out).astype(np.int64)


def test_rows_conserved_through_buckets_in_a_subprocess(tmp_path):
    """Every row comes out exactly once, whole (x and y of the same row), in a new order;
    the same seed gives the same file, another seed another order."""
    n = 20_000
    write_ids(tmp_path / "in.ndf", n)
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "exactbatch.cli",
            "shuffle",
            str(tmp_path / "in.ndf"),
            str(tmp_path / "out.ndf"),
            "--seed",
            "5",
            "--memory",
            "64KB",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    assert "two passes" in p.stdout and "pass 1/2" in p.stderr and "pass 2/2" in p.stderr
    with open_ndf(tmp_path / "out.ndf") as f:
        assert (f.n, f.d, f.l) == (n, 3, 1)
        x, y = f.read_rows(np.arange(n))
    ids = x[:, 0]
    assert np.array_equal(np.sort(ids), np.arange(n))  # the multiset of rows is unchanged
    want_x, want_y = rows_of(ids)
    assert np.array_equal(x, want_x) and np.array_equal(y, want_y)  # rows stayed whole
    assert not np.array_equal(ids, np.arange(n))
    assert (
        main(
            [
                "shuffle",
                str(tmp_path / "in.ndf"),
                str(tmp_path / "again.ndf"),
                "-q",
                "--seed",
                "5",
                "--memory",
                "64KB",
            ]
        )
        == 0
    )
    assert (tmp_path / "again.ndf").read_bytes() == (tmp_path / "out.ndf").read_bytes()
    assert (
        main(
            [
                "shuffle",
                str(tmp_path / "in.ndf"),
                str(tmp_path / "other.ndf"),
                "-q",
                "--seed",
                "6",
                "--memory",
                "64KB",
            ]
        )
        == 0
    )
    assert (tmp_path / "other.ndf").read_bytes() != (tmp_path / "out.ndf").read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["again.ndf", "in.ndf", "other.ndf", "out.ndf"]


@pytest.mark.parametrize("memory", ["1GB", "100"], ids=["in-memory", "recursing"])
def test_in_memory_and_deeply_recursive_shuffles_conserve_rows(tmp_path, memory, capsys):
    """A budget larger than the data shuffles in memory; a tiny one recurses many levels."""
    write_ids(tmp_path / "in.ndf", 3000, d=2, l=0)
    assert (
        main(
            [
                "shuffle",
                str(tmp_path / "in.ndf"),
                str(tmp_path / "out.ndf"),
                "-q",
                "--memory",
                memory,
                "--json",
            ]
        )
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    assert out["passes"] == (1 if memory == "1GB" else 2)
    x, _ = open_ndf(tmp_path / "out.ndf").read_rows(np.arange(3000))
    assert np.array_equal(np.sort(x[:, 0]), np.arange(3000))
    assert np.array_equal(x[:, 1], 2 * x[:, 0] + 0.5)


def test_positions_are_uniform_over_seeds(tmp_path):
    """Law: row i lands at position j with chance 1/n. 8 rows, 1000 seeds, a 3-row budget
    (6 buckets, most of them recursed into): chi-square test of the 8x8 position counts."""
    n, seeds = 8, 1000
    counts = np.zeros((n, n))
    for s in range(seeds):
        order = shuffled_ids(n, s, 24, str(tmp_path))
        counts[order, np.arange(n)] += 1
    assert np.all(counts.sum(axis=0) == seeds) and np.all(counts.sum(axis=1) == seeds)
    expected = seeds / n
    # Cells of a sum of permutation matrices vary by (n/(n-1)) of the multinomial's
    # variance; rescaled, Pearson's statistic is chi-square with (n-1)^2 degrees of freedom.
    stat = ((counts - expected) ** 2 / expected).sum() * (n - 1) / n
    assert stat < CHI2_999[(n - 1) ** 2], counts


def test_whole_permutations_are_uniform_over_seeds(tmp_path):
    """Law: each of the 4! orders of 4 rows is equally likely (1200 seeds, 2-row budget)."""
    n, seeds = 4, 1200
    index = {p: k for k, p in enumerate(itertools.permutations(range(n)))}
    counts = np.zeros(len(index))
    for s in range(seeds):
        counts[index[tuple(shuffled_ids(n, s, 16, str(tmp_path)).tolist())]] += 1
    expected = seeds / math.factorial(n)
    stat = ((counts - expected) ** 2 / expected).sum()
    assert stat < CHI2_999[len(index) - 1], counts


def test_empty_and_zero_width_files(tmp_path, capsys):
    save_ndf(tmp_path / "empty.ndf", np.zeros((0, 3)))
    assert main(["shuffle", str(tmp_path / "empty.ndf"), str(tmp_path / "e.ndf"), "-q"]) == 0
    assert (tmp_path / "e.ndf").read_bytes() == (tmp_path / "empty.ndf").read_bytes()
    save_ndf(tmp_path / "wide0.ndf", np.zeros((5, 0)))
    assert main(["shuffle", str(tmp_path / "wide0.ndf"), str(tmp_path / "w.ndf"), "-q"]) == 0
    assert open_ndf(tmp_path / "w.ndf").n == 5
    capsys.readouterr()


def test_a_budget_below_one_row_is_refused(tmp_path, capsys):
    write_ids(tmp_path / "in.ndf", 10)  # rows of 32 bytes
    assert (
        main(["shuffle", str(tmp_path / "in.ndf"), str(tmp_path / "o.ndf"), "-q", "--memory", "16"])
        == 2
    )
    err = capsys.readouterr().err
    assert "in.ndf" in err and "one row" in err
    assert sorted(os.listdir(tmp_path)) == ["in.ndf"]


_PEAK_SCRIPT = """
import json, sys, tracemalloc
import numpy as np
import exactbatch.cli, exactbatch.tools.shuffle  # all the run imports, before the baseline

tracemalloc.start()
rc = exactbatch.cli.main(["shuffle", sys.argv[1], sys.argv[2], "--memory", sys.argv[3],
                          "--seed", "7", "-q"])
print(json.dumps({"rc": rc, "peak": tracemalloc.get_traced_memory()[1]}))
"""


def test_peak_memory_stays_under_the_budget(tmp_path):
    """A 300 MB file shuffled with --memory 64MB: at its peak the run holds at most 64 MB
    that NumPy and Python allocated (tracemalloc in the subprocess: exact, whatever the
    allocator or the page cache keep resident), and every row comes out once."""
    d, n = 4, (300 << 20) // 32
    src, dst = tmp_path / "big.ndf", tmp_path / "out.ndf"
    with NdfWriter(src, d, 0, n) as w:
        for a in range(0, n, 1 << 20):
            i = np.arange(a, min(n, a + (1 << 20)), dtype=np.float64)
            w.write(np.column_stack([i, i + 0.5, -i, i * 3]))
    budget = 64 << 20
    p = subprocess.run(
        [sys.executable, "-c", _PEAK_SCRIPT, str(src), str(dst), "64MB"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout.splitlines()[-1])
    assert r["rc"] == 0
    assert r["peak"] <= budget, f"{r['peak'] / 2**20:.1f} MiB held at the peak, budget 64 MiB"
    ids = np.memmap(dst, dtype="<f8", mode="r", offset=28, shape=(n, d))[:, 0].copy()
    assert not np.array_equal(ids, np.arange(n))
    ids.sort()
    assert np.array_equal(ids, np.arange(n))


# -- shuffle_file: its arguments, its report, its folders, its disk check -------------------

# The order a seed gives is kept across versions: a file shuffled again from the same input,
# seed and budget is the same file. Budgets: all in memory, and 3 rows (1 level of 8
# buckets, some of them recursed into); 40 rows: 8 rows (10 buckets) and 40 (2 buckets).
GOLDEN = {
    (12, 3, 1000): [10, 7, 0, 3, 8, 5, 1, 9, 6, 4, 2, 11],
    (12, 3, 24): [8, 0, 9, 7, 10, 5, 11, 6, 3, 1, 2, 4],
    (40, 7, 64): [
        25,
        37,
        30,
        4,
        26,
        21,
        20,
        6,
        5,
        15,
        22,
        9,
        23,
        11,
        33,
        17,
        27,
        8,
        14,
        18,
        16,
        36,
        32,
        0,
        1,
        24,
        7,
        34,
        10,
        39,
        13,
        12,
        35,
        3,
        19,
        31,
        2,
        28,
        29,
        38,
    ],  # fmt: skip
    (40, 7, 320): [
        12,
        0,
        23,
        15,
        39,
        34,
        5,
        13,
        27,
        26,
        9,
        22,
        36,
        17,
        19,
        7,
        30,
        3,
        11,
        6,
        2,
        14,
        4,
        28,
        10,
        1,
        33,
        29,
        20,
        16,
        31,
        24,
        18,
        35,
        37,
        38,
        8,
        32,
        21,
        25,
    ],  # fmt: skip
}


@pytest.mark.parametrize("key", list(GOLDEN), ids=[f"n{n}-seed{s}-mem{m}" for n, s, m in GOLDEN])
def test_a_seed_gives_the_same_order_in_every_version(tmp_path, key):
    n, seed, memory = key
    assert shuffled_ids(n, seed, memory, str(tmp_path)).tolist() == GOLDEN[key]
    assert sorted(os.listdir(tmp_path)) == [f"ids-{n}.ndf"]  # every bucket file removed


def test_on_scatter_counts_the_rows_the_top_level_scatters_and_nothing_warns(tmp_path, monkeypatch):
    """``on_scatter(rows)`` is called as the first pass scatters rows (the deeper levels'
    scatters are not counted again); the bucket files are made in ``workdir`` (not the
    working directory), and their writes raise no warning (a program run with ``-W
    error`` would stop on one)."""
    n = 200
    path = tmp_path / "ids.ndf"
    save_ndf(path, np.arange(n, dtype=np.float64).reshape(n, 1))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    seen, out, buckets = [], [], set()

    def on_scatter(rows):
        seen.append(rows)
        buckets.update(name for name in os.listdir(tmp_path) if name.startswith("bucket-"))

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        external_shuffle(
            path,
            28,
            n,
            8,
            lambda v: out.append(np.frombuffer(v.tobytes(), "<f8")),
            shuffle_rng(1),
            256,  # 32 rows: buckets, and buckets of buckets
            str(tmp_path),
            on_scatter=on_scatter,
        )
    assert sum(seen) == n and len(seen) > 1
    assert buckets and os.listdir(tmp_path / "cwd") == []  # every bucket removed too
    assert sorted(os.listdir(tmp_path)) == ["cwd", "ids.ndf"]
    assert sorted(np.concatenate(out).tolist()) == list(range(n))


def test_each_bucket_keeps_its_rows_in_the_files_order(tmp_path):
    """The scatter groups a slab's rows by bucket with a stable sort: each bucket file holds
    its rows in their order in the input (the golden orders above depend on it; their
    slabs are too short to tell a stable sort from another)."""
    from exactbatch.tools.shuffle import _scatter

    n = 5000
    path = tmp_path / "ids.ndf"
    save_ndf(path, np.arange(n, dtype=np.float64).reshape(n, 1))
    names = [str(tmp_path / f"b{j}") for j in range(3)]
    memory = 8 * n - 8  # slabs of 1249 rows
    counts = _scatter([(path, 28, n)], n, 8, shuffle_rng(2), 3, names, memory, None)
    buckets = [np.fromfile(name, "<f8").astype(np.int64) for name in names]
    assert [len(b) for b in buckets] == counts.tolist() and min(counts) > 1000
    assert all(np.all(np.diff(b) > 0) for b in buckets)  # in the file's order
    assert sorted(np.concatenate(buckets).tolist()) == list(range(n))


def _shuffle(src, dst, **kw):
    from exactbatch.tools.shuffle import shuffle_file

    kw.setdefault("seed", 3)
    kw.setdefault("memory", 1 << 20)
    return shuffle_file(src, dst, bar=kw.pop("bar", False), **kw)


def ids_in(path) -> list[int]:
    from exactbatch import open_ndf_dataset

    with open_ndf_dataset(path) if os.path.isdir(path) else open_ndf(path) as f:
        return f.read_rows(np.arange(f.n))[0][:, 0].astype(int).tolist()


@pytest.mark.parametrize(
    ("memory", "passes"), [(32 * 40, 1), (32 * 40 - 1, 2), (256, 2)], ids=["fits", "short", "tiny"]
)
def test_shuffle_file_reports_what_it_did_and_keeps_the_names(tmp_path, memory, passes):
    """The report: the input's shape, the seed, the budget, the data's bytes and the passes
    (one when the data fits the budget to the byte); the output keeps the sidecar's names
    and every row whole."""
    x, y = rows_of(np.arange(40))
    save_ndf(tmp_path / "in.ndf", (x, y), features=["id", "a", "b"], labels=["t"])
    out = _shuffle(tmp_path / "in.ndf", tmp_path / "out.ndf", seed=7, memory=memory)
    assert out == {
        "src": str(tmp_path / "in.ndf"),
        "dst": str(tmp_path / "out.ndf"),
        "n": 40,
        "d": 3,
        "l": 1,
        "seed": 7,
        "memory": memory,
        "data_bytes": 32 * 40,
        "passes": passes,
    }
    with open_ndf(tmp_path / "out.ndf") as f:
        assert (f.features, f.labels) == (("id", "a", "b"), ("t",))
        got_x, got_y = f.read_rows(np.arange(40))
    want_x, want_y = rows_of(got_x[:, 0])
    assert np.array_equal(got_x, want_x) and np.array_equal(got_y, want_y)
    assert sorted(got_x[:, 0]) == list(range(40))
    assert sorted(os.listdir(tmp_path)) == ["in.ndf", "in.ndf.json", "out.ndf", "out.ndf.json"]


def test_shuffle_file_gives_the_golden_order_of_its_rows(tmp_path):
    """The file's order is external_shuffle's over its rows (the golden one above, for a
    one-column file), whether the rows fit the budget or go through buckets."""
    save_ndf(tmp_path / "ids.ndf", np.arange(40, dtype=np.float64).reshape(40, 1))
    for memory in (64, 320):
        _shuffle(tmp_path / "ids.ndf", tmp_path / f"{memory}.ndf", seed=7, memory=memory)
        assert ids_in(str(tmp_path / f"{memory}.ndf")) == GOLDEN[(40, 7, memory)]


def test_render_says_how_the_shuffle_went():
    from exactbatch.tools.shuffle import render

    out = {"dst": "o.ndf", "n": 12345, "seed": 4, "memory": 65536, "passes": 1}
    assert render(out) == (
        "wrote o.ndf: 12,345 rows shuffled in memory (seed 4, memory budget 65,536 bytes)"
    )
    assert render({**out, "passes": 2, "parts": 1234}) == (
        "wrote o.ndf: 12,345 rows in 1,234 parts shuffled in two passes through bucket files "
        "(seed 4, memory budget 65,536 bytes)"
    )


@pytest.mark.parametrize(
    ("kw", "says"),
    [
        ({"seed": -1}, "seed"),
        ({"memory": 0}, "memory"),
        ({"part_rows": 0}, "part_rows"),
        ({"force": "yes"}, "force"),
        ({"bar": 1}, "bar"),
    ],
    ids=["seed", "memory", "part-rows", "force", "bar"],
)
def test_shuffle_file_checks_its_arguments(tmp_path, kw, says):
    write_ids(tmp_path / "in.ndf", 5)
    with pytest.raises((ValueError, TypeError), match=f"^{says} "):  # named as the argument
        _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf", **kw)
    assert sorted(os.listdir(tmp_path)) == ["in.ndf"]


def test_a_seed_may_be_any_size_and_zero(tmp_path):
    write_ids(tmp_path / "in.ndf", 5)
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "a.ndf", seed=0)["seed"] == 0
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "b.ndf", seed=2**70)["seed"] == 2**70
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "c.ndf", memory=32)["passes"] == 2  # a row


def test_shuffle_file_refuses_other_formats_by_name(tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    from exactbatch.tools.common import CliError

    pq.write_table(pa.table({"a": [1.0]}), tmp_path / "a.parquet")
    with pytest.raises(CliError) as e:
        _shuffle(tmp_path / "a.parquet", tmp_path / "o.ndf")
    assert str(e.value) == (
        f"{tmp_path / 'a.parquet'}: shuffle reads .ndf files and sharded datasets; convert "
        "this parquet data first (exactbatch convert SRC NAME.ndf)"
    )
    write_ids(tmp_path / "in.ndf", 5)
    with pytest.raises(CliError) as e:
        _shuffle(tmp_path / "in.ndf", tmp_path / "o.parquet")
    assert str(e.value) == (
        f"{tmp_path / 'o.parquet'}: shuffle writes an .ndf file (or a sharded dataset), not "
        f"parquet; name it NAME.ndf, then convert it: exactbatch convert NAME.ndf "
        f"{tmp_path / 'o.parquet'}"
    )
    with pytest.raises(CliError, match=r"^--memory 31 bytes cannot hold one row of .*in\.ndf"):
        _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf", memory=31)
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "o", memory=32)["n"] == 5  # no extension
    assert sorted(os.listdir(tmp_path)) == ["a.parquet", "in.ndf", "o"]


def test_a_file_shuffled_into_parts(tmp_path):
    """part_rows: a sharded dataset from a file, in the file's shuffled order; its report
    names the parts."""
    write_ids(tmp_path / "in.ndf", 11)
    _shuffle(tmp_path / "in.ndf", tmp_path / "one.ndf", seed=5)
    out = _shuffle(tmp_path / "in.ndf", tmp_path / "ds", seed=5, part_rows=4)
    assert (out["parts"], out["part_rows"], out["passes"]) == (3, 4, 1)
    assert ids_in(str(tmp_path / "ds")) == ids_in(str(tmp_path / "one.ndf"))


def test_a_file_shuffled_into_parts_of_one_row(tmp_path):
    """part_rows=1, the least: a part a row, in the file's shuffled order."""
    write_ids(tmp_path / "in.ndf", 5)
    _shuffle(tmp_path / "in.ndf", tmp_path / "one.ndf", seed=2)
    out = _shuffle(tmp_path / "in.ndf", tmp_path / "ds", seed=2, part_rows=1)
    assert (out["parts"], out["part_rows"]) == (5, 1)
    assert ids_in(str(tmp_path / "ds")) == ids_in(str(tmp_path / "one.ndf"))


def test_a_named_file_shuffled_into_parts_keeps_its_names(tmp_path):
    """The manifest of a shuffle into parts keeps the input's column names."""
    from exactbatch import open_ndf_dataset

    x, y = rows_of(np.arange(6))
    save_ndf(tmp_path / "in.ndf", (x, y), features=["id", "a", "b"], labels=["t"])
    _shuffle(tmp_path / "in.ndf", tmp_path / "ds", part_rows=4)
    with open_ndf_dataset(tmp_path / "ds") as ds:
        assert (ds.manifest.features, ds.manifest.labels) == (("id", "a", "b"), ("t",))


def test_a_file_of_one_row_is_shuffled_to_itself(tmp_path):
    """One row: the output holds it whole (its values, not a row of no values)."""
    write_ids(tmp_path / "in.ndf", 1)
    out = _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf")
    assert out["n"] == 1
    with open_ndf(tmp_path / "o.ndf") as f:
        got_x, got_y = f.read_rows(np.arange(1))
    want_x, want_y = rows_of([0])
    assert np.array_equal(got_x, want_x) and np.array_equal(got_y, want_y)


def test_an_empty_dataset_is_shuffled_into_one_row_parts(tmp_path):
    """A dataset with no rows: the parts' size defaults to one row (its largest part has
    none), and its report says so."""
    from helpers import write_ndf_dataset

    src = write_ndf_dataset(tmp_path / "empty", [0, 0])
    out = _shuffle(src, tmp_path / "o")
    assert (out["n"], out["part_rows"], out["passes"], out["data_bytes"]) == (0, 1, 1, 0)


def test_many_rows_of_no_values_are_written_in_pieces(tmp_path, monkeypatch):
    """Rows of no values: only their count moves, in pieces of at most ``_EMPTY_ROWS``
    (NumPy shapes no more than 2**59 float64 rows)."""
    from exactbatch.tools import shuffle as mod

    monkeypatch.setattr(mod, "_EMPTY_ROWS", 3)
    written = []
    real = mod.NdfWriter.write
    monkeypatch.setattr(mod.NdfWriter, "write", lambda w, b: (written.append(b.shape), real(w, b)))
    save_ndf(tmp_path / "w.ndf", np.zeros((7, 0)))
    out = _shuffle(tmp_path / "w.ndf", tmp_path / "o.ndf", memory=1)
    assert written == [(3, 0), (3, 0), (1, 0)]
    assert (out["n"], out["passes"]) == (7, 1)
    assert open_ndf(tmp_path / "o.ndf").n == 7


def test_buckets_go_to_the_folder_given_and_are_removed(tmp_path, monkeypatch):
    """tmp_dir: the bucket folder is made there (named with this process's id), not in
    the output's folder, and removed at the end, with any other this process left there;
    a tmp_dir that does not exist is refused before anything is written."""
    from exactbatch.tools import shuffle as mod
    from exactbatch.tools.common import CliError

    write_ids(tmp_path / "in.ndf", 50)
    work = tmp_path / "work"
    work.mkdir()
    stale = work / f".exactbatch-shuffle-{os.getpid()}-old"
    stale.mkdir()
    (work / "keep.txt").write_text("not ours")
    seen = []
    real = mod.shuffle_regions

    def spy(regions, row_bytes, write, rng, memory, workdir, *a, **kw):
        if not seen:  # the top level's call (the levels below call it again)
            seen.append((workdir, sorted(os.listdir(work))))
        return real(regions, row_bytes, write, rng, memory, workdir, *a, **kw)

    monkeypatch.setattr(mod, "shuffle_regions", spy)
    out = _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf", memory=256, tmp_dir=work)
    assert out["passes"] == 2
    workdir, during = seen[0]
    assert os.path.dirname(workdir) == str(work)
    assert os.path.basename(workdir).startswith(f".exactbatch-shuffle-{os.getpid()}-")
    assert os.path.basename(workdir) in during
    assert sorted(os.listdir(work)) == ["keep.txt"]
    assert sorted(os.listdir(tmp_path)) == ["in.ndf", "o.ndf", "work"]
    with pytest.raises(CliError) as e:
        _shuffle(tmp_path / "in.ndf", tmp_path / "p.ndf", tmp_dir=tmp_path / "nope")
    assert str(e.value) == f"{tmp_path / 'nope'}: temporary folder does not exist"
    assert not (tmp_path / "p.ndf").exists()


def test_buckets_default_to_the_outputs_folder(tmp_path, monkeypatch):
    from exactbatch.tools import shuffle as mod

    write_ids(tmp_path / "in.ndf", 50)
    (tmp_path / "out").mkdir()
    made = []
    real = mod._bucket_folder
    monkeypatch.setattr(mod, "_bucket_folder", lambda root: (made.append(root), real(root))[1])
    _shuffle(tmp_path / "in.ndf", tmp_path / "out" / "o.ndf", memory=256)
    assert made == [str(tmp_path / "out")]
    assert sorted(os.listdir(tmp_path / "out")) == ["o.ndf"]


def _disk(free_by_folder):
    """A stand-in for shutil.disk_usage: ``free_by_folder[folder]`` bytes free."""
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    return lambda folder: usage(0, 0, free_by_folder[os.fspath(folder)])


def test_a_shuffle_that_cannot_fit_on_disk_is_refused_first(tmp_path, monkeypatch):
    """The output (and, for two passes, the buckets as large again) must fit the free
    space of its device: one need per device, the folders on one device added up."""
    from exactbatch.tools import shuffle as mod
    from exactbatch.tools.common import CliError

    write_ids(tmp_path / "in.ndf", 64)  # 2 KiB of rows
    data, here = 64 * 32, str(tmp_path)
    work = tmp_path / "work"
    work.mkdir()
    # in memory: the output alone
    monkeypatch.setattr(mod.shutil, "disk_usage", _disk({here: 1000}))
    with pytest.raises(CliError) as e:
        _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf", memory=1 << 20)
    assert str(e.value) == (
        f"{here}: the shuffle needs about 2.0 KiB free here (output); 1000 B free"
    )
    monkeypatch.setattr(mod.shutil, "disk_usage", _disk({here: data - 1}))
    with pytest.raises(CliError, match="2.0 KiB free here"):
        _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf", memory=1 << 20)
    monkeypatch.setattr(mod.shutil, "disk_usage", _disk({here: data}))
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf", memory=1 << 20)["passes"] == 1
    # two passes, buckets beside the output (one device): twice the data
    monkeypatch.setattr(mod.shutil, "disk_usage", _disk({here: 2 * data - 1}))
    with pytest.raises(CliError) as e:
        _shuffle(tmp_path / "in.ndf", tmp_path / "p.ndf", memory=256)
    assert str(e.value) == (
        f"{here}: the shuffle needs about 4.0 KiB free here (output and buckets); 4.0 KiB free"
    )
    monkeypatch.setattr(mod.shutil, "disk_usage", _disk({here: 2 * data}))
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "p.ndf", memory=256)["passes"] == 2
    # buckets on another device: each device needs its own share
    real_stat = os.stat

    def stat(path, *a, **kw):
        st = real_stat(path, *a, **kw)
        if os.fspath(path) != str(work):
            return st
        return os.stat_result((*st[:2], st.st_dev + 1, *st[3:]))

    monkeypatch.setattr(mod.os, "stat", stat)
    monkeypatch.setattr(mod.shutil, "disk_usage", _disk({here: data, str(work): data - 1}))
    with pytest.raises(CliError, match=r"work: the shuffle needs about 2\.0 KiB free here \("):
        _shuffle(tmp_path / "in.ndf", tmp_path / "q.ndf", memory=256, tmp_dir=work)
    monkeypatch.setattr(mod.shutil, "disk_usage", _disk({here: data, str(work): data}))
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "q.ndf", memory=256, tmp_dir=work)["n"] == 64


def test_progress_bars_name_the_passes(tmp_path, capsys):
    """With bar=True: one bar in memory; two through buckets, scatter then write, each to
    the file's row count."""
    pytest.importorskip("tqdm")
    write_ids(tmp_path / "in.ndf", 50)
    _shuffle(tmp_path / "in.ndf", tmp_path / "a.ndf", bar=True)
    err = capsys.readouterr().err
    assert "shuffle in.ndf (in memory)" in err and "pass" not in err
    assert re.search(r"shuffle in\.ndf \(in memory\): 100%\|.*\| 50\.0/50\.0 \[.*rows/s\]", err)
    _shuffle(tmp_path / "in.ndf", tmp_path / "b.ndf", memory=256, bar=True)
    err = capsys.readouterr().err
    assert "shuffle in.ndf: pass 1/2 scatter" in err and "shuffle in.ndf: pass 2/2 write" in err
    assert err.index("pass 1/2") < err.index("pass 2/2")
    for bar in ("pass 1/2 scatter", "pass 2/2 write"):
        assert re.search(bar + r": 100%\|.*\| 50\.0/50\.0 \[.*rows/s\]", err), err
    assert err.count("| 50.0/50.0") == 2 and "(in memory)" not in err
    _shuffle(tmp_path / "in.ndf", tmp_path / "c.ndf", memory=256)  # bar=False: no bar at all
    _shuffle(tmp_path / "in.ndf", tmp_path / "d.ndf")
    assert capsys.readouterr().err == ""


def _interrupted():
    raise KeyboardInterrupt


@pytest.mark.parametrize("memory", [1 << 20, 256], ids=["in-memory", "two-passes"])
def test_a_signal_noted_before_the_rename_leaves_no_output(tmp_path, monkeypatch, memory):
    """The writer checks for a noted Ctrl-C (one a library swallowed) before it renames
    the output into place: none is left, file or parts."""
    from exactbatch.tools import shuffle as mod

    write_ids(tmp_path / "in.ndf", 50)
    monkeypatch.setattr(mod, "check_interrupt", _interrupted)
    for dst, kw in (("o.ndf", {}), ("ds", {"part_rows": 20})):
        with pytest.raises(KeyboardInterrupt):
            _shuffle(tmp_path / "in.ndf", tmp_path / dst, memory=memory, **kw)
    assert sorted(os.listdir(tmp_path)) == ["in.ndf"]


def test_the_bar_is_drawn_by_default(tmp_path, capsys):
    pytest.importorskip("tqdm")
    from exactbatch.tools.shuffle import shuffle_file

    write_ids(tmp_path / "in.ndf", 5)
    shuffle_file(tmp_path / "in.ndf", tmp_path / "o.ndf", seed=1, memory=1 << 20)
    assert "shuffle in.ndf (in memory):" in capsys.readouterr().err


def test_a_failed_scatter_is_the_error_raised(tmp_path, monkeypatch):
    """A read that fails in pass 1 (before any row is written) is what the shuffle raises;
    nothing is left, buckets or output."""
    from exactbatch.tools import shuffle as mod

    def failed(*a, **kw):
        raise OSError(5, "the disk failed")

    write_ids(tmp_path / "in.ndf", 50)
    monkeypatch.setattr(mod, "_scatter", failed)
    with pytest.raises(OSError, match="the disk failed"):
        _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf", memory=256)
    assert sorted(os.listdir(tmp_path)) == ["in.ndf"]


def test_an_existing_output_needs_force_and_a_url_is_refused(tmp_path):
    from exactbatch.tools.common import CliError

    write_ids(tmp_path / "in.ndf", 5)
    (tmp_path / "o.ndf").write_bytes(b"old")
    with pytest.raises(CliError, match="already exists"):
        _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf")
    assert (tmp_path / "o.ndf").read_bytes() == b"old"
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "o.ndf", force=True)["n"] == 5
    (tmp_path / "ds").mkdir()
    (tmp_path / "ds" / "x").write_text("")
    with pytest.raises(CliError, match="not empty"):
        _shuffle(tmp_path / "in.ndf", tmp_path / "ds", part_rows=2)
    assert _shuffle(tmp_path / "in.ndf", tmp_path / "ds", part_rows=2, force=True)["parts"] == 3
    with pytest.raises(CliError) as e:
        _shuffle(tmp_path / "in.ndf", tmp_path / "p.ndf", tmp_dir="s3://bucket/tmp")
    assert str(e.value).startswith("writing URLs is not supported by this command; got s3://")
