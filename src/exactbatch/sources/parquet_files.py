"""The local Parquet files a path names: a file, a folder (its matching files, at any
depth) or a list of files, each file once (see :mod:`exactbatch.sources.parquet`, which
re-exports :func:`list_local_files`; a URL's: :mod:`exactbatch.sources.parquet_urls`)."""

from __future__ import annotations

import os
from collections.abc import Sequence

from exactbatch.hints import PathLike
from exactbatch.ndf.regular import check_regular
from exactbatch.urls import FOLDER_PATTERN, find_files, once_each

__all__ = ["list_local_files"]


def list_local_files(
    path: PathLike | Sequence[PathLike], pattern: str = FOLDER_PATTERN
) -> list[str]:
    """The local Parquet files ``path`` names: a file, a folder or a list of files.

    A folder is read as its files matching ``pattern``
    (:func:`exactbatch.urls.find_files`: ``**`` is any depth), sorted by
    their paths inside it, each checked to be a regular file (a FIFO is an
    ``NdfError`` at once: pyarrow would wait on it); an empty one, or a
    missing path, is ``FileNotFoundError``; an empty list a ``ValueError``. A
    list is taken as given (each file is checked on open), but a file named twice (its
    real path: a link too) is read once, at its first place, as in a folder.
    """
    if isinstance(path, (str, os.PathLike)):
        path = os.fspath(path)
        if os.path.isdir(path):
            files = find_files(path, pattern)
            if not files:
                raise FileNotFoundError(f"no files matching {pattern!r} in folder {path}")
        elif not os.path.exists(path):
            raise FileNotFoundError(f"no such Parquet file or folder: {path}")
        else:
            files = [path]
        for f in files:
            check_regular(f, "a Parquet file")
        return files
    if isinstance(path, Sequence) and not isinstance(path, (bytes, str)):
        files = once_each([os.fspath(p) for p in path])
        if not files:
            raise ValueError("parquet_source got an empty list of files")
        return files
    raise TypeError(f"path must be a file, a folder or a list of files; got {path!r}")
