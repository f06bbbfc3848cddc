"""Where a file or a folder lives: a local path or a URL, behind one seam.

:func:`location` turns a path (and, for a URL, its ``storage_options``) into a
:class:`Location`: :class:`LocalLocation` for a local path, :class:`UrlLocation` for
a URL (any fsspec protocol: ``s3://``, ``gs://``, ...). The callers (the
manifest, the names sidecar, a dataset's write protocol, a source's
identity) ask a location what they need, a document read or written whole, a
file made, listed or removed, and never branch on the kind themselves: each
kind answers every question in one method.

The rules a caller may rely on, alike at both kinds: a document is read in
one read of at most :data:`~exactbatch.ndf.jsondoc.MAX_DOC_BYTES` + 1 bytes
(locally only from a regular file: a FIFO is refused, never waited on) and a
missing one is ``FileNotFoundError``; a document is written whole or not at
all (locally a temporary file renamed into place, at a URL one PUT); listing
a missing folder gives no names; a removal is best effort.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any, BinaryIO

from exactbatch.hints import Foreign
from exactbatch.ndf.jsondoc import MAX_DOC_BYTES, fetch_doc
from exactbatch.ndf.regular import read_regular
from exactbatch.ndf.remote import abort_uploads
from exactbatch.ndf.write import atomic_path
from exactbatch.urls import is_url, local_path, url_to_fs

# what writes a file's content to the binary file it is given
Fill = Callable[[BinaryIO], object]
# whether a file name is of a write that is over
Doomed = Callable[[str], bool]

__all__ = [
    "LocalLocation",
    "Location",
    "UrlLocation",
    "dataset_path",
    "join_path",
    "local_stat",
    "location",
]


class Location:
    """A file or a folder, by its ``path`` (as the user gave it: named in errors)."""

    __slots__ = ("path",)
    url = False  # whether the location is at a URL (its parts then hold no descriptor)

    def __init__(self, path: str):
        self.path = path

    def child(self, name: str) -> Location:
        """The location ``name`` inside this folder (or under this URL prefix)."""
        raise NotImplementedError

    def is_file(self) -> bool:
        """Is there a file (an object) here now?"""
        raise NotImplementedError

    def exists(self) -> bool:
        """Is there anything here now: a file or a folder (a prefix holding objects)?"""
        raise NotImplementedError

    def read_doc(self, what: str) -> bytes:
        """The bytes of the small document here (``what`` names it in errors)."""
        raise NotImplementedError

    def write_doc(self, raw: bytes) -> None:
        """Put the small document ``raw`` here, whole or not at all."""
        raise NotImplementedError

    def write_file(self, fill: Fill) -> None:
        """Put here what ``fill(f)`` writes to the binary file ``f``, whole or not at all:
        an error out of ``fill`` leaves what was here before."""
        raise NotImplementedError

    def make_folder(self) -> bool:
        """Make this folder if missing (not its parents); whether it was made. Object
        stores have no folders to make: False there."""
        raise NotImplementedError

    def create(self, name: str) -> None:
        """Make the empty file ``name`` in this folder (locally: one that was not there)."""
        raise NotImplementedError

    def names(self) -> list[str]:
        """The names of the files in this folder now (none if it is missing)."""
        raise NotImplementedError

    def remove(self, name: str) -> None:
        """Remove the file ``name`` from this folder, best effort."""
        raise NotImplementedError

    def abort_uploads(self, doomed: Doomed) -> None:
        """Abort the unfinished uploads under this folder whose file name ``doomed(name)``
        says is of a write that is over (S3's multipart uploads; nothing elsewhere)."""


class LocalLocation(Location):
    """A local path (``file://`` taken off)."""

    __slots__ = ()

    def child(self, name: str) -> LocalLocation:
        return LocalLocation(os.path.join(self.path, name))

    def is_file(self) -> bool:
        return os.path.isfile(self.path)

    def exists(self) -> bool:
        return os.path.exists(self.path)

    def read_doc(self, what: str) -> bytes:
        return read_regular(self.path, MAX_DOC_BYTES, what)

    def write_doc(self, raw: bytes) -> None:
        self.write_file(lambda f: f.write(raw))

    def write_file(self, fill: Fill) -> None:
        with atomic_path(self.path) as tmp, open(tmp, "wb") as f:
            fill(f)

    def make_folder(self) -> bool:
        try:
            os.mkdir(self.path)
        except FileExistsError:
            return False
        return True

    def create(self, name: str) -> None:
        os.close(os.open(os.path.join(self.path, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL))

    def names(self) -> list[str]:
        try:
            return os.listdir(self.path)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def remove(self, name: str) -> None:
        with contextlib.suppress(Exception):
            os.unlink(os.path.join(self.path, name))


class UrlLocation(Location):
    """A URL, with its filesystem and its key there (made once, when first asked for).

    Every question is answered afresh: fsspec's listing cache is dropped
    first, so a file another host wrote or removed meanwhile is seen.
    """

    __slots__ = ("_fs", "_key", "storage_options")
    url = True

    def __init__(
        self,
        path: str,
        storage_options: dict[str, Any] | None = None,
        fs: Foreign = None,
        key: str | None = None,
    ):
        super().__init__(path)
        self.storage_options = storage_options
        self._fs, self._key = fs, key

    @property
    def fs(self) -> Foreign:
        """The fsspec filesystem (imports fsspec, and the protocol's package, on first use)."""
        if self._fs is None:
            self._fs, self._key = url_to_fs(self.path, self.storage_options)
        return self._fs

    @property
    def key(self) -> str:
        """The path within :attr:`fs`."""
        self.fs  # noqa: B018 - made with the filesystem
        assert self._key is not None  # (made with it)
        return self._key

    def child(self, name: str) -> UrlLocation:
        fs, key = (None, None) if self._fs is None else (self._fs, f"{self.key}/{name}")
        return UrlLocation(f"{self.path.rstrip('/')}/{name}", self.storage_options, fs, key)

    def is_file(self) -> bool:
        self.fs.invalidate_cache()
        return bool(self.fs.isfile(self.key))

    def exists(self) -> bool:
        self.fs.invalidate_cache()
        return bool(self.fs.exists(self.key))

    def read_doc(self, what: str) -> bytes:
        return fetch_doc(self.fs, self.key)

    def write_doc(self, raw: bytes) -> None:
        self.fs.pipe_file(self.key, raw)  # one PUT: whole or not at all
        self.fs.invalidate_cache()

    def write_file(self, fill: Fill) -> None:
        f = self.fs.open(self.key, "wb", autocommit=False)  # committed only when whole
        try:
            fill(f)
            f.close()
            f.commit()
        except BaseException:
            _abandon(f)
            raise

    def make_folder(self) -> bool:
        return False  # object stores have no folders to make

    def create(self, name: str) -> None:
        self.fs.pipe_file(f"{self.key}/{name}", b"")

    def names(self) -> list[str]:
        try:
            self.fs.invalidate_cache()
            return [k.rstrip("/").rsplit("/", 1)[-1] for k in self.fs.ls(self.key, detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def remove(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.fs.rm_file(f"{self.key}/{name}")

    def abort_uploads(self, doomed: Doomed) -> None:
        abort_uploads(self.fs, self.key, doomed)


def _abandon(f: Foreign) -> None:
    """Throw away an uncommitted upload (best effort: the error that got here matters more)."""
    with contextlib.suppress(Exception):
        f.discard()
    f.forced = True  # nothing more is uploaded at close
    with contextlib.suppress(Exception):
        f.close()


def location(path: object, storage_options: dict[str, Any] | None = None) -> Location:
    """The :class:`Location` of ``path`` (a str or os.PathLike; ``file://`` is local).
    ``storage_options`` apply only to URLs: given with a local path, a ``ValueError``
    naming the path; a path of another type is a ``TypeError``."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise TypeError(f"path must be a str or os.PathLike; got {type(path).__name__}")
    if is_url(path):
        return UrlLocation(path, storage_options)
    if storage_options is not None:
        raise ValueError(f"storage_options applies only to URLs; got the local path {path!r}")
    return LocalLocation(local_path(path))


def local_stat(path: object) -> os.stat_result | None:
    """A local file's ``os.stat``; None for a URL, a path of another type, or a file gone
    (the callers record it to name the data, and do without it)."""
    if not isinstance(path, (str, os.PathLike)) or is_url(os.fspath(path)):
        return None
    try:
        return os.stat(path)
    except OSError:
        return None


def dataset_path(path: object, storage_options: dict[str, Any] | None) -> str:
    """``path`` as a str (a URL, or a local path with ``file://`` taken off), checked as
    :func:`location` checks it."""
    return location(path, storage_options).path


def join_path(path: str, name: str) -> str:
    """``name`` inside the folder (or URL prefix) ``path``."""
    return f"{path.rstrip('/')}/{name}" if is_url(path) else os.path.join(path, name)
