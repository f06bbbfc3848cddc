"""The random-access feed (exactbatch.feeds.random_access): its whole epoch order is
computed in the background, on a daemon thread of its own, errors kept for whoever
asks for the result."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from exactbatch import DataLoader
from exactbatch.batching.random_access_epoch import BlockedOrder
from exactbatch.feeds import random_access
from exactbatch.order import EpochBijection


def test_the_whole_order_is_computed_on_a_named_daemon_thread():
    seen = {}

    def compute():
        me = threading.current_thread()
        seen.update(name=me.name, daemon=me.daemon, main=me is threading.main_thread())
        return 42

    assert random_access._in_background(compute).result(timeout=60) == 42
    assert seen == {"name": "exactbatch-order", "daemon": True, "main": False}


@pytest.mark.parametrize("run", ["_in_background", "_at_once"])
def test_an_error_computing_the_whole_order_waits_in_the_future(run):
    def compute():
        raise MemoryError("no room for the whole order")

    fut = getattr(random_access, run)(compute)
    with pytest.raises(MemoryError, match="no room for the whole order"):
        fut.result(timeout=60)


def test_a_shuffled_epoch_is_sliced_from_the_whole_order_computed_ahead(monkeypatch):
    """For a moderate n, the whole order of the epoch begun and of the next one are
    computed in the background; once ready, batches are sliced from it (no bijection
    call per batch), in the bijection's order."""
    loader = DataLoader(np.arange(1000.0)[:, None], 10, seed=3)
    it = iter(loader)
    wholes = loader._feed._wholes
    assert sorted(wholes) == [(3, 0, 0), (3, 1, 0)]  # (seed, epoch, shard)
    for fut in wholes.values():
        fut.result(timeout=60)
    calls = []
    real = BlockedOrder.mapped
    monkeypatch.setattr(BlockedOrder, "mapped", lambda o, a, z: calls.append(a) or real(o, a, z))
    rows = [int(r) for xb, _ in it for r in xb[:, 0]]
    assert calls == []
    assert rows == EpochBijection(1000, seed=3, epoch=0, shard=0).rows(0, 1000).tolist()


@pytest.mark.parametrize("extra", [0, 1])
def test_a_small_epochs_whole_order_is_computed_at_once_without_a_thread(monkeypatch, extra):
    """Up to _AT_ONCE_ROWS rows, the whole order of the epoch begun and of the next one
    are computed where they are asked for, done before the first batch, no thread
    started (its start costs more than the order); one row more, each on a thread of
    its own. The rows are the bijection's either way."""
    n = random_access._AT_ONCE_ROWS + extra
    started = []
    real = random_access._in_background
    monkeypatch.setattr(random_access, "_in_background", lambda c: started.append(c) or real(c))
    loader = DataLoader(np.arange(float(n))[:, None], 64, seed=3)
    it = iter(loader)
    wholes = loader._feed._wholes
    assert sorted(wholes) == [(3, 0, 0), (3, 1, 0)]
    assert len(started) == 2 * extra
    if not extra:
        assert all(fut.done() for fut in wholes.values())
    rows = [int(r) for xb, _ in it for r in xb[:, 0]]
    assert rows == EpochBijection(n, seed=3, epoch=0, shard=0).rows(0, n).tolist()


@pytest.mark.parametrize(("d", "l"), [(16, 0), (12, 4), (1, 15)])
def test_an_ndf_loader_prefetches_by_default_from_batches_of_256_kib(tmp_path, d, l):  # noqa: E741
    """Default prefetch over a local .ndf: 2 once a batch is 256 KiB (batch_size x 8 bytes
    x (d + l) columns), else 0: the threshold counts every column of a row, x and y."""
    from exactbatch import open_ndf, save_ndf

    path = tmp_path / "w.ndf"
    x, y = np.zeros((4, d)), np.zeros((4, l))
    save_ndf(path, (x, y))
    rows = (256 << 10) // (8 * (d + l))  # 2048: exactly 256 KiB a batch
    with open_ndf(path) as f:
        assert DataLoader(f, rows).prefetch == 2
        assert DataLoader(f, rows - 1).prefetch == 0


@pytest.mark.parametrize("outcome", ["done", "failed"])
def test_blocks_serve_batches_until_the_whole_order_is_done(monkeypatch, outcome):
    """Until the whole order is computed, batches come from blocks; once it is, from it,
    with no call to the Future per batch; had it failed, blocks go on. The rows are the
    bijection's either way."""
    from concurrent.futures import Future

    bijection = EpochBijection(1000, seed=3, epoch=0, shard=0)
    want = bijection.rows(0, 1000)
    fut = Future()
    order = BlockedOrder(bijection, 0, np.int64, 10)
    order.use_whole(fut)
    assert order.take(0, 10)[0].tolist() == want[:10].tolist()
    whole = BlockedOrder(bijection, 0, np.int64, 10).mapped_all(np.empty(1000, np.int64))
    if outcome == "done":
        fut.set_result(whole)
    else:
        fut.set_exception(MemoryError("no room for the whole order"))
    monkeypatch.setattr(Future, "done", lambda self: pytest.fail("a Future call per batch"))
    for a in range(10, 1000, 10):
        rows, _ = order.take(a, a + 10)
        assert rows.tolist() == want[a : a + 10].tolist()
        assert (rows.base is whole[0]) == (outcome == "done")


def test_a_feeds_fingerprint_names_its_source_and_subset_open_or_closed():
    """Taken while open: the source's kind (a RowSource's own name over its reader's),
    a sample of its rows and the subset served; made once. Taken first after close:
    the sizes and the subset only (no read)."""
    from doubles import RowsDouble

    from exactbatch.order.subset import subset_digest

    x, y = np.arange(40.0).reshape(20, 2), np.zeros((20, 1))
    ids = np.arange(3, 13)
    feed = DataLoader(RowsDouble(x, y), 4, rows=ids)._feed
    fp = feed.fingerprint()
    assert (fp["kind"], fp["n"], fp["d"], fp["l"]) == ("RowsDouble", 20, 2, 1)
    assert fp["rows"] == {"count": 10, "digest": subset_digest(ids)}
    assert "sample" in fp and feed.fingerprint() is fp
    closed = DataLoader(x, 4, rows=ids)
    closed.close()
    fp = closed._feed.fingerprint()
    assert fp == {
        "kind": None,
        "n": 20,
        "d": 2,
        "l": 0,
        "names": None,
        "rows": {"count": 10, "digest": subset_digest(ids)},
    }
