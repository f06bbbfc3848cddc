"""Temporary files of atomic writes, and write ids: their names, creation, and clean-up.

A writer writes ``.NAME.<host>.<pid>.<random>.tmp`` beside the target and
renames it over the target when whole (:mod:`exactbatch.ndf.write`). The
name says who wrote it, so that a file left by a writer that died (killed
mid-write) is removed by the next writer on the same host, and a failed
write removes its own.

A dataset write (:mod:`exactbatch.ndf.dataset_protocol`) names its parts with a
write id, ``<host>-<pid>-<random>`` (:func:`new_write_id`): it tells two
writers apart, and says on which host and in which process the write runs,
so that a later write can tell whether it is over (:func:`parse_write_id`).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket
from collections.abc import Callable

from exactbatch.hints import PathLike

__all__ = [
    "WRITE_ID",
    "create_temp",
    "fsync_folder",
    "host_tag",
    "new_write_id",
    "parse_temp",
    "parse_write_id",
    "pid_alive",
    "remove_own_temps",
    "remove_stale_temps",
]

# What follows ".NAME." in a temporary file's name: host tag, writer's pid, random part.
_TEMP_TAIL = re.compile(r"(?P<host>[0-9a-f]{8})\.(?P<pid>[1-9][0-9]{0,9})\.[0-9a-f]{12}\.tmp")
_TEMP = re.compile(r"\.(?P<name>.+)\." + _TEMP_TAIL.pattern)
# A write id: host tag, the pid of the process that runs the write, random part.
WRITE_ID = r"[0-9a-f]{8}-[1-9][0-9]{0,9}-[0-9a-f]{8}"


def _temp_stem(name: str) -> str:
    # keep the temporary name within NAME_MAX (255 bytes) for long target names
    return os.fsdecode(os.fsencode(name)[:200])


def host_tag() -> str:
    """8 hex digits naming this host and its process id namespace: pids are only
    compared where they mean the same process (two containers that share a host name
    and a folder, each with pids of its own, are told apart)."""
    try:
        pids = os.readlink("/proc/self/ns/pid")  # Linux: "pid:[4026531836]"
    except OSError:
        pids = ""
    key = f"{socket.gethostname()}\0{pids}".encode()
    return hashlib.blake2s(key, digest_size=4).hexdigest()


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host (True where that cannot be told)."""
    if os.name != "posix":  # os.kill(pid, 0) only probes on POSIX
        return True
    try:
        os.kill(pid, 0)  # signal 0: no signal is sent, only the existence is checked
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # PermissionError: it exists (someone else's);
        return True  # a pid too large for this OS: not ours to judge, keep the file
    return True


def remove_stale_temps(folder: str, name: str) -> None:
    """Remove temporary files of ``name`` left by writers on this host that are gone.

    A writer killed mid-write leaves ``.NAME.<host>.<pid>.<random>.tmp``;
    such a file is removed once no process has that pid (a pid reused since
    keeps it until that process ends too). Best effort: errors are ignored.
    Files of live writers, of other hosts, or named otherwise are left alone.
    """
    if os.name != "posix":  # os.kill(pid, 0) only probes on POSIX
        return
    me = os.getpid()
    _remove_temps(folder, name, lambda pid: pid != me and not pid_alive(pid))


def remove_own_temps(path: PathLike) -> None:
    """Remove this process's temporary files of ``path``, after a failed write.

    The writers remove their own, but an exception raised asynchronously (a
    Ctrl-C) can land between a file's creation and the code that would
    remove it. Best effort: errors are ignored.
    """
    path = os.fspath(path)
    me = os.getpid()
    _remove_temps(os.path.dirname(os.path.abspath(path)), os.path.basename(path), me.__eq__)


def _remove_temps(folder: str, name: str, remove: Callable[[int], bool]) -> None:
    """Remove this host's temporary files of ``name`` whose writer's pid passes ``remove``."""
    prefix, host = f".{_temp_stem(name)}.", host_tag()
    try:
        with os.scandir(folder) as entries:
            names = [e.name for e in entries if e.name.startswith(prefix)]
    except OSError:
        return
    for entry in names:
        m = _TEMP_TAIL.fullmatch(entry, len(prefix))
        if m is None or m["host"] != host or not remove(int(m["pid"])):
            continue
        try:
            os.unlink(os.path.join(folder, entry))
        except OSError:
            pass


def parse_temp(entry: str) -> tuple[str, str, int] | None:
    """``(NAME, host, pid)`` of a temporary file named ``entry``, or None if it is not one
    (a name longer than 200 bytes is cut short in its temporary file's name)."""
    m = _TEMP.fullmatch(entry)
    return None if m is None else (m["name"], m["host"], int(m["pid"]))


def new_write_id() -> str:
    """A fresh write id: ``<host>-<pid>-<random>`` (8 hex digits, this process's id,
    8 random hex digits)."""
    return f"{host_tag()}-{os.getpid()}-{secrets.token_hex(4)}"


def parse_write_id(write_id: str) -> tuple[str, int]:
    """``(host, pid)`` of a write id made by :func:`new_write_id`."""
    host, pid, _ = write_id.split("-")
    return host, int(pid)


def create_temp(folder: str, name: str) -> tuple[str, int]:
    stem, host, pid = _temp_stem(name), host_tag(), os.getpid()
    while True:
        tmp = os.path.join(folder, f".{stem}.{host}.{pid}.{secrets.token_hex(6)}.tmp")
        try:  # O_EXCL with mode 0o666 so the final file gets the umask's permissions
            return tmp, os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue


def fsync_folder(folder: str) -> None:
    """Make the rename durable; best effort where folders cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
