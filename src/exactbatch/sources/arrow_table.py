"""pyarrow tables (random access) and record-batch readers (streams).

A ``pyarrow.Table`` or ``RecordBatch`` is read in place: each batch is
gathered from its columns' buffers
(:class:`~exactbatch.sources.arrow_columns.ArrowColumnsReader`), however many
chunks they hold. A ``RecordBatchReader`` can be read once only, and every
epoch must read the stream again, so a reader itself is refused (a
``TypeError`` naming the fix): pass a zero-argument function that returns a
fresh reader, which is called once per pass.
"""

from __future__ import annotations

import collections.abc as cabc
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NoReturn

from exactbatch.extras import need
from exactbatch.hints import Foreign
from exactbatch.sources.arrow_columns import ArrowColumnsReader, ArrowStream, made_by, pick_columns
from exactbatch.sources.categorical import check_categorical, code, vocabularies
from exactbatch.sources.identity import column_names

__all__ = ["ArrowTableSource", "arrow_source", "is_arrow_reader", "is_arrow_table", "refuse_reader"]


def is_arrow_table(obj: object) -> bool:
    """A ``pyarrow.Table`` or ``RecordBatch`` (or a subclass)?"""
    return made_by(obj, "pyarrow", "Table", "RecordBatch")


def is_arrow_reader(obj: object) -> bool:
    """A ``pyarrow.RecordBatchReader``: one pass only?"""
    return made_by(obj, "pyarrow", "RecordBatchReader")


def refuse_reader(reader: Any) -> NoReturn:
    """The ``TypeError`` a bare reader gets, naming the fix."""
    raise TypeError(
        f"a pyarrow RecordBatchReader ({type(reader).__name__}) can be read only once, "
        "but every epoch must read the stream again: pass a zero-argument function that "
        "returns a fresh reader, e.g. arrow_source(lambda: pa.ipc.open_stream(path)), "
        "or a pyarrow Table (random access)"
    )


class ArrowTableSource:
    """A pyarrow ``Table`` (or ``RecordBatch``) as random access: a
    :class:`~exactbatch.sources.protocols.RowSource`. Attributes: ``table``,
    ``features``, ``labels``, ``n``, ``d``, ``l``."""

    def __init__(
        self,
        table: Foreign,
        features: str | Sequence[str] | None,
        labels: str | Sequence[str],
        owner: str = "the pyarrow Table",
        categorical: object = None,
    ) -> None:
        cats = check_categorical(categorical, owner)
        self.features, self.labels = pick_columns(table.schema, features, labels, owner, cats)
        self.n, self.d, self.l = table.num_rows, len(self.features), len(self.labels)
        # coded columns are coded once, here (a float64 column each); the others are read
        # in place
        vocab = vocabularies(cats, lambda: [table.select(list(cats))])
        self.categories = {c: list(v.values) for c, v in vocab.items()}
        held = dict(zip(table.schema.names, table.columns, strict=True))  # (names unique)
        names = self.features + self.labels
        self._columns = [code(c, held[c], vocab, owner) for c in names]
        self.table = table
        self.owner = owner

    def identity(self) -> dict[str, Any]:
        """Its kind and columns (:mod:`exactbatch.sources.identity`)."""
        names = column_names(self.features, self.labels)
        return {"kind": f"arrow table ({self.owner})", "names": names}

    def open_reader(self) -> ArrowColumnsReader:
        """A new reader of the table's rows (the loader owns and closes it)."""
        return ArrowColumnsReader(self._columns, self.d)

    def __repr__(self) -> str:
        return f"ArrowTableSource(n={self.n}, d={self.d}, l={self.l})"


def arrow_source(
    data: Any,
    *,
    features: str | Sequence[str] | None = None,
    labels: str | Sequence[str] = (),
    categorical: Any = None,
) -> ArrowTableSource | ArrowStream:
    """A source over pyarrow data: a ``Table`` or ``RecordBatch`` (random access,
    read in place), or a zero-argument function returning a fresh
    ``RecordBatchReader`` (or any iterable of record batches) per pass: a
    stream, whose first reader is made once here to learn its schema.

    ``features`` and ``labels`` choose columns by name, as in
    :func:`exactbatch.arrow_file`: None features are every numeric column
    not among the labels (others left out with a warning); a named column
    missing or not numeric is a ``ValueError`` naming it; a null is NaN. A
    bare ``RecordBatchReader`` is a ``TypeError`` (it cannot restart).

    ``categorical``: columns read as integer codes, as in
    :func:`exactbatch.parquet_source` (:mod:`exactbatch.sources.categorical`):
    a list learns each vocabulary (a table's column at once; a stream's in a
    first pass), ``{column: [values]}`` gives it; ``source.categories``.
    """
    pa = need("pyarrow", by="arrow_source", package="pyarrow", extra="arrow")
    if is_arrow_table(data):
        return ArrowTableSource(data, features, labels, categorical=categorical)
    if is_arrow_reader(data) or isinstance(data, cabc.Iterator):
        refuse_reader(data)
    if not callable(data):
        raise TypeError(
            "data must be a pyarrow Table or RecordBatch, or a zero-argument function "
            f"returning a fresh RecordBatchReader; got {type(data).__name__}"
        )
    cats = check_categorical(categorical, "arrow_source")
    feats, labs = _schema_columns(data, features, labels, cats)
    return ArrowStream(_Readers(data, pa), feats, labs, "the reader", categorical=cats)


class _Readers:
    """``factory()`` checked to be a reader (or an iterable of record batches)."""

    def __init__(self, factory: Callable[[], Any], pa: Foreign) -> None:
        self.factory, self.pa = factory, pa

    def __call__(self) -> Iterable[Foreign]:
        r = self.factory()
        if isinstance(r, self.pa.Table):
            table: Iterable[Foreign] = r.to_batches()
            return table
        if not isinstance(r, cabc.Iterable):
            raise TypeError(
                "the function passed to arrow_source must return a RecordBatchReader; "
                f"it returned {type(r).__name__}"
            )
        batches: Iterable[Foreign] = r
        return batches


def _schema_columns(
    factory: Callable[[], Any],
    features: str | Sequence[str] | None,
    labels: str | Sequence[str],
    cats: dict[str, list[Any] | None],
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The columns to read, from the schema of a first reader (or first batch) made now."""
    first = factory()
    try:
        schema = getattr(first, "schema", None)
        if schema is None and isinstance(first, cabc.Iterable):
            schema = getattr(next(iter(first), None), "schema", None)  # a batch's
    finally:  # a reader made only for its schema holds a file or a query: closed either way
        close = getattr(first, "close", None)
        if close is not None:
            close()
    if schema is None:
        raise TypeError(
            "the function passed to arrow_source must return a RecordBatchReader or an "
            f"iterable of record batches; it returned {type(first).__name__}"
        )
    return pick_columns(schema, features, labels, "the reader", cats)
