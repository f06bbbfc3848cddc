"""Safe copies from a file's memory map: the read lease (Linux).

A copy from a mapping of a file that another process truncates during the
copy would end the process with SIGBUS. On Linux every copy from the map is
therefore made under a read lease (``fcntl(F_SETLEASE, F_RDLCK)``), taken
before the size check and released after the copy: a process that truncates
or opens the file for writing in that instant waits (microseconds to a few
milliseconds) until the copy is done, and the next read sees the change.
When the file is already open for writing somewhere (no lease is granted
then), scattered rows are read with positional reads, which cannot fault.
Where the OS gives no lease (not Linux, a file owned by another user, a
network filesystem) the copy is unguarded and the race remains: see
:attr:`exactbatch.NdfFile.guarded`.
"""

from __future__ import annotations

import errno
import os
import signal
import sys
import threading
import weakref

__all__ = ["F_GETLEASE", "F_SETLEASE", "F_SETSIG", "Lease"]

# Linux only; all three or none (then copies from the map are unguarded)
if sys.platform == "linux":
    import fcntl

    F_SETLEASE, F_GETLEASE, F_SETSIG = fcntl.F_SETLEASE, fcntl.F_GETLEASE, fcntl.F_SETSIG
else:  # pragma: no cover - other systems
    fcntl = None
    F_SETLEASE = F_GETLEASE = F_SETSIG = None


class Lease:
    """The read lease held on one open file while rows are copied from its map.

    While it is held, a process that truncates the file or opens it for
    writing waits in the kernel until it is released (or for at most
    ``/proc/sys/fs/lease-break-time`` seconds), so a copy never meets a
    truncated page. The lease belongs to the open file, which threads
    share: the first copier takes it and the last one releases it.
    """

    __slots__ = ("__weakref__", "fd", "holders", "lock", "works")

    def __init__(self, fd: int):
        self.fd, self.holders, self.lock = fd, 0, threading.Lock()
        self.works = F_SETLEASE is not None
        if self.works:
            _LEASES.add(self)

    def _after_fork(self) -> None:
        """In a forked child: a lease of its own, on a new open file of the same inode.

        (Parent and child share the inherited open file, and with it one
        lease: one's release would end the other's copy's lease.)
        """
        self.lock, self.holders = threading.Lock(), 0
        try:
            fd = os.open(f"/proc/self/fd/{self.fd}", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:  # no /proc: copies in the child are unguarded
            self.works = False
            return
        self.fd = fd
        weakref.finalize(self, os.close, fd)

    def acquire(self) -> bool | None:
        """Hold the lease for one copy from the map.

        True: held, call :meth:`release` after the copy. False: the OS gives
        no lease for this file (not Linux, not the file's owner, a network
        filesystem): copy unguarded. None: the file is open for writing
        somewhere, or about to be truncated: read with positional reads.
        """
        if not self.works:
            return False
        with self.lock:
            if self.holders:
                # A writer is waiting for the lease: do not hold it off with
                # more overlapping copies (it would wait the full break time).
                if fcntl.fcntl(self.fd, F_GETLEASE) != fcntl.F_RDLCK:
                    return None
            else:
                try:
                    # The kernel signals a lease's holder when a writer waits for it:
                    # SIGIO by default, which kills a process with no handler. Make it
                    # SIGURG, ignored by default. (Every release resets it to SIGIO.)
                    fcntl.fcntl(self.fd, F_SETSIG, signal.SIGURG)
                    fcntl.fcntl(self.fd, F_SETLEASE, fcntl.F_RDLCK)
                except OSError as e:
                    if e.errno == errno.EAGAIN:
                        return None
                    self.works = False  # EACCES, EINVAL, ENOLCK: never retried
                    return False
            self.holders += 1
            return True

    def release(self) -> None:
        """End one copy begun by a successful :meth:`acquire`; the last one lets go."""
        with self.lock:
            self.holders -= 1
            if not self.holders:
                try:
                    fcntl.fcntl(self.fd, F_SETLEASE, fcntl.F_UNLCK)
                except OSError:  # pragma: no cover - broken by the kernel after the break time
                    pass

    def guards(self) -> bool:
        """Can a truncation by another process never crash a copy from this file's map?"""
        held = self.acquire()
        if held:
            self.release()
        return held is not False


_LEASES: weakref.WeakSet[Lease] = weakref.WeakSet()  # every lease in this process, for forks


def _leases_after_fork() -> None:
    for lease in list(_LEASES):
        lease._after_fork()


if F_SETLEASE is not None:
    os.register_at_fork(after_in_child=_leases_after_fork)
