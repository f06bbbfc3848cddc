"""Shared pieces of the command: user errors, Ctrl-C, progress bars, sizes and formats
(the columns a command reads: :mod:`exactbatch.tools.column_args`)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType
from typing import TYPE_CHECKING, Any

from exactbatch.hints import Foreign, PathLike
from exactbatch.ndf.regular import regular_file

if TYPE_CHECKING:  # (typing's own from Python 3.11; only mypy reads it here)
    from typing_extensions import Self

    from exactbatch.ndf import NdfDataset, NdfFile

__all__ = [
    "Bar",
    "CliError",
    "catch_signals",
    "check_dataset_output",
    "check_interrupt",
    "check_output",
    "csv_delimiter",
    "detect_format",
    "refuse_url",
    "format_bytes",
    "input_format",
    "open_ndf_input",
    "output_format",
    "parquet_columns",
    "parquet_files",
    "parse_int_list",
    "parse_size",
    "progress",
]

# Formats the command reads, by magic number first, then by extension.
_MAGICS = ((b"NDF1", "ndf"), (b"PAR1", "parquet"), (b"\x93NUMPY", "npy"))
_EXTENSIONS = {
    ".ndf": "ndf",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".npy": "npy",
    ".csv": "csv",
    ".tsv": "csv",
    ".tab": "csv",
}
_TAB_SEPARATED = (".tsv", ".tab")
_COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")


class CliError(ValueError):
    """A problem with the user's input: printed as one line, exit status 2. A
    ``ValueError``, as bad input is for the library's functions, so a Python caller of a
    tool (``convert``) may catch either."""


# -- Ctrl-C and SIGTERM -------------------------------------------------------------
#
# While a command runs, SIGINT and SIGTERM are noted before they raise
# KeyboardInterrupt, because library code may swallow the exception: pyarrow,
# for one, imports pandas on its first conversion between Arrow and NumPy and
# discards whatever that import raises. A noted signal is raised again at the
# next progress step and before any output is renamed into place, so it can
# neither be lost nor let a conversion replace a file.

_noted: list[int] = []


def _note(signum: int, frame: FrameType | None) -> None:
    _noted.append(signum)
    # A second Ctrl-C while the first unwinds (removing temporary files, printing
    # the message) is only noted: the command is already on its way out.
    if not isinstance(sys.exc_info()[1], KeyboardInterrupt):
        raise KeyboardInterrupt


def check_interrupt() -> None:
    """Raise KeyboardInterrupt if a signal arrived since :func:`catch_signals` began."""
    if _noted:
        raise KeyboardInterrupt


@contextlib.contextmanager
def catch_signals() -> Iterator[None]:
    """In the block, SIGINT and SIGTERM raise KeyboardInterrupt, and are noted for
    :func:`check_interrupt`. A signal that is ignored (SIGINT, in a job a shell
    started in the background) stays ignored. Main thread only; elsewhere a no-op."""
    _noted.clear()
    old: dict[signal.Signals, Any] = {}  # (a handler: a function, an int, or None)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if handler is not None and handler is not signal.SIG_IGN:  # None: set outside Python
                old[sig] = signal.signal(sig, _note)
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


class Bar:
    """A tqdm bar, or none (bars off, or tqdm not installed); every step first raises
    a noted Ctrl-C, so that a signal some library swallowed still stops the loop."""

    def __init__(self, bar: Foreign = None) -> None:
        self._bar = bar

    def update(self, k: float = 1) -> None:
        check_interrupt()
        if self._bar is not None:
            self._bar.update(k)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(
    total: float | None = None,
    desc: str = "",
    unit: str = "rows",
    enabled: bool = True,
    **kw: Any,
) -> Bar:
    """A tqdm progress bar on stderr, or none when disabled or tqdm is missing."""
    if not enabled:
        return Bar()
    try:
        from tqdm import tqdm
    except ImportError:
        return Bar()
    kw.setdefault("unit_scale", True)
    return Bar(
        tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, mininterval=0.25, leave=True, **kw)
    )


_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(i?b?)\s*$", re.I)


def parse_size(text: str) -> int:
    """``"1GB"`` -> bytes. Units are binary: K/KB/KiB = 1024, M = 1024**2, G, T; bare = bytes."""
    m = _SIZE.match(str(text))
    if not m or (m.group(3).lower() == "i"):
        raise ValueError(f"expected a size such as 512MB, 1GB or 1.5GiB; got {text!r}")
    power = " kmgt".index(m.group(2).lower() or " ")
    value = int(float(m.group(1)) * 1024**power)
    if value <= 0:
        raise ValueError(f"a size must be positive; got {text!r}")
    return value


def parse_int_list(text: str) -> list[int]:
    """``"64,1024,4096"`` -> ``[64, 1024, 4096]`` (each >= 1)."""
    try:
        values = [int(v) for v in str(text).replace(" ", "").split(",") if v]
    except ValueError:
        raise ValueError(f"expected comma-separated integers (64,1024); got {text!r}") from None
    if not values or min(values) < 1:
        raise ValueError(f"expected comma-separated integers >= 1; got {text!r}")
    return values


def format_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(size) < 1024 or unit == "TiB":
            return f"{n} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError  # pragma: no cover


def _strip_compression(path: str) -> str:
    low = path.lower()
    for ext in _COMPRESSED:
        if low.endswith(ext):
            return path[: -len(ext)]
    return path


def csv_delimiter(path: PathLike, delimiter: str | None = None) -> str:
    """The field delimiter of a CSV input: ``delimiter`` when given, else a tab for a
    ``.tsv`` or ``.tab`` file (compressed too: ``.tsv.gz``), else a comma."""
    if delimiter is not None:
        return delimiter
    ext = os.path.splitext(_strip_compression(os.fspath(path)))[1].lower()
    return "\t" if ext in _TAB_SEPARATED else ","


def refuse_url(path: object, doing: str = "reading") -> None:
    """A :class:`CliError` for a URL (``s3://...``): the command reads and writes local
    files only (``doing``: "reading" or "writing")."""
    from exactbatch.urls import is_url

    if is_url(path):
        raise CliError(
            f"{doing} URLs is not supported by this command; got {path} (exactbatch info "
            "reads an .ndf or a sharded dataset at a URL; copy the data to a local path "
            "for the rest)"
        )


def named_format(path: PathLike) -> str | None:
    """The format a file's name says (``"ndf"``, ``"parquet"``, ...: its extension, less
    a compression's), or None for a name that says none."""
    ext = os.path.splitext(_strip_compression(os.fspath(path)))[1].lower()
    return _EXTENSIONS.get(ext)


def detect_format(path: PathLike) -> str:
    """``"ndf"``, ``"parquet"``, ``"csv"``, ``"npy"`` or ``"dataset"``: by magic number,
    then extension.

    A folder holding ``manifest.json``, or ``.ndf`` parts and no Parquet (a
    dataset whose manifest is missing: reading it says so), is a sharded
    ``.ndf`` dataset; any other folder is Parquet (its ``.parquet`` files, at any depth). A
    missing path is the OS's ``FileNotFoundError``; a FIFO or a device an
    ``NdfError`` (refused at once, never waited on); a URL (:func:`refuse_url`) and
    anything unrecognised a :class:`CliError`.
    """
    path = os.fspath(path)
    refuse_url(path)
    if os.path.isdir(path):
        names = os.listdir(path)
        parts = any(n.endswith(".ndf") for n in names)
        parquet = any(n.endswith(".parquet") for n in names)
        return "dataset" if "manifest.json" in names or (parts and not parquet) else "parquet"
    with regular_file(path, "a data file") as f:  # missing, no permission: as the OS says
        head = f.read(8)
    for magic, fmt in _MAGICS:
        if head.startswith(magic):
            return fmt
    ext = os.path.splitext(_strip_compression(path))[1].lower()
    if ext in _EXTENSIONS:
        return _EXTENSIONS[ext]
    raise CliError(
        f"{path}: unknown format (found first bytes {head[:6]!r}); expected an .ndf file, "
        "Parquet (a file or a folder), a .csv file or a .npy file"
    )


def parquet_files(path: PathLike) -> list[str]:
    """The local Parquet files of ``path`` (a file or a folder, at any depth), each a
    regular file (:func:`~exactbatch.sources.parquet.list_local_files`), as pyarrow is
    to be given them (:func:`~exactbatch.urls.for_arrow`)."""
    from exactbatch.sources.parquet import list_local_files
    from exactbatch.urls import for_arrow

    return [for_arrow(f) for f in list_local_files(path)]


def parquet_columns(path: PathLike) -> tuple[list[str], dict[str, Foreign], set[str]]:
    """The columns a loader reads from the local Parquet ``path`` (a file or a folder),
    in its order: ``(names, types, keys)``, the first file's columns then the Hive
    partition keys of a folder (``year=2024/...``) that the files do not hold (what
    :func:`~exactbatch.parquet_source` reads as columns, last), each name's Arrow type,
    and which names are partition keys. Read from one footer and the paths."""
    import pyarrow.parquet as pq

    from exactbatch.sources.parquet_columns import hive_partitions
    from exactbatch.urls import for_arrow

    files = parquet_files(path)
    schema = pq.ParquetFile(files[0]).schema_arrow
    names, types = list(schema.names), dict(zip(schema.names, schema.types, strict=True))
    parts = hive_partitions(for_arrow(path), files) if os.path.isdir(path) else None
    keys: list[str] = []
    if parts:
        keys = [k for k in parts.names if k not in types]
        for k in keys:
            names.append(k)
            types[k] = parts.types[k]
    return names, types, set(keys)


def input_format(
    path: PathLike, storage_options: dict[str, Any] | None = None, tool: str = "info"
) -> str:
    """What ``path`` holds, for the commands that read what ``info`` reads: a URL
    (``s3://...``, any fsspec protocol) is an ``"ndf"`` or a ``"dataset"`` (by its
    ``manifest.json``, else by the magic number); a local path is
    :func:`detect_format`'s answer. ``storage_options`` apply only to URLs (else a
    :class:`CliError`); ``tool`` names the command in the messages."""
    from exactbatch.urls import is_url

    path = os.fspath(path)
    if is_url(path):
        return _url_format(path, storage_options, tool)
    if storage_options is not None:
        raise CliError(f"{path}: storage options apply only to URLs (s3://..., gs://...)")
    return detect_format(path)


def _url_format(path: str, storage_options: dict[str, Any] | None, tool: str) -> str:
    """``"dataset"`` (a prefix holding ``manifest.json``) or ``"ndf"`` (by its magic
    number) for a URL; a :class:`CliError` for anything else there."""
    from exactbatch.ndf.format import MAGIC
    from exactbatch.urls import url_to_fs

    try:
        fs, where = url_to_fs(path, storage_options)
        if fs.exists(where.rstrip("/") + "/manifest.json"):
            return "dataset"
        if not fs.isfile(where):
            if fs.isdir(where):  # a prefix without a manifest: reading it says what is wrong
                return "dataset"
            raise FileNotFoundError(f"{path}: no such file or dataset")
        with fs.open(where, "rb") as f:
            head: bytes = f.read(len(MAGIC))
    except (OSError, ImportError, ValueError):
        raise
    except Exception as e:  # the filesystem's own (bad options, an unreachable endpoint)
        raise CliError(
            f"{path}: cannot read it: {type(e).__name__}: {e} (check the URL and --storage-options)"
        ) from e
    if head != MAGIC:
        raise CliError(
            f"{path}: at a URL {tool} reads .ndf files and sharded datasets; found first "
            f"bytes {head!r}"
        )
    return "ndf"


def open_ndf_input(
    path: PathLike, fmt: str, storage_options: dict[str, Any] | None = None
) -> NdfFile | NdfDataset:
    """The ``.ndf`` file (``fmt == "ndf"``) or sharded dataset (``"dataset"``) at
    ``path``, a local path or a URL, opened: an NdfFile or an NdfDataset."""
    from exactbatch.ndf import open_ndf, open_ndf_dataset

    if fmt == "dataset":
        return open_ndf_dataset(path, storage_options=storage_options)
    return open_ndf(path, storage_options=storage_options)


def output_format(path: PathLike) -> str:
    """The format to write, from the destination's extension: ``"ndf"`` or ``"parquet"``."""
    ext = os.path.splitext(os.fspath(path))[1].lower()
    fmt = _EXTENSIONS.get(ext)
    if fmt not in ("ndf", "parquet"):
        raise CliError(f"{path}: cannot tell what to write: name it .ndf or .parquet")
    return fmt


def check_output(dst: PathLike, force: bool) -> str:
    """Refuse to replace an existing file without ``force``; the folder must exist."""
    dst = os.fspath(dst)
    refuse_url(dst, "writing")
    if os.path.isdir(dst):
        raise CliError(f"{dst}: is a folder; give a file name to write")
    if os.path.exists(dst) and not force:
        raise CliError(f"{dst}: already exists (pass --force to replace it)")
    folder = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(folder):
        raise CliError(f"{dst}: folder {folder} does not exist")
    return dst


def check_dataset_output(dst: PathLike, force: bool) -> str:
    """A folder to write a sharded dataset into: not a file; if it exists, empty (or
    ``force``: its old dataset is replaced); its parent folder must exist."""
    dst = os.fspath(dst)
    refuse_url(dst, "writing")
    if os.path.exists(dst) and not os.path.isdir(dst):
        raise CliError(f"{dst}: is a file; a sharded dataset is written into a folder")
    if os.path.isdir(dst) and os.listdir(dst) and not force:
        raise CliError(f"{dst}: folder already exists and is not empty (pass --force to replace)")
    parent = os.path.dirname(os.path.abspath(dst))
    if not os.path.isdir(parent):
        raise CliError(f"{dst}: folder {parent} does not exist")
    return dst
