"""A loader's hand-out of a local sharded dataset's batches through the reader's own run
reads over the dataset's parts (``NdfReader``'s ``read_run`` and ``take_run``, the core's
``PartsRuns``: next_into's one call, iter()'s batch read alone), when a part changes
mid-epoch: the same ``NdfError`` as the same dataset read through the reader's ``read``
(its path before; kernels.RunReads), word for word, on both backends; the batch not
handed out and the state unchanged; a part not open yet that is deleted or replaced
(read by the dataset's read, which opens it: the runs' ``missing`` hook) the same error
too; an open part replaced by a rename or deleted: its old rows handed out, as before;
the parts' descriptors closed with the loader; a truncation during a tight loop of
hand-outs never a SIGBUS (a child process). And the runs themselves: the bytes of the
dataset's read, the hook's read of parts not open, a closed reader's refusal."""

from __future__ import annotations

import os

import backends
import numpy as np
import pytest
import run_laws
from helpers import make_data, part_file, write_ndf_dataset
from laws import reader_of, reads_through_read
from run_laws import B, D, L

from exactbatch import DataLoader, open_ndf_dataset, save_ndf
from exactbatch.loader import epoch_iterator

SIZES = [300, 0, 250, 200, 250]  # uneven, an empty part among them
N = sum(SIZES)
PART = 3  # the part changed: rows 550 .. 749

needs_core = pytest.mark.skipif(not backends.built(), reason="the compiled core is not built")


def _make(tmp_path):
    """A fresh dataset of SIZES' parts per call (``before``: its folder's name)."""
    return lambda before: write_ndf_dataset(tmp_path / f"{before}", SIZES, d=D, l=L)


def _loader(path, before: bool, **kw) -> DataLoader:
    with open_ndf_dataset(path, max_open_parts=kw.pop("max_open_parts", None)) as ds:
        dl = DataLoader(ds, B, seed=7, **kw)
    if before:  # every batch through the reader's read (the twins of read_run, take_run)
        reads_through_read(reader_of(dl))
    return dl


def _runs_are_parts_runs(reader) -> None:
    assert type(reader.read_run.__self__).__name__ == "PartsRuns"


def _said(e: BaseException, folder) -> str:
    """``e``'s message with its dataset's folder and part names made plain (each
    dataset's parts are named by its write)."""
    text = str(e).replace(os.fspath(folder), "DS")
    for k in range(len(SIZES)):
        text = text.replace(os.path.basename(part_file(folder, k)), f"PART{k}")
    return text


def _named(folder) -> str:
    return part_file(folder, PART)


@pytest.fixture
def by_batch(monkeypatch):
    monkeypatch.setattr(epoch_iterator, "_GROUP_BYTES", 1)  # iter(): each batch read alone


@pytest.mark.parametrize("via", run_laws.VIAS)
@pytest.mark.parametrize("change", list(run_laws.changes(SIZES[PART])))
def test_a_part_changed_mid_epoch_is_the_same_error_through_the_readers_runs(
    tmp_path, change, via, each_backend, by_batch
):
    def changed(folder):
        run_laws.changes(SIZES[PART])[change](part_file(folder, PART))

    got = run_laws.two_errors(_make(tmp_path), _loader, changed, via, 3, _runs_are_parts_runs)
    said = run_laws.says(SIZES[PART])[change]
    run_laws.check_same_error(got, _said, _named, said, each_backend == "compiled")
    (_, _, s0), (_, _, s1) = got
    assert s0["epoch"] == s1["epoch"] and s0["batches_done"] == 3


@pytest.mark.parametrize("via", run_laws.VIAS)
@pytest.mark.parametrize("how", ["deleted", "replaced"])
def test_a_part_not_open_yet_that_changed_is_the_same_error_through_the_readers_runs(
    tmp_path, how, via, each_backend, by_batch
):
    """In file order a part opens at the first batch that reaches it: one deleted, or
    replaced by one of other rows, before then is the dataset's error at that batch (the
    runs leave a batch whose parts are not open to the dataset's read, which opens
    them), word for word as through the reader's read."""

    def changed(folder):
        p = part_file(folder, PART)
        if how == "deleted":
            os.unlink(p)
        else:
            save_ndf(p, make_data(SIZES[PART] - 1, D, L))  # (a rename over the path)

    def loader(path, before):
        return _loader(path, before, shuffle=False, max_open_parts=2)

    # batches 0 .. 7 are rows 0 .. 511; batch 8 (512 .. 575) reaches part 3 (from 550)
    got = run_laws.two_errors(_make(tmp_path), loader, changed, via, 8)
    (ours, f0, s0), (theirs, f1, _) = got
    says = "of the dataset is missing" if how == "deleted" else "does not match the manifest"
    assert part_file(f0, PART) in str(ours) and says in str(ours)
    assert _said(ours, f0) == _said(theirs, f1)
    assert run_laws.chain(ours) == run_laws.chain(theirs)
    assert s0["batches_done"] == 8


@pytest.mark.parametrize("via", run_laws.VIAS)
@pytest.mark.parametrize("how", ["replaced", "deleted"])
def test_an_open_part_replaced_or_deleted_mid_epoch_hands_out_its_old_rows(
    tmp_path, how, via, each_backend, by_batch
):
    """An open part replaced by a rename over its path (save_ndf's way) or deleted
    mid-epoch is no change to the rows open: the epoch's batches go on, its old rows,
    the same as through the reader's read."""

    def alter(dl, folder):
        assert len(reader_of(dl).file.open_parts) == len(SIZES) - 1  # (shuffled: all open)
        p = part_file(folder, PART)
        if how == "replaced":
            save_ndf(p, make_data(SIZES[PART], D, L))  # other rows (ids from 0)
        else:
            os.unlink(p)

    run_laws.check_old_rows(_make(tmp_path), _loader, alter, via, N)


def test_a_closed_readers_runs_let_go_of_the_parts(tmp_path, each_backend):
    """A loader closed after next_into's one call read through its reader's runs: the
    parts' descriptors are closed with the loader (the one call may still hold the
    runs, never the dataset: their hooks are let go of), and a hand-out after close
    refuses."""
    folder = write_ndf_dataset(tmp_path / "ds", SIZES, d=D, l=L)
    runs = run_laws.check_closed_lets_go(_loader, folder, opened=len(SIZES) - 1)
    if runs is not None:
        assert runs.changed is None and runs.missing is None


@needs_core
def test_the_runs_read_what_the_dataset_reads_and_leave_parts_not_open_to_it(tmp_path):
    """PartsRuns' read_run and take_run: the bytes of the dataset's own read, when the
    rows' parts are open; else nothing copied, and ``missing`` called with the run and
    the outputs (the dataset's read opens the parts); after a reader's close (its hooks
    let go of), a run whose parts are not open is a ValueError, and one whose parts are
    open still reads (the parts stay mapped while the runs hold them)."""
    folder = write_ndf_dataset(tmp_path / "ds", SIZES, d=D, l=L)
    x, y = make_data(N, D, L)
    with backends.on_backend("compiled"), open_ndf_dataset(folder) as ds:
        parts = ds._handle()
        calls = []
        runs = parts.compiled.runs(None, lambda *a: calls.append(a))
        order = np.array([999, 0, 551, 300, 551, 10], dtype=np.int32)
        ox, oy = np.full((5, D), -1.0), np.full((5, L), -1.0)
        runs.read_run(order, 1, 4, ox, oy)  # no part open: left to missing
        assert len(calls) == 1 and calls[0][:3] == (order, 1, 4) and calls[0][5] is None
        assert calls[0][3] is ox and calls[0][4] is oy and (ox == -1).all()
        runs.missing = parts.read_run_missing
        runs.threads = 2
        runs.read_run(order, 1, 4, ox, oy)  # opened by the dataset's read
        np.testing.assert_array_equal(ox[:4], x[[0, 551, 300, 551]])
        np.testing.assert_array_equal(oy[:4], y[[0, 551, 300, 551]])
        assert (ox[4] == -1).all() and ds.open_parts == (0, 2, 3)  # only the run's rows
        tx, ty = runs.take_run(order, 0, 6, np.dtype(np.float32), np.dtype(np.float64))
        assert tx.dtype == np.float32 and ty.dtype == np.float64 and ds.open_parts == (0, 2, 3, 4)
        np.testing.assert_array_equal(tx, x[order].astype(np.float32))
        np.testing.assert_array_equal(ty, y[order])
        ox2, oy2 = np.empty((6, D)), np.empty((6, L))
        ds.read_rows_into(order, ox2, oy2)
        runs.changed = runs.missing = None
        big_x, big_y = np.empty((6, D)), np.empty((6, L))
        runs.read_run(order, 0, 6, big_x, big_y)  # every part open: no hook needed
        assert big_x.tobytes() == ox2.tobytes() and big_y.tobytes() == oy2.tobytes()
        parts.compiled.unset(0)
        with pytest.raises(ValueError, match="no missing hook"):
            runs.read_run(order, 0, 2, big_x, big_y)
        with pytest.raises(TypeError, match="missing must be a callable or None"):
            runs.missing = 3
        with pytest.raises(TypeError, match="changed must be a callable or None"):
            parts.compiled.runs(3, None)
        with pytest.raises(IndexError, match=f"row {N} out of range for n={N} rows"):
            runs.read_run(np.array([551, N], dtype=np.int64), 0, 2, big_x, big_y)
        with pytest.raises(TypeError, match="out_x and out_y must be writeable"):
            runs.read_run(order, 0, 6, big_x[:5], big_y)
        with pytest.raises(TypeError, match="take_run: dtype must be float64 or float32"):
            runs.take_run(order, 0, 2, np.dtype(np.int64), None)


@needs_core
def test_hand_outs_from_a_part_truncated_meanwhile_are_an_error_never_a_crash(tmp_path):
    """A truncation of a part under a loop of next_into (the one call's read from the
    parts' mappings, a SIGBUS without the fault guard) is an NdfError naming the part's
    file, each round."""
    run_laws.check_truncated_never_a_crash(tmp_path, "dataset")
