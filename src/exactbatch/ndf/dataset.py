"""Sharded ``.ndf`` datasets: a folder of part files and a ``manifest.json`` written last.

A dataset is a folder (local, or a URL: ``s3://bucket/prefix``, any fsspec
protocol) holding part files, each a valid ``.ndf`` with the same d and l,
and ``manifest.json`` listing the parts in order with their n and byte size
(the format is in docs/format.md and
:mod:`exactbatch.ndf.manifest`). Global row ``i`` is row ``i - start[k]``
of the part ``k`` whose range ``[start[k], start[k+1])`` holds it, where
``start`` is the cumulative sum of the parts' n. A folder without a
manifest is not a dataset.

Reading (:func:`open_ndf_dataset`, :class:`NdfDataset`): opening reads the
manifest only, so N is known without touching a part. A part opens on the
first read of a row in it, and is then checked against the manifest (n, d,
l, byte size), so a loader shard opens only the parts its rows lie in.
Local parts with the compiled core (:func:`exactbatch.backend`): a request
is one guarded C call that gathers each row straight from its part's
mapping into the batch (:func:`exactbatch.parts.parts_rows`), whatever
parts the rows lie in, as fast as from one file; a loader's reader hands out
a whole order's batches through run reads of its own over it
(:meth:`~exactbatch.ndf.dataset_parts.Parts.run_rows`: one C call from the
hand-out, a batch whose parts are not open left to the read above). Otherwise (URLs, the pure
NumPy path) a request is split by part (``np.searchsorted`` on the
cumulative n) and each part is read once with its own coalesced reads
(:mod:`exactbatch.ndf.file`, :mod:`exactbatch.ndf.remote`); for URLs the
parts of one request are read concurrently by a small thread pool. Memory:
the manifest, the parts open (below), and on the split path, for a request
spanning parts, one staging copy of the batch.

Open parts are bounded: a local dataset keeps at most ``max_open_parts``
parts open (by default a quarter of the soft limit on open descriptors,
``RLIMIT_NOFILE``, over the descriptors a part holds: one with the compiled
core, two on the pure NumPy path; at most 1,024 parts), closing the least
recently used part when another must open. A part a read on another thread
is copying from is never closed under it (the compiled gather pins the parts
it reads; a read through a part's ``NdfFile`` holds that file until it is
done). A request touching more parts than may be open at once is read part
by part (the split path above), so reading works whatever the bound; each
part closed and opened again costs an ``open``, an ``fstat`` and a mapping.
The parts open, their bound and the read paths are the shared handle's,
:class:`~exactbatch.ndf.dataset_parts.Parts`, which every holder of one open
dataset reads through.

Writing is :mod:`exactbatch.ndf.dataset_write`'s (its names are importable
from here too): :func:`save_ndf_dataset` from an iterable of parts,
:class:`NdfDatasetWriter` slab by slab, and the steps both are made of, for
a distributed writer (``exactbatch.dask``). A dataset appears whole, when
its manifest replaces the last one; a failed write leaves nothing of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from exactbatch.checks import check_int
from exactbatch.errors import NdfError
from exactbatch.hints import PathLike
from exactbatch.ndf.dataset_parts import Parts, default_max_open_parts
from exactbatch.ndf.dataset_write import (
    NdfDatasetWriter,
    abort_dataset,
    describe_part,
    finish_dataset,
    remove_parts,
    save_ndf_dataset,
    start_dataset,
    write_part,
)
from exactbatch.ndf.file import NdfFile, Share
from exactbatch.ndf.manifest import (
    Manifest,
    PartInfo,
    part_name,
    read_manifest,
    write_manifest,
)
from exactbatch.ndf.names import default_names
from exactbatch.ndf.storage import location

__all__ = [
    "Manifest",
    "NdfDataset",
    "NdfDatasetWriter",
    "PartInfo",
    "abort_dataset",
    "describe_part",
    "finish_dataset",
    "open_ndf_dataset",
    "part_name",
    "read_manifest",
    "remove_parts",
    "save_ndf_dataset",
    "start_dataset",
    "write_manifest",
    "write_part",
]


class NdfDataset(Share):
    """An open sharded ``.ndf`` dataset: ``n`` rows of ``d`` features and ``l`` labels.

    Use :func:`open_ndf_dataset` to get one. Row ``i`` is row ``i - start``
    of the part that holds it (the parts' rows concatenated in manifest
    order), so a loader over it gives the same batches as one ``.ndf``
    holding those rows. Attributes: ``path``, ``n``, ``d``, ``l``,
    ``parts`` (a tuple of :class:`PartInfo`), ``starts`` (the first global
    row of each part, and ``n`` last), ``features`` and ``labels`` (column
    names from the manifest, else ``x0..``/``y0..`` as for an NdfFile),
    ``categories`` (the vocabularies of columns stored as integer codes,
    ``{}`` when none) and ``manifest`` (the ``Manifest`` read, :mod:`exactbatch.ndf.manifest`;
    its names are None when it has none). The read methods are
    :class:`~exactbatch.ndf.file.NdfFile`'s (``read_row``, ``read_rows``,
    ``read_rows_into``, ``read_block_into``, ``will_need``), over the global
    rows; each may be called from several threads at once. ``close()``
    releases this object's share, as for an NdfFile; reading a closed
    dataset is a ``ValueError``. At most ``max_open_parts`` parts are open at
    once (None: no bound): see :func:`open_ndf_dataset`. Pickling reopens it
    by path: unpickling reads the manifest again and refuses with an
    :class:`NdfError` one other than the pickled (parts, sizes, names).
    """

    __slots__ = (
        "_h",
        "categories",
        "d",
        "features",
        "l",
        "labels",
        "manifest",
        "n",
        "parts",
        "path",
        "starts",
    )

    def __init__(self, shared: Parts) -> None:
        self._h = shared
        man = shared.man
        self.path, self.parts, self.d, self.l = shared.path, man.parts, man.d, man.l
        self.n, self.starts = int(shared.starts[-1]), shared.starts
        self.manifest = man
        fx, fy = default_names(man.d, man.l)
        self.features, self.labels = man.features or fx, man.labels or fy
        self.categories = {c: list(v) for c, v in (man.categories or {}).items()}

    def _handle(self) -> Parts:
        parts: Parts = super()._handle()
        return parts

    def __reduce__(self) -> tuple[Callable[..., NdfDataset], tuple[object, ...]]:
        h = self._handle()  # a closed dataset is not pickled: ValueError
        path = self.path if h.url else os.path.abspath(self.path)  # for a worker elsewhere
        return _reopen, (path, h.man, h.so, h.max_open)

    @property
    def open_parts(self) -> tuple[int, ...]:
        """The indices of the parts open now (by any holder of this dataset), in order:
        those read so far, less those closed to keep within ``max_open_parts``."""
        return tuple(sorted(self._handle().open))

    @property
    def max_open_parts(self) -> int | None:
        """The most parts kept open at once (None: no bound)."""
        return self._handle().max_open

    def __repr__(self) -> str:
        state = "closed" if self._h is None else "open"
        return (
            f"NdfDataset({self.path!r}, n={self.n}, d={self.d}, l={self.l}, "
            f"parts={len(self.parts)}, {state})"
        )

    def part(self, k: int) -> NdfFile:
        """Part ``k`` as an :class:`NdfFile` (a share of it: close it when done; it
        keeps the part's descriptor open until then, whatever ``max_open_parts``)."""
        check_int("part", k)
        if not 0 <= k < len(self.parts):
            raise IndexError(f"part {k} out of range for {self.path} with {len(self.parts)} parts")
        return self._handle().file(k).share()

    def check_part(self, k: int) -> None:
        """Open part ``k`` afresh and check it against the manifest: :class:`NdfError`
        naming the part if it is missing, malformed or other than listed."""
        check_int("part", k)
        if not 0 <= k < len(self.parts):
            raise IndexError(f"part {k} out of range for {self.path} with {len(self.parts)} parts")
        self._handle().open_part(k).close()

    def read_block_into(self, start_row: int, out: np.ndarray) -> None:
        """Fill ``out`` ((r, d + l) float64, C-contiguous) with rows ``start_row`` on, x then
        y per row: one positional (or ranged) read per part the rows lie in. Unchecked."""
        s = self._handle()
        for k, first, at, rows in s.spans(start_row, out.shape[0]):
            s.file(k).read_block_into(first, out[at : at + rows])

    def will_need(self, start_row: int, rows: int) -> None:
        """Rows ``[start_row, start_row + rows)`` are read soon (see
        :meth:`NdfFile.will_need <exactbatch.ndf.file.NdfFile.will_need>`)."""
        s = self._handle()
        for k, first, _, count in s.spans(start_row, rows):
            s.file(k).will_need(first, count)


def _reopen(
    path: str, man: Manifest, storage_options: dict[str, Any] | None, max_open: int | None
) -> NdfDataset:
    """An NdfDataset unpickled: opened again, refused if its manifest is not the pickled."""
    ds = open_ndf_dataset(path, storage_options=storage_options, max_open_parts=max_open)
    if ds.manifest != man:
        ds.close()
        raise NdfError(
            f"{path}: the dataset changed between pickling and unpickling (its manifest "
            "lists other parts, sizes or names now); open it again"
        )
    return ds


def open_ndf_dataset(
    path: PathLike,
    *,
    storage_options: dict[str, Any] | None = None,
    max_open_parts: int | None = None,
) -> NdfDataset:
    """Open the sharded ``.ndf`` dataset at ``path`` (a folder, or a URL) for reading.

    Reads and checks the manifest only (:func:`read_manifest`); each part
    opens on the first read of a row in it and is then checked against the
    manifest. A part that is missing, truncated, malformed, of other d or l,
    or of another n or size than the manifest says is an :class:`NdfError`
    naming the part, at that read. ``storage_options`` go to the
    filesystem of a URL (as for ``open_ndf``); only for URLs.

    ``max_open_parts``: the most parts kept open at once; the least recently
    used is closed when another must open (never one a read is copying from).
    By default, for a local dataset, a quarter of the soft limit on open
    descriptors over the descriptors a part holds
    (:func:`default_max_open_parts`); for a URL, no bound (its parts hold no
    descriptor).
    """
    check_int("max_open_parts", max_open_parts, 1, optional=True)
    folder = location(path, storage_options)
    path = folder.path
    man = read_manifest(path, storage_options=storage_options)
    if max_open_parts is None and not folder.url:
        max_open_parts = default_max_open_parts()
    return NdfDataset(Parts(path, man, storage_options, max_open_parts))
