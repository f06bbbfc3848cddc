"""Polars frames through Arrow: a ``DataFrame`` as random access, a ``LazyFrame`` as a stream.

A ``DataFrame`` is read as its Arrow columns (``to_arrow()``, which shares
the frame's numeric buffers), each batch gathered from them
(:class:`~exactbatch.sources.arrow_columns.ArrowColumnsReader`). A
``LazyFrame`` is a query: each pass runs it again, in batches
(``collect_batches``), so it must give its rows in the same order every
time (sort it, or keep ``maintain_order``) for the epochs to be exact.

A bare polars ``DataFrame`` passed to ``DataLoader`` is an array-like
(every column numeric, no labels, read once into a float64 array:
:mod:`exactbatch.arrays`); :func:`polars_source` names the features and
labels and leaves the frame where it is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from exactbatch.checks import check_int
from exactbatch.extras import need
from exactbatch.hints import Foreign
from exactbatch.sources.arrow_columns import ArrowStream, made_by, pick_columns
from exactbatch.sources.arrow_table import ArrowTableSource
from exactbatch.sources.categorical import check_categorical

__all__ = ["is_lazy_frame", "polars_source"]

# Rows per batch of a LazyFrame's pass.
BATCH_ROWS = 65536


def is_lazy_frame(obj: object) -> bool:
    """A polars ``LazyFrame``?"""
    return made_by(obj, "polars", "LazyFrame")


def polars_source(
    frame: Any,
    *,
    features: str | Sequence[str] | None = None,
    labels: str | Sequence[str] = (),
    batch_rows: int = BATCH_ROWS,
    n_rows: int | None = None,
    categorical: Any = None,
) -> ArrowTableSource | ArrowStream:
    """A source over a polars ``DataFrame`` (random access) or ``LazyFrame`` (a stream
    that runs the query once per pass, ``batch_rows`` rows a chunk).

    Columns as in :func:`exactbatch.arrow_file`: ``features`` None is every
    numeric column not among ``labels`` (others left out with a warning); a
    named column missing or not numeric is a ``ValueError`` naming it; a
    null is NaN. ``n_rows``: a LazyFrame's row count if you know it (else
    the loader counts it in a pass, or takes ``total_size``); a DataFrame
    knows its own.

    ``categorical``: columns read as integer codes, as in
    :func:`exactbatch.parquet_source` (:mod:`exactbatch.sources.categorical`):
    a list learns each vocabulary, sorted (a DataFrame's column at once; a
    LazyFrame's in a first pass of its query), ``{column: [values]}`` gives
    it; the vocabularies are ``source.categories``. A DataFrame's coded
    columns are coded once, at construction (a float64 column each).
    """
    pl = need("polars", by="polars_source", package="polars", extra="polars")
    check_int("batch_rows", batch_rows, 1)
    if isinstance(frame, pl.DataFrame):
        if n_rows is not None:
            raise ValueError("n_rows applies to a LazyFrame; a DataFrame knows its rows")
        owner = "the polars DataFrame"
        return ArrowTableSource(_to_arrow(frame, owner), features, labels, owner, categorical)
    if not isinstance(frame, pl.LazyFrame):
        raise TypeError(
            f"frame must be a polars DataFrame or LazyFrame; got {type(frame).__name__}"
        )
    check_int("n_rows", n_rows, 0, optional=True)
    need("pyarrow", by="polars_source", package="pyarrow", extra="polars")
    cats = check_categorical(categorical, "polars_source")
    feats, labs = pick_columns(_arrow_schema(frame), features, labels, "the LazyFrame", cats)
    query = frame.select(list(feats + labs))

    def batches() -> Iterator[Foreign]:
        return (df.to_arrow() for df in query.collect_batches(chunk_size=batch_rows))

    return ArrowStream(batches, feats, labs, "the LazyFrame", n_rows, categorical=cats)


def _arrow_schema(frame: Foreign) -> Foreign:
    """The LazyFrame's schema as Arrow's, without running its query: an empty frame's."""
    import polars as pl

    return _to_arrow(pl.DataFrame(schema=frame.collect_schema()), "the LazyFrame").schema


def _to_arrow(frame: Foreign, owner: str) -> Foreign:
    """``frame.to_arrow()``, or a ``ValueError`` naming the columns Arrow cannot hold (a
    polars Int128, say) instead of pyarrow's own error."""
    import pyarrow as pa

    try:
        return frame.to_arrow()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
        bad = []
        for name, dtype in frame.schema.items():
            try:
                frame.select(name).head(0).to_arrow()
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                bad.append(f"{name} ({dtype})")
        raise ValueError(
            f"{owner}: column(s) {bad or list(frame.columns)} have a type Arrow cannot hold "
            f"({e}); cast them first (e.g. pl.col(name).cast(pl.Float64)), or drop them"
        ) from None
