"""The write protocol of sharded ``.ndf`` datasets: each write under a write id, its
manifest last.

Apart from :mod:`exactbatch.ndf.dataset_write` (the user-facing writers,
:func:`~exactbatch.ndf.dataset_write.save_ndf_dataset` and
:class:`~exactbatch.ndf.dataset_write.NdfDatasetWriter`, which run these
steps) because the steps are used alone too: a distributed writer
(``exactbatch.dask`` on its workers, ``exactbatch.ray``'s datasink) calls them
one by one, and what they share - the folder, its leftovers, the writes in
progress, the signals held - is none of the writers' business.

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from exactbatch.hints import PathLike
from exactbatch.ndf.file import open_ndf
from exactbatch.ndf.format import check_shape, expected_size
from exactbatch.ndf.manifest import (
    MANIFEST,
    Manifest,
    PartInfo,
    file_not_dataset,
    part_name,
    read_manifest,
    write_manifest,
)
from exactbatch.ndf.storage import dataset_path, join_path, location
from exactbatch.ndf.temps import (
    WRITE_ID,
    host_tag,
    new_write_id,
    parse_temp,
    parse_write_id,
    pid_alive,
)
from exactbatch.ndf.write import as_dataset, write_ndf_to

__all__ = [
    "abort_dataset",
    "describe_part",
    "finish_dataset",
    "remove_parts",
    "signals_held",
    "start_dataset",
    "write_part",
]


# A part's file name: part_name's, with a write id, or as named before write ids.
_PART = re.compile(rf"part-[0-9]{{5,}}(?:-(?P<write>{WRITE_ID}))?\.ndf")
_MARKER = ".exactbatch-write-"  # + write id: the write runs

_ACTIVE: dict[str, bool] = {}  # this process's writes in progress -> whether each made its folder
_ACTIVE_LOCK = threading.Lock()


# -- the steps of a write --------------------------------------------------------------------


def start_dataset(path: PathLike, *, storage_options: dict[str, Any] | None = None) -> str:
    """Begin a write of a dataset at ``path``; return its write id, for :func:`write_part`,
    :func:`finish_dataset` and :func:`abort_dataset`.

    The folder is made (not its parents) if missing. Nothing already there is
    changed, so a dataset at ``path`` stays readable until
    :func:`finish_dataset` replaces it; leftovers of writes that are over are
    removed (see the module docstring).
    """
    where = dataset_path(path, storage_options)
    folder = _Folder(where, storage_options)
    made = folder.make()
    with _ACTIVE_LOCK:
        write_id = new_write_id()
        while write_id in _ACTIVE:  # pragma: no cover - 32 random bits drew twice
            write_id = new_write_id()
        _ACTIVE[write_id] = made
    try:
        folder.location.create(_MARKER + write_id)
    except BaseException:
        abort_dataset(where, write_id, storage_options=storage_options)
        raise
    folder.remove_leftovers()
    return write_id


def write_part(
    path: PathLike,
    index: int,
    data: Any,
    *,
    write_id: str,
    storage_options: dict[str, Any] | None = None,
) -> PartInfo:
    """Write ``data`` (a Dataset, an ``(x, y)`` pair or an array ``x``) as part ``index``
    of the write ``write_id`` (from :func:`start_dataset`) of the dataset at ``path``,
    atomically, named :func:`part_name(index, write_id) <part_name>`; return its
    :class:`PartInfo` for :func:`finish_dataset`.

    Locally as a temporary file renamed into place; at a URL as one upload
    that is committed only when whole (an S3 multipart upload is aborted on
    error). Runs on any machine that sees ``path``; no manifest is written.
    """
    name = part_name(index, write_id)
    rows = as_dataset(data)
    target = location(path, storage_options).child(name)
    check_shape(rows.n, rows.d, rows.l, target.path)
    target.write_file(lambda f: write_ndf_to(f, rows))
    return PartInfo(name, rows.n, expected_size(rows.n, rows.d, rows.l))


def finish_dataset(
    path: PathLike,
    write_id: str,
    parts: Iterable[Any],
    d: int,
    l: int,  # noqa: E741
    *,
    features: Sequence[str] | None = None,
    labels: Sequence[str] | None = None,
    categories: Mapping[str, Sequence[Any]] | None = None,
    storage_options: dict[str, Any] | None = None,
    before_rename: Callable[[], object] | None = None,
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
    where = dataset_path(path, storage_options)
    folder = _Folder(where, storage_options)
    with signals_held():
        try:
            listing = list(parts)
            folder.check_parts(write_id, listing)
            replaced = folder.listed() or frozenset()
            if before_rename is not None:
                before_rename()
            man = write_manifest(
                where,
                listing,
                d,
                l,
                features=features,
                labels=labels,
                categories=categories,
                storage_options=storage_options,
            )
        except BaseException:
            abort_dataset(where, write_id, storage_options=storage_options)
            raise
        with _ACTIVE_LOCK:
            _ACTIVE.pop(write_id, None)
        folder.remove(_MARKER + write_id)
        for name in replaced - {p.name for p in man.parts}:
            folder.remove(name)
        folder.remove_leftovers()
    return man


def abort_dataset(
    path: PathLike, write_id: str, *, storage_options: dict[str, Any] | None = None
) -> None:
    """Undo the write ``write_id``: remove its parts and their temporary files (every
    such file in the folder, whoever wrote it), its marker, and the folder if the write
    made it and it is empty. A part the manifest lists (the write had finished) is
    kept. Best effort: errors are ignored (the error that led here matters more).
    SIGINT and SIGTERM are held until the end. Call it once nothing writes for
    ``write_id`` any more."""
    where = dataset_path(path, storage_options)
    folder = _Folder(where, storage_options)
    with signals_held():
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
                os.rmdir(where)


def describe_part(
    path: PathLike, name: str, *, storage_options: dict[str, Any] | None = None
) -> tuple[PartInfo, int, int]:
    """``(PartInfo(name, n, nbytes), d, l)`` of the part file ``name`` in the dataset folder
    ``path``, from its header and size (checked as :func:`~exactbatch.ndf.file.open_ndf`
    does: :class:`NdfError` naming the file if malformed)."""
    where = dataset_path(path, storage_options)
    with open_ndf(join_path(where, name), storage_options=storage_options) as f:
        return PartInfo(name, f.n, expected_size(f.n, f.d, f.l)), f.d, f.l


def remove_parts(
    path: PathLike, names: Iterable[str], *, storage_options: dict[str, Any] | None = None
) -> None:
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


def _write_over(write_id: str, names: set[str] | list[str], host: str) -> bool:
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
def signals_held() -> Iterator[None]:
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
    """A dataset's folder, local or at a URL (a :class:`~exactbatch.ndf.storage.Location`):
    what the write protocol does with it."""

    def __init__(self, path: str, storage_options: dict[str, Any] | None) -> None:
        self.location = location(path, storage_options)
        self.path, self.so = self.location.path, storage_options

    def make(self) -> bool:
        """Make the folder if missing (a file there is an error); whether it was made."""
        if self.location.is_file():
            raise file_not_dataset(self.path)
        return self.location.make_folder()

    def names(self) -> list[str]:
        """The names of the files in the folder (none if it is missing)."""
        return self.location.names()

    def remove(self, name: str) -> None:
        """Remove the file ``name``, best effort (a file left is listed by no manifest)."""
        self.location.remove(name)

    def listed(self) -> frozenset[str] | None:
        """The part names the manifest there lists now: none without a manifest; None
        for a manifest that cannot be read (then nothing is judged a leftover)."""
        try:
            man = read_manifest(self.path, storage_options=self.so)
        except Exception:
            return None if MANIFEST in self.names() else frozenset()
        return frozenset(p.name for p in man.parts)

    def check_parts(self, write_id: str, parts: list[Any]) -> None:
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
        markers of writes killed on this host, the temporary files of writers gone, and
        (S3) the multipart uploads of writes that are over.
        Best effort."""
        with contextlib.suppress(Exception):
            host, me, names = host_tag(), os.getpid(), set(self.names())
            over: dict[str, bool] = {}  # write id -> whether it is over, for each write found

            def is_over(write: str | None) -> bool:
                if write is None:
                    return False
                if write not in over:
                    over[write] = _write_over(write, names, host)
                return over[write]

            doomed = [e for e in names if is_over(_write_of(e))]
            # and the uploads of a killed writer, never committed (S3)
            self.location.abort_uploads(lambda e: is_over(_write_of(e)))
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
