"""Reliability, 3b: every source read in place from local files has the ``.ndf`` identity check.

One axis, the kind of file-backed random-access source (an ``.ndf`` file, an
Arrow IPC file, a Hugging Face dataset loaded from disk), against one axis of
changes between two epochs: the file rewritten in place larger, rewritten
with its modification time put back (only ctime tells), or replaced by a
rename. A change in place is an ``NdfError`` naming the file at the next
batch, and a source pickled before it is refused on unpickling; a rename
keeps the file opened being read, every row exactly once. Never rows of the
new file read through the old layout (issue 39, item 4). (Changes *during*
an epoch, and truncations, are tests/reliability/test_files.py's, for
``.ndf``.)
"""

from __future__ import annotations

import os
import pickle
import shutil

import numpy as np
import pytest
from helpers import rewrite_in_place, until_ctime_moves

import exactbatch
from exactbatch import DataLoader, NdfError, save_ndf

pa = pytest.importorskip("pyarrow")

KINDS = ["ndf", "arrow_file", "hf"]
CHANGES = ["rewrite-larger", "rewrite-keep-mtime", "replace"]


def _rows(n: int, first: float) -> tuple[np.ndarray, np.ndarray]:
    i = np.arange(n, dtype=np.float64) + first
    return np.column_stack([i, 3 * i + 0.5]), -i


def _write(kind: str, folder, n: int, first: float) -> str:
    """A file of ``kind`` holding rows x = (i, 3i + 1/2), y = -i, i from ``first``: its
    path (for hf, the dataset's Arrow cache file)."""
    x, y = _rows(n, first)
    os.makedirs(folder, exist_ok=True)
    if kind == "ndf":
        path = os.path.join(folder, "d.ndf")
        save_ndf(path, (x, y))
        return path
    table = pa.table({"a": x[:, 0], "b": x[:, 1], "t": y})
    if kind == "arrow_file":
        path = os.path.join(folder, "d.arrow")
        with pa.OSFile(path, "wb") as f, pa.ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        return path
    datasets = pytest.importorskip("datasets")
    datasets.Dataset(table).save_to_disk(folder)
    [path] = [os.path.join(folder, f) for f in os.listdir(folder) if f.endswith(".arrow")]
    return path


def _open(kind: str, path: str):
    if kind == "ndf":
        return exactbatch.open_ndf(path)
    if kind == "arrow_file":
        return exactbatch.arrow_file(path, labels="t")
    import datasets

    return exactbatch.hf_source(datasets.load_from_disk(os.path.dirname(path)), labels="t")


def _check(loader) -> np.ndarray:
    """The ids of an epoch's rows, each checked to be a row as written."""
    ids = []
    for xb, yb in loader:
        i = xb[:, 0]
        assert np.array_equal(xb[:, 1], 3 * i + 0.5) and np.array_equal(yb[:, 0], -i), "garbage"
        ids.append(i)
    return np.sort(np.concatenate(ids))


@pytest.mark.parametrize("change", CHANGES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_file_changed_between_epochs_is_an_error_or_the_file_opened(tmp_path, kind, change):
    n = 500
    path = _write(kind, tmp_path / "a", n, 0.0)
    os.utime(path, ns=(10**9, 10**9))  # an old mtime: any write in place moves it
    source = _open(kind, path)
    loader = DataLoader(source, 50, shuffle=True, seed=1)
    pickled = pickle.dumps(source)
    assert np.array_equal(_check(loader), np.arange(n))
    other = _write(kind, tmp_path / "b", 2 * n, 10.0**6)  # other rows, a larger file
    if change == "rewrite-larger":
        with open(path, "wb") as f:  # in place: the same inode, truncated then written
            f.write(open(other, "rb").read())
    elif change == "rewrite-keep-mtime":
        size = os.path.getsize(path)
        opened = os.stat(path).st_ctime_ns
        until_ctime_moves(path, opened, lambda: rewrite_in_place(path, offset=size // 2))
    else:
        shutil.copy(other, path + ".new")
        os.replace(path + ".new", path)
    if change == "replace":  # the file opened is still the one read, whole
        assert np.array_equal(_check(loader), np.arange(n))
        return
    with pytest.raises(NdfError, match="changed while open") as info:
        _check(loader)
    assert path in str(info.value)
    with pytest.raises(NdfError, match="changed between pickling and unpickling"):
        pickle.loads(pickled)
