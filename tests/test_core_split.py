"""The compiled gather split over threads (``exactbatch._core``, _core_split.c): what
``threads`` accepts, that the split copies the same bytes as one thread from every kind
of reader, and that the pool's threads neither outlive the interpreter nor break a
forked child. (Truncations during a split read: tests/ndf/test_guard.py; the loader's
``threads``: the law matrix's gather axis.)"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import make_data, run_compiled
from laws import run_threads

from exactbatch import DataLoader, kernels, open_ndf, save_ndf
from exactbatch.parts import parts_rows

core = pytest.importorskip("exactbatch._core", reason="the compiled core is not built")


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_split_read_copies_the_bytes_one_thread_does(dtype):
    """Shuffled, sorted (runs), a slice, repeats, and a transform naming its first NaN
    row: for every thread count, from arrays and whole-row columns, the same bytes and
    the same result as on one thread (a file's mapping and a dataset's parts split too:
    the law matrix's gather axis, tests/ndf/test_guard.py)."""
    rng = np.random.default_rng(3)
    x, y = make_data(500, 6, 2)
    x[[37, 400], 2] = np.nan
    whole = np.hstack([x, y])
    tf = kernels.TransformKernel(rng.normal(size=6), rng.uniform(0.5, 2, size=6), None)
    readers = [core.memory_rows(x, y), core.memory_rows(whole[:, :6], whole[:, 6:])]
    for rows in (
        rng.permutation(500)[:301],
        np.arange(20, 321).astype(np.int32),
        slice(10, 311),
        rng.integers(0, 500, 301),
    ):
        for reader in readers:
            for extra in ((), (tf,)):
                want = [np.empty((301, 6), dtype), np.empty((301, 2), dtype)]
                res = reader.read(rows, *want, *(extra or (None,)), 1)
                for t in (2, 3, 7, 64, 1000, None, 0):
                    got = [np.full((301, 6), 7, dtype), np.full((301, 2), 7, dtype)]
                    assert reader.read(rows, *got, *(extra or (None,)), t) == res
                    assert all(
                        a.tobytes() == b.tobytes() for a, b in zip(got, want, strict=True)
                    ), t


def test_a_files_and_a_datasets_parts_split_reads_run_on_several_threads_at_once(tmp_path):
    """A file's mapping (each pool thread under a fault guard of its own) and a dataset's
    parts (each pinned while a thread copies it), read by three Python threads at once,
    each read split over the pool: every read copies the rows it names. (`make tsan` runs
    this for the guard's and the parts' threads: tests/ndf/test_guard.py cannot run
    there.)"""
    n, starts = 30_000, [0, 9_000, 21_000, 30_000]
    x = np.arange(n, dtype=np.float64)[:, None] + np.arange(4) / 4
    save_ndf(tmp_path / "all.ndf", (x, x[:, :1]))
    for k in range(3):
        part = x[starts[k] : starts[k + 1]]
        save_ndf(tmp_path / f"part{k}.ndf", (part, part[:, :1]))
    files = [open_ndf(tmp_path / "all.ndf")] + [
        open_ndf(tmp_path / f"part{k}.ndf") for k in range(3)
    ]
    try:
        parts = parts_rows(np.array(starts, dtype=np.int64), 4, 1)
        for k in range(3):
            parts.set(k, files[k + 1].kernel_rows())
        readers = [files[0].kernel_rows(), parts]

        def work(i):
            rng = np.random.default_rng(i)
            ox, oy = np.empty((n, 4)), np.empty((n, 1))
            for k in range(6):
                idx = rng.permutation(n) if k % 2 else np.sort(rng.integers(0, n, n))
                ox.fill(np.nan)
                oy.fill(np.nan)
                assert (
                    readers[k % 2].read(idx, ox, oy, None, 3 + i) is None
                )  # copied (all parts set)
                assert (oy[:, 0] == idx).all() and (ox[:, 3] == idx + 0.75).all(), (i, k)

        run_threads(work, 3)
    finally:
        for f in files:
            f.close()


def test_threads_is_none_or_an_int_and_the_rows_object_keeps_it():
    x, y = make_data(10, 2, 1)
    rows = core.memory_rows(x, y)
    assert rows.threads == 0  # auto
    rows.threads = 3
    assert rows.threads == 3
    rows.threads = None
    assert rows.threads == 0
    ox, oy = np.empty((2, 2)), np.empty((2, 1))
    for bad, error in [(-1, ValueError), (2.0, TypeError), ("2", TypeError), (True, TypeError)]:
        with pytest.raises(error, match="threads"):
            rows.read(np.array([1, 2]), ox, oy, None, bad)
        with pytest.raises(error, match="threads"):
            rows.threads = bad


def test_a_loader_refuses_bad_threads_naming_it():
    x = np.zeros((10, 2))
    for bad, error in [(0, ValueError), (-2, ValueError), (1.5, TypeError), (True, TypeError)]:
        with pytest.raises(error, match="threads"):
            DataLoader(x, 4, threads=bad)
    assert DataLoader(x, 4, threads=2).threads == 2
    assert DataLoader(x, 4).threads is None


def test_the_pool_ends_with_the_interpreter_and_a_forked_child_reads_without_it():
    """A parent whose pool has threads forks; the child (no pool thread of the parent's
    exists there) reads on several threads, as does the parent after; both exit 0,
    the parent's pool threads joined at exit (a hang fails on the timeout)."""
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    r = run_compiled(
        """
        import os, sys, threading
        import numpy as np
        from exactbatch import _core
        x = np.arange(40000 * 8, dtype=np.float64).reshape(40000, 8)
        rows = _core.memory_rows(x, x[:, :1])
        idx = np.random.default_rng(0).permutation(40000)
        ox, oy = np.empty((40000, 8)), np.empty((40000, 1))
        rows.read(idx, ox, oy, None, 4)
        assert (ox == x[idx]).all()
        pid = os.fork()
        if pid == 0:
            ox[:] = 0
            rows.read(idx, ox, oy, None, 4)
            os._exit(0 if (ox == x[idx]).all() else 3)
        _, status = os.waitpid(pid, 0)
        print("child", os.waitstatus_to_exitcode(status))
        # reads on several Python threads at once: one takes the pool, the others copy
        # on their own threads
        def read():
            a, b = np.empty((40000, 8)), np.empty((40000, 1))
            for _ in range(5):
                rows.read(idx, a, b, None, 3)
                assert (a == x[idx]).all()
        ts = [threading.Thread(target=read) for _ in range(3)]
        [t.start() for t in ts]
        [t.join() for t in ts]
        print("threads done")
        """,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.splitlines() == ["child 0", "threads done"]


# The sizes where a race in the pool shows: a read long enough that the reading thread
# sleeps on its workers (past the 20 us it polls), and parts that end in another order
# than the read waits for them (every worker that finishes wakes every sleeper): worker
# 0's part (the read's rows n/t .. 2n/t) gathers at random over millions of rows, the
# other parts read the same 64 rows again. Repeated, each read checked against the rows
# it names (x[i] holds i), its output refilled with NaN first. On 2 cores the default
# size caught the reading thread's wait made an `if` (_core_split.c, split_run) in 6 of
# 6 runs (a wrong read or a crash); EXACTBATCH_STRESS=1 runs 120 reads of 4 million
# rows, with uniform shuffles and 64 threads too (`make tsan` runs the default size).
_STRESS = os.environ.get("EXACTBATCH_STRESS", "") not in ("", "0")


def test_large_threaded_reads_wait_for_every_part():
    """Large reads split over many threads, repeated: each returns only once every part
    is copied (a read that returned before a worker had copied its part would show the
    NaN it was filled with, or stale rows)."""
    n, reads = (4_000_000, 120) if _STRESS else (2_000_000, 8)
    rng = np.random.default_rng(11)
    # traceable rows (exact in float32 below 2**22): x[i] = i + (0, 1/4, 1/2, 3/4), y[i] = i
    x = np.arange(n, dtype=np.float64)[:, None] + np.arange(4) / 4
    y = x[:, :1].copy()
    rows = core.memory_rows(x, y)
    ox, oy = np.empty((n, 4), np.float32), np.empty((n, 1), np.float32)
    for k in range(reads):
        t = (4, 3, 8, 64 if _STRESS else 4)[k % 4]
        if not _STRESS or k % 8 < 6:  # worker 0's part slow, every other part fast
            idx = np.arange(n) % 64
            idx[n // t : 2 * n // t] = rng.integers(0, n, 2 * n // t - n // t)
        else:
            idx = rng.permutation(n)
        ox.fill(np.nan)
        oy.fill(np.nan)
        rows.read(idx, ox, oy, None, t)
        assert (oy[:, 0] == idx).all(), (k, t)
        assert (ox[:, 0] == idx).all() and (ox[:, 3] == idx + 0.75).all(), (k, t)
