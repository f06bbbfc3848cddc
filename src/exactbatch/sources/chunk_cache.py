"""A chunk-indexed stream read as random access: chunks loaded on demand, a few kept.

An elastic streamed epoch (:mod:`exactbatch.feeds.elastic_stream`) asks for
rows of the stream by id, as a random-access epoch does, but its order keeps
the rows of a batch within one or two windows of consecutive chunks
(:mod:`exactbatch.order.windows`). :class:`ChunkCacheReader` serves those
reads from the chunks they lie in: a chunk is read (``read_chunk``) the first
time a read needs it, by the thread that needs it (two threads needing one
chunk wait for one read): held column by column where the source can
(``read_columns``: Parquet's row groups, as decoded), else as whole rows (x
then y: straight into them where the source reads into rows,
``read_rows_into`` or ``open_chunk``). The chunks
kept are copied side by side into one array, a snapshot that never changes, so
a read is one gather of the compiled core (or NumPy) from it, and a read in
progress keeps its snapshot alive whatever the others do. A read that needs a
chunk the snapshot lacks makes a new one: the chunks it needs, then those of
the old one used since it was made (the most recent first), then those read
ahead, while the budget allows (a read needing more than the budget gets them
all, never a deadlock); a chunk not used since the last snapshot is done with,
and not copied again. That copy is made about once a window: the price of one
gather a read. A chunk whose read failed is not kept: the next read of it
reads it again. A read ahead that fails is let go: the read that needs the
chunk reads it (a fault that lasts is raised there; a passing one is never
seen).

:meth:`ChunkCacheReader.read_ahead` loads chunks on a background thread
before they are asked for (the elastic feed names the chunks of the next
window its shard needs), so a shard's reads overlap its consumer's work.

``rows_read`` counts the rows of every chunk read: against the rows a shard
hands out, the read amplification of its epochs.
"""

from __future__ import annotations

import threading
from collections import deque
from concurrent.futures import Future

import numpy as np

from exactbatch.kernels import memory_rows
from exactbatch.order.windows import chunk_of_rows
from exactbatch.sources.chunks import ChunkError, Stream, Widths
from exactbatch.sources.column_chunk import put, side_by_side

__all__ = ["ChunkCacheReader"]

_AHEAD = 1 << 62  # the recency of a chunk read ahead and not used yet: above every read's


class _Snapshot:
    """Chunks side by side in one array: chunk ``c`` is rows ``at[c] ..`` of it (-1: not
    held). Never changed once made."""

    __slots__ = ("at", "chunks", "read")

    def __init__(self, nchunks: int, parts: dict, d, l):  # noqa: E741
        self.at = np.full(nchunks, -1, dtype=np.int64)
        rows = sum(part.shape[0] for part in parts.values())
        xy = np.empty((rows, d + l))  # whole rows: x then y, one gather for both
        a = 0
        views = {}  # c -> its rows of xy (whole rows: a chunk is one copy)
        for c, part in parts.items():
            z = a + part.shape[0]
            put(xy[a:z], part)  # (a chunk held column by column: straight from them)
            self.at[c] = a
            views[c] = xy[a:z]
            a = z
        self.chunks = views
        self.read = memory_rows(xy[:, :d], xy[:, d:]).read


class ChunkCacheReader:
    """A :class:`~exactbatch.sources.protocols.RowReader` over a chunk-indexed ``stream``
    (module docs): rows numbered as the stream's, ``budget`` rows of chunks kept."""

    def __init__(self, stream: Stream, widths: Widths, budget: int):
        hooks = stream.hooks
        assert hooks.chunk_rows is not None and hooks.read_chunk is not None  # (a chunk source)
        self._read_chunk = hooks.read_chunk
        self._rows_into, self._open_chunk = hooks.read_rows_into, hooks.open_chunk
        self._read_columns = hooks.read_columns
        self._will_need = hooks.will_need
        self.chunk_rows = hooks.chunk_rows
        self.firsts = np.cumsum(self.chunk_rows) - self.chunk_rows
        self.n = int(self.chunk_rows.sum())
        self._widths = widths
        self.budget = max(1, int(budget))
        self._lock = threading.Lock()
        self._fresh: dict = {}  # read, not in the snapshot (arrays, or Columns)
        self._loading: dict[int, Future] = {}
        self._used = np.zeros(len(self.chunk_rows), dtype=np.int64)  # when each was last read
        self._tick = 0
        self._built = 0  # the tick the snapshot was made at
        self.rows_read = 0  # rows of every chunk read (read amplification)
        self._todo: deque = deque()  # the read-ahead thread's work (see read_ahead)
        self._reading_ahead = False
        self._closed = False
        self._snap: _Snapshot | None = None
        if widths.known() is None:  # learn them from the first chunk with rows
            first = int(np.flatnonzero(self.chunk_rows)[0]) if self.n else None
            if first is not None:
                self._wait(first, self._start(first))
        self.d, self.l = widths.d or 0, widths.l or 0
        self.fuses = True  # read() takes a transform kernel: a snapshot's gather applies it
        self._snap = _Snapshot(len(self.chunk_rows), {}, self.d, self.l)

    def prefetch_default(self, batch_bytes: int) -> int:
        return 0  # the next window's chunks are read ahead (read_ahead)

    # -- chunks -------------------------------------------------------------------

    def _start(self, c: int) -> tuple[Future, bool]:
        """The load of chunk ``c``: one under way, or a new one registered, which the
        caller makes (``(future, True)``: see :meth:`_wait`)."""
        with self._lock:
            fut = self._loading.get(c)
            if fut is not None:
                return fut, False
            fut = self._loading[c] = Future()
            return fut, True

    def _load(self, c: int, fut: Future, ahead: bool = False) -> None:
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
            self.rows_read += xy.shape[0]
            if not self._closed:
                self._fresh[c] = xy
                if ahead:  # not used yet, but soon: kept before any chunk used already
                    self._used[c] = _AHEAD
        fut.set_result(xy)

    def _read(self, c: int):
        """Chunk ``c`` held as ``read_columns`` gives it (x then y, column by column:
        copied into the snapshot with no whole rows first) where the source has it and
        its widths are known; else as whole rows (x then y, float64): read straight into
        them where the source can (``read_rows_into``, ``open_chunk``), else
        ``read_chunk``'s, checked as a pass checks it."""
        known, rows = self._widths.known(), int(self.chunk_rows[c])
        into, opened = self._rows_into, self._open_chunk
        if known is not None and self._read_columns is not None:
            x, y = self._widths.normalize(self._read_columns(c), c)
            if x.shape[0] != rows:
                raise ChunkError(
                    f"chunk {c}: read_columns({c}) returned {x.shape[0]} rows, "
                    f"but chunk_rows[{c}] says {rows}"
                )
            return side_by_side(x, y)
        if known is not None and (into is not None or opened is not None):
            xy = np.empty((rows, sum(known)))
            if into is None:
                assert opened is not None
                into = opened(c).read_rows_into
            into(int(self.firsts[c]), xy)
            return xy
        x, y = self._widths.normalize(self._read_chunk(c), c)
        if x.shape[0] != rows:  # else rows would be lost, or doubled
            raise ChunkError(
                f"chunk {c}: read_chunk({c}) returned {x.shape[0]} rows, "
                f"but chunk_rows[{c}] says {rows}"
            )
        return np.concatenate((x, y), axis=1)

    def _wait(self, c: int, load: tuple[Future, bool]):
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

    def _snapshot(self, chunks) -> _Snapshot:
        """A snapshot holding ``chunks`` (read here if need be), then, while the budget
        allows, the current one's chunks used since it was made and those read ahead
        (module docs)."""
        got = {}
        for c in chunks:  # (outside the lock: reads wait on I/O)
            with self._lock:
                if self._closed:
                    raise ValueError("read from a closed DataLoader")
                held = self._snap.chunks.get(c) if self._snap else None
                held = held if held is not None else self._fresh.get(c)
            got[c] = held if held is not None else self._wait(c, self._start(c))
        with self._lock:
            snap = self._snap
            if self._closed or snap is None:  # closed while this read waited on a chunk
                raise ValueError("read from a closed DataLoader")
            if all(snap.at[c] >= 0 for c in chunks):  # another read made one already
                return snap
            # Then those of the snapshot used since it was made (a window's batches
            # still under way), the most recent first, then the chunks read ahead (the
            # next window's): a chunk not used since is done with, and not copied again.
            used = self._used
            kept = [c for c in snap.chunks if used[c] >= self._built]
            others = {**{c: snap.chunks[c] for c in kept}, **self._fresh}
            order = [*sorted(kept, key=lambda c: -used[c]), *self._fresh]
            room = self.budget - sum(part.shape[0] for part in got.values())
            for c in order:
                if c not in got and room >= others[c].shape[0]:
                    got[c] = others[c]
                    room -= others[c].shape[0]
            self._built = self._tick
            snap = self._snap = _Snapshot(len(self.chunk_rows), got, self.d, self.l)
            self._fresh = {}
            return snap

    # -- rows ---------------------------------------------------------------------

    def read(self, rows, out_x: np.ndarray, out_y: np.ndarray, kernel=None):
        """Rows ``rows`` (stream row ids: a slice or an integer array) into the outputs
        (``kernel``: a transform applied as they are copied; see ``RowReader.fuses``)."""
        if isinstance(rows, slice):
            rows = np.arange(rows.start, rows.stop, dtype=np.int64)
        rows = np.asarray(rows, dtype=np.int64)
        if not rows.size:
            return None if kernel is None else -1
        cid = chunk_of_rows(self.firsts, rows)
        snap = self._snap
        if snap is None:
            raise ValueError("read from a closed DataLoader")
        at = snap.at[cid]
        if at.min() < 0:
            snap = self._snapshot(np.unique(cid).tolist())
            at = snap.at[cid]
        self._tick += 1
        self._used[cid] = self._tick  # (a race between reads only blurs the recency)
        local = at + (rows - self.firsts[cid])
        if kernel is None:
            return snap.read(local, out_x, out_y)
        return snap.read(local, out_x, out_y, kernel)

    def holds(self, chunks) -> bool:
        """Is every chunk of ``chunks`` held (in the snapshot, read, or being read)?"""
        with self._lock:
            snap = self._snap
            if snap is None:
                return False
            at, fresh, loading = snap.at, self._fresh, self._loading
            return all(at[c] >= 0 or c in fresh or c in loading for c in chunks)

    # -- reading ahead --------------------------------------------------------------

    def read_ahead(self, chunks) -> None:
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
                    snap = self._snap
                    if self._closed or snap is None:
                        break
                    if snap.at[c] >= 0 or c in self._fresh or c in self._loading:
                        continue
                    fresh = sum(part.shape[0] for part in self._fresh.values())
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
            self._snap = None
