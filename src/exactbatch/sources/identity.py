"""What data a loader reads: the ``fingerprint`` a state carries.

A fingerprint is small plain data (JSON-safe): ``n``, ``d``, ``l``, the
column ``names`` where the source has real ones (a names sidecar, a
manifest, Parquet columns; None for arrays), the file or manifest identity,
a ``sample`` hash and, with ``DataLoader(rows=)``, the subset (``rows``:
its count and a hash of its ids, in order); with ``DataLoader(features=,
labels=)``, the chosen columns (``selection``: their positions among the
source's columns, and their names; :mod:`exactbatch.sources.selection`).

* An ``.ndf`` file: its ``path``, ``size`` in bytes and ``mtime`` in ns, and
  a ``sample``: a hash of up to 64 rows at fixed positions (spread evenly
  over the file), read through the loader's own reader - 64 small reads,
  never a full read.
* A sharded dataset: its ``path``, ``parts`` (the part count) and
  ``manifest``, a hash of the manifest's parts (names, with their write ids,
  rows and bytes). No rows are read: a part opens only when a shard reads it.
* In memory (an array, a pair, a Dataset, a DataFrame) or a
  :class:`~exactbatch.sources.protocols.RowSource`: the ``sample`` hash; a
  RowSource adds what its ``identity()`` says (below).
* A stream: ``n`` (its ``n_rows``, else the loader's total_size), and what
  its source's ``identity()`` says; a list of chunks (no ``identity()``:
  plain data) the ``sample`` of its rows, as an array's. How a stream is cut
  into chunks (``block_rows``) is a setting of the state, not the data's
  identity.

``identity()`` is the optional hook by which a source kind names itself
(:mod:`exactbatch.sources.protocols`), read once per loader: a small
JSON-safe dict with its ``kind``, its column ``names`` (its schema: every
column is read as a number) and what it can say of its data without a read
of it. Each kind of the library has one: an Arrow file, table, Hugging Face
dataset, polars or DuckDB source its names (a file's ``path``, ``size`` and
``mtime`` too); Parquet (:func:`parquet_identity`) its names, ``path`` (the
first file), ``parts`` (the file count) and ``files`` (a hash of each file's
name and size, and of what its footer, read at construction, says of its
row groups: rows, and each column's min, max and nulls); ``ndf_blocks``
its file's or manifest's identity (:func:`ndf_identity`). A source without
one is recorded by its kind alone: no attribute of it is guessed at.

What :func:`differences` compares - what makes data "other" - is what
describes the rows' content and order: n, d, l, names, the sample, the
manifest's and the Parquet files' hashes, the subset and the column selection. The
paths and mtimes are recorded to name the data in an error, and never
compared: the same file copied to another path, to a node-local disk or
restored from a backup (which moves its mtime) is the same data, and a state
taken on it resumes there. The same rows held in memory and in an ``.ndf``
file have the same sample, so a state moves between the two. What it cannot
see: a file rewritten in place with the same shape that differs only away
from the 64 sampled rows.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from exactbatch.hints import Foreign, PathLike
from exactbatch.ndf import NdfDataset, NdfFile
from exactbatch.ndf.format import expected_size
from exactbatch.ndf.names import DefaultNames
from exactbatch.ndf.storage import local_stat
from exactbatch.order.subset import subset_digest
from exactbatch.sources.chunks import ChunkList, Widths
from exactbatch.sources.protocols import RowReader

__all__ = ["COMPARED", "SAMPLE_ROWS", "describe", "differences", "reader_fingerprint"]
__all__ += ["column_names", "file_facts", "ndf_identity", "parquet_identity", "source_facts"]
__all__ += ["stream_identity"]

# a fingerprint, or what goes into one: JSON (module docs), read key by key
Fingerprint = dict[str, Any]

SAMPLE_ROWS = 64  # rows hashed at fixed positions: a few small reads, whatever n
MAX_NAMES = 256  # more column names than this are recorded as a hash (a small state)
COMPARED = ("n", "d", "l", "names", "sample", "manifest", "files", "rows", "selection")
_ALWAYS = ("rows", "selection")  # compared even where one side has none: a part differs


def _hash(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    for p in parts:
        h.update(p)
    return h.hexdigest()


def sample_positions(n: int) -> np.ndarray:
    """Up to :data:`SAMPLE_ROWS` row positions spread evenly over ``n`` rows (all of
    them for n <= 64): fixed by n alone."""
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    return np.unique(np.linspace(0, n - 1, min(n, SAMPLE_ROWS)).round().astype(np.int64))


def _rows_hash(pos: np.ndarray, x: np.ndarray, y: np.ndarray) -> str:
    """The sample's hash: positions and float64 values (one NaN for every NaN)."""
    x, y = (np.where(np.isnan(a), np.nan, a).astype("<f8") for a in (x, y))
    return _hash(pos.astype("<i8").tobytes(), x.tobytes(), y.tobytes())


def _sample(read: Callable[..., object], n: int, d: int, l: int) -> str:  # noqa: E741
    """The hash of the fixed sample of rows, read by ``read(rows, out_x, out_y)``."""
    pos = sample_positions(n)
    x = np.empty((len(pos), d), dtype=np.float64)
    y = np.empty((len(pos), l), dtype=np.float64)
    if len(pos):
        read(pos, x, y)
    return _rows_hash(pos, x, y)


def column_names(
    features: Iterable[str] | None, labels: Iterable[str] | None
) -> dict[str, list[str]] | str | None:
    """The column names to record: None for default names (x0.., y0..), a hash past
    :data:`MAX_NAMES` names."""
    if features is None or isinstance(features, DefaultNames):
        if labels is None or isinstance(labels, DefaultNames):
            return None
    names = {"features": list(features or ()), "labels": list(labels or ())}
    if len(names["features"]) + len(names["labels"]) > MAX_NAMES:
        return "blake2b:" + _hash(json.dumps(names).encode())
    return names


def ndf_identity(f: NdfFile | NdfDataset, read: Callable[..., object] | None = None) -> Fingerprint:
    """An ``.ndf`` file's or dataset's identity; ``read``: how to read the file's
    sample (None: :meth:`NdfFile.read_rows_into`)."""
    out: Fingerprint = {"names": column_names(f.features, f.labels)}
    if isinstance(f, NdfDataset):
        parts = [[p.name, p.n, p.nbytes] for p in f.manifest.parts]
        digest = _hash(json.dumps([parts, f.d, f.l]).encode())
        out.update(kind="ndf dataset", path=os.fspath(f.path), parts=len(parts), manifest=digest)
        return out
    path = os.fspath(f.path)
    size, mtime = expected_size(f.n, f.d, f.l), None
    # (a URL, a relative path after a chdir, a file removed while open: the header's size)
    if (st := local_stat(path)) is not None:
        size, mtime = st.st_size, st.st_mtime_ns
    out.update(kind="ndf", path=path, size=size, mtime=mtime)
    out["sample"] = _sample(read or f.read_rows_into, f.n, f.d, f.l)
    return out


def file_facts(path: PathLike) -> Fingerprint:
    """A local file's ``path``, ``size`` and ``mtime`` (recorded to name the data in an
    error, never compared); nothing for a URL or a file gone."""
    st = local_stat(path)
    return (
        {} if st is None else {"path": os.fspath(path), "size": st.st_size, "mtime": st.st_mtime_ns}
    )


def _identity_of(source: object, call: Callable[[], object]) -> Fingerprint:
    """What ``call()`` (a source's ``identity()``) says, checked to be a dict."""
    got = call()
    if not isinstance(got, dict):
        raise TypeError(
            f"{type(source).__name__}.identity() must return a dict (its kind, column "
            f"names, ...); got {type(got).__name__}"
        )
    return got


def source_facts(source: object) -> Fingerprint:
    """What a :class:`~exactbatch.sources.protocols.RowSource` says of itself beyond its
    reader: its type, and what its ``identity()`` says (module docs; no read); nothing
    for other sources (their readers say it)."""
    if source is None or not callable(getattr(source, "open_reader", None)):
        return {}
    out: Fingerprint = {"kind": type(source).__name__}
    call = getattr(source, "identity", None)
    if callable(call):
        out.update(_identity_of(source, call))
    return out


def reader_fingerprint(
    reader: RowReader,
    ids: np.ndarray | None = None,
    read: Callable[..., object] | None = None,
    about: Fingerprint | None = None,
) -> Fingerprint:
    """The fingerprint of a random-access reader's source (module docs); ``ids``: the
    subset a loader serves (``rows=``), or None; ``read``: how to read the sample (the
    reader's own read, as the loader opened it), None once the reader is closed: then
    only the sizes and the subset are recorded (what a closed loader still knows);
    ``about``: :func:`source_facts` of a RowSource."""
    fp: Fingerprint = {"kind": None, "n": reader.n, "d": reader.d, "l": reader.l, "names": None}
    f = getattr(reader, "file", None)
    if read is None:
        pass
    elif isinstance(f, (NdfFile, NdfDataset)):
        fp.update(ndf_identity(f, read))
    else:
        fp["kind"] = "memory" if hasattr(reader, "x") else type(reader).__name__
        fp.update(about or {})
        fp["sample"] = _sample(read, reader.n, reader.d, reader.l)
    fp["rows"] = None if ids is None else {"count": len(ids), "digest": subset_digest(ids)}
    return fp


def stream_identity(source: object, call: Callable[[], object] | None = None) -> Fingerprint:
    """What identifies a stream's ``source`` beyond its sizes: what ``call`` (its
    ``identity()``, as :func:`~exactbatch.sources.protocols.stream_hooks` found it)
    says; for a list of chunks, the sample of its rows; else its kind alone."""
    fp: Fingerprint = {"kind": "stream", "names": None, "rows": None}
    if call is not None:
        fp.update(_identity_of(source, call))
    elif isinstance(source, (list, tuple, ChunkList)):
        chunks = source.chunks if isinstance(source, ChunkList) else source
        fp.update(kind="chunks", sample=_chunks_sample(chunks))
    return fp


def _chunks_sample(chunks: Sequence[object]) -> str:
    """The sample of a list of chunks' rows: the rows at :func:`sample_positions` of
    them all (the same hash as for an array of those rows, however they are cut)."""
    widths = Widths()
    pairs = [widths.normalize(c, i) for i, c in enumerate(chunks)]
    d, l = widths.known() or (0, 0)  # noqa: E741
    starts = np.cumsum([0] + [x.shape[0] for x, _ in pairs])
    pos = sample_positions(int(starts[-1]))
    x, y = np.empty((len(pos), d)), np.empty((len(pos), l))
    which = np.searchsorted(starts, pos, side="right") - 1
    for k, (p, c) in enumerate(zip(pos, which, strict=True)):
        x[k], y[k] = pairs[c][0][p - starts[c]], pairs[c][1][p - starts[c]]
    return _rows_hash(pos, x, y)


def parquet_identity(
    files: Sequence[PathLike],
    footers: Iterable[Foreign],
    features: Iterable[str] | None,
    labels: Iterable[str] | None,
) -> Fingerprint:
    """A Parquet source's identity (module docs): ``files`` its paths (or URLs),
    ``footers`` their footers as read at construction."""
    listed = [[os.path.basename(str(p)), _size(p)] for p in files]
    return {
        "kind": "parquet",
        "names": column_names(features, labels),
        "path": str(files[0]) if files else None,  # the first file
        "parts": len(files),
        "files": _hash(json.dumps([listed, _footer_stats(footers)]).encode()),
    }


def _footer_stats(footers: Iterable[Foreign]) -> list[Any]:
    """What Parquet footers say of their rows, already read: each row group's rows and
    each column chunk's statistics (min, max, nulls), as text. Two files of the same
    shape and size but other values differ here."""
    out: list[Any] = []
    for md in footers:
        for g in range(md.num_row_groups):
            rg = md.row_group(g)
            cols: list[Any] = []
            for c in range(rg.num_columns):
                st = rg.column(c).statistics
                has = st is not None and st.has_min_max
                cols.append([repr(st.min), repr(st.max)] if has else None)
                cols.append(None if st is None else st.null_count)
            out.append([rg.num_rows, cols])
    return out


def _size(path: PathLike) -> int | None:
    """A local file's size (None for a URL, or a file gone: its name and the rows say
    enough)."""
    st = local_stat(str(path))
    return None if st is None else st.st_size


def differences(theirs: Fingerprint, mine: Fingerprint) -> list[str]:
    """The keys of :data:`COMPARED` on which two fingerprints differ. A key either
    lacks (or holds None: not known, a stream not read yet) is not compared, but for
    ``rows`` and ``selection``: a subset and the whole source differ, as do chosen
    columns and all of them."""
    out = []
    for key in COMPARED:
        a, b = theirs.get(key), mine.get(key)
        if key not in _ALWAYS and (a is None or b is None):
            continue
        if a != b:
            out.append(key)
    return out


def describe(fp: Fingerprint) -> str:
    """A fingerprint in one line, for an error message."""
    path = fp.get("path")
    bits = [f"{fp.get('kind')}" + (f" {path}" if path else "")]
    bits.append(f"n={fp.get('n')}, d={fp.get('d')}, l={fp.get('l')}")
    for key in ("size", "mtime", "parts"):
        if fp.get(key) is not None:
            bits.append(f"{key}={fp[key]}")
    for key in COMPARED[3:]:
        value = fp.get(key)
        if value is not None:
            bits.append(f"{key}={_short(value)}")
    return ", ".join(bits)


def _short(value: object) -> str:
    if isinstance(value, str):
        return value[:12]
    if isinstance(value, dict) and "digest" in value:
        return f"{value.get('count')} ids {value['digest'][:12]}"
    return f"{json.dumps(value)[:80]}"
