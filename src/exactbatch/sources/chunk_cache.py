"""A chunk-indexed stream read as random access: chunks loaded on demand, a few kept.

An elastic streamed epoch (:mod:`exactbatch.feeds.elastic_stream`) asks for
rows of the stream by id, as a random-access epoch does, but its order keeps
the rows of a batch within one or two windows of consecutive chunks
(:mod:`exactbatch.order.windows`). :class:`ChunkCacheReader` serves those
reads from the chunks they lie in: a chunk is read (``read_chunk``) the first
time a read needs it, by the thread that needs it (two threads needing one chunk wait for one read),
and held as rows at most once copied: ``read_chunk``'s x and y arrays as they
are where they are the source's own (``fresh_chunks``: a list's chunk, Dask's
partitions; no copy unless a side is not float64 rows, each row's values side
by side), else read one at a time and copied as read (a source may fill one
buffer at every read),
else laid out once as whole rows (x then y: one copy straight from its
columns where the source holds them so, ``read_columns``: Parquet's row
groups, as decoded; straight into them where the source reads into rows,
``read_rows_into`` or ``open_chunk``). A list's arrays held are the user's
own: a list changed in place while an epoch reads it changes the rows read,
as an array source's would. The chunks held are the parts of one
:func:`~exactbatch.parts.memory_parts`, so a read is one gather of the
compiled core (or NumPy) by stream row, whatever the chunks its rows lie in.
A read that needs a chunk not held yet decides what is held from then on: the
chunks it needs, then those held and used since the last such decision (the
most recent first), then those read ahead, then the other chunks held (the
most recently used first), while the budget allows (a read needing more than
the budget gets them all, never a deadlock); a chunk left out is let go (a
read on another thread copying from it keeps it until the next decision). No
chunk is copied again: each is laid out once, when read, and a stream that
fits in the budget is read once. A chunk whose read failed is not kept: the next read of it reads it
again. A read ahead that fails is let go: the read that needs the chunk reads
it (a fault that lasts is raised there; a passing one is never seen).

:meth:`ChunkCacheReader.read_ahead` loads chunks on a background thread
before they are asked for (the elastic feed names the chunks of the next
window its shard needs), so a shard's reads overlap its consumer's work.

``rows_read`` counts the rows of every chunk read: against the rows a shard
hands out, the read amplification of its epochs.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future

import numpy as np

from exactbatch.kernels import RowIndex, TransformKernel, memory_rows
from exactbatch.order.windows import chunk_of_rows
from exactbatch.parts import Parts, memory_parts
from exactbatch.sources.chunks import ChunkError, Side, Stream, Widths, owned
from exactbatch.sources.column_chunk import Columns, put, side_by_side

__all__ = ["ChunkCacheReader"]

# A chunk held: its x (rows, d) and y (rows, l), float64, each row's values side by side
# (what memory_rows takes): two arrays, or views of one array of whole rows.
Held = tuple[np.ndarray, np.ndarray]

_AHEAD = 1 << 62  # the recency of a chunk read ahead and not used yet: above every read's


class ChunkCacheReader:
    """A :class:`~exactbatch.sources.protocols.RowReader` over a chunk-indexed ``stream``
    (module docs): rows numbered as the stream's, ``budget`` rows of chunks kept."""

    def __init__(self, stream: Stream, widths: Widths, budget: int):
        hooks = stream.hooks
        assert hooks.chunk_rows is not None and hooks.read_chunk is not None  # (a chunk source)
        # read_chunk's arrays held as they are where they are the source's own (a list's
        # chunks, the user's arrays; fresh_chunks), else read by one thread at a time and
        # copied as read: a source may fill one buffer at every read, which would change
        # the chunks held (this cache reads on the read-ahead thread and the readers')
        read = hooks.read_chunk
        self._read_chunk = read if hooks.fresh_chunks else owned(read)
        self._rows_into, self._open_chunk = hooks.read_rows_into, hooks.open_chunk
        self._read_columns = hooks.read_columns
        self._will_need = hooks.will_need
        self.chunk_rows = hooks.chunk_rows
        self.firsts = np.cumsum(self.chunk_rows) - self.chunk_rows
        self.n = int(self.chunk_rows.sum())
        self._widths = widths
        self.budget = max(1, int(budget))
        self._lock = threading.Lock()
        self._fresh: dict[int, Held] = {}  # read, not held yet
        self._held: dict[int, Held] = {}  # the chunks set in the parts
        # let go of, but set still: copied from by a read then
        self._going: dict[int, Held] = {}
        self._loading: dict[int, Future[Held | None]] = {}
        # when each chunk was last read, and (last) the reads' clock: stamped by the parts'
        # reads (stamp_into), as each read's chunks are known there without a pass here
        self._used = np.zeros(max(1, len(self.chunk_rows)) + 1, dtype=np.int64)
        self._built = 0  # the clock at the last decision of what is held
        self.rows_read = 0  # rows of every chunk read (read amplification)
        # the read-ahead thread's work (see read_ahead)
        self._todo: deque[Callable[[], Iterable[int]]] = deque()
        self._reading_ahead = False
        self._closed = False
        self._parts: Parts | None = None
        if widths.known() is None:  # learn them from the first chunk with rows
            first = int(np.flatnonzero(self.chunk_rows)[0]) if self.n else None
            if first is not None:
                self._wait(first, self._start(first))
        self.d, self.l = widths.d or 0, widths.l or 0
        self.fuses = True  # read() takes a transform kernel: the parts' gather applies it
        starts = np.concatenate([self.firsts, [self.n]]).astype(np.int64)
        self._parts = parts = memory_parts(starts, self.d, self.l)
        parts.stamp_into(self._used)

    def prefetch_default(self, batch_bytes: int) -> int:
        return 0  # the next window's chunks are read ahead (read_ahead)

    # -- chunks -------------------------------------------------------------------

    def _start(self, c: int) -> tuple[Future[Held | None], bool]:
        """The load of chunk ``c``: one under way, or a new one registered, which the
        caller makes (``(future, True)``: see :meth:`_wait`)."""
        with self._lock:
            fut = self._loading.get(c)
            if fut is not None:
                return fut, False
            fut = self._loading[c] = Future()
            return fut, True

    def _load(self, c: int, fut: Future[Held | None], ahead: bool = False) -> None:
        """Read chunk ``c``, resolving ``fut`` (its exception too; read ``ahead``, an error
        is let go, and a thread waiting on ``fut`` reads the chunk itself)."""
        try:
            xy = self._read(c)
        except BaseException as e:
            with self._lock:
                self._loading.pop(c, None)
            if ahead:
                fut.set_result(None)  # abandoned: a thread waiting makes it (_wait)
            else:
                fut.set_exception(e)
            raise
        with self._lock:
            self._loading.pop(c, None)
            self.rows_read += xy[0].shape[0]
            if not self._closed:
                self._fresh[c] = xy
                if ahead:  # not used yet, but soon: kept before any chunk used already
                    self._used[c] = _AHEAD
        fut.set_result(xy)

    def _read(self, c: int) -> Held:
        """Chunk ``c`` as float64 ``(x, y)`` rows: views of whole rows copied straight from
        the columns ``read_columns`` gives where the source has it and its widths are
        known, or read straight into them where the source can (``read_rows_into``,
        ``open_chunk``), else ``read_chunk``'s arrays as they are (each side copied only
        where its rows' values are not side by side), checked as a pass checks them."""
        known, rows = self._widths.known(), int(self.chunk_rows[c])
        into, opened = self._rows_into, self._open_chunk
        if known is not None and self._read_columns is not None:
            x, y = self._widths.normalize(self._read_columns(c), c)
            if x.shape[0] != rows:
                raise ChunkError(
                    f"chunk {c}: read_columns({c}) returned {x.shape[0]} rows, "
                    f"but chunk_rows[{c}] says {rows}"
                )
            if not (isinstance(x, Columns) and isinstance(y, Columns) and x.start == y.start):
                return _rows(x), _rows(y)  # each side held as it is, or its rows made once
            xy = side_by_side(x, y)
            assert isinstance(xy, Columns)  # (both columns from one start: their columns)
            whole = np.empty(xy.shape)  # laid out as whole rows: one copy, from the columns
            put(whole, xy)
            return whole[:, : x.shape[1]], whole[:, x.shape[1] :]
        if known is not None and (into is not None or opened is not None):
            xy = np.empty((rows, sum(known)))
            if into is None:
                assert opened is not None
                into = opened(c).read_rows_into
            into(int(self.firsts[c]), xy)
            return xy[:, : known[0]], xy[:, known[0] :]
        x, y = self._widths.normalize(self._read_chunk(c), c)
        if x.shape[0] != rows:  # else rows would be lost, or doubled
            raise ChunkError(
                f"chunk {c}: read_chunk({c}) returned {x.shape[0]} rows, "
                f"but chunk_rows[{c}] says {rows}"
            )
        # Held as they came (the parts read x and y from two bases): no copy of a list's
        # chunk into whole rows, which with its fresh pages' faults was about a fifth of
        # an elastic epoch's CPU at one rank (docs/benchmarks.md, Round 6).
        return _rows(x), _rows(y)

    def _wait(self, c: int, load: tuple[Future[Held | None], bool]) -> Held:
        """Chunk ``c`` once its ``load`` (:meth:`_start`) is done: made here if this thread
        registered it, or if it was abandoned (a read ahead that failed)."""
        while True:
            fut, mine = load
            if mine:
                self._load(c, fut)
            got = fut.result()
            if got is not None:
                return got
            load = self._start(c)

    def _hold(self, chunks: Sequence[int]) -> None:
        """Decide what is held, ``chunks`` first (read here if need be), then, while the
        budget allows, the chunks held and used since the last decision, those read
        ahead, then the others held (module docs): each set in the parts once, none
        copied again."""
        got: dict[int, Held] = {}
        for c in chunks:  # (outside the lock: reads wait on I/O)
            with self._lock:
                if self._closed:
                    raise ValueError("read from a closed DataLoader")
                held = self._held.get(c)
                held = held if held is not None else self._going.get(c)
                held = held if held is not None else self._fresh.get(c)
            got[c] = held if held is not None else self._wait(c, self._start(c))
        with self._lock:
            parts = self._parts
            if self._closed or parts is None:  # closed while this read waited on a chunk
                raise ValueError("read from a closed DataLoader")
            if all(c in self._held for c in chunks):  # another read decided already
                return
            # Then those held and used since the last decision (a window's batches
            # still under way), the most recent first, then the chunks read ahead (the
            # next window's), then those held and not used since (kept, the most recent
            # first, while there is room: a chunk held costs no copy).
            used, built = self._used, self._built
            recent = sorted(self._held, key=lambda c: -used[c])
            others = {**self._held, **self._fresh}
            order = [
                *(c for c in recent if used[c] >= built),
                *self._fresh,
                *(c for c in recent if used[c] < built),
            ]
            room = self.budget - sum(part[0].shape[0] for part in got.values())
            for c in order:
                if c not in got and room >= others[c][0].shape[0]:
                    got[c] = others[c]
                    room -= others[c][0].shape[0]
            self._built = int(used[-1])
            going = self._going
            going.update((c, xy) for c, xy in self._held.items() if c not in got)
            still = {c: going.pop(c) for c in [c for c in going if c in got]}
            got.update(still)  # let go of before, set still: held again as they are
            for c in list(going):  # (one a read copies from now: at the next decision)
                if parts.unset(c):
                    del going[c]
            for c, (x, y) in got.items():
                if c not in self._held and c not in still:
                    parts.set(c, memory_rows(x, y))
            self._held = got
            self._fresh = {}

    # -- rows ---------------------------------------------------------------------

    def read(
        self,
        rows: RowIndex | Sequence[int],
        out_x: np.ndarray,
        out_y: np.ndarray,
        kernel: TransformKernel | None = None,
    ) -> int | None:
        """Rows ``rows`` (stream row ids: a slice or an integer array) into the outputs
        (``kernel``: a transform applied as they are copied; see ``RowReader.fuses``)."""
        if not isinstance(rows, (slice, np.ndarray)):
            rows = np.asarray(rows, dtype=np.int64)
        parts = self._parts
        if parts is None:
            raise ValueError("read from a closed DataLoader")
        # A read stamps the chunks it touches (the parts' stamp_into): no pass over the
        # rows here unless a chunk is not held.
        while True:
            got = (
                parts.read(rows, out_x, out_y)
                if kernel is None
                else parts.read(rows, out_x, out_y, kernel)
            )
            if not isinstance(got, list):  # copied (None, or the kernel's answer)
                return got
            self._hold(self._chunks(rows))  # chunks not held: copied nothing
            parts = self._parts
            if parts is None:
                raise ValueError("read from a closed DataLoader")

    def _chunks(self, rows: RowIndex) -> list[int]:
        """The chunks ``rows`` (a slice or an integer array of stream rows) lie in."""
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, dtype=np.int64)
        cid = chunk_of_rows(self.firsts, np.asarray(rows, dtype=np.int64))
        chunks: list[int] = np.unique(cid).tolist()
        return chunks

    def holds(self, chunks: Iterable[int]) -> bool:
        """Is every chunk of ``chunks`` held (set in the parts, read, or being read)?"""
        with self._lock:
            if self._closed:
                return False
            held, fresh, loading = self._held, self._fresh, self._loading
            return all(c in held or c in fresh or c in loading for c in chunks)

    # -- reading ahead --------------------------------------------------------------

    def read_ahead(self, chunks: Callable[[], Iterable[int]]) -> None:
        """Read the chunks ``chunks()`` lists (those not held or being read) on a background
        thread, in order (the list is made on that thread too). The thread ends when it
        has nothing left to read: a loader dropped unclosed leaves no thread behind."""
        with self._lock:
            if self._closed:
                return
            self._todo.append(chunks)
            if self._reading_ahead:
                return
            self._reading_ahead = True
        threading.Thread(target=self._run_ahead, name="exactbatch-chunks", daemon=True).start()

    def _run_ahead(self) -> None:
        while True:
            with self._lock:
                if self._closed or not self._todo:
                    self._reading_ahead = False
                    return
                todo = self._todo.popleft()
            try:
                chunks = todo()
            except BaseException:  # (a closed loader's order): nothing to read ahead
                continue
            if self._will_need is not None:  # (ndf_blocks: the kernel starts reading too)
                for c in chunks:
                    self._will_need(c)
            for c in chunks:
                with self._lock:
                    if self._closed:
                        break
                    if c in self._held or c in self._fresh or c in self._loading:
                        continue
                    fresh = sum(part[0].shape[0] for part in self._fresh.values())
                    if fresh + int(self.chunk_rows[c]) > self.budget:  # no room: stop here
                        break
                    fut = self._loading[c] = Future()
                try:
                    self._load(c, fut, ahead=True)
                except BaseException:  # let go: the read that needs it reads it again
                    break

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._fresh.clear()
            self._todo.clear()
            self._held, self._going = {}, {}
            self._parts = None  # (a read copying now keeps the chunks it needs)


def _rows(a: Side) -> np.ndarray:
    """A chunk's side (float64, 2-D) as :func:`~exactbatch.kernels.memory_rows` takes it:
    itself where each row's values lie side by side, rows apart in order (C-contiguous,
    or a slice of such rows, or columns of them), else a C-contiguous copy (a transposed
    or column-strided array; a side held as columns)."""
    if isinstance(a, Columns):
        out = np.empty(a.shape)
        put(out, a)
        return out
    n, w = a.shape
    if (w <= 1 or a.strides[1] == 8) and (n <= 1 or a.strides[0] >= 8 * w):
        return a
    return np.ascontiguousarray(a)
