"""Chunks read ahead at once (prefetch.ReadAhead, sources/passes.py): the same batches
whatever the depth, the chunks handed on in order, and never more than ``depth`` of
them read ahead of the batching (Parquet row groups decoded on every core, within the
buffer's memory bound)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from doubles import ChunksDouble
from helpers import make_data, write_parquet

from exactbatch import DataLoader, parquet_source
from exactbatch.feeds import streamed
from exactbatch.prefetch import ReadAhead
from exactbatch.sources import passes
from exactbatch.sources.chunks import WholeRows
from exactbatch.sources.passes import AHEAD_SHARE, read_depth

WAIT = 30  # seconds: a read that never comes fails the test instead of hanging it


@pytest.mark.parametrize("depth", [1, 2, 4])
def test_read_ahead_hands_results_in_key_order_and_reads_depth_keys_at_once(depth):
    """The first ``depth`` reads run at once (each waits for the others at a barrier,
    which breaks unless all are under way), later keys may end first, and the results
    come in the keys' order."""
    barrier = threading.Barrier(depth, timeout=WAIT)

    def read(k):
        if k < depth:
            barrier.wait()
        return k * k

    ahead = ReadAhead(read, range(13), depth)
    try:
        got = [ahead.get() for _ in range(13)]
        assert got == [k * k for k in range(13)]
        assert ahead.get() is None
    finally:
        ahead.close()


@pytest.mark.parametrize("depth", [1, 3])
def test_read_ahead_never_reads_more_than_depth_keys_ahead_of_the_reader(depth):
    taken, ahead_of = [0], []
    lock = threading.Lock()

    def read(k):
        with lock:
            ahead_of.append(k - taken[0])  # keys past those the reader has
        return k

    ahead = ReadAhead(read, range(20), depth)
    try:
        for k in range(20):
            assert ahead.get() == k
            with lock:
                taken[0] += 1
    finally:
        ahead.close()
    assert max(ahead_of) == depth


def test_a_failed_read_is_raised_where_its_result_was_due():
    def read(k):
        if k == 4:
            raise OSError("injected: key 4")
        return k

    ahead = ReadAhead(read, range(10), 3)
    try:
        assert [ahead.get() for _ in range(4)] == [0, 1, 2, 3]
        with pytest.raises(OSError, match="key 4"):
            ahead.get()
    finally:
        ahead.close()


def test_the_depth_is_a_share_of_the_buffer_at_most_one_a_core():
    assert read_depth(None, 100) == 1  # no buffer (an unshuffled pass)
    assert read_depth(10_000, None) == 1  # no chunk size
    assert read_depth(100, 100, threads=8) == 1  # the buffer holds one chunk
    fit = 10_000 // (AHEAD_SHARE * 100)
    assert read_depth(10_000, 100, threads=64) == fit
    assert read_depth(10_000, 100, threads=3) == 3
    assert read_depth(10_000, 100, threads=1) == 1


class CountedChunks(ChunksDouble):
    """A chunk source whose chunks are decoded for the buffer (``open_chunk``), each an
    object counted while alive: ``most`` is the most alive at once."""

    def __init__(self, x, y, sizes):
        super().__init__(x, y, sizes)
        self.d, self.l = x.shape[1], y.shape[1]
        self.alive = self.most = 0
        self.lock = threading.Lock()

    def open_chunk(self, i: int):
        a, z = self.starts[i], self.starts[i + 1]
        return _Counted(self, np.hstack((self.x[a:z], self.y[a:z])), int(a))


class _Count:
    """Counts one chunk of ``owner`` while alive."""

    def __init__(self, owner: CountedChunks):
        self.owner = owner
        with owner.lock:
            owner.alive += 1
            owner.most = max(owner.most, owner.alive)

    def __del__(self):
        with self.owner.lock:
            self.owner.alive -= 1


class _Counted:
    def __init__(self, owner: CountedChunks, rows: np.ndarray, first: int):
        self.rows, self.first, self.count = rows, first, _Count(owner)

    def read_rows_into(self, row: int, out: np.ndarray) -> None:
        out[...] = self.rows[row - self.first : row - self.first + len(out)]


class CountedRows(WholeRows):
    __slots__ = ("count",)


def _batches(loader, epochs=2):
    out = []
    for e in range(epochs):
        loader.set_epoch(e)
        out += [(xb.copy(), yb.copy()) for xb, yb in loader]
    return out


@pytest.mark.parametrize("buffer_size", [40, 160], ids=["one-piece", "halves"])
@pytest.mark.parametrize("depth", [2, 4])
def test_chunks_read_ahead_at_once_give_the_same_batches_and_stay_bounded(
    monkeypatch, depth, buffer_size
):
    """Depth 1 (one chunk ahead) and ``depth`` chunks read at once hand out the same
    batches, and no more than ``depth + 1`` decoded chunks are ever alive (those read
    ahead, and the one the buffer copies from), a chunk laid out as whole rows by its
    reading thread counted once."""
    x, y = make_data(400)
    sizes = [10] * 40
    loaders = {}
    for k in (1, depth):
        src = CountedChunks(x, y, sizes)
        src.n_rows = 400

        def counted_laid_out(chunk, first, rows, width, lay=passes.laid_out):
            """Rows laid out by a reading thread (depth > 1): the same chunk, counted once."""
            whole = CountedRows(lay(chunk, first, rows, width).whole, first)
            whole.count = chunk.count
            return whole

        monkeypatch.setattr(passes, "laid_out", counted_laid_out)
        monkeypatch.setattr(streamed, "read_depth", lambda *args, k=k: k)
        loaders[k] = (src, _batches(DataLoader(src, 7, seed=3, buffer_size=buffer_size)))
    (one, want), (many, got) = loaders[1], loaders[depth]
    assert len(got) == len(want) > 0
    for (xa, ya), (xb, yb) in zip(want, got, strict=True):
        assert np.array_equal(xa, xb) and np.array_equal(ya, yb)
    assert one.most == 2 and 2 <= many.most <= depth + 1


@pytest.mark.parametrize("shuffle", [False, True])
def test_parquet_read_ahead_at_once_gives_the_same_batches(tmp_path, monkeypatch, shuffle):
    write_parquet(tmp_path / "a.parquet", [13, 7, 20, 0, 11, 9, 30], 0)
    src = parquet_source(tmp_path / "a.parquet", labels=["y0"])
    got = {}
    for k in (1, 3):
        monkeypatch.setattr(streamed, "read_depth", lambda *args, k=k: k)
        loader = DataLoader(src, 5, shuffle=shuffle, seed=1, buffer_size=30)
        got[k] = _batches(loader)
    for (xa, ya), (xb, yb) in zip(got[1], got[3], strict=True):
        assert np.array_equal(xa, xb) and np.array_equal(ya, yb)
