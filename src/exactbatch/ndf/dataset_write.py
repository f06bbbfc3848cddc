"""Writing sharded ``.ndf`` datasets: each write under a write id, its manifest last.

A dataset appears at once and whole, or not at all, as a file written by
:func:`~exactbatch.ndf.write.save_ndf` does; on local folders and URLs alike
(where nothing renames atomically):

1. :func:`start_dataset` makes the folder if missing and returns a fresh
   write id, ``<host>-<pid>-<random>``, and puts an empty marker file,
   ``.exactbatch-write-<write id>``, there for as long as the write runs.
   Nothing else there is touched: a dataset already there stays readable
   throughout the write.
2. :func:`write_part` writes each part atomically as
   ``part-NNNNN-<write id>.ndf``, on any machine: two writes never share a
   part file.
3. :func:`finish_dataset` writes ``manifest.json`` (one rename, or one PUT)
   listing only this write's parts: the one step that makes the new dataset
   visible, whole. Then it removes its marker and the parts of the dataset
   it replaced.
4. On any error before that, :func:`abort_dataset` removes every file of the
   write - its parts and their temporary files, found by listing the folder,
   so a part renamed into place an instant before a Ctrl-C goes too - its
   marker, and the folder, if the write made it.

:func:`save_ndf_dataset` (parts held in memory) and
:class:`NdfDatasetWriter` (slab by slab, a new part every ``part_rows``
rows) run these steps; ``exactbatch.dask`` runs :func:`write_part` on its
workers.

So an interrupted write (an exception, Ctrl-C, SIGTERM under the command)
leaves no new file, and the old dataset as it was; two writers of one
folder end as the dataset of the one whose manifest came last, never a mix.
The manifest's rename and the removals around it run with SIGINT and SIGTERM
held (in the main thread, where Python runs signal handlers): a signal then
takes effect as they end, and cannot cut them in two.

Leftovers, and who removes them: every start and finish of a write removes
the part files the current manifest does not list of writes that are over -
writes whose marker is gone (they ended), writes on this host whose process
is gone (killed mid-write; their marker goes too), and parts named before
write ids (``part-NNNNN.ndf``) - and the temporary files of writers gone.
So the loser of two manifests written at once (no manifest lists its parts)
is cleaned up by whichever of the two finishes last, and what a writer
killed with SIGKILL (or a power loss) leaves, by the next write from the
same host. A write killed on another host keeps its marker: its files are
left for a write from that host (or for removal by hand:
``.exactbatch-write-<write id>`` and ``part-*-<write id>.ndf``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import threading
from collections.abc import Iterable, Iterator
from typing import Any

from exactbatch.arrays import byte_view
from exactbatch.checks import check_int
from exactbatch.hints import Columns, PathLike
from exactbatch.ndf.file import open_ndf
from exactbatch.ndf.format import check_shape, expected_size
from exactbatch.ndf.manifest import (
    MANIFEST,
    Manifest,
    PartInfo,
    dataset_path,
    file_not_dataset,
    join_path,
    part_name,
    read_manifest,
    write_manifest,
)
from exactbatch.ndf.names import check_categories, validate_names
from exactbatch.ndf.temps import (
    WRITE_ID,
    host_tag,
    new_write_id,
    parse_temp,
    parse_write_id,
    pid_alive,
)
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
    "abort_dataset",
    "describe_part",
    "finish_dataset",
    "remove_parts",
    "save_ndf_dataset",
    "start_dataset",
    "write_part",
]

# A part's file name: part_name's, with a write id, or as named before write ids.
_PART = re.compile(rf"part-[0-9]{{5,}}(?:-(?P<write>{WRITE_ID}))?\.ndf")
_MARKER = ".exactbatch-write-"  # + write id: the write runs

_ACTIVE: dict[str, bool] = {}  # this process's writes in progress -> whether each made its folder
_ACTIVE_LOCK = threading.Lock()


# -- the steps of a write --------------------------------------------------------------------


def start_dataset(path, *, storage_options: dict | None = None) -> str:
    """Begin a write of a dataset at ``path``; return its write id, for :func:`write_part`,
    :func:`finish_dataset` and :func:`abort_dataset`.

    The folder is made (not its parents) if missing. Nothing already there is
    changed, so a dataset at ``path`` stays readable until
    :func:`finish_dataset` replaces it; leftovers of writes that are over are
    removed (see the module docstring).
    """
    path = dataset_path(path, storage_options)
    folder = _Folder(path, storage_options)
    made = folder.make()
    with _ACTIVE_LOCK:
        write_id = new_write_id()
        while write_id in _ACTIVE:  # pragma: no cover - 32 random bits drew twice
            write_id = new_write_id()
        _ACTIVE[write_id] = made
    try:
        folder.create(_MARKER + write_id)
    except BaseException:
        abort_dataset(path, write_id, storage_options=storage_options)
        raise
    folder.remove_leftovers()
    return write_id


def write_part(
    path, index: int, data, *, write_id: str, storage_options: dict | None = None
) -> PartInfo:
    """Write ``data`` (a Dataset, an ``(x, y)`` pair or an array ``x``) as part ``index``
    of the write ``write_id`` (from :func:`start_dataset`) of the dataset at ``path``,
    atomically, named :func:`part_name(index, write_id) <part_name>`; return its
    :class:`PartInfo` for :func:`finish_dataset`.

    Locally through :func:`~exactbatch.ndf.write.save_ndf` (a temporary file
    renamed into place); at a URL as one upload that is committed only when
    whole (an S3 multipart upload is aborted on error). Runs on any machine
    that sees ``path``; no manifest is written.
    """
    path = dataset_path(path, storage_options)
    name = part_name(index, write_id)
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


def finish_dataset(
    path,
    write_id: str,
    parts,
    d: int,
    l: int,  # noqa: E741
    *,
    features=None,
    labels=None,
    categories=None,
    storage_options: dict | None = None,
    before_rename=None,
) -> Manifest:
    """End the write ``write_id``: its manifest, listing ``parts`` (in order), replaces
    whatever dataset was at ``path``, in one step; then that dataset's parts are removed.

    ``parts``: the :class:`PartInfo` :func:`write_part` returned, each a part
    of this write (anything else is a ``ValueError``) whose file is there
    (else ``FileNotFoundError``); ``d``, ``l``, ``features``, ``labels``, ``categories`` as
    for :func:`~exactbatch.ndf.manifest.write_manifest`. On an error before
    the manifest is in place the write is aborted (:func:`abort_dataset`)
    and the error raised. SIGINT and SIGTERM are held until the end (see the
    module docstring); one that strikes as the call begins escapes unheld, so
    a caller aborts on any exception from it too (an abort after the manifest
    is in place keeps the write's parts). ``before_rename``: called just before the manifest is
    written; what it raises aborts (the command raises a Ctrl-C some library
    swallowed).
    """
    path = dataset_path(path, storage_options)
    folder = _Folder(path, storage_options)
    with _signals_held():
        try:
            parts = list(parts)
            folder.check_parts(write_id, parts)
            replaced = folder.listed() or frozenset()
            if before_rename is not None:
                before_rename()
            man = write_manifest(
                path,
                parts,
                d,
                l,
                features=features,
                labels=labels,
                categories=categories,
                storage_options=storage_options,
            )
        except BaseException:
            abort_dataset(path, write_id, storage_options=storage_options)
            raise
        with _ACTIVE_LOCK:
            _ACTIVE.pop(write_id, None)
        folder.remove(_MARKER + write_id)
        for name in replaced - {p.name for p in man.parts}:
            folder.remove(name)
        folder.remove_leftovers()
    return man


def abort_dataset(path, write_id: str, *, storage_options: dict | None = None) -> None:
    """Undo the write ``write_id``: remove its parts and their temporary files (every
    such file in the folder, whoever wrote it), its marker, and the folder if the write
    made it and it is empty. A part the manifest lists (the write had finished) is
    kept. Best effort: errors are ignored (the error that led here matters more).
    SIGINT and SIGTERM are held until the end. Call it once nothing writes for
    ``write_id`` any more."""
    path = dataset_path(path, storage_options)
    folder = _Folder(path, storage_options)
    with _signals_held():
        with _ACTIVE_LOCK:
            made = _ACTIVE.pop(write_id, False)
        with contextlib.suppress(Exception):
            listed = folder.listed() or frozenset()
            for entry in folder.names():
                temp = parse_temp(entry)
                ours = _write_of(entry if temp is None else temp[0]) == write_id
                if ours and entry not in listed:
                    folder.remove(entry)
        folder.remove(_MARKER + write_id)
        if made:
            with contextlib.suppress(OSError):
                os.rmdir(path)


def describe_part(path, name: str, *, storage_options: dict | None = None) -> tuple:
    """``(PartInfo(name, n, nbytes), d, l)`` of the part file ``name`` in the dataset folder
    ``path``, from its header and size (checked as :func:`~exactbatch.ndf.file.open_ndf`
    does: :class:`NdfError` naming the file if malformed)."""
    path = dataset_path(path, storage_options)
    with open_ndf(join_path(path, name), storage_options=storage_options) as f:
        return PartInfo(name, f.n, expected_size(f.n, f.d, f.l)), f.d, f.l


def save_ndf_dataset(
    path: PathLike,
    parts: Iterable[Any],
    *,
    features: Columns = None,
    labels: Columns = None,
    storage_options: dict | None = None,
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
        with _signals_held():  # the id is kept before a signal can strike: the abort finds it
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


def remove_parts(path, names, *, storage_options: dict | None = None) -> None:
    """Remove the part files ``names`` from the dataset folder ``path``. Best effort:
    errors are ignored. (A write's own clean-up is :func:`abort_dataset`.)"""
    folder = _Folder(dataset_path(path, storage_options), storage_options)
    for name in names:
        folder.remove(name)


# -- what the steps share ---------------------------------------------------------------------


def _write_of(name: str) -> str | None:
    """The write id in the part file name ``name``: ``""`` for a part named before
    write ids, None for a name that is not a part's."""
    m = _PART.fullmatch(name)
    return None if m is None else (m["write"] or "")


def _write_over(write_id: str, names, host: str) -> bool:
    """Whether the write ``write_id`` (``""``: a part named before write ids) will never
    write a manifest, judged from ``names``, the folder's listing: its marker is gone
    (it ended), or it ran on this host (``host``) in a process that is gone, or in this
    process and ended."""
    if not write_id or _MARKER + write_id not in names:
        return True
    where, pid = parse_write_id(write_id)
    if where != host:
        return False  # a write on another host that is not over, or was killed there
    if pid == os.getpid():
        with _ACTIVE_LOCK:
            return write_id not in _ACTIVE
    return not pid_alive(pid)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM that arrive in the block take effect at its end, each with the
    handler it had: in the main thread (the one that runs Python's signal handlers),
    for handlers set from Python (an ignored signal stays ignored)."""
    held: list[int] = []
    old: dict[int, Any] = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if handler is not None and handler is not signal.SIG_IGN:
                old[sig] = signal.signal(sig, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for caught, handler in old.items():
            signal.signal(caught, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


class _Folder:
    """A dataset's folder, local or at a URL: what the write protocol does with it."""

    def __init__(self, path: str, storage_options):
        self.path, self.so = path, storage_options
        self.fs = None
        if is_url(path):
            self.fs, self.key = url_to_fs(path, storage_options)

    def make(self) -> bool:
        """Make the folder if missing (a file there is an error); whether it was made."""
        if self.fs is not None:  # object stores have no folders to make
            self.fs.invalidate_cache()
            if self.fs.isfile(self.key):
                raise file_not_dataset(self.path)
            return False
        if os.path.isfile(self.path):
            raise file_not_dataset(self.path)
        try:
            os.mkdir(self.path)
        except FileExistsError:
            return False
        return True

    def create(self, name: str) -> None:
        """Make the empty file ``name`` (locally: one that was not there)."""
        if self.fs is not None:
            self.fs.pipe_file(join_path(self.key, name), b"")
        else:
            os.close(os.open(os.path.join(self.path, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL))

    def names(self) -> list[str]:
        """The names of the files in the folder (none if it is missing)."""
        try:
            if self.fs is None:
                return os.listdir(self.path)
            self.fs.invalidate_cache()
            return [k.rstrip("/").rsplit("/", 1)[-1] for k in self.fs.ls(self.key, detail=False)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def remove(self, name: str) -> None:
        """Remove the file ``name``, best effort (a file left is listed by no manifest)."""
        with contextlib.suppress(Exception):
            if self.fs is None:
                os.unlink(os.path.join(self.path, name))
            else:
                self.fs.rm_file(join_path(self.key, name))

    def listed(self) -> frozenset | None:
        """The part names the manifest there lists now: none without a manifest; None
        for a manifest that cannot be read (then nothing is judged a leftover)."""
        try:
            man = read_manifest(self.path, storage_options=self.so)
        except Exception:
            return None if MANIFEST in self.names() else frozenset()
        return frozenset(p.name for p in man.parts)

    def check_parts(self, write_id: str, parts: list) -> None:
        """Each of ``parts`` is a part of the write ``write_id`` and its file is there."""
        there = set(self.names())
        for k, p in enumerate(parts):
            if isinstance(p, dict):
                name = p.get("name")
            else:
                name = p[0] if isinstance(p, (tuple, list)) and p else None
            if not isinstance(name, str):
                continue  # write_manifest names what is wrong with it
            if _write_of(name) != write_id:
                raise ValueError(
                    f"{join_path(self.path, str(name))}: part {k} is not a part of this write "
                    f"({write_id}): a manifest lists only its own write's parts, as "
                    "write_part(..., write_id=...) names them"
                )
            if name not in there:
                raise FileNotFoundError(
                    errno.ENOENT,
                    f"part {k} of the write {write_id} is not there",
                    join_path(self.path, name),
                )

    def remove_leftovers(self) -> None:
        """Remove the part files no manifest will list (see the module docstring), the
        markers of writes killed on this host, and the temporary files of writers gone.
        Best effort."""
        with contextlib.suppress(Exception):
            host, me, names = host_tag(), os.getpid(), set(self.names())
            over = {}  # write id -> whether it is over, for each write found

            def is_over(write: str | None) -> bool:
                if write is None:
                    return False
                if write not in over:
                    over[write] = _write_over(write, names, host)
                return over[write]

            doomed = [e for e in names if is_over(_write_of(e))]
            for e in names:
                if e.startswith(_MARKER) and re.fullmatch(WRITE_ID, w := e[len(_MARKER) :]):
                    if is_over(w):  # a marker of a write that is over: killed
                        doomed.append(e)
                    continue
                temp = parse_temp(e)
                if temp is None or temp[1] != host:
                    continue
                name, _, pid = temp
                write = _write_of(name)
                if pid != me:
                    gone = (write is not None or name == MANIFEST) and not pid_alive(pid)
                else:  # ours: of a write that ended (a Ctrl-C between its creation and use)
                    gone = write is not None and is_over(write)
                if gone:
                    doomed.append(e)
            listed = self.listed()  # now: a write that is over has put its manifest there
            if listed is None:
                return
            for e in doomed:
                if e not in listed:
                    self.remove(e)


class NdfDatasetWriter(Committing):
    """Write a sharded dataset slab by slab, a new part every ``part_rows`` rows;
    the manifest at :meth:`commit`. Local folders only.

    One write of the protocol above (its id is ``write_id``, from the first
    part on): each part is an :class:`~exactbatch.ndf.write.NdfWriter`
    (atomic: a temporary file renamed into place when the part is full), and
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
        path,
        d: int,
        l: int,  # noqa: E741
        part_rows: int,
        *,
        n: int | None = None,
        features=None,
        labels=None,
        categories=None,
        before_rename=None,
    ):
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
            with _signals_held():  # kept before a signal can strike: the abort finds it
                self.write_id = start_dataset(self.path)
        return self.write_id

    def _room(self):
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
