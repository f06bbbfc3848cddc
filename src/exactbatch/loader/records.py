"""What a state's records and summaries hold, as types: a record is
:mod:`exactbatch.loader.history`'s (one loader's segment of one epoch), a summary
:mod:`exactbatch.loader.compaction`'s (old clean records of one shard, folded).

Both are plain data (JSON), checked where a state is loaded
(:func:`~exactbatch.loader.history.check_records`,
:func:`~exactbatch.loader.compaction.check_summaries`); a state itself, user data
until :func:`~exactbatch.loader.state.unpack_state` has checked it, is a ``State``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypedDict

from exactbatch.feeds.base import BatchSpec, Exhaustible, Feed, Place

if TYPE_CHECKING:  # (typing's own from Python 3.11; only mypy reads it here)
    from typing_extensions import NotRequired

__all__ = ["Record", "Recorder", "Resumed", "State", "Summary", "Tallied"]

State = dict[str, Any]  # a state_dict(): JSON, every key checked where it is read


class Tallied(TypedDict):
    """A :class:`~exactbatch.order.digest.Tally` as a state holds it."""

    rows: int
    digest: str  # 16 hex digits


class Record(TypedDict):
    """One loader's segment of one epoch (:mod:`exactbatch.loader.history`)."""

    epoch: int
    shard: list[int]  # [index, count]
    elastic: bool | str
    start: int  # the global batch the segment began at (0 unless elastic)
    drops: bool  # rows left out by design (drop_last, even_batches=True)
    rows: int  # this segment's hand-outs
    digest: str
    promised: Tallied | None  # the epoch's promise, once it ended here
    whole: Tallied | None  # the dataset's rows (None: a stream of unknown size)


class Summary(TypedDict):
    """A shard's old clean records, folded (:mod:`exactbatch.loader.compaction`)."""

    shard: list[int]
    elastic: bool | str
    drops: bool
    epochs: list[list[int]]  # runs [first, last, rows]
    digest: str  # the weighted sum of the records' digests
    whole: Tallied
    promised: NotRequired[Tallied]  # elastic with drops: the weighted promises


class Recorder(Protocol):
    """The cursor, as a record reads it (:meth:`History.record
    <exactbatch.loader.history.History.record>`): its spec, its feed and the epoch
    being handed out (None on a start)."""

    @property
    def spec(self) -> BatchSpec: ...

    @property
    def feed(self) -> Feed: ...

    @property
    def current(self) -> Exhaustible | None: ...


class Resumed(Place, Protocol):
    """A state's position as a history takes it on (a
    :class:`~exactbatch.loader.state.Position`, whose module imports the history)."""

    @property
    def pending(self) -> tuple[int, ...]: ...

    @property
    def parent(self) -> str | None: ...

    @property
    def run(self) -> int: ...

    @property
    def compacted(self) -> tuple[Summary, ...]: ...
