"""iter()'s common call in one (loader/iter_step.py): the compiled core's ``IterStep``
(EpochIterator's base where the core is in use: ``next()`` runs it) and its pure twin
``IterStep.__next__`` hand out the same batches and leave the same states and counts,
bit for bit, as the iterator's path in Python alone (every batch through its
``_hand``); each hands out only what it is for (a batch read with its group, or a
whole order's batch claimed unread, read into a new pair) and leaves the rest, popped,
to that path; a read that raises in it leaves the batch next; threads sharing one
iterator hand out every row once."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch import DataLoader, kernels, open_ndf_dataset
from exactbatch.feeds import random_access
from exactbatch.loader import epoch_iterator
from exactbatch.loader.epoch_iterator import EpochIterator
from exactbatch.loader.iter_step import IterStep
from tests.helpers import make_data, state_json, stats_counts, write_ndf_dataset
from tests.laws import run_threads

COMPILED = kernels.backend() == "compiled"
needs_core = pytest.mark.skipif(
    not COMPILED, reason="the compiled core is not in use (not built, or EXACTBATCH_PURE=1)"
)


@pytest.fixture
def whole(monkeypatch):
    """Every epoch's whole order made at once, not on a thread: each batch then a job of
    it (the step's), whatever the timing (on a thread, batches claimed before it is done
    are blocks, which the step leaves to Python)."""
    monkeypatch.setattr(random_access, "_AT_ONCE_ROWS", 1 << 20)


@pytest.fixture
def lazy(monkeypatch):
    """Batches too large for groups (of any size here): claimed unread, each read as it
    is handed out (the step's take_run)."""
    monkeypatch.setattr(epoch_iterator, "_GROUP_BYTES", 1)


def _compiled_next(it):
    """``next(it)``: the compiled step where the core is in use, else the twin."""
    return next(it)


def _twin_next(it):
    """The pure twin's step, on any iterator (its fields are the compiled step's too)."""
    return IterStep.__next__(it)


def _python_next(it):
    """The iterator's path in Python alone: every batch popped goes to its ``_hand``."""
    group = it._current
    try:
        item = group.queue.popleft()
    except IndexError:
        return it._waited()
    return it._hand(group, item)


STEPS = (_compiled_next, _twin_next, _python_next)


def _batches(it, step):
    """The batches of ``it``, each handed out by ``step``."""
    while True:
        try:
            yield step(it)
        except StopIteration:
            return


def _fallbacks(monkeypatch) -> list[object]:
    """The cursor of each call of ``EpochIterator._hand`` (the path in Python): whose
    iterator handed a batch to it."""
    got: list[object] = []
    hand = EpochIterator._hand

    def counted(self, group, item):
        got.append(self._cursor)
        return hand(self, group, item)

    monkeypatch.setattr(EpochIterator, "_hand", counted)
    return got


def _same_run(loaders: list[DataLoader], epochs: int = 2) -> None:
    """Each loader iterated by its step (STEPS, in order): the same batches, bit for bit,
    the same states (mid-epoch and at each end) and the same counts."""
    for epoch in range(epochs):
        its = [iter(dl) for dl in loaders]
        runs = [_batches(it, step) for it, step in zip(its, STEPS, strict=True)]
        for k, got in enumerate(zip(*runs, strict=True)):
            for b in got[1:]:
                assert len(b) == len(got[0]), (epoch, k)
                for a, c in zip(got[0], b, strict=True):
                    assert a.dtype == c.dtype and a.tobytes() == c.tobytes(), (epoch, k)
            if k % 5 == 2:
                states = [state_json(dl) for dl in loaders]
                assert states[0] == states[1] == states[2], (epoch, k)
                assert len({dl.last_rows for dl in loaders}) == 1
        states = [state_json(dl) for dl in loaders]
        assert states[0] == states[1] == states[2], epoch
        counts = [stats_counts(dl.stats()) for dl in loaders]  # (not the times)
        assert counts[0] == counts[1] == counts[2] and counts[0]


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_batches_read_with_their_group_are_handed_out_alike(shuffle, drop_last, whole, monkeypatch):
    loaders = [
        DataLoader(make_data(1000), 16, seed=5, shuffle=shuffle, drop_last=drop_last) for _ in STEPS
    ]
    fallbacks = _fallbacks(monkeypatch)
    _same_run(loaders)
    # the path in Python alone hands its 2 epochs of 63 (or 62) batches to _hand; the
    # steps only each epoch's first (of its one group: the iterator's _next_group's)
    got = [fallbacks.count(dl._cursor) for dl in loaders]
    assert got == [2, 2, 2 * (62 + (not drop_last))]


def _source(kind: str, tmp_path):
    """1000 traceable rows of 3 + 2 values: in memory, or a sharded dataset of uneven
    parts (an empty one among them) of which at most 2 are open at once (its reader's
    runs: PartsRuns, a batch whose parts are closed read by the dataset's read)."""
    if kind == "memory":
        return make_data(1000, 3, 2)
    path = tmp_path / "ds"
    if not path.exists():
        write_ndf_dataset(path, [250, 0, 333, 417], d=3, l=2)
    return open_ndf_dataset(path, max_open_parts=2)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("source", ["memory", "dataset"])
def test_batches_claimed_unread_are_read_and_handed_out_alike(
    shuffle, drop_last, dtype, source, tmp_path, whole, lazy, monkeypatch
):
    loaders = [
        DataLoader(
            _source(source, tmp_path), 16, seed=5, shuffle=shuffle, drop_last=drop_last, dtype=dtype
        )
        for _ in STEPS
    ]
    fallbacks = _fallbacks(monkeypatch)
    _same_run(loaders)
    # the path in Python alone hands its 2 epochs of 63 (or 62) batches to _hand; the
    # steps read every one themselves (the short last one too) but each epoch's first
    # (of its one claim of 256: the iterator's _next_group's)
    got = [fallbacks.count(dl._cursor) for dl in loaders]
    assert got == [2, 2, 2 * (62 + (not drop_last))]
    for dl in loaders:
        dl.close()  # (a dataset's parts: their descriptors)


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.__name__)
def test_padded_peeked_and_row_id_batches_are_the_iterators_own(step, whole, lazy):
    def loader(**kw):
        return DataLoader(make_data(100), 16, seed=5, **kw)

    # padding (even_batches="pad") and row ids: the same batches as a loader's iter()
    for kw in ({"num_shards": 3, "shard_index": 1, "even_batches": "pad"}, {"with_rows": True}):
        want = list(loader(**kw))
        got = list(_batches(iter(loader(**kw)), step))
        assert len(got) == len(want) and len(got[0]) == len(want[0]) >= 3
        for a, b in zip(got, want, strict=True):
            assert all(u.tobytes() == v.tobytes() for u, v in zip(a, b, strict=True))
    # batches read by peek: the same arrays, handed out in order
    it = iter(loader())
    ahead = it.peek(3)
    handed = [step(it) for _ in range(3)]
    assert all(h[0] is a[0] and h[1] is a[1] for h, a in zip(handed, ahead, strict=True))


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.__name__)
def test_a_stale_iterator_raises_in_the_step(step, whole, lazy):
    dl = DataLoader(make_data(200), 16, seed=5)
    it = iter(dl)
    step(it)
    dl.reset()
    with pytest.raises(RuntimeError, match="stale"):
        step(it)


@pytest.mark.parametrize("step", STEPS, ids=lambda s: s.__name__)
def test_a_read_that_raises_in_the_step_leaves_its_batch_next(step, whole, lazy):
    dl, want = (DataLoader(make_data(200, 3, 2), 16, seed=5) for _ in range(2))
    it, wit = iter(dl), iter(want)
    a, b = step(it), next(wit)
    assert a[0].tobytes() == b[0].tobytes()
    run = it._current.queue[0][0].run
    rows = run.rows[16:32].copy()
    run.rows[16:32] = 10**6  # batch 1's rows: out of range (the order, changed in place)
    state = state_json(dl)
    with pytest.raises(IndexError, match="out of range"):
        step(it)
    assert state_json(dl) == state
    run.rows[16:32] = rows
    for got, ref in zip(_batches(it, step), wit, strict=True):
        assert got[0].tobytes() == ref[0].tobytes() and got[1].tobytes() == ref[1].tobytes()
    assert state_json(dl) == state_json(want)


@needs_core
def test_the_compiled_step_is_the_iterators_next():
    dl = DataLoader(make_data(100), 16, seed=5)
    it = iter(dl)
    assert type(it).__mro__[1] is kernels.core().IterStep
    assert it._plain is True and it._peeked == {} and it._tel is dl._cursor.telemetry
    with pytest.raises(AttributeError):
        it._cursor = None  # (read only: the step keeps what it looked up)


@pytest.mark.parametrize("lazy_reads", [False, True])
@pytest.mark.parametrize("b", [64, 2048])  # (2048 rows of 5 values: a read that lets the GIL go)
def test_threads_sharing_the_step_hand_out_every_row_once(b, lazy_reads, whole, monkeypatch):
    n = 60_000
    if lazy_reads:
        monkeypatch.setattr(epoch_iterator, "_GROUP_BYTES", 1)
    x = np.arange(n, dtype=np.float64).reshape(n, 1) * np.ones((1, 3))
    dl = DataLoader((x, np.zeros((n, 2))), b, seed=2)
    fallbacks = _fallbacks(monkeypatch)
    it = iter(dl)
    got: list[np.ndarray] = []

    def work(_: int) -> None:
        for bx, _ in it:
            got.append(bx[:, 0].copy())

    run_threads(work, 4)
    rows = np.sort(np.concatenate(got)).astype(np.int64)
    np.testing.assert_array_equal(rows, np.arange(n))  # every row once (the ledger agrees)
    assert dl.state_dict()["epoch"] == 1 and dl.stats()["epoch"]["batches"] == -(-n // b)
    # every batch the step's (read with its group, or by the step) but those a thread
    # took in _next_group, waiting for the next group: at most one a thread a group
    batches = -(-n // b)
    per = epoch_iterator._LAZY_BATCHES if lazy_reads else dl._group_sizes()[0]
    assert len(fallbacks) <= 4 * -(-batches // per)
