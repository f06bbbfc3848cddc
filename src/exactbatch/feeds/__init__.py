"""The two feeds behind the loader: random access and streamed.

:func:`open_feed` is the loader's one way in: the source's kind
(:func:`exactbatch.sources.kinds.open_source`) picks the feed.
"""

from __future__ import annotations

from exactbatch.feeds.base import BatchSpec, Epoch, Feed, Job
from exactbatch.feeds.random_access import RandomAccessFeed
from exactbatch.feeds.streamed import StreamFeed
from exactbatch.sources.chunks import Stream
from exactbatch.sources.kinds import open_source

__all__ = ["BatchSpec", "Epoch", "Feed", "Job", "RandomAccessFeed", "StreamFeed", "open_feed"]


def open_feed(source, spec: BatchSpec, total_size="auto", buffer_size: int | None = None) -> Feed:
    """The feed for ``source``: a stream's, or a random-access reader's."""
    opened = open_source(source)
    if isinstance(opened, Stream):
        return StreamFeed(opened, spec, total_size, buffer_size)
    return RandomAccessFeed(opened, spec, total_size)
