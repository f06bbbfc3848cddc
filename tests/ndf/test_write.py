"""ndf/write.py: the atomic writers on their own - NdfWriter's blocks and raw rows, its
checks and messages, AtomicFile, atomic_path, the names sidecar in step with the data,
leaves_no_temps, Committing."""

from __future__ import annotations

import os
import stat
import struct

import numpy as np
import pytest

from exactbatch import Dataset, NdfError, open_ndf
from exactbatch.ndf import write
from exactbatch.ndf.names import read_sidecar, sidecar_path
from exactbatch.ndf.temps import host_tag
from exactbatch.ndf.write import (
    AtomicFile,
    Committing,
    NamesSidecar,
    NdfWriter,
    as_dataset,
    atomic_path,
    leaves_no_temps,
    save_ndf,
)

HEADER = struct.Struct("<4sQQQ")


def _rows(path) -> np.ndarray:
    with open_ndf(path) as f:
        x, y = f.read_rows(np.arange(f.n))
    return np.concatenate((x, y), axis=1)


def _temps(folder) -> list[str]:
    return sorted(e for e in os.listdir(folder) if e.endswith(".tmp"))


def test_ndf_writer_counts_the_rows_of_every_block(tmp_path):
    path = tmp_path / "w.ndf"
    blocks = [np.arange(6).reshape(2, 3), np.full((3, 3), 1.5, np.float32), np.zeros((0, 3))]
    with NdfWriter(path, 2, 1) as w:
        for b in blocks:
            w.write(b)
        assert w.rows == 5
    head = HEADER.unpack(path.read_bytes()[:28])
    assert head[1:] == (5, 2, 1)
    want = np.concatenate([b.astype(np.float64) for b in blocks])
    np.testing.assert_array_equal(_rows(path), want)
    assert path.stat().st_size == 28 + 5 * 3 * 8


def test_ndf_writer_with_n_promised_checks_it_at_commit(tmp_path):
    path = tmp_path / "w.ndf"
    w = NdfWriter(path, 1, 0, n=3)
    w.write(np.zeros((2, 1)))
    w.write(np.zeros((1, 1)))
    w.commit()
    assert HEADER.unpack(path.read_bytes()[:28])[1] == 3
    w = NdfWriter(tmp_path / "v.ndf", 1, 0, n=3)
    w.write(np.zeros((2, 1)))
    with pytest.raises(ValueError, match=r"v.ndf: the input promised 3 rows but 2 were written"):
        w.commit()
    assert not (tmp_path / "v.ndf").exists() and _temps(tmp_path) == []


def test_ndf_writer_refuses_a_block_of_the_wrong_shape(tmp_path):
    w = NdfWriter(tmp_path / "w.ndf", 2, 1)
    for bad in (np.zeros((2, 2)), np.zeros(3), np.zeros((1, 3, 1))):
        with pytest.raises(ValueError) as e:
            w.write(bad)
        assert str(e.value) == (
            f"{tmp_path / 'w.ndf'}: expected rows of shape (r, 3); got {bad.shape}"
        )
    assert w.rows == 0
    w.abort()
    assert os.listdir(tmp_path) == []


def test_ndf_writer_writes_little_endian_float64_whatever_it_is_given(tmp_path):
    path = tmp_path / "w.ndf"
    with NdfWriter(path, 2, 0) as w:
        w.write(np.array([[1, 2]], dtype=">i4"))
        w.write(np.array([[0.1, 3]], dtype=">f8"))
        w.write(np.array([[0.1, 4]], dtype=np.float32))
    body = np.frombuffer(path.read_bytes()[28:], dtype="<f8")
    np.testing.assert_array_equal(body, [1, 2, 0.1, 3, np.float64(np.float32(0.1)), 4])


def test_ndf_writer_write_raw_takes_whole_rows_in_the_file_layout(tmp_path):
    path = tmp_path / "w.ndf"
    rows = np.arange(6, dtype="<f8").reshape(3, 2)
    with NdfWriter(path, 1, 1) as w:
        w.write_raw(rows[:1].tobytes())
        w.write_raw(memoryview(rows[1:].tobytes()))
        with pytest.raises(ValueError) as e:
            w.write_raw(b"\0" * 24)
        assert str(e.value) == f"{path}: 24 bytes is not a whole number of rows"
        assert w.rows == 3
    np.testing.assert_array_equal(_rows(path), rows)
    assert HEADER.unpack(path.read_bytes()[:28])[1:] == (3, 1, 1)


def test_ndf_writer_of_no_columns_refuses_raw_rows(tmp_path):
    with NdfWriter(tmp_path / "w.ndf", 0, 0) as w:
        with pytest.raises(ValueError, match="0 bytes is not a whole number of rows"):
            w.write_raw(b"")
        w.write(np.zeros((4, 0)))
    assert HEADER.unpack((tmp_path / "w.ndf").read_bytes())[1:] == (4, 0, 0)


def test_ndf_writer_row_bytes(tmp_path):
    w = NdfWriter(tmp_path / "w.ndf", 2, 1)
    assert (w.d, w.l, w.n, w.rows, w.row_bytes) == (2, 1, None, 0, 24)
    assert os.path.dirname(w.temp_path) == str(tmp_path)
    w.abort()


def test_ndf_writer_checks_its_shape_naming_the_file(tmp_path):
    path = tmp_path / "w.ndf"
    with pytest.raises(NdfError, match=rf"^{path}: impossible shape n=0, d=2147483647, l=1"):
        NdfWriter(path, 2**31 - 1, 1)
    with pytest.raises(NdfError, match=rf"^{path}: impossible shape n=2\*\*70|^{path}: impossible"):
        NdfWriter(path, 1, 0, n=2**70)
    with pytest.raises(ValueError, match=str(path)):
        NdfWriter(path, 2, 0, features=["a", "a"])
    assert os.listdir(tmp_path) == []


def test_ndf_writer_calls_before_rename_at_commit(tmp_path):
    calls = []
    path = tmp_path / "w.ndf"
    with NdfWriter(path, 1, 0, before_rename=lambda: calls.append(path.exists())) as w:
        w.write(np.ones((1, 1)))
    assert calls == [False] and path.exists()

    def stop():
        raise KeyboardInterrupt

    w = NdfWriter(tmp_path / "v.ndf", 1, 0, before_rename=stop, features=["a"])
    w.write(np.ones((1, 1)))
    with pytest.raises(KeyboardInterrupt):
        w.commit()
    assert sorted(os.listdir(tmp_path)) == ["w.ndf"]


def test_ndf_writer_names_go_to_the_sidecar_at_commit(tmp_path):
    path = tmp_path / "w.ndf"
    with NdfWriter(path, 2, 1, features=["a", "b"], labels=["t"]) as w:
        w.write(np.zeros((2, 3)))
        assert not os.path.exists(sidecar_path(path))
    side = read_sidecar(path, 2, 2, 1)
    assert tuple(side[0]) == ("a", "b") and tuple(side[1]) == ("t",)
    assert _temps(tmp_path) == []


def test_ndf_writer_abort_removes_both_temps(tmp_path):
    path = tmp_path / "w.ndf"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError), NdfWriter(path, 1, 0, features=["a"]) as w:
        w.write(np.ones((1, 1)))
        assert len(_temps(tmp_path)) == 1
        raise RuntimeError
    assert sorted(os.listdir(tmp_path)) == ["w.ndf"] and path.read_bytes() == b"old"


def test_ndf_writer_aborts_when_its_header_cannot_be_written(tmp_path, monkeypatch):
    def fail(fd, buf):
        raise OSError("disk full")

    monkeypatch.setattr(write.os, "write", fail)
    with pytest.raises(OSError, match="disk full"):
        NdfWriter(tmp_path / "w.ndf", 1, 0)
    assert os.listdir(tmp_path) == []


def test_write_all_writes_in_as_many_calls_as_the_os_takes(tmp_path, monkeypatch):
    real = os.write
    sizes = []

    def short(fd, buf):
        n = real(fd, bytes(buf)[:5])
        sizes.append(n)
        return n

    monkeypatch.setattr(write.os, "write", short)
    path = tmp_path / "w.ndf"
    with NdfWriter(path, 1, 0) as w:
        w.write(np.arange(3.0).reshape(3, 1))
    np.testing.assert_array_equal(_rows(path)[:, 0], [0, 1, 2])
    assert sizes[0] == 5 and sum(sizes) == 28 + 24


def test_as_dataset():
    x = np.ones((2, 3))
    ds = Dataset(x)
    assert as_dataset(ds) is ds
    pair = as_dataset((x, np.zeros(2)))
    assert isinstance(pair, Dataset) and (pair.d, pair.l) == (3, 1)
    assert as_dataset(x).l == 0 and as_dataset(x).d == 3
    with pytest.raises(
        TypeError, match=r"^data must be a Dataset or an \(x, y\) pair; got a 3-tuple$"
    ):
        as_dataset((x, x, x))
    with pytest.raises(TypeError, match="got a 1-tuple"):
        as_dataset((x,))


def test_save_ndf_of_labels_only_and_of_features_only_in_slabs(tmp_path, monkeypatch):
    monkeypatch.setattr(write, "_WRITE_ROWS_BYTES", 16)  # 2 rows of one column a slab
    y = np.arange(5.0).reshape(5, 1)
    save_ndf(tmp_path / "y.ndf", (np.zeros((5, 0)), y))
    np.testing.assert_array_equal(_rows(tmp_path / "y.ndf"), y)
    save_ndf(tmp_path / "x.ndf", y)
    np.testing.assert_array_equal(_rows(tmp_path / "x.ndf"), y)
    x = np.arange(10.0).reshape(5, 2)
    monkeypatch.setattr(write, "_WRITE_ROWS_BYTES", 1)  # less than a row: a row a slab
    save_ndf(tmp_path / "xy.ndf", (x, y))
    np.testing.assert_array_equal(_rows(tmp_path / "xy.ndf"), np.concatenate((x, y), axis=1))


def test_save_ndf_names_and_their_removal(tmp_path):
    path = tmp_path / "s.ndf"
    save_ndf(path, np.zeros((2, 2)), features=["a", "b"])
    assert tuple(read_sidecar(path, 2, 2, 0)[0]) == ("a", "b")
    save_ndf(path, np.zeros((2, 2)))  # without names: the old sidecar goes
    assert sorted(os.listdir(tmp_path)) == ["s.ndf"]


def test_save_ndf_failing_removes_the_sidecars_temp(tmp_path, monkeypatch):
    def fail(f, data):
        raise OSError("disk full")

    monkeypatch.setattr(write, "write_ndf_to", fail)
    with pytest.raises(OSError):
        save_ndf(tmp_path / "s.ndf", np.zeros((2, 1)), features=["a"])
    assert os.listdir(tmp_path) == []


def test_a_stale_sidecar_is_removed_only_if_it_is_one(tmp_path):
    side = tmp_path / "s.ndf.json"
    side.write_text('{"format": "exactbatch.ndf.names", "version": 1}')
    write._remove_stale_sidecar(str(side))
    assert not side.exists()
    side.write_text('{"format": "someone else"}')
    write._remove_stale_sidecar(str(side))
    assert side.exists()
    write._remove_stale_sidecar(str(tmp_path / "missing.json"))  # nothing raised
    side.unlink()
    side.mkdir()
    write._remove_stale_sidecar(str(side))  # a folder: left alone
    assert side.is_dir()


def test_a_stale_sidecar_is_recognised_by_its_first_256_bytes(tmp_path):
    side = tmp_path / "s.ndf.json"
    side.write_text(" " * 230 + '{"format": "exactbatch.ndf.names"}')  # the name ends at 263
    write._remove_stale_sidecar(str(side))
    assert side.exists()
    side.write_text(" " * 200 + '{"format": "exactbatch.ndf.names"}')
    write._remove_stale_sidecar(str(side))
    assert not side.exists()


def test_names_sidecar_without_names_prepares_nothing(tmp_path):
    s = NamesSidecar(str(tmp_path / "a.ndf"), None)
    assert s.path == str(tmp_path / "a.ndf.json") and s.categories is None
    s.prepare(1, 1, 0)
    assert os.listdir(tmp_path) == []
    s.abort()
    s.commit()


def test_atomic_file_commit_and_abort(tmp_path):
    path = tmp_path / "f.bin"
    out = AtomicFile(path)
    assert out.path == str(path) and out.folder == str(tmp_path)
    assert os.path.dirname(out.temp) == str(tmp_path) and out.fd >= 0
    os.write(out.fd, b"new")
    assert not path.exists()
    out.commit()
    assert path.read_bytes() == b"new" and out.fd == -1 and _temps(tmp_path) == []
    out = AtomicFile(path)
    os.write(out.fd, b"other")
    out.abort()
    out.abort()  # idempotent
    assert path.read_bytes() == b"new" and _temps(tmp_path) == []


def test_atomic_file_refuses_a_missing_folder(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        AtomicFile(tmp_path / "no" / "f.bin")
    assert e.value.filename == str(tmp_path / "no" / "f.bin")
    assert "folder does not exist" in str(e.value)
    assert not (tmp_path / "no").exists()


def test_atomic_file_removes_dead_writers_temps_first(tmp_path):
    import subprocess
    import sys

    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    stale = tmp_path / f".f.bin.{host_tag()}.{p.pid}.0123456789ab.tmp"
    stale.write_bytes(b"")
    out = AtomicFile(tmp_path / "f.bin")
    assert not stale.exists()
    out.abort()


def test_atomic_file_commit_runs_finish_and_aborts_on_its_error(tmp_path):
    path = tmp_path / "f.bin"
    order = []
    out = AtomicFile(path, before_rename=lambda: order.append("before"))
    out.commit(finish=lambda: order.append("finish"))
    assert order == ["before", "finish"] and path.exists()

    def fail():
        raise ValueError("no")

    out = AtomicFile(tmp_path / "g.bin")
    with pytest.raises(ValueError):
        out.commit(fail)
    assert not (tmp_path / "g.bin").exists() and _temps(tmp_path) == []


def test_atomic_file_commit_after_close_fd_reopens_to_fsync(tmp_path, monkeypatch):
    out = AtomicFile(tmp_path / "f.bin")
    os.write(out.fd, b"abc")
    out.close_fd()
    out.close_fd()  # twice: nothing
    synced = []
    real = os.fsync

    def fsync(fd):
        synced.append(stat.S_ISREG(os.fstat(fd).st_mode))
        real(fd)

    monkeypatch.setattr(write.os, "fsync", fsync)
    out.commit()  # the file (reopened), then the folder
    assert synced == [True, False] and (tmp_path / "f.bin").read_bytes() == b"abc"


def test_atomic_path(tmp_path):
    path = tmp_path / "f.bin"
    with atomic_path(path) as tmp:
        assert isinstance(tmp, str) and os.path.dirname(tmp) == str(tmp_path)
        with open(tmp, "wb") as f:
            f.write(b"x")
        assert not path.exists()
    assert path.read_bytes() == b"x" and _temps(tmp_path) == []
    with pytest.raises(KeyboardInterrupt), atomic_path(path) as tmp:
        with open(tmp, "wb") as f:
            f.write(b"y")
        raise KeyboardInterrupt
    assert path.read_bytes() == b"x" and _temps(tmp_path) == []
    calls = []
    with atomic_path(tmp_path / "g.bin", before_rename=lambda: calls.append(1)) as tmp:
        open(tmp, "wb").close()
    assert calls == [1]


def test_leaves_no_temps_removes_this_process_temps_and_the_sidecars(tmp_path):
    path = tmp_path / "f.ndf"
    me, host = os.getpid(), host_tag()
    own = [f".f.ndf.{host}.{me}.0123456789ab.tmp", f".f.ndf.json.{host}.{me}.0123456789ab.tmp"]
    with leaves_no_temps(path):
        pass
    with pytest.raises(KeyboardInterrupt), leaves_no_temps(path):
        for e in own:
            (tmp_path / e).write_bytes(b"")
        raise KeyboardInterrupt
    assert os.listdir(tmp_path) == []
    for e in own:
        (tmp_path / e).write_bytes(b"")
    with leaves_no_temps(path):  # a clean exit removes nothing
        pass
    assert sorted(os.listdir(tmp_path)) == sorted(own)


def test_committing_commits_on_a_clean_exit_and_aborts_on_an_error():
    class W(Committing):
        def __init__(self):
            self.calls = []

        def commit(self):
            self.calls.append("commit")

        def abort(self):
            self.calls.append("abort")

    with W() as w:
        pass
    assert w.calls == ["commit"]
    with pytest.raises(KeyError), W() as w:
        raise KeyError
    assert w.calls == ["abort"]
    with pytest.raises(NotImplementedError):
        Committing().commit()
    with pytest.raises(NotImplementedError):
        Committing().abort()
