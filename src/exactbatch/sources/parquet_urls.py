"""Parquet over a URL (``s3://bucket/folder``, any fsspec protocol): listing a folder,
each object's identity, and a ``pyarrow.parquet.ParquetFile`` reading by ranged reads
(see :mod:`exactbatch.sources.parquet`, which re-exports these names).
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from typing import Any

from exactbatch.extras import need
from exactbatch.hints import Foreign, PathLike
from exactbatch.urls import (
    FOLDER_PATTERN,
    find_files,
    is_url,
    object_info,
    url_to_fs,
    version_tag,
)

__all__ = ["list_url_files", "url_identity", "url_parquet_file"]


def _pq() -> Foreign:
    return need("pyarrow.parquet", by="parquet_source", package="pyarrow", extra="parquet")


def list_url_files(
    path: PathLike | Sequence[PathLike],
    pattern: str = FOLDER_PATTERN,
    storage_options: dict[str, Any] | None = None,
) -> tuple[Foreign, list[str]]:
    """``(fs, [url, ...])``: the Parquet objects a URL, a folder URL or a list of URLs names.

    A folder (a prefix) is read as its objects matching ``pattern``, as a
    local folder is (:func:`exactbatch.urls.find_files`); a missing object
    or an empty folder is ``FileNotFoundError``.
    Every URL of a list must be on one filesystem (one protocol and options).
    """
    if isinstance(path, (str, os.PathLike)):
        url = os.fspath(path)
        fs, key = url_to_fs(url, storage_options)
        try:
            fs.invalidate_cache(key)
            info = fs.info(key)
        except FileNotFoundError as e:
            raise FileNotFoundError(f"no such Parquet file or folder: {url}") from e
        if info.get("type") != "directory":
            return fs, [url]
        files = find_files(key, pattern, fs)
        if not files:
            raise FileNotFoundError(f"no files matching {pattern!r} in folder {url}")
        return fs, [fs.unstrip_protocol(k) for k in files]
    urls = [os.fspath(p) for p in path]
    if not urls:
        raise ValueError("parquet_source got an empty list of files")
    local = [u for u in urls if not is_url(u)]
    if local:
        raise ValueError(
            f"parquet_source got a list mixing URLs and local paths (e.g. {local[0]!r}); "
            "pass all files on one filesystem"
        )
    fs = None
    for u in urls:
        f, _ = url_to_fs(u, storage_options)
        if fs is None:
            fs = f
        elif f is not fs:
            raise ValueError(
                f"parquet_source got URLs on different filesystems ({urls[0]!r} and {u!r}); "
                "pass files of one protocol with one set of storage_options"
            )
    return fs, urls


def url_identity(fs: Foreign, url: str) -> tuple[Any, str | None, Any]:
    """What changes when an object is overwritten: (size, ETag or mtime, version)."""
    info = object_info(fs, fs._strip_protocol(url), url)
    return info.get("size"), version_tag(info), info.get("VersionId")


def url_parquet_file(
    fs: Foreign, url: str, metadata: Foreign = None, size: int | None = None
) -> Foreign:
    """A ``pyarrow.parquet.ParquetFile`` reading ``url`` through ``fs`` by ranged reads.

    No read-ahead cache: pyarrow asks for exactly the footer, or a row
    group's column chunks (coalesced, ``pre_buffer=True``).
    """
    kw: dict[str, Any] = {"cache_type": "none"}
    if size is not None:
        kw["size"] = size  # saves the file object a metadata request
    try:
        f = fs.open(fs._strip_protocol(url), "rb", **kw)
    except FileNotFoundError as e:
        raise FileNotFoundError(errno.ENOENT, "no such file or object", url) from e
    return _pq().ParquetFile(f, metadata=metadata, pre_buffer=True)
