"""Temporary files of atomic writes: their names, creation, and clean-up.

A writer writes ``.NAME.<host>.<pid>.<random>.tmp`` beside the target and
renames it over the target when whole (:mod:`exactbatch.ndf.write`). The
name says who wrote it, so that a file left by a writer that died (killed
mid-write) is removed by the next writer on the same host, and a failed
write removes its own.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import socket

__all__ = ["create_temp", "fsync_folder", "host_tag", "remove_own_temps", "remove_stale_temps"]

# What follows ".NAME." in a temporary file's name: host tag, writer's pid, random part.
_TEMP_TAIL = re.compile(r"(?P<host>[0-9a-f]{8})\.(?P<pid>[1-9][0-9]{0,9})\.[0-9a-f]{12}\.tmp")


def _temp_stem(name: str) -> str:
    # keep the temporary name within NAME_MAX (255 bytes) for long target names
    return os.fsdecode(os.fsencode(name)[:200])


def host_tag() -> str:
    """8 hex digits naming this host: pids are only compared on the host that wrote them."""
    return hashlib.blake2s(socket.gethostname().encode(), digest_size=4).hexdigest()


def _pid_alive(pid: int) -> bool:
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
    _remove_temps(folder, name, lambda pid: pid != me and not _pid_alive(pid))


def remove_own_temps(path) -> None:
    """Remove this process's temporary files of ``path``, after a failed write.

    The writers remove their own, but an exception raised asynchronously (a
    Ctrl-C) can land between a file's creation and the code that would
    remove it. Best effort: errors are ignored.
    """
    path = os.fspath(path)
    me = os.getpid()
    _remove_temps(os.path.dirname(os.path.abspath(path)), os.path.basename(path), me.__eq__)


def _remove_temps(folder: str, name: str, remove) -> None:
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
