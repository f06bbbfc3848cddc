"""Prefetch: batches prepared on a background thread, same batches, clean shutdown."""

import gc
import threading
import time

import numpy as np
import pytest
from helpers import rows_of, wait_until_prefetched

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


@pytest.mark.parametrize("depth", [1, 5])  # depth 2: the law matrix
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


def test_a_batch_prefetched_before_set_epoch_is_not_handed_out_after_it():
    """Batches a prefetching iterator prepared before set_epoch() belong to the old epoch:
    the iterator is stale, and the new epoch is whole."""
    x, y = ids(100)
    loader = DataLoader((x, y), 10, seed=1, prefetch=2)
    it = iter(loader)
    next(it)
    wait_until_prefetched(it)
    loader.set_epoch(1)
    with pytest.raises(RuntimeError, match="stale"):
        next(it)
    assert sorted(r for b in rows_of(loader) for r in b) == list(range(100))


def test_closing_an_iterator_with_one_batch_ready_gives_it_back():
    """The last batch prepared and not received (the only one left) goes back to the
    loader when the iterator closes, and next_into hands it out next."""
    x, y = ids(100)
    loader = DataLoader((x, y), 10, shuffle=False, prefetch=1)
    it = iter(loader)
    for _ in range(9):
        next(it)
    wait_until_prefetched(it)
    it.close()
    out_x, out_y = np.empty((10, 3)), np.empty((10, 1))
    assert loader.next_into(out_x, out_y) == 10
    assert out_x[:, 0].tolist() == list(range(90, 100))
    assert loader.next_into(out_x, out_y) == 0


def test_a_stale_iterator_reaching_its_end_does_not_end_the_new_epoch():
    """An iterator whose thread saw the end of epoch 0, drained after set_epoch(1): its
    end is its own epoch's, so epoch 1 goes on (no early ledger check) and stays whole."""
    x, y = ids(20)
    loader = DataLoader((x, y), 10, shuffle=False, prefetch=2)
    it0 = iter(loader)
    next(it0)
    next(it0)
    wait_until_prefetched(it0)  # its thread has claimed the end and stopped
    loader.set_epoch(1)
    out_x, out_y = np.empty((10, 3)), np.empty((10, 1))
    assert loader.next_into(out_x, out_y) == 10
    assert next(it0, None) is None
    assert loader.next_into(out_x, out_y) == 10 and loader.next_into(out_x, out_y) == 0
    assert out_x[:, 0].tolist() == list(range(10, 20))


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
    x, y = ids(100_000)  # more than the thread can read ahead: 3 + 2 groups of 64 batches
    save_ndf(path, (x, y))
    f = open_ndf(path)
    # File order: batches are read with positional reads, which fail cleanly on a
    # truncated file whenever it happens (copies from the memory map, used for
    # scattered rows, are guarded by a read lease: tests/ndf/test_guard.py).
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


def test_hints_run_ahead_of_the_reader_by_at_most_ahead_keys():
    """Hinter announces keys in order, never more than ``ahead`` past those taken."""
    from exactbatch.prefetch import Hinter

    taken = 0
    seen = []  # (key, keys taken when it was hinted)
    lock = threading.Lock()
    hinted_all = threading.Event()

    def hint(k):
        with lock:
            seen.append((k, taken))
        if k == 49:
            hinted_all.set()

    hints = Hinter(hint, iter(range(50)), 4)
    for _ in range(50):
        deadline = time.monotonic() + 10
        while len(seen) < min(50, taken + 4) and time.monotonic() < deadline:
            time.sleep(0.001)
        with lock:
            taken += 1
        hints.taken()
    assert hinted_all.wait(10)
    hints.close()
    assert [k for k, _ in seen] == list(range(50))
    assert all(k < t + 4 for k, t in seen)  # at most 4 ahead of the keys taken


def test_hinter_close_stops_a_hinter_waiting_for_room_and_a_failed_hint_stops_hints():
    """close() ends the thread while it waits for the reader; a hint that raises
    OSError ends the hints quietly (they only advise)."""
    from exactbatch.prefetch import Hinter

    seen = []
    hints = Hinter(seen.append, iter(range(100)), 3)
    deadline = time.monotonic() + 10
    while len(seen) < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    hints.close()  # returns: the thread was waiting for room, and stops
    assert seen == [0, 1, 2]
    assert not any(t.name == "exactbatch-hints" for t in threading.enumerate())

    calls = []

    def failing(k):
        calls.append(k)
        raise OSError("bad file descriptor")

    hints = Hinter(failing, iter(range(100)), 50)
    for _ in range(10):
        hints.taken()
    hints.close()
    assert calls == [0]


def test_a_stale_iterators_prefetch_thread_does_not_begin_the_epoch_the_loader_moved_to():
    """set_epoch(5) while a prefetching iterator's thread reads its first group: the
    thread's next claim finds the iterator stale and stops, so the next iter() begins
    epoch 5 (had the thread begun it, iter() would begin epoch 6)."""
    from laws import GateReader, wrap_reader

    x, y = ids(1000, d=1)
    loader = DataLoader((x, y), 10, seed=1, prefetch=2)
    gate = wrap_reader(loader, GateReader)
    gate.arm()
    it = iter(loader)
    assert gate.entered.wait(60)  # the thread reads its first group
    loader.set_epoch(5)
    gate.release(False)
    deadline = time.monotonic() + 60
    while not it._prefetcher.full():  # that group, then the thread's next claim's outcome
        assert time.monotonic() < deadline
        time.sleep(0.01)
    want = DataLoader((x, y), 10, seed=1)
    want.set_epoch(5)
    assert [xb[:, 0].tolist() for xb, _ in loader] == [xb[:, 0].tolist() for xb, _ in want]
    with pytest.raises(RuntimeError, match="stale"):
        next(it)


def test_a_stale_prefetch_thread_over_a_stream_not_read_yet_does_not_begin_the_next_epoch():
    """The same for a stream whose widths were unknown when iter() was called (its thread
    sizes each group once it has read): once the loader has moved to epoch 5, the
    thread's next claim finds the iterator stale, and the next iter() begins epoch 5."""
    x, _ = ids(1000, d=1)
    parts = [x[a : a + 70] for a in range(0, 1000, 70)]

    def stream() -> DataLoader:
        return DataLoader(lambda: iter(parts), 10, seed=1, prefetch=2, total_size=1000)

    def until_full(it):
        deadline = time.monotonic() + 60
        while not it._prefetcher.full():
            assert time.monotonic() < deadline
            time.sleep(0.01)

    loader = stream()
    it = iter(loader)
    until_full(it)  # two groups read; the thread waits for room
    loader.set_epoch(5)
    with pytest.raises(RuntimeError, match="stale"):
        next(it)  # takes a group from the thread, which claims again
    until_full(it)  # what that claim gave (the stale error)
    want = stream()
    want.set_epoch(5)
    assert [xb[:, 0].tolist() for xb, _ in loader] == [xb[:, 0].tolist() for xb, _ in want]


# -- the threads themselves (exactbatch.prefetch) ----------------------------------------


def _until(done, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.001)


def _threads(name):
    return [t for t in threading.enumerate() if t.name == name]


def test_each_helper_thread_is_a_named_daemon():
    """Named, so that a stack dump says whose thread it is; daemons, so that the
    interpreter's exit waits for none of them."""
    from exactbatch.prefetch import Hinter, Prefetcher, ReadAhead

    go = threading.Event()
    before = {n: len(_threads(n)) for n in ("exactbatch-prefetch", "exactbatch-read")}
    p = Prefetcher(lambda: go.wait(10) and None, 2)
    r = ReadAhead(lambda k: go.wait(10), range(3), 2)
    h = Hinter(lambda k: go.wait(10), iter(range(3)), 1)
    try:
        assert p._thread.name == "exactbatch-prefetch" and p._thread.daemon is True
        assert [(t.name, t.daemon) for t in r._threads] == [("exactbatch-read", True)] * 2
        assert h._thread.name == "exactbatch-hints" and h._thread.daemon is True
        assert len(_threads("exactbatch-read")) == before["exactbatch-read"] + 2
    finally:
        go.set()
        p.close()
        r.close()
        h.close()


def test_a_prefetcher_waits_for_room_however_long_the_consumer_takes():
    """A producer ahead by ``depth`` waits for room, polling its stop flag, for as long as
    the consumer takes: it never gives up."""
    from exactbatch.prefetch import Prefetcher

    made = iter(range(1, 4))
    p = Prefetcher(lambda: next(made, None), 1)
    _until(p.full)
    time.sleep(0.2)  # several polls without room
    assert p.join(0.01) is False  # still waiting, not ended
    assert [p.get(), p.get(), p.get(), p.get()] == [1, 2, 3, None]
    assert p.join(10) is True


def test_a_prefetcher_closed_returns_what_nobody_took_in_order_once():
    """close() returns the results ready and the one made while the thread waited for
    room, in order; a second close() nothing more. join() on the prefetch thread itself
    is False at once."""
    from exactbatch.prefetch import Prefetcher

    made, joined, box = [], [], []
    go = threading.Event()

    def produce():
        go.wait(10)
        if not made:
            joined.append(box[0].join(1))
        made.append(len(made) + 1)
        return made[-1]

    box.append(Prefetcher(produce, 1))
    p = box[0]
    go.set()
    _until(lambda: len(made) >= 2)  # 1 ready, 2 made and waiting for room
    assert p.close() == [1, 2]
    assert p.close() == []
    assert joined == [False]


def test_cores_without_an_affinity_is_the_cpu_count_or_one(monkeypatch):
    import os

    from exactbatch import prefetch

    def no_affinity(pid):
        raise OSError("not here")

    monkeypatch.setattr(os, "sched_getaffinity", no_affinity, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: None)
    assert prefetch.cores() == 1
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert prefetch.cores() == 6


def test_a_read_ahead_stopped_begins_no_read_and_closed_waits_for_the_one_under_way():
    from exactbatch.prefetch import ReadAhead

    go = threading.Event()
    seen, done, queued = [], [], []

    def read(k):
        seen.append(k)
        if k == 0:
            go.wait(10)
            time.sleep(0.2)
            done.append(k)
        return k

    r = ReadAhead(read, range(5), 1, taken=lambda: queued.append(1))
    _until(lambda: seen == [0])
    got = []
    getter = threading.Thread(target=lambda: got.append(r.get()))
    getter.start()
    _until(lambda: len(queued) == 2)  # key 1 queued behind the read of key 0
    r.stop()
    go.set()
    r.close()
    assert done == [0]  # close() waited for the read under way
    getter.join(10)
    assert got == [0] and seen == [0]  # key 1, queued before the stop, never read
