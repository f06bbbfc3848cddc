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
import numpy as np
import pytest
from helpers import make_data, rewrite_in_place, run_compiled, until_ctime_moves
from laws import reader_of, reads_through_read

from exactbatch import DataLoader, NdfError, kernels, open_ndf, save_ndf
from exactbatch.loader import epoch_iterator

N, D, L, B = 1000, 3, 2, 64
FULL = 28 + 8 * (D + L) * N


def _truncate(path, opened_ctime: int) -> None:
    os.truncate(path, 28 + 8 * (D + L) * (N // 2))  # half the rows gone


def _rewrite(path, opened_ctime: int) -> None:  # same size, only ctime tells
    until_ctime_moves(path, opened_ctime, lambda: rewrite_in_place(path))


def _touch(path, opened_ctime: int) -> None:  # same bytes, a new modification time
    st = os.stat(path)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))


CHANGES = {"truncated": _truncate, "rewritten": _rewrite, "touched": _touch}
SAYS = {
    "truncated": f"expected {FULL} bytes, found {FULL // 2 + 14} (truncated?)",
    "rewritten": "its change time, ctime, moved though its modification time did not",
    "touched": "modified in place after it was opened (its modification time changed)",
}


def _loader(path, before: bool) -> DataLoader:
    with open_ndf(path) as f:
        dl = DataLoader(f, B, seed=7)
    if before:  # every batch through the reader's read (the twins of read_run, take_run)
        reads_through_read(reader_of(dl))
    return dl


def _hand(dl: DataLoader, via: str):
    """A callable handing out ``dl``'s next batch through ``via``."""
    if via == "next_into":
        bx, by = np.empty((B, D)), np.empty((B, L))
        return lambda: dl.next_into(bx, by)
    it = iter(dl)
    return lambda: next(it)


def _last(e: BaseException) -> BaseException:
    while e.__context__ is not None:
        e = e.__context__
    return e


def _chain(e: BaseException | None) -> list[tuple[str, bool]]:
    """Each exception of ``e``'s context chain: its type's name, and whether it was
    raised ``from None``."""
    out = []
    while e is not None:
        out.append((type(e).__name__, e.__suppress_context__))
        e = e.__context__
    return out


@pytest.mark.parametrize("via", ["next_into", "iter"])
@pytest.mark.parametrize("change", list(CHANGES))
def test_a_file_changed_mid_epoch_is_the_same_error_through_the_readers_runs(
    tmp_path, change, via, each_backend, monkeypatch
):
    monkeypatch.setattr(epoch_iterator, "_GROUP_BYTES", 1)  # iter(): each batch read alone
    x, y = make_data(N, D, L)
    errors, states = [], []
    for before in (False, True):
        path = tmp_path / f"{before}.ndf"
        save_ndf(path, (x, y))
        opened = os.stat(path).st_ctime_ns
        dl = _loader(path, before)
        if not before and each_backend == "compiled":
            assert type(reader_of(dl).read_run.__self__) is type(reader_of(dl).file._h.compiled)
        hand = _hand(dl, via)
        for _ in range(3):
            hand()
        state = dl.state_dict()
        CHANGES[change](path, opened)
        with pytest.raises(NdfError) as info:
            try:  # (called while an exception is handled: it ends the chain, both ways)
                raise KeyError("the caller's")
            except KeyError:
                hand()
        assert dl.state_dict() == state  # the batch not handed out, nothing counted
        errors.append(info.value)
        states.append(state)
        dl.close()
    ours, theirs = errors
    paths = [os.fspath(tmp_path / f"{before}.ndf") for before in (False, True)]
    assert paths[0] in str(ours) and SAYS[change] in str(ours)
    assert str(ours).replace(paths[0], "P") == str(theirs).replace(paths[1], "P")
    assert _chain(ours) == _chain(theirs)  # NdfError, FileChanged (compiled), KeyError
    if each_backend == "compiled":
        assert isinstance(ours.__context__, kernels.FileChanged)
    assert type(_last(ours)) is KeyError
    assert states[0]["epoch"] == states[1]["epoch"] and states[0]["batches_done"] == 3


@pytest.mark.parametrize("via", ["next_into", "iter"])
@pytest.mark.parametrize("how", ["replaced", "deleted"])
def test_a_file_replaced_or_deleted_mid_epoch_hands_out_its_old_rows(
    tmp_path, how, via, each_backend, monkeypatch
):
    """A file replaced by a rename over its path (save_ndf's way) or deleted mid-epoch
    is no change to the rows open: the epoch's batches go on, its old rows, the same
    as through the reader's read."""
    monkeypatch.setattr(epoch_iterator, "_GROUP_BYTES", 1)
    x, y = make_data(N, D, L)
    got = []
    for before in (False, True):
        path = tmp_path / f"{before}.ndf"
        save_ndf(path, (x, y))
        dl = _loader(path, before)
        hand = _hand(dl, via)
        batches = [hand() for _ in range(3)]
        if how == "replaced":
            save_ndf(path, (x[:10] + 1, y[:10]))  # (a rename over the path)
        else:
            os.unlink(path)
        for _ in range(N // B - 3):
            batches.append(hand())
        rows = [b[0].copy() for b in batches] if via == "iter" else None
        state = dl.state_dict()
        del state["fingerprint"]  # (of the file: its path, its identity)
        got.append((rows, state))
        if via == "next_into":  # the last batch in the caller's buffers: its rows by x0
            assert dl.last_rows == B
        dl.close()
    (ours, s0), (theirs, s1) = got
    assert s0 == s1 and s0["batches_done"] == N // B
    if via == "iter":
        assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
        seen = np.concatenate([b[:, 0] for b in ours]).astype(np.int64)
        assert len(set(seen.tolist())) == len(seen)  # old rows, each once (x0 is its id)


def test_a_closed_readers_runs_let_go_of_the_file(tmp_path, each_backend):
    """A loader closed after next_into's one call read through its reader's rows: the
    file's descriptor is closed with the loader (the one call may still hold the rows,
    never the file), and a hand-out after close refuses."""
    x, y = make_data(N, D, L)
    save_ndf(tmp_path / "a.ndf", (x, y))
    fds = len(os.listdir("/proc/self/fd"))
    dl = _loader(tmp_path / "a.ndf", before=False)
    bx, by = np.empty((B, D)), np.empty((B, L))
    for _ in range(5):
        assert dl.next_into(bx, by) == B
    assert len(os.listdir("/proc/self/fd")) > fds  # (the pure path's mmap holds a second)
    dl.close()
    assert len(os.listdir("/proc/self/fd")) == fds
    with pytest.raises(ValueError, match="closed"):
        dl.next_into(bx, by)


_HAND_OUTS_WHILE_TRUNCATED = """
import os, sys
import numpy as np
from exactbatch import DataLoader, NdfError, open_ndf, save_ndf
root, rounds = sys.argv[1], int(sys.argv[2])
n, d = 4096, 15  # rows of 128 bytes: 32 a page
x = np.arange(n * d, dtype=np.float64).reshape(n, d)
rng = np.random.default_rng(0)
errors = 0
for k in range(rounds):
    path = os.path.join(root, f"shrinking{k}.ndf")
    save_ndf(path, x)
    with open_ndf(path) as f:
        dl = DataLoader(f, 64, seed=k)
    bx, by = np.empty((64, d)), np.empty((64, 0))
    assert type(dl._feed.reader.read_run).__name__ == "builtin_function_or_method"
    dl.next_into(bx, by)  # the pages are mapped and read
    os.truncate(path, int(rng.integers(28, 28 + 128 * (n // 4))))
    try:
        while dl.next_into(bx, by):
            pass
    except NdfError as e:
        assert path in str(e), str(e)
        errors += 1
    dl.close()
print("errors", errors, flush=True)
"""


@pytest.mark.skipif(not backends.built(), reason="the compiled core is not built")
def test_hand_outs_from_a_file_truncated_meanwhile_are_an_error_never_a_crash(tmp_path):
    """A truncation under a loop of next_into (the one call's read from the mapping, a
    SIGBUS without the fault guard) is an NdfError naming the file, each round."""
    r = run_compiled(_HAND_OUTS_WHILE_TRUNCATED, tmp_path, "6", timeout=60)
    assert r.stdout.splitlines() == ["errors 6"], (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.returncode == 0
