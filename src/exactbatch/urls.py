"""URLs and their fsspec filesystems: the one place that knows what a URL is.

A path is a URL when it starts with ``scheme://`` (``s3://bucket/key``,
``gs://``, ``az://``, ``http(s)://``, ... any protocol fsspec knows, or an
fsspec chain such as ``simplecache::s3://...``); ``file://`` is a local path.
``storage_options`` (endpoint, credentials, ...) go to the filesystem, as in
``fsspec.core.url_to_fs(url, **storage_options)``. fsspec (and the
protocol's package, s3fs for ``s3://``) is imported only when a URL is
opened: ``import exactbatch`` does not import it.

Filesystems are made anew in a forked child (fsspec's async ones are not
fork-safe): :class:`ForkSafeFs` is the one holder that does it, so readers
work in forked workers.
"""

from __future__ import annotations

import errno
import os
import pickle
import re

__all__ = [
    "ForkSafeFs",
    "import_fsspec",
    "is_url",
    "local_path",
    "object_info",
    "protocols",
    "url_to_fs",
    "version_tag",
]

# "scheme://" or an fsspec chain "scheme::..." (two letters at least, so that
# a Windows drive "C:/" or "C://" is never a scheme).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)(://|::)")


def is_url(path) -> bool:
    """True for ``scheme://...`` (and fsspec chains ``a::b://...``) other than ``file://``."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        return False
    m = _SCHEME.match(path)
    return m is not None and not (m[1].lower() == "file" and m[2] == "://")


def local_path(path):
    """``file:///a/b`` as ``/a/b``; anything else unchanged."""
    if isinstance(path, str) and path[:7].lower() == "file://":
        return path[7:]
    return path


def import_fsspec():
    """The ``fsspec`` module, or an ``ImportError`` saying what to install."""
    try:
        import fsspec
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "reading URLs needs fsspec (and s3fs for s3://): pip install 'exactbatch[remote]'"
        ) from e
    return fsspec


def url_to_fs(url: str, storage_options: dict | None = None):
    """``(filesystem, path within it)`` for ``url``, with ``storage_options``."""
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict or None; got {storage_options!r}")
    return import_fsspec().core.url_to_fs(url, **(storage_options or {}))


def protocols(fs) -> tuple[str, ...]:
    """The protocol names of filesystem ``fs`` (``("s3", "s3a")`` for s3fs)."""
    p = fs.protocol
    return (p,) if isinstance(p, str) else tuple(p)


class ForkSafeFs:
    """A filesystem for this process: made anew in a forked child, then reused there.

    fsspec's async filesystems (s3fs, gcsfs, http) run an event loop in a
    thread that a fork does not copy. Unpickling builds the filesystem anew
    (fsspec drops its instances after a fork). Any number of threads may
    call :meth:`get`; picklable.
    """

    __slots__ = ("fs", "pid")

    def __init__(self, fs):
        self.fs, self.pid = fs, os.getpid()

    def get(self):
        """The filesystem to use in the calling process."""
        if self.pid != os.getpid():
            self.fs, self.pid = pickle.loads(pickle.dumps(self.fs)), os.getpid()
        return self.fs


def object_info(fs, key: str, url: str) -> dict:
    """Fresh metadata of one object (never a cached listing); a missing one names ``url``."""
    try:
        fs.invalidate_cache(key)
        return fs.info(key)
    except FileNotFoundError as e:
        raise FileNotFoundError(errno.ENOENT, "no such file or object", url) from e


# what tells one version of an object from the next, by protocol (the first one present)
_TAG_KEYS = (
    "ETag",
    "etag",
    "md5Hash",
    "LastModified",
    "last_modified",
    "mtime",
    "updated",
    "created",
)


def version_tag(info: dict) -> str | None:
    """What tells this version of an object from the next: its ETag, else its modification
    time (the first of these the protocol reports), as a string; None if none is."""
    for k in _TAG_KEYS:
        if info.get(k) is not None:
            return str(info[k])
    return None
