"""A loader's hand-out of a local .ndf file's batches through the reader's own compiled
rows (``NdfReader``'s ``read_run`` and ``take_run``: next_into's one call, iter()'s
batch read alone), when the file changes mid-epoch: the same ``NdfError`` as the
same file read through the reader's ``read`` (its path before; kernels.RunReads),
word for word, on both backends; the batch not handed out and the state unchanged;
a file replaced by a rename or deleted: its old rows handed out, as before; the file's
descriptor closed with the loader; a truncation during a tight loop of hand-outs never
a SIGBUS (a child process)."""

from __future__ import annotations

import os

import backends
import pytest
import run_laws
from helpers import make_data
from laws import reader_of, reads_through_read
from run_laws import B, D, L

from exactbatch import DataLoader, open_ndf, save_ndf
from exactbatch.loader import epoch_iterator

N = 1000


def _make(tmp_path):
    """A fresh .ndf file of N rows per call (``before``: its name)."""
    x, y = make_data(N, D, L)

    def make(before: bool):
        path = tmp_path / f"{before}.ndf"
        save_ndf(path, (x, y))
        return path

    return make


def _loader(path, before: bool) -> DataLoader:
    with open_ndf(path) as f:
        dl = DataLoader(f, B, seed=7)
    if before:  # every batch through the reader's read (the twins of read_run, take_run)
        reads_through_read(reader_of(dl))
    return dl


def _runs_are_the_files(reader) -> None:
    assert type(reader.read_run.__self__) is type(reader.file._h.compiled)


def _said(e: BaseException, path) -> str:
    return str(e).replace(os.fspath(path), "P")


@pytest.mark.parametrize("via", run_laws.VIAS)
@pytest.mark.parametrize("change", list(run_laws.changes(N)))
def test_a_file_changed_mid_epoch_is_the_same_error_through_the_readers_runs(
    tmp_path, change, via, each_backend, monkeypatch
):
    monkeypatch.setattr(epoch_iterator, "_GROUP_BYTES", 1)  # iter(): each batch read alone
    got = run_laws.two_errors(
        _make(tmp_path), _loader, run_laws.changes(N)[change], via, 3, _runs_are_the_files
    )
    said = run_laws.says(N)[change]
    run_laws.check_same_error(got, _said, os.fspath, said, each_backend == "compiled")
    (_, _, s0), (_, _, s1) = got
    assert s0["epoch"] == s1["epoch"] and s0["batches_done"] == 3


@pytest.mark.parametrize("via", run_laws.VIAS)
@pytest.mark.parametrize("how", ["replaced", "deleted"])
def test_a_file_replaced_or_deleted_mid_epoch_hands_out_its_old_rows(
    tmp_path, how, via, each_backend, monkeypatch
):
    """A file replaced by a rename over its path (save_ndf's way) or deleted mid-epoch
    is no change to the rows open: the epoch's batches go on, its old rows, the same
    as through the reader's read."""
    monkeypatch.setattr(epoch_iterator, "_GROUP_BYTES", 1)
    x, y = make_data(N, D, L)

    def alter(dl, path):
        if how == "replaced":
            save_ndf(path, (x[:10] + 1, y[:10]))  # (a rename over the path)
        else:
            os.unlink(path)

    run_laws.check_old_rows(_make(tmp_path), _loader, alter, via, N)


def test_a_closed_readers_runs_let_go_of_the_file(tmp_path, each_backend):
    """A loader closed after next_into's one call read through its reader's rows: the
    file's descriptor is closed with the loader (the one call may still hold the rows,
    never the file), and a hand-out after close refuses."""
    path = _make(tmp_path)(False)
    run_laws.check_closed_lets_go(_loader, path, opened=1)


@pytest.mark.skipif(not backends.built(), reason="the compiled core is not built")
def test_hand_outs_from_a_file_truncated_meanwhile_are_an_error_never_a_crash(tmp_path):
    """A truncation under a loop of next_into (the one call's read from the mapping, a
    SIGBUS without the fault guard) is an NdfError naming the file, each round."""
    run_laws.check_truncated_never_a_crash(tmp_path, "file")
