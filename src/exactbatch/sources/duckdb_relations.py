"""A DuckDB relation as a stream: its query runs again on every pass.

Each pass asks the relation for a fresh Arrow reader (``to_arrow_reader``)
and reads it batch by batch
(:class:`~exactbatch.sources.arrow_columns.ArrowStream`); a relation keeps no
result between runs, so every epoch reads the data as it is then. For the
epochs to be exact the query must give its rows in the same order every
time: a table or a Parquet scan does (DuckDB keeps insertion order), a
query with joins, aggregates or parallel sorts of ties need not: add an
``ORDER BY`` over a unique key.

N: a relation over a table (``con.table(name)``) is counted at construction
(``count(*)``, which reads none of its columns); any other
relation is counted only if you say so: pass ``n_rows`` when you know it,
else the loader counts the rows in one pass (``total_size="auto"``, with a
warning) or takes a declared ``total_size``.

``DECIMAL`` columns are not floating: cast them (``CAST(x AS DOUBLE)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from exactbatch.checks import check_int
from exactbatch.extras import need
from exactbatch.hints import Foreign
from exactbatch.sources.arrow_columns import ArrowStream, made_by, pick_columns
from exactbatch.sources.categorical import check_categorical

__all__ = ["duckdb_source", "is_duckdb_relation"]

# Rows per batch of a pass (DuckDB's own default for an Arrow reader).
BATCH_ROWS = 131072


def is_duckdb_relation(obj: object) -> bool:
    """A DuckDB relation (``DuckDBPyRelation``)?"""
    return made_by(obj, "duckdb", "DuckDBPyRelation")


def duckdb_source(
    relation: Any,
    *,
    features: str | Sequence[str] | None = None,
    labels: str | Sequence[str] = (),
    batch_rows: int = BATCH_ROWS,
    n_rows: int | None = None,
    categorical: Any = None,
) -> ArrowStream:
    """A stream over a DuckDB relation, its query run once per pass, ``batch_rows`` rows
    a chunk.

    Columns as in :func:`exactbatch.arrow_file`: ``features`` None is every
    numeric column not among ``labels`` (others left out with a warning); a
    named column missing or not numeric is a ``ValueError`` naming it; a
    null is NaN. ``n_rows``: the relation's row count, if known (a table's
    is counted here; see the module docs).

    ``categorical``: columns read as integer codes, as in
    :func:`exactbatch.parquet_source` (:mod:`exactbatch.sources.categorical`):
    a list learns each vocabulary, sorted, in a first pass of the query;
    ``{column: [values]}`` gives it; ``source.categories``.
    """
    need("duckdb", by="duckdb_source", package="duckdb", extra="duckdb")
    need("pyarrow", by="duckdb_source", package="pyarrow", extra="duckdb")
    if not is_duckdb_relation(relation):
        raise TypeError(
            f"relation must be a DuckDB relation (con.table(...), con.sql(...)); "
            f"got {type(relation).__name__}"
        )
    check_int("batch_rows", batch_rows, 1)
    check_int("n_rows", n_rows, 0, optional=True)
    schema = _reader(relation.limit(0), 1).schema
    cats = check_categorical(categorical, "duckdb_source")
    feats, labs = pick_columns(schema, features, labels, "the DuckDB relation", cats)
    if n_rows is None and relation.type == "TABLE_RELATION":
        n_rows = int(relation.count("*").fetchall()[0][0])
    query = relation.select(*[_quoted(c) for c in feats + labs])
    owner = "the DuckDB relation"
    return ArrowStream(
        lambda: _reader(query, batch_rows), feats, labs, owner, n_rows, categorical=cats
    )


def _reader(relation: Foreign, batch_rows: int) -> Foreign:
    """A fresh Arrow reader running ``relation`` (``to_arrow_reader``; before DuckDB 1.4,
    ``fetch_arrow_reader``)."""
    run = getattr(relation, "to_arrow_reader", None) or relation.fetch_arrow_reader
    return run(batch_rows)


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
