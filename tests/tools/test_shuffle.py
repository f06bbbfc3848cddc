"""exactbatch shuffle: the one-time shuffle on disk - every row once, uniform, bounded memory."""

from __future__ import annotations

import itertools
import json
import math
import os
import subprocess
import sys

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
