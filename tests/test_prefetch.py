"""Prefetch: batches prepared on a background thread, same batches, clean shutdown."""

import gc
import threading
import time

import numpy as np
import pytest

from exactbatch import DataLoader, NdfError, open_ndf, save_ndf


def ids(n, d=3):
    x = np.zeros((n, d))
    x[:, 0] = np.arange(n)
    return x, np.arange(n, dtype=np.float64)


def prefetch_threads():
    return [t for t in threading.enumerate() if t.name == "exactbatch-prefetch"]


def wait_for_no_prefetch_threads(timeout=5.0):
    deadline = time.monotonic() + timeout
    while prefetch_threads() and time.monotonic() < deadline:
        time.sleep(0.01)
    return prefetch_threads()


@pytest.mark.parametrize("depth", [1, 2, 5])
@pytest.mark.parametrize("drop_last", [False, True])
def test_prefetch_gives_the_same_batches(depth, drop_last):
    """A prefetching loader hands out exactly the batches of one that does not."""
    x, y = ids(1003)
    plain = DataLoader((x, y), 64, seed=4, drop_last=drop_last, prefetch=0)
    ahead = DataLoader((x, y), 64, seed=4, drop_last=drop_last, prefetch=depth)
    for _ in range(2):
        a, b = list(plain), list(ahead)
        assert len(a) == len(b) == len(plain)
        for (xa, ya), (xb, yb) in zip(a, b, strict=True):
            assert np.array_equal(xa, xb) and np.array_equal(ya, yb)


def test_prefetched_batches_are_not_counted_as_consumed():
    """state_dict counts batches handed out, not those prepared ahead."""
    x, y = ids(1000)
    loader = DataLoader((x, y), 100, seed=1, prefetch=4)
    it = iter(loader)
    taken = [next(it)[0][:, 0] for _ in range(3)]
    time.sleep(0.05)  # let the thread run ahead
    state = loader.state_dict()
    assert state["batches_done"] == 3 and loader.last_rows == 100
    resumed = DataLoader((x, y), 100, seed=1, prefetch=0)
    resumed.load_state_dict(state)
    rest = [xb[:, 0] for xb, _ in resumed]
    assert np.array_equal(np.sort(np.concatenate(taken + rest)), np.arange(1000))


def test_stopping_early_stops_the_thread():
    """Dropping or closing an iterator mid-epoch ends its prefetch thread; none pile up."""
    x, y = ids(100_000)
    loader = DataLoader((x, y), 10, prefetch=2)
    for _ in range(50):
        it = iter(loader)
        next(it)
        del it
    gc.collect()
    assert wait_for_no_prefetch_threads() == []
    it = iter(loader)
    next(it)
    it.close()
    assert wait_for_no_prefetch_threads() == []


def test_a_new_epoch_stops_the_old_iterator():
    """iter() again while a prefetching iterator is open: the old one is stale."""
    x, y = ids(1000)
    loader = DataLoader((x, y), 10, prefetch=2)
    old = iter(loader)
    next(old)
    new = iter(loader)
    assert len(list(new)) == 100
    with pytest.raises(RuntimeError, match="stale"):
        for _ in old:
            pass
    del old
    gc.collect()
    assert wait_for_no_prefetch_threads() == []


def test_reader_errors_reach_the_consumer(tmp_path):
    """An error while preparing a batch (a truncated .ndf) is raised in the consumer."""
    path = tmp_path / "d.ndf"
    x, y = ids(10_000)
    save_ndf(path, (x, y))
    f = open_ndf(path)
    # File order: batches are read with positional reads, which fail cleanly on a
    # truncated file whenever it happens (copies from the memory map, used for
    # scattered rows, are guarded by a read lease: tests/test_ndf_lease.py).
    loader = DataLoader(f, 100, prefetch=3, shuffle=False)
    it = iter(loader)
    next(it)
    with open(path, "r+b") as fh:
        fh.truncate(5000)
    with pytest.raises(NdfError, match="d.ndf"):
        for _ in it:
            pass
    assert wait_for_no_prefetch_threads() == []


def test_bad_prefetch_is_refused():
    """prefetch must be an int >= 0."""
    x, y = ids(10)
    with pytest.raises(ValueError, match="prefetch"):
        DataLoader((x, y), 2, prefetch=-1)
    with pytest.raises(TypeError, match="prefetch"):
        DataLoader((x, y), 2, prefetch=1.5)
