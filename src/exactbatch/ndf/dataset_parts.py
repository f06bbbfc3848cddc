"""The shared handle of an open sharded ``.ndf`` dataset: :class:`Parts`.

Every holder of one open :class:`~exactbatch.ndf.dataset.NdfDataset` (its
shares, a loader's readers) reads through one :class:`Parts`: the manifest,
the cumulative row counts (``starts``) and which part holds a row, the parts
open now (an LRU bounded by ``max_open_parts``; a part opens, and is checked
against the manifest, on the first read of a row in it), and the read paths:
one compiled gather over the open parts' mappings, or a request split by part
(concurrently for URLs); and a loader's reader's own run reads over that gather
(:meth:`Parts.run_rows`), which leave a batch whose parts are not open to the
read. Its locks and thread pool are made anew in a forked process.

Apart from :mod:`exactbatch.ndf.dataset` because that module is what a user
meets (:class:`~exactbatch.ndf.dataset.NdfDataset`,
:func:`~exactbatch.ndf.dataset.open_ndf_dataset`, pickling by path), while
this is the machinery under it: the parts' lifetimes and the row routing,
which only the dataset and its tests need to know.
"""

from __future__ import annotations

import os
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, NoReturn

import numpy as np

from exactbatch.errors import NdfError
from exactbatch.kernels import FileChanged, RowIndex, TransformKernel, backend, staged
from exactbatch.ndf.file import NdfFile, open_ndf
from exactbatch.ndf.format import expected_size
from exactbatch.ndf.manifest import Manifest
from exactbatch.ndf.storage import join_path, location
from exactbatch.parts import Parts as Gather
from exactbatch.parts import parts_rows

__all__ = ["Parts", "default_max_open_parts"]

_URL_THREADS = 8  # parts of one request read at once, for URLs
_OPEN_LOCKS = 64  # parts may open at once (one lock per part would cost memory per part)
_MAX_OPEN_PARTS = 1024  # the default bound on open parts never exceeds this
_GATHER_TRIES = 3  # compiled gathers of a request whose parts other threads keep closing


def default_max_open_parts() -> int:
    """The parts a local dataset keeps open by default: a quarter of this process's
    soft limit on open descriptors (``RLIMIT_NOFILE``), over the descriptors an open
    part holds (one with the compiled core, two on the pure NumPy path), from 1 to
    1,024."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    except (ImportError, OSError, ValueError):  # pragma: no cover - no rlimit (Windows)
        soft = 1024
    if soft < 0:  # RLIM_INFINITY
        return _MAX_OPEN_PARTS
    per_part = 1 if backend() == "compiled" else 2
    return max(1, min(_MAX_OPEN_PARTS, soft // 4 // per_part))


# -- reading ------------------------------------------------------------------------------


def _slices(cuts: list[int]) -> Iterator[tuple[int, slice]]:
    """``(k, slice(cuts[k], cuts[k + 1]))`` for each non-empty span."""
    spans = enumerate(zip(cuts[:-1], cuts[1:], strict=True))
    return ((k, slice(a, b)) for k, (a, b) in spans if b > a)


def _sort_rows(idx: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(order, rows)``: ``rows = idx[order]``, sorted. Each row number and its
    position are packed into one int64 and sorted together: a plain sort, several
    times faster than an argsort."""
    r = idx.shape[0]
    bits = max(1, (r - 1).bit_length())
    if n >= 1 << (62 - bits):  # row numbers too large to pack
        order = np.argsort(idx)
        return order, idx[order]
    keys = idx.astype(np.int64) << bits
    keys |= np.arange(r, dtype=np.int64)
    keys.sort()
    return keys & ((1 << bits) - 1), keys >> bits


class Parts:
    """What every holder of one open dataset shares: the manifest and the parts open
    now, at most ``max_open`` of them (None: no bound), least recently used first."""

    def __init__(
        self,
        path: str,
        man: Manifest,
        storage_options: dict[str, Any] | None,
        max_open: int | None,
    ) -> None:
        self.path, self.man, self.so = path, man, storage_options
        self.url = location(path, storage_options).url
        ns = np.array([p.n for p in man.parts], dtype=np.int64)
        self.starts = np.zeros(len(ns) + 1, dtype=np.int64)
        np.cumsum(ns, out=self.starts[1:])
        self.bounds = self.starts.tolist()  # for part_of (a Python list: bisect is fast)
        self.nparts = len(ns)
        self.max_open = max_open
        # part -> NdfFile, in the order of last use; changed only under self.lock
        self.open: OrderedDict[int, NdfFile] = OrderedDict()
        # The compiled core's gather over every open part's mapping (local parts with
        # rows): a batch is one call, whatever open parts its rows lie in. A part is set
        # there exactly while it is in self.open.
        local = not self.url and man.d + man.l > 0 and len(ns) > 0
        self.compiled: Gather | None = parts_rows(self.starts, man.d, man.l) if local else None
        self.pid = -1
        self._fresh()

    def _fresh(self) -> None:
        """Locks and a pool of this process's own (made anew after a fork). Parts open
        under striped locks, so that the threads of a URL's reads open theirs at once."""
        if self.pid != os.getpid():
            self.pid, self.lock = os.getpid(), threading.Lock()
            self.pool: ThreadPoolExecutor | None = None
            self.locks = [threading.Lock() for _ in range(min(_OPEN_LOCKS, self.nparts))]

    def file(self, k: int, keep: Sequence[int] = ()) -> NdfFile:
        """Part ``k``, opened (and checked against the manifest) if it is not open;
        least recently used parts other than ``keep`` are closed to stay in the bound."""
        f = self.open.get(k)
        if f is not None:
            if self.max_open is not None:
                try:
                    self.open.move_to_end(k)
                except KeyError:  # closed meanwhile: f still reads (it holds the file)
                    pass
            return f
        self._fresh()
        with self.locks[k % len(self.locks)]:
            f = self.open.get(k)
            if f is None:
                f = self.open_part(k)
                with self.lock:
                    compiled = self.compiled
                    rows = f.kernel_rows() if compiled is not None else None
                    if compiled is not None and rows is not None:
                        compiled.set(k, rows)
                    self.open[k] = f
                    self._close_over(keep=(k, *keep))
        return f

    def _close_over(self, keep: Sequence[int]) -> None:
        """Close the least recently used parts beyond the bound (under self.lock), but
        none in ``keep`` and none a compiled gather is copying from now. The part's
        ``NdfFile`` is only let go of: a read on another thread that holds it still
        reads, and its descriptor closes when the last holder lets go."""
        excess = 0 if self.max_open is None else len(self.open) - self.max_open
        for j in list(self.open) if excess > 0 else ():
            if j in keep or (self.compiled is not None and not self.compiled.unset(j)):
                continue
            del self.open[j]
            excess -= 1
            if not excess:
                break

    def touched(self, idx: RowIndex) -> list[int]:
        """The parts (holding rows) that rows ``idx`` (a slice or an array) lie in."""
        if isinstance(idx, slice):
            first, last = self.part_of(idx.start), self.part_of(idx.stop - 1)
            return [k for k in range(first, last + 1) if self.bounds[k + 1] > self.bounds[k]]
        parts: list[int] = np.unique(np.searchsorted(self.starts, idx, side="right") - 1).tolist()
        return parts

    def open_part(self, k: int) -> NdfFile:
        """Part ``k`` opened afresh, or an NdfError naming it: missing, malformed, or
        other than the manifest says."""
        p, man = self.man.parts[k], self.man
        where = join_path(self.path, p.name)
        said = f"the manifest lists it with n={p.n}, {p.nbytes} bytes"
        try:
            f = open_ndf(where, storage_options=self.so)
        except FileNotFoundError:
            raise NdfError(
                f"{where}: part {k} ({p.name}) of the dataset is missing; {said}"
            ) from None
        except NdfError as e:
            raise NdfError(f"part {k} ({p.name}) of the dataset {self.path}: {e}; {said}") from None
        if (f.d, f.l) != (man.d, man.l):
            f.close()
            raise NdfError(
                f"{where}: part {k} ({p.name}) has d={f.d}, l={f.l}; the dataset has "
                f"d={man.d}, l={man.l} (every part must have the same widths)"
            )
        if f.n != p.n:
            f.close()
            raise NdfError(
                f"{where}: part {k} ({p.name}) does not match the manifest: it holds n={f.n} "
                f"rows ({expected_size(f.n, f.d, f.l)} bytes); {said}"
            )
        return f

    def part_of(self, row: int) -> int:
        """The part that holds global row ``row`` (an empty part never does)."""
        return bisect_right(self.bounds, row) - 1

    def executor(self) -> ThreadPoolExecutor:
        self._fresh()
        if self.pool is None:
            with self.lock:
                if self.pool is None:
                    workers = min(_URL_THREADS, self.nparts)
                    self.pool = ThreadPoolExecutor(workers, thread_name_prefix="exactbatch-part")
        return self.pool

    fuses = True  # read_rows_into takes a transform kernel
    splits = True  # read_rows_into takes threads (the compiled gather's)

    def read_rows_into(
        self,
        idx: RowIndex,
        out_x: np.ndarray,
        out_y: np.ndarray,
        kernel: TransformKernel | None = None,
        threads: int | None = None,
    ) -> int | None:
        """Rows ``idx`` (global) into the outputs; with ``kernel``, x through it (in the
        compiled gather, else after a float64 read), returning the first row that held
        a NaN (or -1). ``threads``: the compiled gather's (None: from the bytes; a run
        within one part is one copy)."""
        if isinstance(idx, slice):  # a run of rows (a loader's batch in file order)
            if idx.stop <= idx.start:
                return None if kernel is None else -1
            k = self.part_of(idx.start)
            a = self.bounds[k]
            if idx.stop <= self.bounds[k + 1]:  # in one part: a run of its rows, one copy
                run = slice(idx.start - a, idx.stop - a)
                return self.file(k).read_rows_into(run, out_x, out_y, kernel)
        if self.compiled is not None:
            return self._gather(idx, out_x, out_y, kernel, threads)
        if kernel is not None:
            return staged(self._split, idx, out_x, out_y, kernel)
        self._split(idx, out_x, out_y)
        return None

    def _split(self, idx: RowIndex, out_x: np.ndarray, out_y: np.ndarray) -> None:
        """Rows ``idx`` read part by part, each through its part's ``NdfFile`` (a part
        open at a time is enough)."""
        if isinstance(idx, slice):
            idx = np.arange(idx.start, idx.stop, dtype=np.int64)
        r = idx.shape[0]
        if r == 0:
            return
        starts = self.starts
        k = self.part_of(int(idx[0]))
        a, b = int(starts[k]), int(starts[k + 1])
        if a <= int(idx.min()) and int(idx.max()) < b:  # one part (blocks, most sorted batches)
            self.file(k).read_rows_into(idx - a if a else idx, out_x, out_y)
            return
        if bool(np.all(idx[1:] >= idx[:-1])):  # sorted: cut at part boundaries, no staging
            cuts = np.searchsorted(idx, starts, side="left").tolist()
            self._run(
                partial(self._rows, p, idx[cuts[p] : cuts[p + 1]] - starts[p], out_x, out_y, s)
                for p, s in _slices(cuts)
            )
            return
        # Scattered: sort the rows, cut them at the part boundaries, read each part's
        # rows into its slice of a staging copy, then put them back in the request's
        # order (whole rows at once, as one void element each), then split x from y.
        d, l = self.man.d, self.man.l  # noqa: E741
        if d + l == 0:
            return
        order, rows = _sort_rows(idx, int(starts[-1]))
        cuts = np.searchsorted(rows, starts, side="left").tolist()
        stage = np.empty((r, d + l))
        self._run(partial(self._raw, p, rows[s] - starts[p], stage[s]) for p, s in _slices(cuts))
        wide = out_x.dtype == np.float64  # else float32: put back whole, then cast
        final = out_x if l == 0 and wide else out_y if d == 0 and wide else np.empty((r, d + l))
        whole = np.dtype((np.void, 8 * (d + l)))
        final.view(whole).reshape(r)[order] = stage.view(whole).reshape(r)
        if final is not out_x and d:
            out_x[...] = final[:, :d]
        if final is not out_y and l:
            out_y[...] = final[:, d:]

    def _gather(
        self,
        idx: RowIndex,
        out_x: np.ndarray,
        out_y: np.ndarray,
        kernel: TransformKernel | None = None,
        threads: int | None = None,
    ) -> int | None:
        """Rows ``idx`` (global) in one guarded C call over the open parts' mappings;
        the parts it names as not open are opened (and checked) first, keeping the
        others it needs open. Rows in more parts than may be open at once, or parts
        other threads keep closing, are read part by part instead."""
        compiled = self.compiled
        assert compiled is not None  # (called only with it)
        for _ in range(_GATHER_TRIES):
            try:
                missing = compiled.read(idx, out_x, out_y, kernel, threads)
            except FileChanged as e:
                self._changed(e.part)
            if not isinstance(missing, list):  # copied: None, or the kernel's NaN row
                return missing
            need = self.touched(idx)
            if self.max_open is not None and len(need) > self.max_open:
                break
            # open the missing, and mark every part needed as just used (gathers that
            # find their parts open leave no trace in the order of use)
            pure = False
            for k in need:
                pure |= self.file(k, keep=need).kernel_rows() is None
            if pure:
                break  # opened on the pure path (kernels.use_backend): no mapping to gather
        if kernel is not None:
            return staged(self._split, idx, out_x, out_y, kernel)
        self._split(idx, out_x, out_y)
        return None

    def run_rows(self) -> Any:
        """New run reads over the compiled gather (the core's ``PartsRuns``), a loader's
        reader's own: their ``read_run`` and ``take_run`` read a batch of an epoch's whole
        order in one guarded C call when its parts are open, else through
        :meth:`read_run_missing`, and raise this dataset's errors (:meth:`run_changed`).
        They hold this object through their hooks until the reader lets go of them (a
        closed reader sets both to None). None without the compiled gather (URLs, the
        pure path, a dataset of no rows or no columns)."""
        if self.compiled is None:
            return None
        runs_of: Any = self.compiled  # (the core's Parts: its runs)
        return runs_of.runs(self.run_changed, self.read_run_missing)

    def run_changed(self, exc: BaseException) -> NoReturn:
        """The run reads' ``changed`` hook: the core's ``FileChanged`` (``exc``) of a
        copy from part ``exc.part`` as the NdfError a read's gather raises for it."""
        self._changed(getattr(exc, "part", None))

    def read_run_missing(
        self,
        order: np.ndarray,
        start: int,
        size: int,
        out_x: np.ndarray,
        out_y: np.ndarray,
        threads: int | None,
    ) -> None:
        """The run reads' ``missing`` hook: rows ``order[start:start + size]`` some of
        whose parts are not open (nothing was copied), read as a read does (opening
        them, or part by part) into the first ``size`` rows of the outputs."""
        if len(out_x) != size:
            out_x, out_y = out_x[:size], out_y[:size]
        self.read_rows_into(order[start : start + size], out_x, out_y, threads=threads)

    def _changed(self, part: int | None) -> NoReturn:
        """A part changed during a gather (``part``; None: a copy faulted where the core
        cannot say): an NdfError naming it, and what changed if it can still be seen."""
        suspects = [part] if part is not None else list(self.open)
        for k in suspects:
            self.file(k).check_unchanged()
        which = f"part {part} ({self.man.parts[part].name})" if part is not None else "a part"
        raise NdfError(
            f"{self.path}: {which} of the dataset changed while open: a copy from it failed "
            "(truncated, or rewritten in place, during the read?)"
        )

    def _rows(
        self, p: int, rows: np.ndarray, out_x: np.ndarray, out_y: np.ndarray, s: slice
    ) -> None:
        self.file(p).read_rows_into(rows, out_x[s], out_y[s])

    def _raw(self, p: int, rows: np.ndarray, out: np.ndarray) -> None:
        self.file(p).read_raw_into(rows, out, scattered=True)

    def _run(self, tasks: Iterable[Callable[[], object]]) -> None:
        """Run the reads ``tasks`` (one per part); concurrently for URLs."""
        todo = list(tasks)
        if not self.url or len(todo) == 1:
            for task in todo:
                task()
            return
        futures = [self.executor().submit(task) for task in todo]
        errors = [f.exception() for f in futures]  # waits for all: none still writes after
        for e in errors:
            if e is not None:
                raise e

    def spans(self, start: int, rows: int) -> Iterator[tuple[int, int, int, int]]:
        """``(part, first row in it, offset in the request, rows)`` for global rows
        ``[start, start + rows)``."""
        stop, at = start + rows, start
        k = self.part_of(start)
        while at < stop:
            end = min(stop, int(self.starts[k + 1]))
            if end > at:
                yield k, at - int(self.starts[k]), at - start, end - at
            at, k = max(at, end), k + 1
