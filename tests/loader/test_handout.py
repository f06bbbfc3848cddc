"""next_into's common call in one (loader/handout.py): the compiled core's ``into``
and its pure twin ``HandOut`` hand out the same batches and leave the same states,
bit for bit, as next_into's path in Python alone; each hands out only what it is
for (plain buffers, a whole order's batch of batch_size rows) and leaves the rest,
popped or not, to that path; a read that raises in it leaves the batch next. So for a
local .ndf file, whose reader reads a whole order's batches through compiled rows of its
own (sources/random_access.NdfReader), and for a local sharded dataset, whose reader
reads them through run reads of its own over the dataset's parts (a batch whose parts
are not open read by the dataset's read, which opens them): the same batches and states
as the same file or dataset read through the reader's ``read`` (as before it had them)
and as the same rows in memory, on both backends."""

from __future__ import annotations

import numpy as np
import pytest

from exactbatch import DataLoader, kernels, open_ndf, open_ndf_dataset, save_ndf
from exactbatch.batching.random_access_epoch import OrderRun
from exactbatch.loader import epoch_iterator
from exactbatch.loader.handout import HandOut, hand_out
from tests.helpers import make_data, state_json, stats_counts, write_ndf_dataset
from tests.laws import reader_of, reads_through_read, run_threads

COMPILED = kernels.backend() == "compiled"
needs_core = pytest.mark.skipif(
    not COMPILED, reason="the compiled core is not in use (not built, or EXACTBATCH_PURE=1)"
)


def _loader(n=1000, b=16, path=None, **kw) -> DataLoader:
    """A loader of ``n`` traceable rows of 3 + 2 values: in memory, or (``path``) in an
    .ndf file written there, or (``path`` a folder's, no suffix) in a sharded dataset
    there of uneven parts, an empty one among them, at most 2 open at once (so that its
    batches also find parts closed, which the dataset's read opens)."""
    x, y = make_data(n, 3, 2)
    if path is None:
        return DataLoader((x, y), b, seed=5, **kw)
    if not path.suffix:
        if not path.exists():
            write_ndf_dataset(path, [n // 4, 0, n // 3, n - n // 4 - n // 3], d=3, l=2)
        with open_ndf_dataset(path, max_open_parts=2) as ds:
            return DataLoader(ds, b, seed=5, **kw)
    if not path.exists():
        save_ndf(path, (x, y))
    with open_ndf(path) as f:  # (the loader holds a share of its own)
        return DataLoader(f, b, seed=5, **kw)


def _twin(dl: DataLoader) -> None:
    """``dl``'s next_into with the pure twin's one call (whichever backend reads)."""
    nx = dl._next_into
    dl._hand = HandOut(nx.checks, nx.holder, nx.cursor, nx.tel, nx.waits[True]).hand


def _python(dl: DataLoader) -> None:
    """``dl``'s next_into with no one call: its path in Python alone (as before it)."""
    dl._hand = lambda bx, by: None


def _counted(dl: DataLoader) -> list[object]:
    """What ``dl``'s one call returns, call by call."""
    got: list[object] = []
    hand = dl._hand

    def counted(bx, by):
        r = hand(bx, by)
        got.append(r if r is None or isinstance(r, int) else "popped")
        return r

    dl._hand = counted
    return got


@pytest.mark.parametrize("source", ["memory", "ndf", "dataset"])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("drop_last", [False, True])
def test_the_one_call_and_its_twin_give_the_batches_and_states_of_the_python_path(
    shuffle, drop_last, source, tmp_path
):
    path = {"memory": None, "ndf": tmp_path / "a.ndf", "dataset": tmp_path / "ds"}[source]
    loaders = [_loader(shuffle=shuffle, drop_last=drop_last, path=path) for _ in range(3)]
    _twin(loaders[1])
    _python(loaders[2])
    calls = _counted(loaders[0])
    bufs = [(np.empty((16, 3)), np.empty((16, 2))) for _ in loaders]
    for epoch in range(2):
        for step in range(70):
            got = [dl.next_into(bx, by) for dl, (bx, by) in zip(loaders, bufs, strict=True)]
            assert got[0] == got[1] == got[2], (epoch, step)
            for bx, by in bufs[1:]:
                assert bx[: got[0]].tobytes() == bufs[0][0][: got[0]].tobytes()
                assert by[: got[0]].tobytes() == bufs[0][1][: got[0]].tobytes()
            if step % 7 == 3 or got[0] < 16:  # mid-epoch, and at its end
                states = [state_json(dl) for dl in loaders]
                assert states[0] == states[1] == states[2], (epoch, step)
                assert len({dl.last_rows for dl in loaders}) == 1
            if not got[0]:
                break
        for dl in loaders:
            dl.reset()
        counts = [stats_counts(dl.stats()) for dl in loaders]  # (not the times)
        assert counts[0] == counts[1] == counts[2] and counts[0]
    if COMPILED:  # a whole order's batches (file order's too): handed out in the one call
        assert calls.count(16) >= 100
    for dl in loaders:
        dl.close()


def _epochs(dl: DataLoader, via: str, b: int) -> list:
    """Two epochs of ``dl`` through ``via``: each batch's bytes, and the state after
    every fifth batch and at each epoch's end."""
    out: list = []
    for _ in range(2):
        if via != "next_into":
            for k, (x, y) in enumerate(dl):
                out.append(x.tobytes() + y.tobytes())
                if k % 5 == 2:
                    out.append(state_json(dl))
        else:
            bx, by = np.empty((b, 3), dl.dtype), np.empty((b, 2), dl.dtype)
            k = 0
            while got := dl.next_into(bx, by):
                out.append(bx[:got].tobytes() + by[:got].tobytes())
                if k % 5 == 2:
                    out.append(state_json(dl))
                k += 1
            dl.reset()
        out.append(state_json(dl))
    return out


@pytest.mark.parametrize("via", ["iter", "iter, a batch a group", "next_into"])
@pytest.mark.parametrize(("b", "dtype"), [(16, np.float64), (100, np.float32)])
@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("source", ["a.ndf", "ds"])
def test_an_ndf_file_read_through_its_own_runs_gives_what_its_read_and_memory_give(
    via, b, dtype, shuffle, source, tmp_path, each_backend, monkeypatch
):
    """An .ndf loader (a file, or a sharded dataset of which at most 2 parts are open)
    whose reader hands out its compiled rows' ``read_run`` and ``take_run`` (a dataset's:
    its PartsRuns'; on the compiled path; their twins on the pure one) against the same
    file read through the reader's ``read`` alone (kernels.RunReads: the path before it
    had them) and the same rows in memory: the same batches, bit for bit, and the same
    states (the ledger's digests and counts in them) as the file read through ``read``.
    iter() reads small batches a group at a time (one ``read``), or each alone
    (``take_run``) where a group holds one."""
    if via == "iter, a batch a group":
        monkeypatch.setattr(epoch_iterator, "_GROUP_BYTES", 1)
    path = tmp_path / source  # an .ndf file, or a sharded dataset (its runs: PartsRuns)
    kw = {"b": b, "n": 1013, "shuffle": shuffle, "dtype": dtype}
    runs, before = _loader(path=path, **kw), _loader(path=path, **kw)
    reads_through_read(reader_of(before))
    assert hasattr(reader_of(runs), "read_run") == (each_backend == "compiled")
    memory = _loader(**kw)
    got = [_epochs(dl, via, b) for dl in (runs, before, memory)]
    assert got[0] == got[1]
    assert [g for g in got[0] if isinstance(g, bytes)] == [
        g for g in got[2] if isinstance(g, bytes)
    ]
    for dl in (runs, before, memory):
        dl.close()


@needs_core
def test_the_compiled_call_leaves_other_buffers_and_short_batches_to_python():
    dl = _loader(n=40, b=16)  # batches of 16, 16 and 8
    hand = hand_out(
        dl._checks, dl._holder, dl._cursor, dl._cursor.telemetry, dl._next_into.waits[True]
    )
    bx, by = np.empty((16, 3)), np.empty((16, 2))
    assert hand(bx, by) is None  # no plain buffers known yet: the full checks first
    list(iter(dl))  # (the whole order computed, waited for by iter's first epoch)
    dl.reset()
    assert dl.next_into(bx, by) == 16  # the full checks, and a claim of the group
    assert hand(bx, np.empty((16, 2), np.float32)) is None  # not plain: nothing popped
    dl._cursor._last_rows = 0  # (so that the call is seen to set it)
    assert hand(bx, by) == 16 and dl.last_rows == 16
    group, item, t0 = hand(bx, by)  # the short last batch: popped, left to Python
    assert item[0].size == 8 and isinstance(t0, int)
    assert dl._next_into(bx, by, None, (group, item, t0)) == 8
    assert hand(bx, by) is None and dl.next_into(bx, by) == 0


@needs_core  # (a row out of range: the compiled read_run's refusal)
@pytest.mark.parametrize("twin", [False, True])
def test_a_read_that_raises_in_the_one_call_leaves_its_batch_next(twin):
    # (file order: its whole order is there from the first claim, on both backends)
    dl, want = _loader(n=200, b=16, shuffle=False), _loader(n=200, b=16, shuffle=False)
    if twin:
        _twin(dl)
    calls = _counted(dl)
    bx, by = np.empty((16, 3)), np.empty((16, 2))
    list(iter(dl))
    list(iter(want))
    for d in (dl, want):
        d.reset()
    assert dl.next_into(bx, by) == want.next_into(bx.copy(), by.copy()) == 16
    group = dl._holder.group
    run: OrderRun = group.queue[0][0].run
    rows = run.rows[16:32].copy()
    run.rows[16:32] = 10**6  # batch 1's rows: out of range (the order, changed in place)
    state = state_json(dl)
    with pytest.raises(IndexError, match="out of range"):
        dl.next_into(bx, by)
    assert state_json(dl) == state
    run.rows[16:32] = rows
    wx, wy = np.empty((16, 3)), np.empty((16, 2))
    for _ in range(12):
        assert dl.next_into(bx, by) == want.next_into(wx, wy)
        assert bx.tobytes() == wx.tobytes() and by.tobytes() == wy.tobytes()
    assert state_json(dl) == state_json(want)
    assert calls.count(16) >= 10


@pytest.mark.parametrize("b", [64, 2048])  # (2048 rows of 5 values: a read that lets the GIL go)
def test_threads_sharing_the_one_call_hand_out_every_row_once(b, monkeypatch):

    from exactbatch.feeds import random_access

    n = 60_000
    # every epoch's whole order made at once, not on a thread: each batch then a run of it
    # (the one call's), whatever the timing - on a thread, batches claimed before it is
    # done are blocks, which the one call leaves to Python (the count below would race)
    monkeypatch.setattr(random_access, "_AT_ONCE_ROWS", n)
    x = np.arange(n, dtype=np.float64).reshape(n, 1) * np.ones((1, 3))
    dl = DataLoader((x, np.zeros((n, 2))), b, seed=2)
    list(iter(dl))  # (the next epoch's whole order computed meanwhile)
    dl.reset()
    calls = _counted(dl)
    got: list[np.ndarray] = []

    def work(_: int) -> None:
        bx, by = np.empty((b, 3)), np.empty((b, 2))
        while k := dl.next_into(bx, by):
            got.append(bx[:k, 0].copy())

    run_threads(work, 4)
    rows = np.sort(np.concatenate(got)).astype(np.int64)
    np.testing.assert_array_equal(rows, np.arange(n))  # every row once (the ledger agrees)
    assert dl.state_dict()["epoch"] == 2 and calls.count(b) > n // b // 2
