"""The user-facing writers of sharded ``.ndf`` datasets: :func:`save_ndf_dataset`
(parts held in memory) and :class:`NdfDatasetWriter` (slab by slab, a new part
every ``part_rows`` rows).

Both are one write of the protocol in :mod:`exactbatch.ndf.dataset_protocol`
(a write id, parts written atomically, the manifest last, everything of the
write removed on any error), kept apart from it because they only run its
steps: what they add is taking the parts in, checking their widths and column
names before the first part is written, and cutting slabs into parts. The
protocol's steps (:func:`start_dataset`, :func:`write_part`,
:func:`finish_dataset`, :func:`abort_dataset`, :func:`describe_part`,
:func:`remove_parts`) are importable from here too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from exactbatch.arrays import byte_view
from exactbatch.checks import check_int
from exactbatch.hints import Columns, PathLike
from exactbatch.ndf.dataset_protocol import (
    abort_dataset,
    describe_part,
    finish_dataset,
    remove_parts,
    signals_held,
    start_dataset,
    write_part,
)
from exactbatch.ndf.format import check_shape, expected_size
from exactbatch.ndf.manifest import (
    MANIFEST,
    PartInfo,
    file_not_dataset,
    part_name,
)
from exactbatch.ndf.names import check_categories, validate_names
from exactbatch.ndf.storage import dataset_path, join_path
from exactbatch.ndf.write import Committing, NdfWriter, as_dataset

__all__ = [
    "NdfDatasetWriter",
    "abort_dataset",
    "describe_part",
    "finish_dataset",
    "remove_parts",
    "save_ndf_dataset",
    "start_dataset",
    "write_part",
]


def save_ndf_dataset(
    path: PathLike,
    parts: Iterable[Any],
    *,
    features: Columns = None,
    labels: Columns = None,
    storage_options: dict[str, Any] | None = None,
) -> None:
    """Write a sharded dataset at ``path`` (a folder, made if missing; or a URL) from
    ``parts``: an iterable of Datasets, ``(x, y)`` pairs or arrays ``x``, one per part,
    all of the same d and l (at least one part; a part may have no rows).

    Each part is written atomically as it comes (:func:`write_part`), and the
    manifest last (:func:`finish_dataset`, which also keeps ``features`` and
    ``labels``, column names, if given: checked by
    :func:`~exactbatch.ndf.names.validate_names` before the first part is
    written). A dataset already at ``path`` stays
    readable until the new manifest replaces it; its parts are removed then.
    On any error (a bad part, a full disk, a Ctrl-C) nothing of the new
    dataset is left - no part, no temporary file, and the folder only if it
    was there - and the old dataset is as it was. ``storage_options``: for a
    URL, as in :func:`open_ndf_dataset`.
    """
    path = dataset_path(path, storage_options)
    write_id, width = None, None
    written: list[PartInfo] = []
    try:
        with signals_held():  # the id is kept before a signal can strike: the abort finds it
            write_id = start_dataset(path, storage_options=storage_options)
        for k, data in enumerate(parts):
            data = as_dataset(data)
            if width is None:
                width = (data.d, data.l)
                # the names the manifest will keep, checked before the first part is written
                validate_names(features, labels, *width, join_path(path, MANIFEST))
            elif (data.d, data.l) != width:
                raise ValueError(
                    f"{join_path(path, part_name(k, write_id))}: part {k} has d={data.d}, "
                    f"l={data.l}; part 0 had d={width[0]}, l={width[1]} (every part must have "
                    "the same widths)"
                )
            part = write_part(path, k, data, write_id=write_id, storage_options=storage_options)
            written.append(part)
        if width is None:
            raise ValueError(f"{path}: no parts to write (parts was empty)")
        finish_dataset(
            path,
            write_id,
            written,
            *width,
            features=features,
            labels=labels,
            storage_options=storage_options,
        )
    except BaseException:  # (after a finish that a held Ctrl-C ended, this keeps all)
        if write_id is not None:
            abort_dataset(path, write_id, storage_options=storage_options)
        raise


class NdfDatasetWriter(Committing):
    """Write a sharded dataset slab by slab, a new part every ``part_rows`` rows;
    the manifest at :meth:`commit`. Local folders only.

    One write of the protocol (:mod:`exactbatch.ndf.dataset_protocol`; its
    id is ``write_id``, from the first part on): each part is an
    :class:`~exactbatch.ndf.write.NdfWriter` (atomic: a temporary file
    renamed into place when the part is full), and
    :meth:`commit` ends with :func:`finish_dataset`. ``n``, when known up
    front, is checked at commit. ``features``/``labels``: column names kept
    in the manifest (checked here, before any part is written), and
    ``categories`` the vocabularies of coded columns. Use as a
    context manager: a clean exit commits; an exception aborts
    (:func:`abort_dataset`: no part of this write is left, nor the folder if it
    made it, and a dataset that was there is untouched). ``before_rename``:
    called before each part and the manifest are renamed into place (the CLI
    raises a Ctrl-C some library swallowed).
    """

    def __init__(
        self,
        path: PathLike,
        d: int,
        l: int,  # noqa: E741
        part_rows: int,
        *,
        n: int | None = None,
        features: Sequence[str] | None = None,
        labels: Sequence[str] | None = None,
        categories: dict[str, Sequence[Any]] | None = None,
        before_rename: Callable[[], object] | None = None,
    ) -> None:
        self.path = dataset_path(path, None)
        self.d, self.l = check_int("d", d, 0), check_int("l", l, 0)
        self.part_rows = check_int("part_rows", part_rows, 1)
        self.n, self.features, self.labels = n, features, labels
        self.before_rename = before_rename
        self.row_bytes = 8 * (self.d + self.l)
        check_shape(0 if n is None else n, self.d, self.l, self.path)
        where = join_path(self.path, MANIFEST)
        names = validate_names(features, labels, self.d, self.l, where)
        self.categories = check_categories(categories, names, where)
        self.parts: list[PartInfo] = []
        self.rows = 0
        self._part: NdfWriter | None = None  # the part being written
        self.write_id: str | None = None  # the write starts with its first part (or the commit)
        if os.path.isfile(self.path):
            raise file_not_dataset(self.path)

    def _start(self) -> str:
        """This write's id; :func:`start_dataset` on first use, inside the ``with`` block
        (so that an abort always knows what to undo)."""
        if self.write_id is None:
            with signals_held():  # kept before a signal can strike: the abort finds it
                self.write_id = start_dataset(self.path)
        return self.write_id

    def _room(self) -> tuple[NdfWriter, int]:
        """The part being written (one is started when none is), and the rows it can take."""
        if self._part is None:
            target = join_path(self.path, part_name(len(self.parts), self._start()))
            self._part = NdfWriter(target, self.d, self.l, before_rename=self.before_rename)
        return self._part, self.part_rows - self._part.rows

    def _close_part(self) -> None:
        w, self._part = self._part, None
        if w is None:
            return
        w.commit()
        self.parts.append(
            PartInfo(os.path.basename(w.path), w.rows, expected_size(w.rows, self.d, self.l))
        )

    def write(self, block: np.ndarray) -> None:
        """Append rows: a (rows, d + l) array of numbers, written as float64."""
        at = 0
        while at < len(block):
            w, room = self._room()
            take = block[at : at + room]
            w.write(take)
            at += len(take)
            self.rows += len(take)
            if w.rows == self.part_rows:
                self._close_part()

    def write_raw(self, rows: Any) -> None:
        """Append whole rows already in the file layout (a bytes-like object of rows)."""
        view = byte_view(rows)
        rb = self.row_bytes
        if rb == 0 or len(view) % rb:
            raise ValueError(f"{self.path}: {len(view)} bytes is not a whole number of rows")
        at = 0
        while at < len(view):
            w, room = self._room()
            take = view[at : at + room * rb]
            w.write_raw(take)
            at += len(take)
            self.rows += len(take) // rb
            if w.rows == self.part_rows:
                self._close_part()

    def commit(self) -> None:
        """Finish the last part and write the manifest: the dataset appears."""
        try:
            if self.n is not None and self.rows != self.n:
                raise ValueError(
                    f"{self.path}: the input promised {self.n} rows but {self.rows} were written"
                )
            if self._part is not None:
                self._close_part()
            finish_dataset(
                self.path,
                self._start(),
                self.parts,
                self.d,
                self.l,
                features=self.features,
                labels=self.labels,
                categories=self.categories,
                before_rename=self.before_rename,
            )
        except BaseException:  # (after a finish that a held Ctrl-C ended, this keeps all)
            self.abort()
            raise

    def abort(self) -> None:
        """Remove every file of this write; no manifest of it is left."""
        if self._part is not None:
            self._part.abort()
            self._part = None
        if self.write_id is not None:
            abort_dataset(self.path, self.write_id)
        self.parts = []
