"""Random-access readers: fetch any rows of an in-memory array pair, an .ndf file or a
sharded .ndf dataset.

Each is a :class:`~exactbatch.sources.protocols.RowReader`: ``n``, ``d``,
``l``, ``read(rows, out_x, out_y)`` where ``rows`` is a ``slice`` of
consecutive rows or an int32/int64 array of row indices, and the outputs are
float64 or float32 arrays of shapes (r, d) and (r, l) (the cast happens in
the gather); ``read`` may run on several threads at once.
``use_threads(threads)`` sets how many threads the compiled gather splits each
read over (None: picked from the batch's bytes and the cores); batches are the
same bytes whatever it is.
``prefetch_default(batch_bytes)`` is how many batches a loader prepares
ahead unless told: where reads wait (an .ndf file, a URL) overlapping them
with the consumer's work pays; in memory a gather is as cheap as handing a
batch between threads.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from exactbatch.dataset import Dataset
from exactbatch.kernels import ReadRun, Rows, TakeRun, memory_rows, run_reads
from exactbatch.ndf import NdfDataset, NdfFile
from exactbatch.sources.protocols import RowReader
from exactbatch.urls import is_url

__all__ = ["MemoryReader", "NdfReader", "WrappedReader"]

PREFETCH_MIN_BYTES = 256 << 10  # an .ndf file: default prefetch for batches at least this large


def _closed(*args: object) -> NoReturn:  # (read, read_run and take_run, once closed)
    raise ValueError("read from a closed DataLoader")


class MemoryReader:
    """Rows of a :class:`Dataset`: one gather per batch (:func:`exactbatch.kernels.memory_rows`)."""

    def __init__(self, ds: Dataset):
        self.x: Any = ds.x  # None once closed
        self.y: Any = ds.y
        self.n, self.d, self.l = ds.n, ds.d, ds.l
        # The bound method itself: one call per batch, whatever the backend. It takes
        # a transform kernel too (fuses: applied as rows are copied).
        rows = memory_rows(ds.x, ds.y)
        self._rows: Rows | None = rows
        self.read: Callable[..., int | None] = rows.read
        # A hand-out's read of a batch of an epoch's whole order (kernels.run_reads).
        self.read_run: ReadRun
        self.take_run: TakeRun
        self.read_run, self.take_run = run_reads(rows)
        self.fuses = True

    def use_threads(self, threads: int | None) -> None:
        """The gather's threads for every read (None: picked from each batch's bytes).
        Set on the rows object: no extra call per batch."""
        if self._rows is None:
            _closed()
        self._rows.threads = threads

    def prefetch_default(self, batch_bytes: int) -> int:
        return 0

    def close(self) -> None:
        self.x = self.y = self._rows = None
        self.read = self.read_run = self.take_run = _closed


class NdfReader:
    """Rows of an ``.ndf`` file, or of a sharded dataset, through this reader's own share
    of it. An :class:`NdfDataset` reads as its parts concatenated; it opens a part at the
    first read of a row in it, so a shard's reader opens only its shard's parts."""

    # A hand-out's read of a batch of an epoch's whole order, where the file has compiled
    # rows (a local file or dataset on the compiled path): theirs, one guarded C call a
    # batch (and next_into's one call reads through them too; a dataset's batch whose
    # parts are not open yet is read by the dataset's read, which opens them). Else
    # unset: the loader reads through their twins over ``read`` (kernels.RunReads).
    read_run: ReadRun
    take_run: TakeRun

    def __init__(self, f: NdfFile | NdfDataset):
        self.file = f.share()
        self.n, self.d, self.l = f.n, f.d, f.l
        # The handle's own read, called per batch (this reader's share stays open
        # until close()): one guarded kernel call on the compiled path.
        self.read = self.file.rows_reader()
        self.fuses = self.file.fuses()  # takes a transform kernel
        # rows of this reader's own, whose errors name the file as read's do
        self._rows: Any = self.file.run_rows()  # (the core's Rows or PartsRuns: hooks too)
        if self._rows is not None:
            self.read_run, self.take_run = run_reads(self._rows)

    def use_threads(self, threads: int | None) -> None:
        """The gather's threads for every read (None: picked from each batch's bytes;
        a URL's reads ignore it)."""
        self.read = self.file.rows_reader(threads)
        if self._rows is not None:
            self._rows.threads = threads

    def prefetch_default(self, batch_bytes: int) -> int:
        """2 for a URL (every batch is a network round trip: always overlap it), and for
        batches of at least 256 KiB (page faults and I/O wait overlap the consumer's
        work; smaller batches cost more to hand between threads than they gain); else 0."""
        if is_url(self.file.path) or batch_bytes >= PREFETCH_MIN_BYTES:
            return 2
        return 0

    def close(self) -> None:
        self.file.close()
        self.read = _closed  # lets go of the handle (the file closes with its last holder)
        if self._rows is not None:
            # (a hand-out may still hold the rows' read_run: they let go of the handle)
            self._rows.changed = None
            if hasattr(self._rows, "missing"):  # a dataset's: its read of parts not open
                self._rows.missing = None
            self._rows = None
            self.read_run = self.take_run = _closed


class WrappedReader:
    """A reader over another, ``inner``, that changes what a read gives (the columns
    taken, the output's dtype and transform) and leaves the rest to it: its threads,
    its prefetch default and its close."""

    inner: RowReader

    def prefetch_default(self, batch_bytes: int) -> int:
        return self.inner.prefetch_default(batch_bytes)

    def use_threads(self, threads: int | None) -> None:
        use = getattr(self.inner, "use_threads", None)
        if use is not None:
            use(threads)

    def close(self) -> None:
        self.inner.close()
