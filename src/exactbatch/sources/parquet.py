"""Parquet files as a chunked source: one chunk per row group (needs pyarrow).

``n_rows`` comes from the files' footers, so ``total_size="auto"`` reads no
data. Columns are frozen by name at construction and every file's schema is
checked against them, so a file with its columns in another order still
yields the right features. The loader reads only the row groups (and rows)
its shard owns, and may shuffle the order of row groups each epoch.
Memory: one row group at a time, as float64.

Faults: a file that is not readable Parquet (truncated, a corrupt footer,
row counts that do not add up), that lacks a column, has it non-numeric or
more than once, is a ``ValueError`` naming the file; so is a file changed
(replaced, rewritten, truncated) after the source read its footer, at its
next read. A missing file stays a ``FileNotFoundError``.

URLs (``s3://bucket/folder``, any fsspec protocol) are read through fsspec
(:mod:`exactbatch.urls`): a folder is listed as a local one is
(:func:`exactbatch.urls.find_files`: one pattern, one meaning); every file's
footer is read through pyarrow on an fsspec file (pyarrow reads the file's
last 64 KiB, more only for a larger footer; no row group), so ``n_rows``
reads no data; a row group is read with pyarrow's coalesced reads
(``pre_buffer``) of just its column chunks. Each file's size, ETag and
version are kept with its footer, and a file whose identity has changed at
a later read is a ``ValueError``, as for a local file.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from exactbatch.extras import need
from exactbatch.hints import Columns, PathLike
from exactbatch.ndf.regular import check_regular
from exactbatch.sources.arrow import ArrowRows, fill_columns
from exactbatch.sources.protocols import Chunk
from exactbatch.urls import (
    FOLDER_PATTERN,
    ForkSafeFs,
    find_files,
    for_arrow,
    is_url,
    local_path,
    object_info,
    url_to_fs,
    version_tag,
)

__all__ = [
    "LABELS_METADATA_KEY",
    "ParquetSource",
    "is_numeric_type",
    "list_local_files",
    "list_url_files",
    "parquet_source",
    "recorded_labels",
    "url_identity",
    "url_parquet_file",
]

# Parquet schema metadata naming the label columns (comma-separated), written by
# ``exactbatch convert`` (.ndf -> Parquet); parquet_source reads it when labels is not given.
LABELS_METADATA_KEY = b"exactbatch.labels"


class _NotGiven(tuple):
    """The default of ``labels``: no labels, unless the files record theirs. An empty
    tuple everywhere else; it shows as ``()`` in signatures."""

    def __repr__(self) -> str:
        return "()"


_NOT_GIVEN = _NotGiven()


def recorded_labels(schema) -> list[str] | None:
    """The label columns a Parquet schema's metadata records (``LABELS_METADATA_KEY``),
    or None when it records none."""
    raw = (schema.metadata or {}).get(LABELS_METADATA_KEY)
    if raw is None:
        return None
    return [c for c in raw.decode().split(",") if c]


def _pq():
    return need("pyarrow.parquet", by="parquet_source", package="pyarrow", extra="parquet")


def list_local_files(path, pattern: str = FOLDER_PATTERN) -> list[str]:
    """The local Parquet files ``path`` names: a file, a folder or a list of files.

    A folder is read as its files matching ``pattern``
    (:func:`exactbatch.urls.find_files`: ``**`` is any depth), sorted by
    their paths inside it, each checked to be a regular file (a FIFO is an
    ``NdfError`` at once: pyarrow would wait on it); an empty one, or a
    missing path, is ``FileNotFoundError``; an empty list a ``ValueError``. A
    list is taken as given (each file is checked on open).
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
        files = [os.fspath(p) for p in path]
        if not files:
            raise ValueError("parquet_source got an empty list of files")
        return files
    raise TypeError(f"path must be a file, a folder or a list of files; got {path!r}")


def is_numeric_type(arrow_type) -> bool:
    """Can a column of this Arrow type be read as float64 (integer, floating, boolean)?"""
    import pyarrow.types as pat

    return pat.is_integer(arrow_type) or pat.is_floating(arrow_type) or pat.is_boolean(arrow_type)


def _check_names(features, labels) -> None:
    """Refuse a column named twice: within ``features``, within ``labels``, or in both."""
    for what, names in (("features", features), ("labels", labels)):
        names = list(names or ())
        twice = list(dict.fromkeys(c for c in names if names.count(c) > 1))
        if twice:
            raise ValueError(f"{what} names column(s) {twice} more than once; name each once")
    both = [c for c in dict.fromkeys(labels) if c in set(features or ())]
    if both:
        raise ValueError(
            f"column(s) {both} are named both in features and in labels: a label among "
            "the features hands the model its answer (label leakage); name each in one only"
        )


class ParquetSource:
    """Row groups of Parquet files as chunks; see :func:`parquet_source`.

    Attributes: ``files``, ``features`` and ``labels`` (column names),
    ``d``, ``l``, ``n_rows`` and ``chunk_rows`` (rows of each row group, in
    file then row-group order). ``read_chunk(i)`` reads row group ``i`` as
    float64 ``(x, y)``, ``open_chunk(i)`` decodes it for a shuffle buffer to
    copy into its rows; iterating yields every chunk in order.
    """

    def __init__(
        self,
        files: list[str],
        features: Sequence[str] | None,
        labels: Any = _NOT_GIVEN,
        fs: Any = None,
    ) -> None:
        _pq()
        _check_names(features, labels)
        self.files = files
        self._fs = None if fs is None else ForkSafeFs(fs)  # of URL files; None: local
        self.labels = tuple(labels)
        self._meta = []
        self._stats = []  # each file's identity when its footer was read
        self._groups = []  # (file index, row group index) per chunk
        chunk_rows = []
        for fi, f in enumerate(files):
            try:
                self._stats.append(self._identity(f))
                pf = self._parquet_file(fi)
                schema, md = pf.schema_arrow, pf.metadata
                rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
            except FileNotFoundError:
                raise
            except Exception as e:  # ArrowInvalid (a ValueError), OSError, NotImplementedError...
                raise ValueError(f"{f}: not a readable Parquet file ({e})") from e
            if fi == 0 and labels is _NOT_GIVEN:
                taken = set(features or ())
                self.labels = tuple(c for c in recorded_labels(schema) or () if c not in taken)
            if features is None:  # the first file's columns, less the labels
                features = [n for n in schema.names if n not in self.labels]
            self._check_schema(f, schema, list(features) + list(self.labels))
            self._meta.append(md)
            if any(r < 0 for r in rows) or sum(rows) != md.num_rows:
                raise ValueError(
                    f"{f}: corrupt footer: row groups of {rows} rows, "
                    f"expected non-negative counts that add up to its {md.num_rows} rows"
                )
            for g, r in enumerate(rows):
                self._groups.append((fi, g))
                chunk_rows.append(r)
        self.features = tuple(features or ())
        self.d, self.l = len(self.features), len(self.labels)
        self.chunk_rows = np.asarray(chunk_rows, dtype=np.int64)
        self.n_rows = int(self.chunk_rows.sum())

    @staticmethod
    def _check_schema(f, schema, columns) -> None:
        missing = [c for c in columns if c not in schema.names]
        if missing:
            raise ValueError(
                f"{f}: missing column(s) {missing}; expected columns {columns}, "
                f"found {schema.names}"
            )
        twice = sorted({c for c in columns if schema.names.count(c) > 1})
        if twice:
            raise ValueError(
                f"{f}: column name(s) {twice} appear more than once in the file "
                f"(found {schema.names}), so which column is meant is ambiguous"
            )
        types = {c: schema.field(c).type for c in columns}
        bad = [f"{c} ({t})" for c, t in types.items() if not is_numeric_type(t)]
        if bad:
            raise ValueError(
                f"{f}: non-numeric column(s) {bad}; features and labels must be "
                "integer, floating or boolean columns"
            )

    def _identity(self, path):
        return _identity(path) if self._fs is None else url_identity(self._fs.get(), path)

    def _parquet_file(self, fi: int, metadata=None):
        if self._fs is None:
            return _pq().ParquetFile(for_arrow(self.files[fi]), metadata=metadata)
        size = self._stats[fi][0]  # url_identity: (size, etag, version)
        return url_parquet_file(self._fs.get(), self.files[fi], metadata=metadata, size=size)

    @property
    def footers(self) -> list:
        """Each file's footer (``pyarrow.parquet.FileMetaData``), as read at construction:
        its row groups' rows and column statistics (what a state's fingerprint hashes)."""
        return list(self._meta)

    def __len__(self) -> int:
        return len(self._groups)

    def __repr__(self) -> str:
        return (
            f"ParquetSource({len(self.files)} files, {len(self._groups)} row groups, "
            f"n_rows={self.n_rows}, d={self.d}, l={self.l})"
        )

    def read_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row group ``i`` (in file order) as float64 ``(x, y)``."""
        columns, rows, d = self._columns(i), int(self.chunk_rows[i]), self.d
        x = np.empty((rows, d), dtype=np.float64)
        y = np.empty((rows, self.l), dtype=np.float64)
        fill_columns(columns[:d], x)  # nulls become NaN
        fill_columns(columns[d:], y)
        return x, y

    def open_chunk(self, i: int) -> ArrowRows:
        """Row group ``i`` decoded (on the calling thread: a stream's read-ahead), for a
        shuffle buffer to copy straight into its rows (``read_rows_into``, rows
        numbered from the source's first): one copy a row less than
        :meth:`read_chunk`, and no arrays of its own."""
        first = int(self.chunk_rows[:i].sum())
        return ArrowRows(self._columns(i), first, int(self.chunk_rows[i]))

    def _columns(self, i: int) -> list:
        """Row group ``i`` decoded and checked: its feature then label columns (Arrow)."""
        fi, g = self._groups[i]
        path = self.files[fi]
        names = list(self.features) + list(self.labels)
        if self._identity(path) != self._stats[fi]:
            # its footer (kept since construction) no longer describes the file
            raise ValueError(
                f"{path}: the file changed (replaced, rewritten or truncated) after "
                "parquet_source read its footer; build the source again to read it"
            )
        try:
            pf = self._parquet_file(fi, metadata=self._meta[fi])
            table = pf.read_row_group(g, columns=names)
        except FileNotFoundError:
            raise
        except Exception as e:
            raise ValueError(f"{path}: cannot read row group {g} ({e})") from e
        rows = table.num_rows
        if rows != self.chunk_rows[i]:
            raise ValueError(
                f"{path}: row group {g} has {rows} rows, its footer said {self.chunk_rows[i]}"
            )
        return [table.column(name) for name in names]

    def __iter__(self) -> Iterator[Chunk]:
        for i in range(len(self._groups)):
            yield self.read_chunk(i)


def _identity(path) -> tuple[int, int, int, int, int]:
    """What changes when a file is replaced or rewritten: (device, inode, size, mtime,
    ctime). The change time catches a rewrite whose mtime was put back (``touch -r``,
    ``rsync --inplace -t``); a change of metadata alone (chmod) moves it too."""
    st = os.stat(path)
    return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def parquet_source(
    path: PathLike | Sequence[PathLike],
    *,
    features: Columns = None,
    labels: Any = _NOT_GIVEN,
    pattern: str = FOLDER_PATTERN,
    storage_options: dict | None = None,
) -> ParquetSource:
    """A chunked source over Parquet data: a file, a folder of files or a list of files.

    ``features`` are the feature columns (None: every column not in
    ``labels``, in the first file's order); ``labels`` the label columns.
    When ``labels`` is not given, the label columns the first file's schema
    metadata records (key ``exactbatch.labels``, which ``exactbatch convert``
    writes from an ``.ndf``) are the labels, less any named in ``features``;
    without such metadata there are none. ``labels=()`` says "no labels"
    whatever the metadata records.
    A column named twice - in both, or twice in one - is a ``ValueError``
    naming it (a label among the features would leak it into the input).
    Every file must have them all, numeric (integer, floating or boolean),
    else ``ValueError`` naming the file and the columns.

    A folder is read as its files matching ``pattern``, sorted by their
    paths inside it. The default, ``"**/*.parquet"``, is every ``.parquet``
    file at any depth, so a Hive-style partitioned folder
    (``year=2024/month=01/part-0.parquet``) is read whole; the partition
    keys are not read as columns. ``"*.parquet"`` reads the top level only.
    ``**`` is any number of folders; a wildcard skips hidden names (a
    leading ``.``); glob characters in the folder's own name (``run[1]``)
    are plain characters. The pattern means the same on a local folder and
    over a URL (:func:`exactbatch.urls.find_files`).

    ``path`` may be a URL (``s3://bucket/folder``, any fsspec protocol), or
    a list of URLs on one filesystem; ``storage_options`` (endpoint,
    credentials, ...) go to that filesystem, and apply only to URLs.
    """
    if isinstance(labels, str):
        labels = (labels,)
    if isinstance(features, str):
        features = (features,)
    if isinstance(path, Sequence) and not isinstance(path, (str, bytes)):
        paths, many = list(path), True
    else:
        paths, many = [path], False
    if any(is_url(p) for p in paths):
        fs, files = list_url_files(path, pattern, storage_options)
        return ParquetSource(files, features, labels, fs=fs)
    if storage_options is not None:
        raise ValueError(f"storage_options applies only to URLs; got the local path {path!r}")
    local = [local_path(p) for p in paths] if many else local_path(paths[0])
    files = list_local_files(local, pattern)
    return ParquetSource(files, features, labels)


# -- Parquet over a URL ----------------------------------------------------------------------


def list_url_files(path, pattern: str = FOLDER_PATTERN, storage_options: dict | None = None):
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


def url_identity(fs, url: str) -> tuple:
    """What changes when an object is overwritten: (size, ETag or mtime, version)."""
    info = object_info(fs, fs._strip_protocol(url), url)
    return info.get("size"), version_tag(info), info.get("VersionId")


def url_parquet_file(fs, url: str, metadata=None, size: int | None = None):
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
