"""The shuffle buffer in two halves, one filled on a helper thread while the other's
rows are handed out: used for chunk-indexed sources (Parquet, ndf_blocks) whose size
is known and larger than the buffer, when the buffer holds at least 16 chunks.

Checked here: every row exactly once; the order a pure function of (seed, epoch),
whatever the threads' timing; rows mix within windows of half the buffer; a source
error surfaces in the consumer; an epoch closed early stops the helper and does not
hand its half-written memory to the next epoch; a stream that fits in the buffer is
still one full shuffle.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import exactbatch.batching.buffer as buffer_module
from exactbatch import DataLoader, NdfError, ndf_blocks, open_ndf, save_ndf


@pytest.fixture(scope="module")
def path(tmp_path_factory):
    p = tmp_path_factory.mktemp("ahead") / "rows.ndf"
    i = np.arange(3000, dtype=np.float64)
    save_ndf(p, (np.column_stack([i, 2 * i]), -i))
    return p


def ids(loader) -> np.ndarray:
    out = []
    for xb, yb in loader:
        assert np.array_equal(xb[:, 1], 2 * xb[:, 0]) and np.array_equal(yb[:, 0], -xb[:, 0])
        out.append(xb[:, 0])
    return np.concatenate(out).astype(np.int64) if out else np.empty(0, np.int64)


def test_the_helper_path_is_the_one_taken(path, monkeypatch):
    used = []
    real = buffer_module.shuffle_halves

    def counted(*a):
        used.append(1)
        return real(*a)

    monkeypatch.setattr(buffer_module, "shuffle_halves", counted)
    with open_ndf(path) as f:
        got = ids(DataLoader(ndf_blocks(f, 25), 64, buffer_size=500, seed=1))
        ids(DataLoader(ndf_blocks(f, 40), 64, buffer_size=500, seed=1))  # 12.5 blocks: no
    assert used == [1] and np.array_equal(np.sort(got), np.arange(3000))


@settings(max_examples=25, deadline=None)
@given(
    block=st.integers(5, 150),
    batch=st.integers(1, 400),
    extra=st.integers(0, 600),
    drop_last=st.booleans(),
    seed=st.integers(0, 50),
)
def test_every_row_once_and_the_order_is_a_function_of_the_seed(
    path, block, batch, extra, drop_last, seed
):
    buffer = min(2999, 16 * block + extra)  # at least 16 blocks, less than the file
    with open_ndf(path) as f:
        loader = DataLoader(
            ndf_blocks(f, block), batch, buffer_size=buffer, seed=seed, drop_last=drop_last
        )
        first = ids(loader)
        loader.set_epoch(0)
        again = ids(loader)  # epoch 0 again: the same order, whatever the threads did
    assert np.array_equal(first, again)
    keep = 3000 // batch * batch if drop_last else 3000
    assert len(first) == keep and len(np.unique(first)) == keep


def test_rows_mix_within_windows_of_half_the_buffer(path):
    """Blocks of 10 rows, a buffer of 1000: the first 500 rows handed out are all the
    rows of the epoch's first 50 blocks (half the buffer), shuffled together."""
    with open_ndf(path) as f:
        loader = DataLoader(ndf_blocks(f, 10), 100, buffer_size=1000, seed=0)
        got = ids(loader)
    blocks = np.unique(got[:500] // 10)
    assert len(blocks) == 50
    whole = np.sort((blocks[:, None] * 10 + np.arange(10)).ravel())
    assert np.array_equal(np.sort(got[:500]), whole)
    assert len(np.unique(got[:100] // 10)) > 30  # a batch draws from across the window


def test_a_stream_that_fits_is_one_full_shuffle(path, monkeypatch):
    calls = []
    monkeypatch.setattr(buffer_module, "shuffle_halves", lambda *a: calls.append(1))
    with open_ndf(path) as f:
        got = ids(DataLoader(ndf_blocks(f, 100), 64, buffer_size=3000, seed=2))
    assert calls == [] and np.array_equal(np.sort(got), np.arange(3000))
    assert np.abs(got[:300] - 1500).mean() > 500  # the first batches span the whole file


def _prefetch_threads() -> int:
    return sum(t.name.startswith("exactbatch-prefetch") for t in threading.enumerate())


def _settled(before: int) -> int:
    deadline = time.monotonic() + 10
    while _prefetch_threads() > before and time.monotonic() < deadline:
        time.sleep(0.01)
    return _prefetch_threads()


def test_an_epoch_left_early_stops_its_helpers(path):
    """A new epoch (or closing the loader) ends the one left mid-way, and its helper
    threads with it; the next epoch is intact (it does not share the old halves)."""
    before = _prefetch_threads()
    with open_ndf(path) as f:
        loader = DataLoader(ndf_blocks(f, 25), 32, buffer_size=600, seed=3)
        for _ in range(3):
            it = iter(loader)
            next(it)
        got = ids(loader)  # a new epoch: the one left mid-way is closed
        assert np.array_equal(np.sort(got), np.arange(3000))
        assert _settled(before) == before
        it = iter(loader)
        next(it)
        loader.close()
        assert _settled(before) == before


def test_a_read_error_while_filling_reaches_the_consumer(tmp_path):
    p = tmp_path / "cut.ndf"
    i = np.arange(3000, dtype=np.float64)
    save_ndf(p, (np.column_stack([i, 2 * i]), -i))
    f = open_ndf(p)
    loader = DataLoader(ndf_blocks(f, 20), 50, buffer_size=400, seed=4)
    it = iter(loader)
    next(it)
    with open(p, "r+b") as g:
        g.truncate(28 + 24 * 1000)
    with pytest.raises(NdfError, match="changed while open"):
        for _ in it:
            pass
