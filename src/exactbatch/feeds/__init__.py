"""The two feeds behind the loader: random access and streamed.

:func:`open_feed` is the loader's one way in: the source's kind
(:func:`exactbatch.sources.kinds.open_source`) picks the feed, and the spec's
``elastic`` the dealing (:mod:`exactbatch.feeds.dealing`), read there once:
contiguous rows a shard, one global order dealt to the shards in turn, or
(``"ranges"``, :mod:`exactbatch.feeds.ranges`) contiguous shares of each segment.
"""

from __future__ import annotations

from exactbatch.feeds.base import BatchSpec, Dealing, DealingKind, Epoch, Feed, Job
from exactbatch.feeds.dealing import Contiguous, Elastic
from exactbatch.feeds.elastic_stream import ElasticStreamFeed
from exactbatch.feeds.random_access import RandomAccessFeed
from exactbatch.feeds.ranges import Ranges
from exactbatch.feeds.streamed import StreamFeed
from exactbatch.hints import ArrayLike, ColumnSelection, Source
from exactbatch.sources.categorical import check_code_dtype
from exactbatch.sources.chunks import Stream
from exactbatch.sources.columns import column_names, source_categories
from exactbatch.sources.kinds import open_source
from exactbatch.sources.selection import select_columns

__all__ = [
    "BatchSpec",
    "Contiguous",
    "Dealing",
    "Elastic",
    "ElasticStreamFeed",
    "Epoch",
    "Feed",
    "Job",
    "RandomAccessFeed",
    "Ranges",
    "StreamFeed",
    "open_feed",
]


# How batches are dealt to the shards, by the spec's elastic: contiguous shards, one
# global order dealt in turn, or contiguous shares of each segment.
_DEALINGS: dict[bool | str, DealingKind] = {False: Contiguous, True: Elastic, "ranges": Ranges}


def open_feed(
    source: Source,
    spec: BatchSpec,
    total_size: int | str | None = "auto",
    buffer_size: int | None = None,
    rows: ArrayLike | None = None,
    columns: tuple[ColumnSelection, ColumnSelection] = (None, None),
) -> Feed:
    """The feed for ``source``: a stream's, or a random-access reader's (of the subset
    ``rows`` of it, if given: a stream has no row ids to select, a ``TypeError``);
    ``columns``: the loader's ``(features, labels)`` selection
    (:func:`~exactbatch.sources.selection.select_columns`)."""
    dealing: DealingKind = _DEALINGS[spec.elastic]  # (the one choice)
    source = select_columns(dealing.chunked(source), *columns)
    opened = open_source(source)
    try:
        names, cats = column_names(source, opened), source_categories(source, opened)
        if cats and names is not None and spec.output is not None and spec.output.int_labels:
            cats = {c: v for c, v in cats.items() if c not in set(names[1])}  # int labels
        check_code_dtype(cats, spec.dtype)
        if spec.output is not None:  # a transform meets the source's columns by name
            spec.output.name_columns(names)
    except BaseException:
        if not isinstance(opened, Stream):
            opened.close()
        raise
    if isinstance(opened, Stream):
        if rows is not None:
            raise TypeError(
                f"rows= selects rows of a random-access source, but {type(source).__name__} "
                "is a stream, read front to back: its rows cannot be picked by id. Write it "
                "once to .ndf (exactbatch convert, save_ndf) and pass rows= with that file"
            )
        return dealing.open_stream(opened, spec, total_size, buffer_size)
    try:
        return RandomAccessFeed(opened, spec, dealing, total_size, rows, about=source)
    except BaseException:
        opened.close()  # the loader never got it: let go of the file now
        raise
