"""Local files read in place, watched: the identity check every mapped source shares.

An ``.ndf`` file checks its size, modification time and change time at every
read (:meth:`exactbatch.ndf.local.LocalHandle.check_size`). A source whose
columns are views of other memory-mapped files (an Arrow IPC file, a Hugging
Face dataset's Arrow cache files) holds a :class:`FileWatch` over them and
checks it after every batch it gathers, by the same rule
(:func:`exactbatch.ndf.local.what_changed`): a file rewritten in place,
truncated, or written with its modification time put back is an
:class:`~exactbatch.errors.NdfError` naming it, never rows of the new file
read through the old layout. A file replaced by a rename, or deleted, is not
a change: the file opened is still the one read (its descriptor is held).
The same stamps travel in a pickle, and :func:`check_same` refuses a file
that changed between pickling and unpickling.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Sequence

from exactbatch.errors import NdfError
from exactbatch.ndf.local import what_changed
from exactbatch.ndf.regular import open_regular

__all__ = ["FileWatch", "check_same", "stamp"]


def stamp(st: os.stat_result) -> tuple[int, int, int]:
    """What a file's identity check compares: (size, mtime, ctime), in bytes and ns."""
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


class FileWatch:
    """The local files ``paths``, opened (``what``: what each is, for errors) and
    stamped now; :meth:`check` says if any changed since. ``stamps`` (one a file):
    what they must still be (a source unpickled), else taken now."""

    def __init__(
        self, paths: Sequence[str], what: str, stamps: Sequence[Sequence[int]] | None = None
    ):
        self.paths = [os.fspath(p) for p in paths]
        self.what = what
        self._fds: list[int] = []
        for p in self.paths:
            self._fds.append(open_regular(p, what))
        weakref.finalize(self, _close, list(self._fds))
        self.stamps = [stamp(os.fstat(fd)) for fd in self._fds]
        if stamps is not None:
            for p, was, now in zip(self.paths, stamps, self.stamps, strict=True):
                check_same(p, was, now)

    def __reduce__(  # by its paths and stamps: opened again, and checked, on load
        self,
    ) -> tuple[type[FileWatch], tuple[list[str], str, list[tuple[int, int, int]]]]:
        return FileWatch, (self.paths, self.what, self.stamps)

    def check(self) -> None:
        """:class:`NdfError` naming the first file changed since it was stamped."""
        for path, fd, (size, mtime, ctime) in zip(self.paths, self._fds, self.stamps, strict=True):
            what = what_changed(os.fstat(fd), size, mtime, ctime)
            if what is not None:
                raise NdfError(
                    f"{path}: the file changed while open: {what}; build the source again "
                    "to read the new contents, and replace files by a rename instead"
                )


def check_same(path: str, was: Sequence[int], now: Sequence[int]) -> None:
    """:class:`NdfError` naming ``path`` if its stamp ``now`` is not ``was`` (pickled)."""
    if tuple(was) != tuple(now):
        raise NdfError(
            f"{path}: the file changed between pickling and unpickling (size, modification "
            f"and change times {tuple(was)} when pickled, {tuple(now)} now); build the "
            "source again"
        )


def _close(fds: list[int]) -> None:
    for fd in fds:
        os.close(fd)
