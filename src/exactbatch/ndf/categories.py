"""``exactbatch.categories(path)``: the vocabularies of the columns an ``.ndf`` file or a
sharded dataset stores as integer codes.

Columns named in ``categorical=`` (``exactbatch convert --categorical``,
``parquet_source``, ``exactbatch.dask.to_ndf_dataset``) are stored as codes
``0 .. k-1``; the value of code ``j`` is the ``j``-th of the column's
vocabulary, kept beside the column names: in a file's names sidecar, in a
dataset's manifest (:mod:`exactbatch.ndf.names`, docs/format.md). A missing
value (null, NaN) is stored as NaN, never as a code.

What it costs: one small read (the header and the sidecar, or the manifest).
"""

from __future__ import annotations

from typing import Any

from exactbatch.hints import PathLike
from exactbatch.ndf.file import open_ndf
from exactbatch.ndf.manifest import read_manifest
from exactbatch.ndf.storage import location

__all__ = ["categories"]


def categories(
    path: PathLike, *, storage_options: dict[str, Any] | None = None
) -> dict[str, list[Any]]:
    """``{column: [value, ...]}`` for every column of the data at ``path`` stored as
    integer codes: code ``j`` of a column stands for its ``j``-th value. ``{}`` when no
    column is (data written without ``categorical=``, or before it existed).

    ``path``: an ``.ndf`` file (its names sidecar ``path + ".json"`` is read)
    or a sharded dataset's folder (its manifest), locally or as a URL with
    ``storage_options``. A malformed sidecar or manifest, or one whose
    vocabularies name columns the data does not have, is an
    :class:`~exactbatch.errors.NdfError`; a missing path ``FileNotFoundError``.
    """
    where = location(path, storage_options)
    path = where.path
    if not where.is_file():
        man = read_manifest(path, storage_options=storage_options)
        return {c: list(v) for c, v in (man.categories or {}).items()}
    with open_ndf(path, storage_options=storage_options) as f:
        cats: dict[str, list[Any]] = f.categories
        return cats
