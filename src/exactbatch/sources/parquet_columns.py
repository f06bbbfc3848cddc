"""Where the columns of a Parquet source come from: the files, or a Hive-partitioned
folder's paths (``year=2024/month=01/part-0.parquet``), and which are coded as
categories (:mod:`exactbatch.sources.categorical`).

Hive partitions are found by ``pyarrow.dataset``'s partitioning
(``HivePartitioning.discover()``, relative to the folder the source was given,
from the paths alone: no footer is read): a key
whose values are all integers is an integer column (``int32``, or ``int64``
where a value is past int32), any other a string column (usable as a
category); values are URL-decoded, as Spark, Dask and Polars write them. A
key a file also holds as a column is read from the file, and every value
there must be the one its path says (:func:`check_held_keys`: from the
footer's statistics, else a read of that column), else a ``ValueError``
naming the file and the key. A file outside any ``key=value`` folder has the key
missing (null: NaN, or a missing category). Partition keys cost no read:
their values are constant within a file, taken from its path.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from exactbatch.hints import Foreign
from exactbatch.sources.categorical import Vocabulary, is_categorical_type, learn, learned

__all__ = ["Partitions", "SourceColumns", "check_names", "find_columns", "hive_partitions"]
__all__ += ["check_held_keys", "is_numeric_type"]


class Partitions(NamedTuple):
    """A folder's Hive partition keys: their ``names`` (in path order), Arrow ``types``
    and each file's ``values`` (one dict a file, in the source's file order)."""

    names: tuple[str, ...]
    types: dict[str, Foreign]  # an Arrow type each
    values: list[dict[str, Any]]


def _has_keys(base: str, files: list[str]) -> bool:
    for f in files:
        rel = f[len(base) :].strip("/") if f.startswith(base) else os.path.relpath(f, base)
        if any("=" in part for part in rel.replace(os.sep, "/").split("/")[:-1]):
            return True
    return False


def hive_partitions(base: str, files: list[str], fs: Any = None) -> Partitions | None:
    """The Hive partition keys of ``files`` under the folder ``base`` (both paths within
    ``fs``, an fsspec filesystem; None: local paths), or None when no file lies in a
    ``key=value`` folder."""
    if not _has_keys(base, files):
        return None
    import pyarrow.dataset as pds
    from pyarrow.fs import FSSpecHandler, LocalFileSystem, PyFileSystem

    filesystem = LocalFileSystem() if fs is None else PyFileSystem(FSSpecHandler(fs))
    options = pds.FileSystemFactoryOptions(partition_base_dir=base)
    options.partitioning_factory = pds.HivePartitioning.discover()
    try:
        factory = pds.FileSystemDatasetFactory(filesystem, files, pds.ParquetFileFormat(), options)
        # the keys' schema only (fragments=0): no footer is read, and a key that a file
        # also holds as a column (of another type, say) does not conflict here
        ds = factory.finish(factory.inspect(fragments=0))
    except Exception as e:  # ArrowInvalid (a ValueError), ArrowTypeError...
        raise ValueError(f"{base}: cannot read its Hive partitions ({e})") from e
    keys = {f.path: pds.get_partition_keys(f.partition_expression) for f in ds.get_fragments()}
    fields = [ds.schema.field(i) for i in range(len(ds.schema))]
    found = {k for v in keys.values() for k in v}
    names = tuple(f.name for f in fields if f.name in found)
    types = {f.name: f.type for f in fields}
    values = [keys.get(f, {}) for f in files]
    for name in names:  # discover() says int32 or string: integers past int32 are int64
        if str(types[name]) == "string" and _all_int64([v.get(name) for v in values]):
            import pyarrow as pa

            types[name] = pa.int64()
            for v in values:
                if v.get(name) is not None:
                    v[name] = int(v[name])
    return Partitions(names, types, values)


def _all_int64(values: list[Any]) -> bool:
    """Are the (string) values, less nulls, all integers within int64?"""
    found = [v for v in values if v is not None]
    try:
        return bool(found) and all(-(2**63) <= int(v) < 2**63 and str(int(v)) == v for v in found)
    except (TypeError, ValueError):
        return False


def check_held_keys(path: str, pf: Foreign, keys: dict[str, Any]) -> None:
    """A ``ValueError`` naming ``path`` and the key if a partition key the file (``pf``, a
    ``ParquetFile``) also holds as a column holds a value other than its path's
    (``keys``: the path's values). From the footer's statistics where every row group
    has them, else from a read of that column."""
    names = pf.schema_arrow.names
    md = pf.metadata
    for key, want in keys.items():
        if key not in names or want is None:
            continue
        j = pf.schema_arrow.get_field_index(key)
        stats = [md.row_group(g).column(j).statistics for g in range(md.num_row_groups)]
        if all(s is not None and s.has_min_max and not s.null_count for s in stats):
            found = {v for s in stats for v in (s.min, s.max)}
        else:
            found = set(pf.read(columns=[key]).column(0).unique().to_pylist())
        bad = sorted(repr(v) for v in found if v != want and str(v) != str(want))
        if bad:
            raise ValueError(
                f"{path}: the partition key {key!r} is also a column of the file, holding "
                f"{', '.join(bad[:5])} where its path says {key}={want}: which is meant is "
                "ambiguous; drop the column from the files, or fix the folder's name"
            )


class SourceColumns:
    """The chosen columns (features then labels) of a Parquet source: which are read from
    the files (``file_columns``), which are partition keys, and the vocabularies of the
    coded ones (``categories``). :meth:`arrow_columns` turns what was read of a file
    into the chosen columns, coded, in order."""

    def __init__(
        self,
        names: Iterable[str],
        partitions: Partitions | None,
        categorical: dict[str, list[Any] | None],
        where: str,
    ) -> None:
        self.names = list(names)
        self.partitions = partitions
        keys = set(partitions.names) if partitions is not None else set()
        self.keys = [c for c in self.names if c in keys]
        self.file_columns = [c for c in self.names if c not in keys]
        self._from_files = frozenset(self.file_columns)  # (a set: linear in the columns)
        outside = [c for c in categorical if c not in self.names]
        if outside:
            raise ValueError(
                f"{where}: categorical names column(s) {outside} that are neither features "
                f"nor labels (chosen: {self.names}); name them in features= or labels= too"
            )
        self.categorical = categorical
        self.vocab: dict[str, Vocabulary] = {}
        if partitions is not None:
            for c in self.keys:
                t = partitions.types[c]
                if c not in categorical and not is_numeric_type(t):
                    raise ValueError(
                        f"{where}: the partition key {c!r} holds {t} values; code it with "
                        f"categorical=[{c!r}], or leave it out of features/labels"
                    )

    def check_types(self, path: str, types: dict[str, Foreign]) -> None:
        """Refuse a file whose chosen columns (``types``: name -> Arrow type) are not
        numeric, or, for a categorical column, not of a type that can be coded."""
        cats = {c: t for c, t in types.items() if c in self.categorical}
        bad = [f"{c} ({t})" for c, t in cats.items() if not is_categorical_type(t)]
        if bad:
            raise TypeError(
                f"{path}: categorical column(s) {bad} cannot be coded: a category is a "
                "string, an integer, a boolean or a float (cast the column first)"
            )
        bad = [f"{c} ({t})" for c, t in types.items() if c not in cats and not is_numeric_type(t)]
        if bad:
            names = [b.split(" (")[0] for b in bad]
            raise ValueError(
                f"{path}: non-numeric column(s) {bad}; features and labels must be integer, "
                f"floating or boolean columns: code them with categorical={names}, or leave "
                "them out of features=[...]"
            )

    def learn(self, reads: Callable[[list[str]], Iterable[tuple[int, Foreign]]]) -> None:
        """The vocabularies: those given, and the others learned, sorted, from
        ``reads(columns)`` (an iterable of ``(file index, table)`` of those file columns)
        and the partition keys' values."""
        todo = [c for c, v in self.categorical.items() if v is None and c in self._from_files]
        seen: dict[str, list[Foreign]] = {c: [] for c in todo}
        if todo:
            import pyarrow.compute as pc

            for _, table in reads(todo):
                for c in todo:
                    seen[c].append(pc.unique(table.column(c)))  # not the column: memory
        for c, given in self.categorical.items():
            if given is not None:
                self.vocab[c] = Vocabulary(c, given)
            elif c in self.keys:
                import pyarrow as pa

                assert self.partitions is not None
                values = [v.get(c) for v in self.partitions.values]
                self.vocab[c] = Vocabulary(c, learn([pa.array(values)]))
            else:
                self.vocab[c] = learned(c, seen[c])

    @property
    def string_codes(self) -> list[str]:
        """The files' columns coded against vocabularies of strings (read dictionary-
        encoded: :meth:`Vocabulary.encode` codes each distinct value once)."""
        return [c for c in self.file_columns if c in self.vocab and self.vocab[c].strings]

    @property
    def categories(self) -> dict[str, list[Any]]:
        """``{column: [value, ...]}``: code ``j`` is the ``j``-th value."""
        return {c: list(v.values) for c, v in self.vocab.items()}

    def arrow_columns(
        self, table: Foreign, fi: int, where: str, first_row: int = 0, place: Any = None
    ) -> list[Foreign]:
        """The chosen columns of ``table`` (a table or record batch read from file ``fi``,
        holding ``file_columns``): partition keys made constant, categories coded
        (``place``: the row group's, when ``table`` is one: :meth:`Vocabulary.encode`)."""
        import pyarrow as pa

        rows, out = table.num_rows, []
        for c in self.names:
            if c in self._from_files:
                col = table.column(c)
            else:
                assert self.partitions is not None
                value = self.partitions.values[fi].get(c)
                t = self.partitions.types[c]
                col = pa.nulls(rows, t) if value is None else pa.repeat(pa.scalar(value, t), rows)
            v = self.vocab.get(c)
            out.append(col if v is None else v.encode(col, where, first_row, place))
        return out


def is_numeric_type(arrow_type: Foreign) -> bool:
    """Can a column of this Arrow type be read as float64 (integer, floating, boolean)?"""
    import pyarrow.types as pat

    numeric: bool = (
        pat.is_integer(arrow_type) or pat.is_floating(arrow_type) or pat.is_boolean(arrow_type)
    )
    return numeric


def check_names(features: Sequence[str] | None, labels: Sequence[str]) -> None:
    """Refuse a column named twice: within ``features``, within ``labels``, or in both
    (every Arrow-backed source's rule)."""
    for what, names in (("features", features), ("labels", labels)):
        _, twice = find_columns(names or (), ())
        if twice:
            raise ValueError(f"{what} names column(s) {twice} more than once; name each once")
    chosen = set(features or ())
    both = [c for c in dict.fromkeys(labels) if c in chosen]
    if both:
        raise ValueError(
            f"column(s) {both} are named both in features and in labels: a label among "
            "the features hands the model its answer (label leakage); name each in one only"
        )


def find_columns(available: Sequence[str], named: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(missing, twice)``: the names of ``named`` not in ``available``, in their
    order, and the names of ``available`` found in it more than once that ``named``
    names (all of them when ``named`` is empty), sorted. Linear in the columns (a
    file of 8,000 columns is checked in milliseconds, not minutes)."""
    counts = Counter(available)
    missing = [c for c in named if c not in counts]
    asked = counts if not named else dict.fromkeys(named)
    twice = sorted(c for c in asked if counts.get(c, 0) > 1)
    return missing, twice
