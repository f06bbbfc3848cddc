"""ndf/temps.py: the temporary files of atomic writes and the write ids, named, parsed,
created and cleaned up (each function on its own, with the names it must give)."""

from __future__ import annotations

import os
import re
import stat
import subprocess
import sys

import pytest

from exactbatch.ndf import temps
from exactbatch.ndf.temps import (
    WRITE_ID,
    create_temp,
    fsync_folder,
    host_tag,
    new_write_id,
    parse_temp,
    parse_write_id,
    pid_alive,
    remove_own_temps,
    remove_stale_temps,
)


def _dead_pid() -> int:
    """The pid of a process that has ended (and been reaped)."""
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_host_tag_is_8_hex_digits_of_the_host_name_and_pid_namespace(monkeypatch):
    tag = host_tag()
    assert re.fullmatch("[0-9a-f]{8}", tag) and host_tag() == tag
    monkeypatch.setattr(temps.socket, "gethostname", lambda: "another-host")
    assert host_tag() != tag


def test_host_tag_without_a_pid_namespace_is_the_host_names_alone(monkeypatch):
    import hashlib

    def no_link(path):
        raise OSError("no /proc")

    monkeypatch.setattr(temps.os, "readlink", no_link)
    monkeypatch.setattr(temps.socket, "gethostname", lambda: "h")
    assert host_tag() == hashlib.blake2s(b"h\0", digest_size=4).hexdigest()


def test_pid_alive():
    assert pid_alive(os.getpid())
    assert not pid_alive(_dead_pid())
    assert pid_alive(1)  # init: someone else's (PermissionError) or ours as root: alive
    assert pid_alive(2**70)  # too large for the OS: not ours to judge


def test_pid_alive_off_posix_is_always_true(monkeypatch):
    monkeypatch.setattr(temps.os, "name", "nt")
    assert pid_alive(_dead_pid())


def test_a_write_id_names_this_host_and_process():
    wid = new_write_id()
    assert re.fullmatch(WRITE_ID, wid)
    assert parse_write_id(wid) == (host_tag(), os.getpid())
    assert new_write_id() != wid  # the random part
    assert parse_write_id("0123abcd-42-deadbeef") == ("0123abcd", 42)
    for bad in ("0123abcd-042-deadbeef", "0123abcd-0-deadbeef", "0123abc-42-deadbeef"):
        assert not re.fullmatch(WRITE_ID, bad)


def test_create_temp_names_who_wrote_it_and_parse_temp_reads_it_back(tmp_path):
    path, fd = create_temp(str(tmp_path), "data.ndf")
    try:
        os.write(fd, b"abc")
    finally:
        os.close(fd)
    entry = os.path.basename(path)
    assert os.path.dirname(path) == str(tmp_path)
    assert re.fullmatch(r"\.data\.ndf\.[0-9a-f]{8}\.[0-9]+\.[0-9a-f]{12}\.tmp", entry)
    assert parse_temp(entry) == ("data.ndf", host_tag(), os.getpid())
    with open(path, "rb") as f:
        assert f.read() == b"abc"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask


def test_parse_temp_refuses_other_names():
    for entry in (
        "data.ndf",
        ".data.ndf.0123abcd.42.0123456789ab",  # no .tmp
        ".data.ndf.0123abcd.042.0123456789ab.tmp",  # a pid with a leading 0
        ".data.ndf.0123abc.42.0123456789ab.tmp",  # 7 hex digits of host
        "data.ndf.0123abcd.42.0123456789ab.tmp",  # no leading dot
        ".data.ndf.0123abcd.42.0123456789ab.tmpx",
    ):
        assert parse_temp(entry) is None, entry
    assert parse_temp(".a.b.0123abcd.42.0123456789ab.tmp") == ("a.b", "0123abcd", 42)


def test_create_temp_retries_a_name_taken(tmp_path, monkeypatch):
    tokens = iter(["aaaaaaaaaaaa", "aaaaaaaaaaaa", "bbbbbbbbbbbb"])
    monkeypatch.setattr(temps.secrets, "token_hex", lambda n: next(tokens))
    first, fd = create_temp(str(tmp_path), "x")
    os.close(fd)
    second, fd = create_temp(str(tmp_path), "x")
    os.close(fd)
    assert first.endswith(".aaaaaaaaaaaa.tmp") and second.endswith(".bbbbbbbbbbbb.tmp")


def test_a_long_target_name_is_cut_to_200_bytes_in_its_temps_name(tmp_path):
    name = "é" * 150  # 300 bytes
    path, fd = create_temp(str(tmp_path), name)
    os.close(fd)
    entry = os.path.basename(path)
    stem = os.fsdecode(os.fsencode(name)[:200])
    assert entry.startswith(f".{stem}.") and len(os.fsencode(entry)) < 255
    assert parse_temp(entry)[0] == stem
    # and the clean-up finds it by the same stem
    remove_own_temps(tmp_path / name)
    assert not os.path.exists(path)


def _temp(folder, name, host, pid) -> str:
    entry = f".{name}.{host}.{pid}.0123456789ab.tmp"
    (folder / entry).write_bytes(b"")
    return entry


def test_remove_stale_temps_removes_only_this_hosts_dead_writers_files(tmp_path):
    me, dead, host = os.getpid(), _dead_pid(), host_tag()
    other = "ffffffff" if host != "ffffffff" else "eeeeeeee"
    stale = _temp(tmp_path, "d.ndf", host, dead)
    kept = [
        _temp(tmp_path, "d.ndf", host, me),  # a live writer's (this one)
        _temp(tmp_path, "d.ndf", other, dead),  # another host's
        _temp(tmp_path, "e.ndf", host, dead),  # another target's
        ".d.ndf.junk.tmp",  # named otherwise
    ]
    (tmp_path / ".d.ndf.junk.tmp").write_bytes(b"")
    remove_stale_temps(str(tmp_path), "d.ndf")
    assert sorted(os.listdir(tmp_path)) == sorted(kept)
    assert stale not in os.listdir(tmp_path)


def test_remove_stale_temps_off_posix_removes_nothing(tmp_path, monkeypatch):
    entry = _temp(tmp_path, "d.ndf", host_tag(), _dead_pid())
    monkeypatch.setattr(temps.os, "name", "nt")
    remove_stale_temps(str(tmp_path), "d.ndf")
    assert os.listdir(tmp_path) == [entry]


def test_remove_own_temps_removes_this_process_files_only(tmp_path):
    host = host_tag()
    own = _temp(tmp_path, "d.ndf", host, os.getpid())
    others = sorted([_temp(tmp_path, "d.ndf", host, _dead_pid()), "d.ndf"])
    (tmp_path / "d.ndf").write_bytes(b"x")
    remove_own_temps(tmp_path / "d.ndf")  # a PathLike
    assert sorted(os.listdir(tmp_path)) == others and own not in others


def test_remove_own_temps_of_a_relative_path_looks_in_its_folder(tmp_path, monkeypatch):
    own = _temp(tmp_path, "d.ndf", host_tag(), os.getpid())
    monkeypatch.chdir(tmp_path)
    remove_own_temps("d.ndf")
    assert own not in os.listdir(tmp_path)


def test_removal_is_best_effort(tmp_path, monkeypatch):
    remove_own_temps(tmp_path / "missing-folder" / "d.ndf")  # the folder cannot be listed
    own = _temp(tmp_path, "d.ndf", host_tag(), os.getpid())
    after = _temp(tmp_path, "d.ndf", host_tag(), os.getpid() + 10**9)
    removed = []

    def unlink(p):
        removed.append(os.path.basename(p))
        raise PermissionError(p)

    monkeypatch.setattr(temps.os, "unlink", unlink)
    remove_own_temps(tmp_path / "d.ndf")
    assert removed == [own] and after in os.listdir(tmp_path)


def test_fsync_folder_is_best_effort(tmp_path, monkeypatch):
    fsync_folder(str(tmp_path))
    fsync_folder(str(tmp_path / "missing"))  # cannot be opened: nothing raised
    closed = []
    real_close = os.close

    def fsync(fd):
        raise OSError("EINVAL")

    def close(fd):
        closed.append(fd)
        real_close(fd)

    monkeypatch.setattr(temps.os, "fsync", fsync)
    monkeypatch.setattr(temps.os, "close", close)
    fsync_folder(str(tmp_path))
    assert len(closed) == 1  # closed even when the fsync fails


@pytest.mark.skipif(os.name != "posix", reason="opens a folder")
def test_fsync_folder_fsyncs_the_folder(tmp_path, monkeypatch):
    seen = []
    real = os.fsync

    def fsync(fd):
        seen.append(os.path.samestat(os.fstat(fd), os.stat(tmp_path)))
        real(fd)

    monkeypatch.setattr(temps.os, "fsync", fsync)
    fsync_folder(str(tmp_path))
    assert seen == [True]
