"""URLs and their fsspec filesystems: the one place that knows what a URL is.

A path is a URL when it starts with ``scheme://`` (``s3://bucket/key``,
``gs://``, ``az://``, ``http(s)://``, ... any protocol fsspec knows), or is
an fsspec chain: a registered protocol, ``::``, then a URL or another chain
(``simplecache::s3://...``). ``file://`` is a local path, and so is any other
name with ``::`` in it (``data::v2.ndf``).
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
import fnmatch
import os
import pickle
import re
from types import ModuleType
from typing import Any, NoReturn

from exactbatch.extras import need
from exactbatch.hints import Foreign

__all__ = [
    "FOLDER_PATTERN",
    "ForkSafeFs",
    "find_files",
    "for_arrow",
    "import_fsspec",
    "is_url",
    "local_path",
    "object_info",
    "protocols",
    "url_to_fs",
    "version_tag",
]

# "scheme://" or the head of an fsspec chain "scheme::..." (two letters at least, so
# that a Windows drive "C:/" or "C://" is never a scheme).
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+)(://|::)")


def is_url(path: object) -> bool:
    """True for ``scheme://...`` other than ``file://``, and for an fsspec chain.

    A chain (``simplecache::s3://b/k``, ``blockcache::simplecache::gs://b/k``)
    is a protocol fsspec has registered, ``::``, and a URL or another chain.
    Any other name with ``::`` in it (``data::v2.ndf``, ``s3::old``) is a
    local path: so is a chain whose end is a local path. fsspec is imported
    only to look a chain's protocol up; without fsspec, a chain that ends in
    a URL is a URL still, so opening it says what to install.
    """
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        return False
    m = _SCHEME.match(path)
    if m is None:
        return False
    if m[2] == "://":
        return m[1].lower() != "file"
    return _chains_to_url(path)


def _chains_to_url(path: str) -> bool:
    """Is ``path`` (``proto::rest``) a chain: registered protocols down to a URL?"""
    m = _SCHEME.match(path)
    if m is None:
        return False
    if m[2] == "://":
        return True  # the chain's target (file:// too: fsspec reads it as a chain's end)
    return _registered(m[1]) and _chains_to_url(path[m.end() :])


def _registered(protocol: str) -> bool:
    """Has fsspec a filesystem for ``protocol`` (True without fsspec: let the open say so)?"""
    try:
        from fsspec.registry import known_implementations, registry
    except ImportError:  # pragma: no cover - depends on the environment
        return True
    protocol = protocol.lower()
    return protocol in known_implementations or protocol in registry


def local_path(path: Any) -> Any:
    """``file:///a/b`` as ``/a/b``; anything else unchanged."""
    if isinstance(path, str) and path[:7].lower() == "file://":
        return path[7:]
    return path


def for_arrow(path: str | os.PathLike[str]) -> str:
    """A local path as pyarrow is to be given it: absolute. Given a relative name with a
    ``:`` in it (``data::v2.parquet``, ``a:b.csv``), pyarrow takes it for a URI, and
    it expands a leading ``~``; an absolute path is only ever a local file to it."""
    path = os.fspath(path)
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def import_fsspec() -> ModuleType:
    """The ``fsspec`` module, or an ``ImportError`` saying what to install."""
    return need("fsspec", by="reading URLs", package="fsspec (and s3fs for s3://)", extra="remote")


def url_to_fs(url: str, storage_options: dict[str, Any] | None = None) -> tuple[Foreign, str]:
    """``(filesystem, path within it)`` for ``url``, with ``storage_options``."""
    if storage_options is not None and not isinstance(storage_options, dict):
        raise TypeError(f"storage_options must be a dict or None; got {storage_options!r}")
    fs, key = import_fsspec().core.url_to_fs(url, **(storage_options or {}))
    return fs, key


def protocols(fs: Foreign) -> tuple[str, ...]:
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

    def __init__(self, fs: Any) -> None:
        self.fs, self.pid = fs, os.getpid()

    def get(self) -> Any:
        """The filesystem to use in the calling process."""
        if self.pid != os.getpid():
            self.fs, self.pid = pickle.loads(pickle.dumps(self.fs)), os.getpid()
        return self.fs


def object_info(fs: Foreign, key: str, url: str) -> dict[str, Any]:
    """Fresh metadata of one object (never a cached listing); a missing one names ``url``."""
    try:
        fs.invalidate_cache(key)
        info: dict[str, Any] = fs.info(key)
        return info
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


def version_tag(info: dict[str, Any]) -> str | None:
    """What tells this version of an object from the next: its ETag, else its modification
    time (the first of these the protocol reports), as a string; None if none is."""
    for k in _TAG_KEYS:
        if info.get(k) is not None:
            return str(info[k])
    return None


# -- files of a folder by pattern: one meaning, local or over a URL ---------------------------

FOLDER_PATTERN = "**/*.parquet"
"""What a folder of Parquet is read as: its ``.parquet`` files at any depth (Hive-style
partition folders such as ``year=2024/month=01/`` included)."""


MAX_WALK = 1_000_000  # files and folders a local search looks at before it gives up


def find_files(folder: str, pattern: str, fs: Foreign = None) -> list[str]:
    """The files under ``folder`` whose path inside it matches ``pattern``, sorted by that path.

    ``fs`` None: ``folder`` is a local folder, and the files come back as
    local paths. Otherwise ``folder`` is a path within the fsspec filesystem
    ``fs`` (as :func:`url_to_fs` returns it), and the files come back as
    paths within ``fs``. The pattern means the same either way:

    * it is ``/``-separated, relative to ``folder``; ``**`` as a whole part
      is any number of folders, none included (``**/*.parquet`` is every
      ``.parquet`` at any depth); ``*``, ``?``, ``[seq]`` and ``[!seq]``
      match within one name, case-sensitively (``[[]`` is a literal ``[``);
    * a wildcard never matches a name that begins with ``.`` unless the
      pattern's part does (as the shell and :mod:`glob`): hidden files and
      folders are skipped;
    * ``folder`` itself is never a pattern: ``[1]`` or ``*`` in its name is
      just a name;
    * the order is that of the paths inside ``folder`` as strings, the same
      locally and over a URL.

    A pattern that is empty, absolute or climbs out with ``..`` is a
    ``ValueError`` naming it. Local folders reached through links are
    followed, except a link to a folder it is in (a loop); one that cannot
    be listed is the
    ``OSError`` that says so, never a folder without files. A local file
    reached by several paths (a link to a folder beside it, a link to a
    file) is listed once, at its first path (:func:`once_each`): its rows
    are never read twice. A local search
    that meets more than ``MAX_WALK`` (a million) files and folders stops
    with a ``ValueError`` naming ``folder`` (``exactbatch info /`` would walk
    the whole filesystem).
    """
    parts = _pattern_parts(pattern)
    depth = None if "**" in parts else len(parts)
    found: list[str] = []
    if fs is None:
        top = os.path.normpath(folder)
        above: dict[str, frozenset[str]] = {}  # the real folders down to each
        seen = 0
        for here, dirs, files in os.walk(top, onerror=_raise, followlinks=True):
            seen += len(dirs) + len(files)
            if seen > MAX_WALK:  # "/" or a home folder: never a walk of the whole disk
                raise ValueError(
                    f"{folder}: more than {MAX_WALK:,} files and folders under it, looking "
                    f"for {pattern!r}: name the folder that holds the data, not one above it"
                )
            rel = os.path.relpath(here, top)
            at = () if rel == os.curdir else tuple(rel.split(os.sep))
            real = os.path.realpath(here)
            chain = above.get(os.path.dirname(here), frozenset()) if at else frozenset()
            if real in chain:  # a link to a folder it is in: a loop
                dirs[:] = []
                continue
            above[here] = chain | {real}
            dirs[:] = [d for d in dirs if _matches(parts, (*at, d), folder=True)]
            found += ["/".join((*at, f)) for f in files if _matches(parts, (*at, f))]
        return once_each([os.path.join(folder, *rel.split("/")) for rel in sorted(found)])
    root = folder.rstrip("/")
    head = root + "/"
    for key, info in fs.find(root, maxdepth=depth, withdirs=False, detail=True).items():
        if info.get("type") == "directory" or not key.startswith(head):
            continue
        rel = key[len(head) :]
        if _matches(parts, tuple(rel.split("/"))):
            found.append(rel)
    return [head + rel for rel in sorted(found)]


def once_each(paths: list[str]) -> list[str]:
    """``paths`` less those that reach a file already listed (the same real path: through
    a link), in order: each local file once, at its first path."""
    seen: set[str] = set()
    out = []
    for p in paths:
        real = os.path.realpath(p)
        if real not in seen:
            seen.add(real)
            out.append(p)
    return out


def _raise(error: OSError) -> NoReturn:
    raise error  # a folder that cannot be listed is an error, not a folder without files


def _pattern_parts(pattern: object) -> tuple[str, ...]:
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a str such as '*.parquet'; got {pattern!r}")
    parts = pattern.split("/")
    if not pattern or "" in parts or ".." in parts:
        raise ValueError(
            f"pattern must be a path inside the folder, such as '*.parquet' or "
            f"'**/*.parquet' (no empty part, no leading '/', no '..'); got {pattern!r}"
        )
    # runs of "**" mean what one does (and would cost a power of the depth to try)
    return tuple(p for k, p in enumerate(parts) if p != "**" or parts[k - 1 : k] != ["**"])


def _matches(parts: tuple[str, ...], names: tuple[str, ...], folder: bool = False) -> bool:
    """Does the path ``names`` match the pattern ``parts``? With ``folder``: could a path
    under the folder ``names`` match it (is the folder worth listing)?"""
    if not parts:
        return not names and not folder
    if not names:
        return folder or all(p == "**" for p in parts)
    if parts[0] == "**":  # no folder more, or one more (not hidden)
        return _matches(parts[1:], names, folder) or (
            not names[0].startswith(".") and _matches(parts, names[1:], folder)
        )
    return _name_matches(parts[0], names[0]) and _matches(parts[1:], names[1:], folder)


def _name_matches(part: str, name: str) -> bool:
    if name.startswith(".") and not part.startswith("."):
        return False  # hidden: only a pattern that names the dot matches it
    return fnmatch.fnmatchcase(name, part)
