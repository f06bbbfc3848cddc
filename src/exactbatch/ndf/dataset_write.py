"""Writing sharded ``.ndf`` datasets: parts first, each atomically, the manifest last.

- :func:`save_ndf_dataset` writes a whole dataset from an iterable of parts
  held in memory (local folders and URLs);
- :class:`NdfDatasetWriter` writes one slab of rows at a time, starting a
  new part every ``part_rows`` rows, for data larger than memory (local);
- the steps both are made of are public, so that a distributed writer
  (``exactbatch.dask``) can run them where it likes: :func:`start_dataset`
  (make the folder, remove an old manifest), :func:`write_part` (one part,
  atomically, on any machine), :func:`write_manifest` (last, atomically,
  from the :class:`~exactbatch.ndf.manifest.PartInfo` of every part), and
  :func:`remove_parts` to clean up after a failure.

A failed write leaves no manifest (the old one is removed before the first
part is written), so a half-written folder is never taken for a dataset.
"""

from __future__ import annotations

import contextlib
import os

from exactbatch.checks import check_int
from exactbatch.ndf.file import open_ndf
from exactbatch.ndf.format import check_shape, expected_size
from exactbatch.ndf.manifest import (
    MANIFEST,
    PartInfo,
    dataset_path,
    file_not_dataset,
    join_path,
    part_name,
    write_manifest,
)
from exactbatch.ndf.names import validate_names
from exactbatch.ndf.temps import remove_own_temps
from exactbatch.ndf.write import (
    Committing,
    NdfWriter,
    as_dataset,
    save_ndf,
    write_ndf_to,
)
from exactbatch.urls import is_url, url_to_fs

__all__ = [
    "NdfDatasetWriter",
    "describe_part",
    "remove_parts",
    "save_ndf_dataset",
    "start_dataset",
    "write_part",
]


def start_dataset(path, *, storage_options: dict | None = None) -> None:
    """Make ``path`` ready for a dataset's parts: the folder is made (not its parents)
    if missing, and a ``manifest.json`` already there is removed first, so that the
    folder is not a dataset until :func:`write_manifest` ends the write."""
    path = dataset_path(path, storage_options)
    if is_url(path):
        fs, key = url_to_fs(path, storage_options)
        fs.invalidate_cache()
        if fs.isfile(key):
            raise file_not_dataset(path)
        with contextlib.suppress(FileNotFoundError):
            fs.rm_file(join_path(key, MANIFEST))
        return
    if os.path.isfile(path):
        raise file_not_dataset(path)
    with contextlib.suppress(FileExistsError):
        os.mkdir(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(path, MANIFEST))


def write_part(path, index: int, data, *, storage_options: dict | None = None) -> PartInfo:
    """Write ``data`` (a Dataset, an ``(x, y)`` pair or an array ``x``) as part ``index``
    of the dataset at ``path`` (named :func:`part_name(index) <part_name>`), atomically;
    return its :class:`PartInfo` for :func:`write_manifest`.

    Locally through :func:`~exactbatch.ndf.write.save_ndf` (a temporary file
    renamed over the part); at a URL as one upload that is committed only
    when whole (an S3 multipart upload is aborted on error). The folder must
    exist (:func:`start_dataset`); no manifest is written.
    """
    path = dataset_path(path, storage_options)
    name = part_name(index)
    data = as_dataset(data)
    target = join_path(path, name)
    check_shape(data.n, data.d, data.l, target)
    if is_url(path):
        fs, key = url_to_fs(target, storage_options)
        f = fs.open(key, "wb", autocommit=False)
        try:
            write_ndf_to(f, data)
            f.close()
            f.commit()
        except BaseException:
            _abandon(f)
            raise
    else:
        save_ndf(target, data)
    return PartInfo(name, data.n, expected_size(data.n, data.d, data.l))


def _abandon(f) -> None:
    """Throw away an uncommitted upload (best effort: the error that got here matters more)."""
    with contextlib.suppress(Exception):
        f.discard()
    f.forced = True  # nothing more is uploaded at close
    with contextlib.suppress(Exception):
        f.close()


def describe_part(path, name: str, *, storage_options: dict | None = None) -> tuple:
    """``(PartInfo(name, n, nbytes), d, l)`` of the part file ``name`` in the dataset folder
    ``path``, from its header and size (checked as :func:`~exactbatch.ndf.file.open_ndf`
    does: :class:`NdfError` naming the file if malformed)."""
    path = dataset_path(path, storage_options)
    with open_ndf(join_path(path, name), storage_options=storage_options) as f:
        return PartInfo(name, f.n, expected_size(f.n, f.d, f.l)), f.d, f.l


def save_ndf_dataset(
    path, parts, *, features=None, labels=None, storage_options: dict | None = None
) -> None:
    """Write a sharded dataset at ``path`` (a folder, made if missing; or a URL) from
    ``parts``: an iterable of Datasets, ``(x, y)`` pairs or arrays ``x``, one per part,
    all of the same d and l (at least one part; a part may have no rows).

    Each part is written atomically as it comes (:func:`write_part`), and the
    manifest last (:func:`write_manifest`, which also keeps ``features`` and
    ``labels``, column names, if given: checked by
    :func:`~exactbatch.ndf.names.validate_names` before the first part is
    written). A manifest already at ``path`` is removed first, so on any
    error (a bad part, a full disk, a Ctrl-C) no manifest is left and the
    folder is not a dataset; the parts this call
    wrote are removed then too (and the folder, if this call made it). Part
    files of an earlier dataset there that the new one does not list are
    removed on success. ``storage_options``: for a URL, as in
    :func:`open_ndf_dataset`.
    """
    path = dataset_path(path, storage_options)
    made = not is_url(path) and not os.path.isdir(path)  # a failure removes the folder it made
    start_dataset(path, storage_options=storage_options)
    written: list[PartInfo] = []
    width = None
    try:
        for k, data in enumerate(parts):
            data = as_dataset(data)
            if width is None:
                width = (data.d, data.l)
                # the names the manifest will keep, checked before the first part is written
                validate_names(features, labels, *width, join_path(path, MANIFEST))
            elif (data.d, data.l) != width:
                raise ValueError(
                    f"{join_path(path, part_name(k))}: part {k} has d={data.d}, l={data.l}; "
                    f"part 0 had d={width[0]}, l={width[1]} (every part must have the same widths)"
                )
            written.append(write_part(path, k, data, storage_options=storage_options))
        if width is None:
            raise ValueError(f"{path}: no parts to write (parts was empty)")
        write_manifest(
            path,
            written,
            *width,
            features=features,
            labels=labels,
            storage_options=storage_options,
        )
    except BaseException:
        remove_parts(path, [p.name for p in written], storage_options=storage_options)
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(path)
        raise


def remove_parts(path, names, *, storage_options: dict | None = None) -> None:
    """Remove the part files ``names`` from the dataset folder ``path``, after a failed
    write. Best effort: errors are ignored (the error that led here matters more)."""
    path = dataset_path(path, storage_options)
    if is_url(path):
        with contextlib.suppress(Exception):
            fs, key = url_to_fs(path, storage_options)
            for name in names:
                with contextlib.suppress(Exception):
                    fs.rm_file(join_path(key, name))
        return
    for name in names:
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(path, name))


class NdfDatasetWriter(Committing):
    """Write a sharded dataset slab by slab, a new part every ``part_rows`` rows;
    the manifest at :meth:`commit`. Local folders only.

    Each part is an :class:`~exactbatch.ndf.write.NdfWriter` (atomic: a
    temporary file renamed into place when the part is full). ``n``, when
    known up front, is checked at commit. ``features``/``labels``: column
    names kept in the manifest (checked here, before any part is written).
    Use as a context manager: a clean exit commits; an exception aborts,
    removing the parts written (and the folder, if this writer made it) and
    leaving no manifest. ``before_rename``: called before each part and the
    manifest are renamed into place (the CLI raises a Ctrl-C some library
    swallowed).
    """

    def __init__(
        self,
        path,
        d: int,
        l: int,  # noqa: E741
        part_rows: int,
        *,
        n: int | None = None,
        features=None,
        labels=None,
        before_rename=None,
    ):
        self.path = dataset_path(path, None)
        self.d, self.l = check_int("d", d, 0), check_int("l", l, 0)
        self.part_rows = check_int("part_rows", part_rows, 1)
        self.n, self.features, self.labels = n, features, labels
        self.before_rename = before_rename
        self.row_bytes = 8 * (self.d + self.l)
        check_shape(0 if n is None else n, self.d, self.l, self.path)
        validate_names(features, labels, self.d, self.l, join_path(self.path, MANIFEST))
        self.parts: list[PartInfo] = []
        self.rows = 0
        self._part = None  # the part being written
        self._made = not os.path.isdir(self.path)  # an abort removes the folder it made
        start_dataset(self.path)

    def _room(self):
        """The part being written (one is started when none is), and the rows it can take."""
        if self._part is None:
            target = join_path(self.path, part_name(len(self.parts)))
            try:
                self._part = NdfWriter(target, self.d, self.l, before_rename=self.before_rename)
            except BaseException:
                remove_own_temps(target)  # a Ctrl-C between its creation and here
                raise
        return self._part, self.part_rows - self._part.rows

    def _close_part(self) -> None:
        w, self._part = self._part, None
        w.commit()
        self.parts.append(
            PartInfo(os.path.basename(w.path), w.rows, expected_size(w.rows, self.d, self.l))
        )

    def write(self, block) -> None:
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

    def write_raw(self, rows) -> None:
        """Append whole rows already in the file layout (a bytes-like object of rows)."""
        view = memoryview(rows).cast("B")
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
            if self._part is not None and self._part.rows:
                self._close_part()
            if self.before_rename is not None:
                self.before_rename()
            write_manifest(
                self.path,
                self.parts,
                self.d,
                self.l,
                features=self.features,
                labels=self.labels,
            )
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Remove the part being written and the parts written; no manifest is left."""
        if self._part is not None:
            self._part.abort()
            self._part = None
        remove_parts(self.path, [p.name for p in self.parts])
        self.parts = []
        if self._made:
            with contextlib.suppress(OSError):
                os.rmdir(self.path)
