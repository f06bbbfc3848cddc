"""Reliability, 4: load - 8 threads, many epochs, many loaders; nothing lost, nothing leaked.

* 8 threads share one loader through ``next_into`` for several epochs (an
  in-memory source and an ``.ndf`` file): in every epoch every row is handed
  out exactly once, every row's values are that row's (no torn or mixed
  rows), and the batches are exactly the epoch's batches of a loader read by
  one thread.
* Nothing is left behind: the number of threads, of open descriptors
  (``/proc/self/fd``) and the memory NumPy and Python hold (tracemalloc: exact,
  whatever the allocator keeps) stay flat across 1,000
  loaders created, read a little and dropped (over an ``.ndf`` file -
  shared or opened per loader - and in memory; by ``iter`` with the default
  prefetch of 2 batches, with a deeper prefetch, without prefetch, and by
  ``next_into``; iterators dropped mid-epoch while their prefetch thread
  waits on a full queue, loaders closed or dropped), and across 100 epochs
  of one loader. Threads are counted after joining exactbatch's own
  short-lived threads ("exactbatch-prefetch", and "exactbatch-order" where
  a version computes the next epoch's order ahead), with a timeout: a
  thread that does not stop fails the count.

:func:`threaded_epochs` and :func:`churn_loaders` are shared with
``bench/reliability.py load`` (50 epochs over 1M rows, 8 threads).
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
import tracemalloc

import numpy as np
import pytest

from exactbatch import DataLoader, ndf_blocks, open_ndf, save_ndf

needs_proc = pytest.mark.skipif(
    not os.path.isdir("/proc/self/fd"), reason="reads /proc/self/fd and /proc/self/statm"
)


# -- data whose rows can be traced: x[i] = (i, 2i + 1/4, ...), y[i] = -(i + 1) - 1/8 --------


def make_data(n: int, d: int = 3) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(n, dtype=np.float64)[:, None]
    x = i * (np.arange(d) + 1) + np.arange(d) / 4
    return np.ascontiguousarray(x), -(i + 1) - 0.125


def check_batch(bx: np.ndarray, by: np.ndarray) -> np.ndarray:
    """The row ids of a batch, after checking every value belongs to its row."""
    ids = bx[:, 0]
    d = bx.shape[1]
    want = ids[:, None] * (np.arange(d) + 1) + np.arange(d) / 4
    if not (np.array_equal(bx, want) and np.array_equal(by[:, 0], -(ids + 1) - 0.125)):
        raise AssertionError("a batch holds values that are not its rows' (torn or mixed rows)")
    return ids.astype(np.int64)


# -- threads ------------------------------------------------------------------------


def threaded_epochs(loader: DataLoader, epochs: int, threads: int = 8, check_batches=True):
    """``threads`` threads share ``loader`` via next_into for ``epochs`` epochs.

    Each epoch: every thread claims batches until next_into returns 0; at a
    barrier one thread calls ``reset()`` (the next epoch), then all go on.
    Returns per epoch the list of batches (row-id arrays) handed out, in
    no particular order. Raises the first error of any thread.
    """
    b, d, l = loader.batch_size, loader.d, loader.l  # noqa: E741
    barrier = threading.Barrier(threads)
    got = [[[] for _ in range(epochs)] for _ in range(threads)]
    errors: list[BaseException] = []

    def work(t: int) -> None:
        bx, by = np.empty((b, d)), np.empty((b, l))
        try:
            for e in range(epochs):
                out = got[t][e]
                while rows := loader.next_into(bx, by):
                    out.append(
                        check_batch(bx[:rows], by[:rows])
                        if check_batches
                        else bx[:rows, 0].astype(np.int64)
                    )
                if barrier.wait() == 0:
                    loader.reset()  # rewind to the start of the next epoch
                barrier.wait()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)
            barrier.abort()

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    if errors:
        raise errors[0]
    return [[batch for t in range(threads) for batch in got[t][e]] for e in range(epochs)]


def check_exactly_once(batches, n: int) -> None:
    rows = np.concatenate(batches) if batches else np.empty(0, dtype=np.int64)
    counts = np.bincount(rows, minlength=n)
    assert len(counts) == n, "a row id outside the data"
    assert counts.min() == 1 and counts.max() == 1, (
        f"rows handed out {counts.max()} times / missing {int(np.sum(counts == 0))} rows"
    )


@pytest.fixture(scope="module")
def ndf_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("load") / "load.ndf"
    save_ndf(path, make_data(100_000))
    return path


@pytest.mark.parametrize("kind", ["memory", "ndf"])
def test_eight_threads_share_a_loader_for_many_epochs(kind, ndf_path):
    """Every epoch: every row exactly once, values intact, the batches a single thread gets."""
    n, epochs = 100_000, 6
    with open_ndf(ndf_path) as f:
        source = f if kind == "ndf" else make_data(n)
        loader = DataLoader(source, batch_size=500, shuffle=True, seed=11)
        reference = DataLoader(source, batch_size=500, shuffle=True, seed=11)
        per_epoch = threaded_epochs(loader, epochs)
    for e, batches in enumerate(per_epoch):
        check_exactly_once(batches, n)
        assert len(batches) == len(loader)
        want = {tuple(check_batch(xb, yb)) for xb, yb in reference}  # epoch e of one thread
        assert {tuple(b) for b in batches} == want, f"epoch {e}: other batches than one thread's"


def test_eight_threads_with_drop_last_and_shards(ndf_path):
    """Shards read by 8 threads each, with drop_last: each shard's epoch is exactly its
    full batches; together the shards cover every row at most once."""
    n, shards, b = 100_000, 3, 777
    seen = []
    with open_ndf(ndf_path) as f:
        for s in range(shards):
            loader = DataLoader(f, b, seed=2, drop_last=True, num_shards=shards, shard_index=s)
            for batches in threaded_epochs(loader, 2):
                assert all(len(x) == b for x in batches) and len(batches) == len(loader)
                assert len(batches) == loader.n // b
                rows = np.concatenate(batches)
                assert len(np.unique(rows)) == len(rows)
                lo, hi = s * n // shards, (s + 1) * n // shards
                assert rows.min() >= lo and rows.max() < hi
            seen.append(rows)
    all_rows = np.concatenate(seen)
    assert len(np.unique(all_rows)) == len(all_rows)


# -- nothing left behind -------------------------------------------------------------


def settle() -> None:
    """Collect garbage (dropped iterators stop their threads), then join exactbatch's
    short-lived threads - with a timeout, so one that never stops is counted."""
    deadline = time.monotonic() + 10
    while True:  # a dropped iterator's thread ends its read first, which may start another
        gc.collect()
        ours = [th for th in threading.enumerate() if th.name.startswith("exactbatch-")]
        if not ours or time.monotonic() > deadline:
            break
        for th in ours:
            with contextlib.suppress(RuntimeError):  # started, not yet running: next round
                th.join(timeout=max(0.0, deadline - time.monotonic()))
    gc.collect()


def resources() -> dict:
    """Threads, open descriptors, (while tracemalloc runs) the bytes NumPy and Python
    hold that were allocated since it started - exact, whatever the allocator keeps -
    and the resident memory (for bench/reliability.py: the tests do not assert on it,
    it depends on the allocator)."""
    settle()
    with open("/proc/self/statm") as f:
        rss_pages = int(f.read().split()[1])
    return {
        "threads": threading.active_count(),
        "fds": len(os.listdir("/proc/self/fd")),
        "held": tracemalloc.get_traced_memory()[0] if tracemalloc.is_tracing() else None,
        "rss_mb": rss_pages * os.sysconf("SC_PAGE_SIZE") / 2**20,
    }


def churn_loaders(path, count: int, n: int, seed: int = 0) -> None:
    """Create, read a little from, and drop ``count`` loaders of several kinds."""
    rng = np.random.default_rng(seed)
    shared = open_ndf(path)
    memory = make_data(n)
    try:
        for i in range(count):
            kind = i % 5
            if kind == 4:  # blocks through the two-half buffer (a helper thread fills one)
                loader = DataLoader(ndf_blocks(shared, 500), 256, seed=i, buffer_size=10_000)
            elif kind == 0:  # a loader over a shared NdfFile, read by iter(), dropped (some
                # with a progress callback: the telemetry holds the loader's stats weakly)
                progress = (lambda stats: None) if i % 2 else None
                loader = DataLoader(shared, batch_size=256, seed=i, prefetch=4, progress=progress)
            elif kind == 1:  # a file opened for this loader and closed at once
                with open_ndf(path) as f:
                    loader = DataLoader(f, batch_size=256, seed=i)
            elif kind == 2:  # in memory
                loader = DataLoader(memory, batch_size=256, seed=i, prefetch=i % 3)
            else:  # in memory, as a context manager, no shuffle
                with DataLoader(memory, batch_size=256, shuffle=False) as loader:
                    next(iter(loader))
                continue
            it = iter(loader)
            for _ in range(int(rng.integers(0, 3))):
                next(it)
            if i % 8 < 4:  # some by next_into, which begins the epoch without iter()
                bx, by = np.empty((256, loader.d)), np.empty((256, loader.l))
                loader.next_into(bx, by)
            if i % 16 == 7:
                loader.close()  # closed while its iterator's thread may still be waiting
            del it, loader
    finally:
        shared.close()


@needs_proc
def test_a_thousand_loaders_leave_no_thread_descriptor_or_memory_behind(ndf_path):
    """Loaders over n = 100,000 rows (enough to compute the next epoch's order ahead on a
    thread): threads and descriptors are back where they were after 1,000, and what
    NumPy and Python allocated for 200 more is all freed."""
    churn_loaders(ndf_path, 100, 100_000)  # warm up: imports, caches, allocator pools
    before = resources()
    churn_loaders(ndf_path, 1000, 100_000, seed=1)
    after = resources()
    assert after["threads"] == before["threads"], (before, after)
    assert after["fds"] == before["fds"], (before, after)
    # Memory by tracemalloc, not RSS (which counts what the allocator keeps in the arenas
    # of short-lived threads): one leaked order of 100,000 rows alone is 400 KB.
    tracemalloc.start()
    try:
        churn_loaders(ndf_path, 200, 100_000, seed=2)
        settle()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 256 << 10, f"{held} bytes still held after 200 loaders were dropped"


@needs_proc
def test_a_hundred_epochs_leave_no_thread_descriptor_or_memory_behind(ndf_path, request):
    """One loader over the .ndf file, 100 shuffled epochs (iter and next_into): the
    threads, descriptors and memory held after epoch 100 are those after epoch 10."""
    request.addfinalizer(tracemalloc.stop)
    with open_ndf(ndf_path) as f:
        loader = DataLoader(f, batch_size=4096, seed=5)
        bx, by = np.empty((4096, 3)), np.empty((4096, 1))
        marks = {}
        for e in range(100):
            if e % 2:
                for _ in loader:
                    pass
            else:
                while loader.next_into(bx, by):
                    pass
                loader.reset()
            if e + 1 == 5:
                tracemalloc.start()  # from here on, what is allocated and kept is seen
            if e + 1 in (10, 100):
                marks[e + 1] = resources()
        loader.close()
    a, b = marks[10], marks[100]
    assert b["threads"] == a["threads"] and b["fds"] == a["fds"], marks
    # Both hold the same things (the epoch's and the next epoch's orders, 400 KB each):
    # 90 epochs that each kept one order would hold 36 MB more.
    assert b["held"] - a["held"] < 256 << 10, marks
