"""The laws of a loader's hand-out through its reader's own compiled run reads
(``NdfReader``'s ``read_run`` and ``take_run``) when what it reads changes mid-epoch,
one helper per law, run over both kinds: a single local .ndf file
(tests/ndf/test_file_runs.py) and a sharded dataset's parts (tests/ndf/test_dataset_runs.py).

Each law takes ``make(before)`` (writes a fresh file or dataset, returns its path) and
``open_loader(path, before)`` (a loader over it; ``before``: every batch through the
reader's read, as before the runs) and compares the two loaders' hand-outs."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from helpers import rewrite_in_place, run_compiled, until_ctime_moves
from laws import reader_of

from exactbatch import DataLoader, NdfError, kernels

D, L, B = 3, 2, 64
VIAS = ["next_into", "iter"]


def changes(rows: int) -> dict:
    """The changes of a file of ``rows`` rows in place, each ``change(path)``: truncated
    to half its rows, rewritten at the same size (only ctime tells), touched (same bytes,
    a new modification time)."""

    def truncated(path) -> None:
        os.truncate(path, 28 + 8 * (D + L) * (rows // 2))

    def rewritten(path) -> None:
        opened = os.stat(path).st_ctime_ns
        until_ctime_moves(path, opened, lambda: rewrite_in_place(path))

    def touched(path) -> None:
        st = os.stat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))

    return {"truncated": truncated, "rewritten": rewritten, "touched": touched}


def says(rows: int) -> dict:
    """What the NdfError of each of ``changes(rows)`` says."""
    full = 28 + 8 * (D + L) * rows
    return {
        "truncated": f"expected {full} bytes, found {full // 2 + 14} (truncated?)",
        "rewritten": "its change time, ctime, moved though its modification time did not",
        "touched": "modified in place after it was opened (its modification time changed)",
    }


def hand(dl: DataLoader, via: str):
    """A callable handing out ``dl``'s next batch through ``via``."""
    if via == "next_into":
        bx, by = np.empty((B, D)), np.empty((B, L))
        return lambda: dl.next_into(bx, by)
    it = iter(dl)
    return lambda: next(it)


def chain(e: BaseException | None) -> list[tuple[str, bool]]:
    """Each exception of ``e``'s context chain: its type's name, and whether it was
    raised ``from None``."""
    out = []
    while e is not None:
        out.append((type(e).__name__, e.__suppress_context__))
        e = e.__context__
    return out


def two_errors(make, open_loader, change, via: str, after: int, runs_are=None):
    """The error and state of a loader over ``make(before)`` whose path is changed by
    ``change(path)`` after ``after`` batches: through the reader's runs (checked by
    ``runs_are(reader)`` on the compiled backend, where given), then through its read; each
    error called while a KeyError is handled. The batch is not handed out, the state
    unchanged. Returns ``[(error, path, state)]``, ours then theirs."""
    got = []
    for before in (False, True):
        path = make(before)
        dl = open_loader(path, before)
        if not before and runs_are is not None and kernels.backend() == "compiled":
            runs_are(reader_of(dl))
        next_batch = hand(dl, via)
        for _ in range(after):
            next_batch()
        state = dl.state_dict()
        change(path)
        with pytest.raises(NdfError) as info:
            try:  # (called while an exception is handled: it ends the chain, both ways)
                raise KeyError("the caller's")
            except KeyError:
                next_batch()
        assert dl.state_dict() == state  # the batch not handed out, nothing counted
        got.append((info.value, path, state))
        dl.close()
    return got


def check_same_error(got, said, named, says_what: str, compiled: bool) -> None:
    """Law: the runs' error is the read's, word for word (``said(error, path)`` makes
    each's paths plain), names ``named(path)`` and says ``says_what``; the same context
    chain (NdfError, FileChanged on the compiled backend, the caller's KeyError)."""
    (ours, p0, _), (theirs, p1, _) = got
    assert named(p0) in str(ours) and says_what in str(ours)
    assert said(ours, p0) == said(theirs, p1)
    assert chain(ours) == chain(theirs)
    if compiled:
        assert isinstance(ours.__context__, kernels.FileChanged)
    last = ours
    while last.__context__ is not None:
        last = last.__context__
    assert type(last) is KeyError


def check_old_rows(make, open_loader, alter, via: str, n: int) -> None:
    """Law: ``alter(dl, path)`` after 3 batches (a rename over a file or a part, or its
    deletion) is no change to the rows open: the epoch's batches go on, its old rows,
    each once (x0 is its id), the same as through the reader's read."""
    got = []
    for before in (False, True):
        path = make(before)
        dl = open_loader(path, before)
        next_batch = hand(dl, via)
        batches = [next_batch() for _ in range(3)]
        alter(dl, path)
        for _ in range(n // B - 3):
            batches.append(next_batch())
        rows = [b[0].copy() for b in batches] if via == "iter" else None
        state = dl.state_dict()
        del state["fingerprint"]  # (of the path: its identity, its parts' names)
        got.append((rows, state))
        if via == "next_into":  # the last batch in the caller's buffers: its rows by x0
            assert dl.last_rows == B
        dl.close()
    (ours, s0), (theirs, s1) = got
    assert s0 == s1 and s0["batches_done"] == n // B
    if via == "iter":
        assert all(np.array_equal(a, b) for a, b in zip(ours, theirs, strict=True))
        seen = np.concatenate([b[:, 0] for b in ours]).astype(np.int64)
        assert len(set(seen.tolist())) == len(seen)


def check_closed_lets_go(open_loader, path, opened: int):
    """Law: a loader closed after next_into's one call read through its reader's runs
    closes the ``opened`` descriptors it holds (the one call may still hold the rows,
    never the files), and a hand-out after close refuses. Returns the reader's runs."""
    gc.collect()  # (earlier tests' loaders left to the collector: their descriptors go now)
    fds = len(os.listdir("/proc/self/fd"))
    dl = open_loader(path, False)
    bx, by = np.empty((B, D)), np.empty((B, L))
    for _ in range(5):
        assert dl.next_into(bx, by) == B
    assert len(os.listdir("/proc/self/fd")) >= fds + opened  # (the pure path's mmap: more)
    runs = getattr(reader_of(dl), "_rows", None)
    dl.close()
    assert len(os.listdir("/proc/self/fd")) == fds
    with pytest.raises(ValueError, match="closed"):
        dl.next_into(bx, by)
    return runs


# A child (argv: folder, rounds, kind): a file ("file"), or one of a dataset's two parts
# ("dataset"), truncated under a loop of next_into, each round; it prints "errors N".
_HAND_OUTS_WHILE_TRUNCATED = """
import os, sys
import numpy as np
from exactbatch import DataLoader, NdfError, open_ndf, open_ndf_dataset, save_ndf
from exactbatch import save_ndf_dataset
root, rounds, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
n, d = 4096, 15  # rows of 128 bytes: 32 a page
x = np.arange(n * d, dtype=np.float64).reshape(n, d)
rng = np.random.default_rng(0)
errors = 0
for k in range(rounds):
    if kind == "file":
        path = os.path.join(root, f"shrinking{k}.ndf")
        save_ndf(path, x)
        with open_ndf(path) as f:
            dl = DataLoader(f, 64, seed=k)
        assert type(dl._feed.reader.read_run).__name__ == "builtin_function_or_method"
        cut = 128 * (n // 4)
    else:
        folder = os.path.join(root, f"shrinking{k}")
        save_ndf_dataset(folder, [x[: n // 2], x[n // 2 :]])
        with open_ndf_dataset(folder) as ds:
            dl = DataLoader(ds, 64, seed=k)
            path = os.path.join(folder, ds.parts[k % 2].name)
        assert type(dl._feed.reader.read_run.__self__).__name__ == "PartsRuns"
        cut = 128 * (n // 8)
    bx, by = np.empty((64, d)), np.empty((64, 0))
    dl.next_into(bx, by)  # the pages are mapped and read
    os.truncate(path, int(rng.integers(28, 28 + cut)))
    try:
        while dl.next_into(bx, by):
            pass
    except NdfError as e:
        assert path in str(e), str(e)
        errors += 1
    dl.close()
print("errors", errors, flush=True)
"""


def check_truncated_never_a_crash(tmp_path, kind: str) -> None:
    """Law: a truncation of a file (``kind`` "file") or a part ("dataset") under a loop
    of next_into (the one call's read from the mapping, a SIGBUS without the fault
    guard) is an NdfError naming the file, each round (a child process)."""
    r = run_compiled(_HAND_OUTS_WHILE_TRUNCATED, tmp_path, "6", kind, timeout=60)
    assert r.stdout.splitlines() == ["errors 6"], (r.returncode, r.stdout, r.stderr[-2000:])
    assert r.returncode == 0
