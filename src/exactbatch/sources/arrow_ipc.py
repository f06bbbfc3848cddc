"""Arrow IPC files (Feather v2) as random access: memory-mapped, read in place.

The file is mapped, not read: its columns are views of the mapping, and each
batch is gathered from them (:class:`~exactbatch.sources.arrow_columns.ArrowColumnsReader`),
so opening costs no read of the data and no conversion, and the page cache
is shared by every loader and process that reads the file. A file of several
record batches reads as their rows in order.

A compressed file (``compression="lz4"`` or ``"zstd"``, Feather's default)
cannot be read in place: its buffers are decompressed into memory when it is
opened (the columns named only). Write ``compression="uncompressed"`` to
keep the file mapped.

The file's identity is checked as an ``.ndf`` file's is
(:mod:`~exactbatch.sources.file_watch`): its size, modification time and
change time after every batch read from the mapping, and on unpickling. A
file rewritten in place (say, written again larger between epochs) is then
an ``NdfError`` naming it, never rows of the new file read through the old
layout; one replaced by a rename keeps being read as the file opened. (A
compressed file, read into memory at open, is checked only on unpickling.)
Do not truncate the file while a loader reads it: unlike an ``.ndf`` file,
whose copies are guarded, a mapping of a truncated file is a ``SIGBUS``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from exactbatch.extras import need
from exactbatch.hints import Foreign, PathLike
from exactbatch.sources.arrow_columns import ArrowColumnsReader, pick_columns
from exactbatch.sources.file_watch import FileWatch
from exactbatch.sources.identity import column_names, file_facts

__all__ = ["ArrowFileSource", "arrow_file"]


class ArrowFileSource:
    """An Arrow IPC file, as :func:`arrow_file` opens it: a
        :class:`~exactbatch.sources.protocols.RowSource`. Attributes: ``path``,
        ``features``, ``labels``, ``n``, ``d``, ``l``, ``batches`` (the file's record
        batches) and ``compressed``. It pickles by its path and the file's stamps (reopened
    on load, and refused if the file changed: ``NdfError``)."""

    def __init__(
        self,
        path: str,
        features: str | Sequence[str] | None,
        labels: str | Sequence[str],
        stamps: Sequence[Sequence[int]] | None = None,
    ) -> None:
        pa = need("pyarrow", by="arrow_file", package="pyarrow", extra="arrow")
        self.path = path
        # opened (and stamped) before it is mapped: what is read is what is checked
        self._watch = FileWatch([path], "an Arrow IPC file", stamps)
        mapping = pa.memory_map(path, "r")
        try:
            f = pa.ipc.open_file(mapping)
        except pa.ArrowInvalid as e:
            raise ValueError(
                f"{path}: not an Arrow IPC file (Feather v2) ({e}); an IPC stream "
                "(.arrows) is read with arrow_source(lambda: pa.ipc.open_stream(path))"
            ) from e
        self.features, self.labels = pick_columns(f.schema, features, labels, path)
        names = list(self.features + self.labels)
        first = pa.Table.from_batches([f.get_batch(0)]) if f.num_record_batches else None
        self.compressed = first is not None and not _in_mapping(first, mapping)
        if self.compressed:  # decompress the columns named only (a selection copies)
            fields = sorted(f.schema.get_field_index(c) for c in names)
            only = pa.ipc.IpcReadOptions(included_fields=fields)
            f = pa.ipc.open_file(mapping, options=only)
        table = f.read_all()
        self.batches = f.num_record_batches
        self.n, self.d, self.l = table.num_rows, len(self.features), len(self.labels)
        self._columns = [table.column(c) for c in names]

    def open_reader(self) -> ArrowColumnsReader:
        """A new reader of the file's rows (the loader owns and closes it)."""
        check = None if self.compressed else self._watch.check
        return ArrowColumnsReader(self._columns, self.d, mapped=True, check=check)

    def identity(self) -> dict[str, Any]:
        """Its kind, columns and file (:mod:`exactbatch.sources.identity`)."""
        names = column_names(self.features, self.labels)
        return {"kind": "arrow_file", "names": names, **file_facts(self.path)}

    def check_unchanged(self) -> None:
        """``NdfError`` naming the file if it changed (in place) since it was opened."""
        self._watch.check()

    def __reduce__(self) -> tuple[Callable[..., ArrowFileSource], tuple[Any, ...]]:
        return (_reopen, (self.path, self.features, self.labels, self._watch.stamps))

    def __repr__(self) -> str:
        return (
            f"ArrowFileSource({self.path!r}, n={self.n}, d={self.d}, l={self.l}, "
            f"batches={self.batches})"
        )


def _in_mapping(table: Foreign, mapping: Foreign) -> bool:
    """Do ``table``'s buffers lie in ``mapping`` (read in place, not decompressed)?"""
    mapping.seek(0)
    start = mapping.read_buffer(1).address
    end = start + mapping.size()
    return all(
        start <= b.address < end
        for col in table.columns
        for chunk in col.chunks
        for b in chunk.buffers()
        if b is not None and b.size
    )


def _reopen(
    path: str,
    features: str | Sequence[str] | None,
    labels: str | Sequence[str],
    stamps: Sequence[Sequence[int]] | None = None,
) -> ArrowFileSource:
    return ArrowFileSource(path, features, labels, stamps)


def arrow_file(
    path: PathLike,
    *,
    features: str | Sequence[str] | None = None,
    labels: str | Sequence[str] = (),
) -> ArrowFileSource:
    """A random-access source over an Arrow IPC file (Feather v2), memory-mapped.

    ``features``: the feature columns (None: every integer, floating or
    boolean column not among ``labels``, in the file's order; other columns
    are left out, with a warning naming them); ``labels``: the label
    columns. A column named that is missing or not numeric, or named twice,
    is a ``ValueError`` naming it. Values are read as float64 (then the
    loader's dtype); a null is NaN. A missing file is ``FileNotFoundError``,
    a file that is not an Arrow IPC file a ``ValueError`` naming it.
    """
    return ArrowFileSource(os.fspath(path), features, labels)
