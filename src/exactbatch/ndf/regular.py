"""Opening a local file for reading without ever blocking: the one way every reader opens one.

A plain ``open()`` of a FIFO (a named pipe) waits for a writer that may
never come, and a read of a character device (``/dev/zero``) may never end:
a reader handed one would hang. Every local file exactbatch reads - an
``.ndf`` file or a dataset's part, a manifest, a names sidecar, an input of
the command line (Parquet, CSV, ``.npy``) - is opened here: with
``O_NONBLOCK``, so that the open returns at once whatever the file is, then
checked with ``fstat`` to be a regular file, and ``O_NONBLOCK`` cleared again
before anything is read. A folder is the OS's ``IsADirectoryError``; any
other file that is not a regular file an :class:`NdfError` naming it
("not a regular file"). Cost: one ``fstat`` and two ``fcntl`` per open.
"""

from __future__ import annotations

import errno
import os
import stat
from io import FileIO
from typing import BinaryIO, Literal, overload

from exactbatch.errors import NdfError
from exactbatch.hints import PathLike

__all__ = ["check_regular", "open_regular", "read_regular", "regular_file"]

_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def open_regular(path: PathLike, what: str = "a file") -> int:
    """A read-only, close-on-exec descriptor of the regular file at ``path``; the caller
    closes it. Never blocks: a folder is ``IsADirectoryError``, a FIFO, a device or a
    socket an :class:`NdfError` naming ``path`` (``what``: what was expected there);
    other errors as the OS reports them."""
    path = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, f"expected {what}, found a folder", path)
        if not stat.S_ISREG(mode):
            kind = next((name for test, name in _KINDS if test(mode)), "a special file")
            raise NdfError(f"{path}: not a regular file: expected {what}, found {kind}")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)  # reads of a regular file block anyway; keep them plain
    except BaseException:
        os.close(fd)
        raise
    return fd


@overload
def regular_file(path: PathLike, what: str = ..., *, buffering: Literal[0]) -> FileIO: ...
@overload
def regular_file(path: PathLike, what: str = ..., buffering: int = ...) -> BinaryIO: ...
def regular_file(path: PathLike, what: str = "a file", buffering: int = -1) -> BinaryIO | FileIO:
    """The regular file at ``path`` opened for reading as a binary file object (unbuffered,
    a ``FileIO``, with ``buffering=0``; :func:`open_regular`'s checks); use it in a
    ``with`` block."""
    fd = open_regular(path, what)
    if buffering == 0:  # (the same call: its type is FileIO)
        return open(fd, "rb", buffering=0)  # noqa: SIM115
    return open(fd, "rb", buffering=buffering)  # noqa: SIM115


def check_regular(path: PathLike, what: str = "a file") -> None:
    """:func:`open_regular`'s checks, for a reader that opens ``path`` itself (pyarrow)."""
    os.close(open_regular(path, what))


def read_regular(path: PathLike, limit: int, what: str) -> bytes:
    """The whole of the small regular file at ``path``: :class:`NdfError` naming it if it
    holds more than ``limit`` bytes (nothing is read then)."""
    with regular_file(path, what) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise NdfError(
                f"{os.fspath(path)}: {size} bytes is too large for {what} (at most {limit} bytes)"
            )
        raw = f.read(size + 1)  # read(n) allocates n bytes up front: not the limit
    if len(raw) > limit:  # grown since the fstat
        raise NdfError(f"{os.fspath(path)}: too large for {what} (at most {limit} bytes)")
    return raw
