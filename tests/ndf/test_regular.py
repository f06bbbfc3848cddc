"""ndf/regular.py: every local file exactbatch reads is opened without blocking and checked
to be a regular file (each function on its own, with its messages)."""

from __future__ import annotations

import fcntl
import os
import socket

import pytest
from helpers import fifo

from exactbatch import NdfError
from exactbatch.ndf import regular
from exactbatch.ndf.regular import check_regular, open_regular, read_regular, regular_file


def test_open_regular_gives_a_blocking_close_on_exec_read_only_descriptor(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"hello")
    fd = open_regular(p)  # a PathLike
    try:
        assert os.read(fd, 10) == b"hello"
        assert os.get_blocking(fd)
        assert not os.get_inheritable(fd)  # O_CLOEXEC
        assert fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_RDONLY
    finally:
        os.close(fd)


def test_open_regular_of_a_folder_is_is_a_directory_error(tmp_path):
    with pytest.raises(IsADirectoryError) as e:
        open_regular(str(tmp_path), "a manifest")
    assert e.value.filename == str(tmp_path)
    assert e.value.strerror == "expected a manifest, found a folder"
    with pytest.raises(IsADirectoryError, match="expected a file, found a folder"):
        open_regular(tmp_path)


def test_open_regular_refuses_a_fifo_at_once_naming_it(tmp_path):
    with fifo(tmp_path / "p") as path:
        with pytest.raises(NdfError) as e:
            open_regular(path, "an .ndf file")
    assert str(e.value) == (
        f"{os.fspath(path)}: not a regular file: expected an .ndf file, found a FIFO (named pipe)"
    )


def test_open_regular_names_a_device_and_a_socket(tmp_path):
    with pytest.raises(
        NdfError, match="^/dev/null: not a regular file: expected a file, found a character device$"
    ):
        open_regular("/dev/null")
    path = str(tmp_path / "s")
    s = socket.socket(socket.AF_UNIX)
    try:
        s.bind(path)
        # a socket cannot be opened (ENXIO): what the OS says, as any other error
        with pytest.raises(OSError):
            open_regular(path)
    finally:
        s.close()


def test_open_regular_closes_its_descriptor_on_a_refusal(tmp_path, monkeypatch):
    closed = []
    real = os.close
    monkeypatch.setattr(regular.os, "close", lambda fd: (closed.append(fd), real(fd)))
    with pytest.raises(IsADirectoryError):
        open_regular(tmp_path)
    with pytest.raises(NdfError):
        open_regular("/dev/null")
    assert len(closed) == 2


def test_open_regular_of_a_missing_file_is_the_os_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        open_regular(tmp_path / "missing")


def test_regular_file_and_check_regular(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    with regular_file(p) as f:
        assert f.read() == b"abc" and f.mode == "rb"
    with regular_file(p, buffering=0) as f:
        assert f.read(2) == b"ab" and not hasattr(f, "raw")  # unbuffered: a FileIO
    check_regular(p)
    with pytest.raises(NdfError, match="^/dev/null: not a regular file: expected a file, found"):
        check_regular("/dev/null")  # what= by default
    with pytest.raises(NdfError, match="expected a parquet file, found a character device"):
        check_regular("/dev/null", "a parquet file")
    with pytest.raises(IsADirectoryError, match="expected a sidecar, found a folder"):
        regular_file(tmp_path, "a sidecar")


def test_check_regular_closes_its_descriptor(tmp_path, monkeypatch):
    p = tmp_path / "f.bin"
    p.write_bytes(b"abc")
    closed = []
    real = os.close
    monkeypatch.setattr(regular.os, "close", lambda fd: (closed.append(fd), real(fd)))
    check_regular(p)
    assert len(closed) == 1


def test_read_regular_reads_up_to_its_limit(tmp_path):
    p = tmp_path / "doc.json"
    p.write_bytes(b"12345")
    assert read_regular(p, 5, "a doc") == b"12345"
    assert read_regular(str(p), 100, "a doc") == b"12345"
    with pytest.raises(NdfError) as e:
        read_regular(p, 4, "a doc")
    assert str(e.value) == f"{p}: 5 bytes is too large for a doc (at most 4 bytes)"
    (tmp_path / "empty").write_bytes(b"")
    assert read_regular(tmp_path / "empty", 0, "a doc") == b""


def test_read_regular_refuses_a_file_grown_since_its_fstat(tmp_path, monkeypatch):
    p = tmp_path / "doc.json"
    p.write_bytes(b"123")
    real = os.fstat

    calls = []

    def fstat(fd):  # the file grows between read_regular's fstat (the second) and the read
        st = real(fd)
        calls.append(fd)
        if len(calls) == 2:
            with open(p, "ab") as f:
                f.write(b"45")
        return st

    monkeypatch.setattr(regular.os, "fstat", fstat)
    with pytest.raises(NdfError) as e:
        read_regular(p, 3, "a doc")
    assert str(e.value) == f"{p}: too large for a doc (at most 3 bytes)"


def test_read_regular_of_a_file_grown_within_its_limit_reads_one_byte_more(tmp_path, monkeypatch):
    p = tmp_path / "doc.json"
    p.write_bytes(b"123")
    real = os.fstat

    calls = []

    def fstat(fd):  # the file grows between read_regular's fstat (the second) and the read
        st = real(fd)
        calls.append(fd)
        if len(calls) == 2:
            with open(p, "ab") as f:
                f.write(b"45")
        return st

    monkeypatch.setattr(regular.os, "fstat", fstat)
    assert read_regular(p, 10, "a doc") == b"1234"  # size + 1 bytes: still within the limit
