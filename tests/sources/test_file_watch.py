"""exactbatch.sources.file_watch on its own: the stamps of watched files, the check after
each batch, the stamps carried in a pickle. (Through the Arrow IPC and Hugging Face
sources: tests/reliability/test_file_identity.py.)"""

from __future__ import annotations

import gc
import os
import pickle
import re

import pytest

from exactbatch.errors import NdfError
from exactbatch.sources.file_watch import FileWatch, check_same, stamp


def _files(tmp_path, k=2):
    paths = []
    for i in range(k):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(bytes(range(10 + i)))
        paths.append(p)
    return paths


def test_stamp_is_size_mtime_and_ctime_in_bytes_and_ns(tmp_path):
    (p,) = _files(tmp_path, 1)
    st = os.stat(p)
    assert stamp(st) == (10, st.st_mtime_ns, st.st_ctime_ns)


def test_a_watch_stamps_each_file_and_passes_while_none_changed(tmp_path):
    paths = _files(tmp_path)
    w = FileWatch(paths, "a test file")
    assert w.paths == [os.fspath(p) for p in paths] and w.what == "a test file"
    assert w.stamps == [stamp(os.stat(p)) for p in paths]
    w.check()
    w.check()


@pytest.mark.parametrize("which", [0, 1])
def test_a_file_grown_or_truncated_in_place_is_an_error_naming_it(tmp_path, which):
    """Any file of the watch, the first or a later one: an NdfError naming it and saying
    how it changed, never a check that passes."""
    paths = _files(tmp_path)
    w = FileWatch(paths, "a test file")
    st = os.stat(paths[which])
    with open(paths[which], "r+b") as f:
        f.truncate(3)
    os.utime(paths[which], ns=(st.st_atime_ns, st.st_mtime_ns))  # its mtime put back
    with pytest.raises(NdfError) as info:
        w.check()
    assert str(info.value) == (
        f"{os.fspath(paths[which])}: the file changed while open: expected "
        f"{10 + which} bytes, found 3 (truncated?); build the source again to read the "
        "new contents, and replace files by a rename instead"
    )


def test_a_file_rewritten_in_place_is_an_error_naming_what_changed(tmp_path):
    paths = _files(tmp_path)
    w = FileWatch(paths, "a test file")
    st = os.stat(paths[1])
    with open(paths[1], "r+b") as f:
        f.write(b"\xff")  # the same size
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    with pytest.raises(NdfError, match=re.escape("(its modification time changed)")):
        w.check()


def test_a_file_replaced_by_a_rename_is_not_a_change(tmp_path):
    """The descriptor held is the file opened: a rename over it, or a delete, leaves it."""
    paths = _files(tmp_path)
    w = FileWatch(paths, "a test file")
    new = tmp_path / "new.bin"
    new.write_bytes(b"other")
    os.replace(new, paths[0])
    os.unlink(paths[1])
    w.check()


def test_a_folder_is_refused_naming_what_was_expected(tmp_path):
    with pytest.raises(IsADirectoryError, match="expected a test file, found a folder"):
        FileWatch([tmp_path], "a test file")


def test_a_pickled_watch_opens_its_files_again_and_refuses_one_changed_since(tmp_path):
    paths = _files(tmp_path)
    w = FileWatch(paths, "a test file")
    copy = pickle.loads(pickle.dumps(w))
    assert (copy.paths, copy.what, copy.stamps) == (w.paths, w.what, w.stamps)
    copy.check()
    blob = pickle.dumps(w)
    with open(paths[1], "ab") as f:
        f.write(b"more")
    with pytest.raises(NdfError) as info:
        pickle.loads(blob)
    was, now = w.stamps[1], stamp(os.stat(paths[1]))
    assert str(info.value) == (
        f"{os.fspath(paths[1])}: the file changed between pickling and unpickling (size, "
        f"modification and change times {was} when pickled, {now} now); build the source "
        "again"
    )


def test_check_same_compares_stamps_as_tuples():
    check_same("p", [1, 2, 3], (1, 2, 3))  # a list from JSON is the same stamp
    with pytest.raises(NdfError, match="^q: the file changed between pickling"):
        check_same("q", (1, 2, 3), (1, 2, 4))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd")
def test_a_watch_closes_its_descriptors_when_it_goes(tmp_path):
    paths = _files(tmp_path, 3)
    w = FileWatch(paths, "a test file")
    fds = list(w._fds)
    assert [os.readlink(f"/proc/self/fd/{fd}") for fd in fds] == [str(p) for p in paths]
    del w
    gc.collect()
    for fd, p in zip(fds, paths, strict=True):  # closed (or the number reused elsewhere)
        try:
            assert os.readlink(f"/proc/self/fd/{fd}") != str(p)
        except FileNotFoundError:
            pass
