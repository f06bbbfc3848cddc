"""Parquet files as a chunked source: one chunk per row group (needs pyarrow).

``n_rows`` comes from the files' footers, so ``total_size="auto"`` reads no
data. Columns are frozen by name at construction and every file's schema is
checked against them, so a file with its columns in another order still
yields the right features. The loader reads only the row groups (and rows)
its shard owns, and may shuffle the order of row groups each epoch.
Memory: one row group at a time, as decoded (float64 copies of its other
columns).

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

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from exactbatch.extras import need
from exactbatch.hints import Columns, Foreign, PathLike
from exactbatch.sources.arrow import ArrowRows, column_chunk
from exactbatch.sources.categorical import check_categorical
from exactbatch.sources.column_chunk import Columns as ColumnChunk
from exactbatch.sources.identity import parquet_identity
from exactbatch.sources.parquet_columns import (
    Partitions,
    SourceColumns,
    check_held_keys,
    check_names,
    find_columns,
    hive_partitions,
    is_numeric_type,
)
from exactbatch.sources.parquet_files import list_local_files
from exactbatch.sources.parquet_urls import list_url_files, url_identity, url_parquet_file
from exactbatch.sources.protocols import Chunk
from exactbatch.urls import (
    FOLDER_PATTERN,
    ForkSafeFs,
    for_arrow,
    is_url,
    local_path,
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


class _NotGiven(tuple[str, ...]):
    """The default of ``labels``: no labels, unless the files record theirs. An empty
    tuple everywhere else; it shows as ``()`` in signatures."""

    def __repr__(self) -> str:
        return "()"


_NOT_GIVEN = _NotGiven()


def recorded_labels(schema: Foreign) -> list[str] | None:
    """The label columns the schema's metadata records (``LABELS_METADATA_KEY``), or None."""
    raw = (schema.metadata or {}).get(LABELS_METADATA_KEY)
    if raw is None:
        return None
    return [c for c in raw.decode().split(",") if c]


def _pq() -> Foreign:
    return need("pyarrow.parquet", by="parquet_source", package="pyarrow", extra="parquet")


class ParquetSource:
    """Row groups of Parquet files as chunks; see :func:`parquet_source`.

    Attributes: ``files``, ``features`` and ``labels`` (column names),
    ``d``, ``l``, ``n_rows`` and ``chunk_rows`` (rows of each row group, in
    file then row-group order). ``read_chunk(i)`` reads row group ``i`` as
    float64 ``(x, y)``, ``read_columns(i)`` holds it column by column (copied
    straight into batches), ``open_chunk(i)`` decodes it for a shuffle buffer to
    copy into its rows; iterating yields every chunk in order.
    """

    def __init__(
        self,
        files: list[str],
        features: Sequence[str] | None,
        labels: Any = _NOT_GIVEN,
        fs: Any = None,
        *,
        categorical: Any = None,
        partitions: Partitions | None = None,
        identities: list[tuple[Any, ...]] | None = None,
    ) -> None:
        _pq()
        check_names(features, labels)
        cats = check_categorical(categorical, "parquet_source")
        self.files = files
        self._fs = None if fs is None else ForkSafeFs(fs)  # of URL files; None: local
        self._partitions = partitions
        self.labels = tuple(labels)
        self._meta: list[Foreign] = []
        self._stats: list[tuple[Any, ...]] = []  # each file's identity when its footer was read
        self._groups: list[tuple[int, int]] = []  # (file index, row group index) per chunk
        keys = partitions.names if partitions is not None else ()
        # every file's held keys are checked against its path, also after the keys the
        # first file holds are dropped from ``partitions`` (all of them: None)
        paths = partitions
        chunk_rows: list[int] = []
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
            if identities is not None and self._stats[fi] != identities[fi]:
                raise ValueError(
                    f"{f}: the file changed between pickling and unpickling the source "
                    "(replaced, rewritten or touched); build the source again to read it"
                )
            if fi == 0 and labels is _NOT_GIVEN:
                taken = set(features or ())
                self.labels = tuple(c for c in recorded_labels(schema) or () if c not in taken)
            if paths is not None:  # a key a file also holds must agree with its path
                check_held_keys(f, pf, paths.values[fi])
            if fi == 0 and partitions is not None:
                # a key the files also hold as a column is read from the files
                kept = tuple(k for k in partitions.names if k not in schema.names)
                partitions = partitions._replace(names=kept) if kept else None
                self._partitions, keys = partitions, kept
            if features is None:  # the first file's columns and the partition keys, less labels
                features = [n for n in (*schema.names, *keys) if n not in self.labels]
            if fi == 0:
                self._cols = SourceColumns((*features, *self.labels), partitions, cats, f)
            self._check_schema(f, schema, self._cols)
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
        if files:
            self._cols.learn(self._read_columns)
        self.categories: dict[str, list[Any]] = self._cols.categories if files else {}

    @staticmethod
    def _check_schema(f: str, schema: Foreign, cols: SourceColumns) -> None:
        columns, names = cols.file_columns, schema.names  # (a new list at each .names)
        missing, twice = find_columns(names, columns)
        if missing:
            keys = cols.partitions.names if cols.partitions is not None else ()
            raise ValueError(
                f"{f}: missing column(s) {missing}; expected columns {columns}, "
                f"found {[*names, *keys]}"
            )
        if twice:
            raise ValueError(
                f"{f}: column name(s) {twice} appear more than once in the file "
                f"(found {names}), so which column is meant is ambiguous"
            )
        at = {c: i for i, c in enumerate(names)}
        cols.check_types(f, {c: schema.field(at[c]).type for c in columns})

    def _read_columns(self, columns: list[str]) -> Iterator[tuple[int, Foreign]]:
        """``(file index, table)`` of ``columns`` of each file in turn, a record batch at a
        time: the first pass that learns categorical vocabularies."""
        for fi, f in enumerate(self.files):
            try:
                pf = self._parquet_file(fi, metadata=self._meta[fi])
                for batch in pf.iter_batches(columns=columns, use_threads=False):
                    yield fi, batch
            except FileNotFoundError:
                raise
            except Exception as e:
                raise ValueError(f"{f}: cannot read column(s) {columns} ({e})") from e

    def __reduce__(self) -> tuple[Callable[..., ParquetSource], tuple[Any, ...]]:
        fs = None if self._fs is None else self._fs.get()
        cats = self.categories or None  # the vocabularies as learned: no second pass
        # local files by absolute path: the receiver may run in another folder
        files = self.files if fs is not None else [os.path.abspath(f) for f in self.files]
        args = (files, self.features, self.labels, fs, cats, self._partitions, self._stats)
        return _unpickle, args

    def _identity(self, path: str) -> tuple[Any, ...]:
        return _identity(path) if self._fs is None else url_identity(self._fs.get(), path)

    def _parquet_file(
        self, fi: int, metadata: Foreign = None, dictionary: list[str] | None = None
    ) -> Foreign:
        """File ``fi`` opened; ``dictionary``: columns a local file hands out dictionary-
        encoded (categorical strings: their row group's distinct values are coded once,
        and Parquet's own dictionary pages are never expanded into strings)."""
        if self._fs is None:
            path = for_arrow(self.files[fi])
            return _pq().ParquetFile(path, metadata=metadata, read_dictionary=dictionary)
        size = self._stats[fi][0]  # url_identity: (size, etag, version)
        return url_parquet_file(self._fs.get(), self.files[fi], metadata=metadata, size=size)

    @property
    def footers(self) -> list[Foreign]:
        """Each file's footer (``pyarrow.parquet.FileMetaData``), as read at construction:
        its row groups' rows and column statistics (what a state's fingerprint hashes)."""
        return list(self._meta)

    def identity(self) -> dict[str, Any]:
        """Its files, footers and columns (:func:`exactbatch.sources.identity.parquet_identity`)."""
        return parquet_identity(self.files, self._meta, self.features, self.labels)

    def __len__(self) -> int:
        return len(self._groups)

    def __repr__(self) -> str:
        return (
            f"ParquetSource({len(self.files)} files, {len(self._groups)} row groups, "
            f"n_rows={self.n_rows}, d={self.d}, l={self.l})"
        )

    fresh_chunks = True  # each read_chunk decodes its row group anew

    def read_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """Row group ``i`` (in file order) as float64 ``(x, y)``."""
        x, y = self.read_columns(i)
        return np.asarray(x), np.asarray(y)  # nulls are NaN

    def read_columns(self, i: int) -> tuple[ColumnChunk, ColumnChunk]:
        """Row group ``i`` decoded, as ``(x, y)`` held column by column (views of its
        float64 columns' buffers, a float64 copy of any other: nulls as NaN): a loader
        copies its rows straight into batches, with no row-major copy first."""
        columns, rows, d = self._columns(i), int(self.chunk_rows[i]), self.d
        return column_chunk(columns[:d], rows), column_chunk(columns[d:], rows)

    def open_chunk(self, i: int) -> ArrowRows:
        """Row group ``i`` decoded (on the calling thread: a stream's read-ahead), for a
        shuffle buffer to copy straight into its rows (``read_rows_into``, rows
        numbered from the source's first): one copy a row less than
        :meth:`read_chunk`, and no arrays of its own."""
        first = int(self.chunk_rows[:i].sum())
        return ArrowRows(self._columns(i), first, int(self.chunk_rows[i]))

    def _columns(self, i: int) -> list[Foreign]:
        """Row group ``i`` decoded and checked: its feature then label columns (Arrow)."""
        fi, g = self._groups[i]
        path = self.files[fi]
        self._check_unchanged(fi)
        try:
            pf = self._parquet_file(fi, self._meta[fi], self._cols.string_codes or None)
            table = pf.read_row_group(g, columns=self._cols.file_columns)
        except FileNotFoundError:
            raise
        except Exception as e:
            raise ValueError(f"{path}: cannot read row group {g} ({e})") from e
        rows = table.num_rows
        if rows != self.chunk_rows[i]:
            raise ValueError(
                f"{path}: row group {g} has {rows} rows, its footer said {self.chunk_rows[i]}"
            )
        first = int(self.chunk_rows[:i].sum())
        return self._cols.arrow_columns(table, fi, f"{path}: row group {g}", first, (fi, g))

    def _check_unchanged(self, fi: int) -> None:
        path = self.files[fi]
        if self._identity(path) != self._stats[fi]:
            # its footer (kept since construction) no longer describes the file
            raise ValueError(
                f"{path}: the file changed (replaced, rewritten or truncated) after "
                "parquet_source read its footer; build the source again to read it"
            )

    def iter_batches(self, rows: int) -> Iterator[list[Foreign]]:
        """Every row in order as lists of Arrow columns (features then labels, coded),
        a record batch of at most ``rows`` rows each: memory is one batch, whatever the
        row groups' size (what ``exactbatch convert`` writes from)."""
        first = 0
        for fi, path in enumerate(self.files):
            self._check_unchanged(fi)
            if self._fs is None:
                # Without pre-buffering, pages are read as they are decoded: memory is about
                # one record batch, not a whole row group's column chunks at once.
                pf = _pq().ParquetFile(
                    for_arrow(path), metadata=self._meta[fi], pre_buffer=False, buffer_size=1 << 20
                )
            else:
                pf = self._parquet_file(fi, metadata=self._meta[fi])
            batches = pf.iter_batches(
                batch_size=rows, columns=self._cols.file_columns, use_threads=False
            )
            for batch in batches:
                yield self._cols.arrow_columns(batch, fi, path, first)
                first += batch.num_rows

    def __iter__(self) -> Iterator[Chunk]:
        for i in range(len(self._groups)):
            yield self.read_chunk(i)


def _identity(path: str) -> tuple[int, int, int, int, int]:
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
    categorical: Any = None,
    pattern: str = FOLDER_PATTERN,
    storage_options: dict[str, Any] | None = None,
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
    (``year=2024/month=01/part-0.parquet``) is read whole, its partition
    keys columns as the files' are (:mod:`~exactbatch.sources.parquet_columns`);
    ``"*.parquet"`` reads the top level only; a file reached twice (a link) is read once.
    ``**`` is any number of folders; a wildcard skips hidden names (a
    leading ``.``); glob characters in the folder's own name (``run[1]``)
    are plain characters. The pattern means the same on a local folder and
    over a URL (:func:`exactbatch.urls.find_files`).

    ``categorical``: columns (among the features and labels) read as integer
    codes, with the rule of :mod:`exactbatch.sources.categorical`: a list of
    names learns each vocabulary, sorted, in a first pass over those columns
    at construction; ``{column: [values]}`` gives it (a value outside it is
    a ``ValueError`` at the read that meets it). The vocabularies are
    ``source.categories``. Any other non-numeric column chosen is a
    ``ValueError`` naming it and this option.

    The source pickles by its files (to spawned workers): unpickling reads
    the footers again (not the data, and not the first pass: the
    vocabularies travel) and refuses, with a ``ValueError`` naming it, a file
    that changed since the source was built.

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
        parts = None
        if not many and (len(files) > 1 or files[0] != os.fspath(paths[0])):  # a folder
            base = fs._strip_protocol(os.fspath(paths[0])).rstrip("/")
            parts = hive_partitions(base, [fs._strip_protocol(f) for f in files], fs)
        return ParquetSource(
            files, features, labels, fs=fs, categorical=categorical, partitions=parts
        )
    if storage_options is not None:
        raise ValueError(f"storage_options applies only to URLs; got the local path {path!r}")
    local = [local_path(p) for p in paths] if many else local_path(paths[0])
    files = list_local_files(local, pattern)
    parts = None
    if not isinstance(local, list) and os.path.isdir(local):
        base = for_arrow(local)
        parts = hive_partitions(base, [for_arrow(f) for f in files])
    return ParquetSource(files, features, labels, categorical=categorical, partitions=parts)


def _unpickle(
    files: list[str],
    features: Sequence[str],
    labels: Sequence[str],
    fs: Any,
    categories: dict[str, list[Any] | None] | None,
    partitions: Partitions | None,
    identities: list[tuple[Any, ...]],
) -> ParquetSource:
    """A ParquetSource unpickled: its files' footers read again, checked unchanged."""
    return ParquetSource(
        files,
        features,
        labels,
        fs=fs,
        categorical=categories,
        partitions=partitions,
        identities=identities,
    )
