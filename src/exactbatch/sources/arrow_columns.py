"""What every Arrow-native source shares: choosing columns, reading rows of columns.

The Arrow-native kinds (:mod:`~exactbatch.sources.arrow_ipc`,
:mod:`~exactbatch.sources.arrow_table`, :mod:`~exactbatch.sources.polars_frames`,
:mod:`~exactbatch.sources.hf_datasets`, :mod:`~exactbatch.sources.duckdb_relations`)
are each one module that turns its library's object into Arrow columns, and
then one of the two classes here:

* :class:`ArrowColumnsReader`, a :class:`~exactbatch.sources.protocols.RowReader`
  over Arrow columns in memory (or memory-mapped): each batch is gathered
  from NumPy views of the columns' own buffers, so nothing is converted or
  copied whole, before or during training. Multi-chunk columns (several
  record batches) are read chunk by chunk.
* :class:`ArrowStream`, a re-iterable stream of ``(x, y)`` chunks, one per
  record batch of a fresh pass (a query run again, a reader made again).

Columns (:func:`pick_columns`): integer, floating and boolean columns are
read as float64 (then as the loader's dtype); a null is NaN. With
``features=None``, the features are every numeric column not among the
labels, and any other column is left out with a warning naming it. A column
named as a feature or label that is missing or not numeric is a
``ValueError`` naming it.
"""

from __future__ import annotations

import warnings
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from exactbatch.hints import Foreign
from exactbatch.kernels import columns_into
from exactbatch.sources.arrow import column_chunk
from exactbatch.sources.categorical import code, is_categorical_type, vocabularies
from exactbatch.sources.column_chunk import Columns
from exactbatch.sources.identity import column_names
from exactbatch.sources.parquet_columns import check_names, find_columns, is_numeric_type

__all__ = ["ArrowColumnsReader", "ArrowStream", "made_by", "pick_columns"]

# A memory-mapped file: batches of at least this many bytes are read ahead by default
# (page faults overlap the consumer's work), as for an .ndf file.
PREFETCH_MIN_BYTES = 256 << 10


def made_by(obj: object, library: str, *names: str) -> bool:
    """Is ``obj`` an instance of a class called one of ``names`` from the package
    ``library``? Found from its classes' modules, so nothing is imported to ask."""
    return any(
        cls.__name__ in names and cls.__module__.partition(".")[0] == library
        for cls in type(obj).__mro__
    )


def _names(columns: object, what: str) -> tuple[str, ...] | None:
    if columns is None:
        return None
    if isinstance(columns, str):
        return (columns,)
    if not isinstance(columns, Iterable):
        raise TypeError(f"{what} must be a column name or a list of names; got {columns!r}")
    out = tuple(columns)
    bad = [c for c in out if not isinstance(c, str)]
    if bad:
        raise TypeError(f"{what} must be column names (str); got {bad}")
    return out


def pick_columns(
    schema: Foreign,
    features: object,
    labels: object,
    owner: str,
    categorical: dict[str, list[Any] | None] | None = None,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """``(features, labels)``: the column names to read from ``schema`` (a
    ``pyarrow.Schema``), checked as the module docs say; ``owner`` names the
    source in errors. ``categorical`` (:func:`~exactbatch.sources.categorical.
    check_categorical`'s dict): columns read as codes, which may be strings (and are
    features, with ``features=None``, where they are not labels)."""
    cats = categorical or {}
    feats, labs = _names(features, "features"), _names(labels, "labels") or ()
    check_names(feats, labs)
    names = list(schema.names)
    named = list(feats or ()) + list(labs)
    missing, twice = find_columns(names, named)
    if missing:
        raise ValueError(f"{owner}: missing column(s) {missing}; its columns are {names}")
    if twice:
        raise ValueError(f"{owner}: column name(s) {twice} appear more than once")
    types = {c: t for c, t in zip(names, schema.types, strict=True)}  # (by name: linear)

    numeric = {t: is_numeric_type(t) for t in set(types.values())}  # (few distinct types)

    def readable(c: str) -> bool:
        return is_categorical_type(types[c]) if c in cats else numeric[types[c]]

    outside = [c for c in cats if c not in types]
    if outside:
        raise ValueError(f"{owner}: categorical names missing column(s) {outside}")
    bad = [f"{c} ({types[c]})" for c in named if not readable(c)]
    if bad:
        raise ValueError(
            f"{owner}: non-numeric column(s) {bad}; features and labels must be integer, "
            "floating or boolean columns: leave them out, or encode them as numbers first"
        )
    if feats is None:
        labelled = set(labs)
        rest = [c for c in names if c not in labelled]
        ok = [readable(c) for c in rest]
        feats = tuple(c for c, r in zip(rest, ok, strict=True) if r)
        twice = find_columns(names, feats)[1]
        if twice:
            raise ValueError(f"{owner}: column name(s) {twice} appear more than once")
        left = [f"{c} ({types[c]})" for c, r in zip(rest, ok, strict=True) if not r]
        if left:
            warnings.warn(
                f"{owner}: non-numeric column(s) {left} left out of the features; "
                "name the features (features=[...]) to choose them yourself",
                stacklevel=4,
            )
    if not feats and not labs:
        raise ValueError(f"{owner}: no numeric column to read (its columns are {names})")
    chosen = {*feats, *labs}
    unread = [c for c in cats if c not in chosen]
    if unread:
        raise ValueError(
            f"{owner}: categorical names column(s) {unread} that are neither features nor "
            "labels; name them in features= or labels= too"
        )
    return feats, labs


# -- random access ---------------------------------------------------------------------


# Arrow's names of its floating types, as NumPy's (the integer types' names are NumPy's).
_FLOATS = {"halffloat": "float16", "float": "float32", "double": "float64"}


def _bits_at(bits: np.ndarray, first: int, src: slice | np.ndarray) -> np.ndarray:
    i = (np.arange(src.start, src.stop) if isinstance(src, slice) else src) + first
    out: np.ndarray = ((bits[i >> 3] >> (i & 7).astype(np.uint8)) & 1).astype(bool)
    return out


class _Part:
    """One chunk of one column, as views of its Arrow buffers (no copy): ``take(src)``
    reads its rows ``src`` (a slice or an int64 array of rows in the chunk)."""

    __slots__ = ("bits", "first", "valid", "values")

    def __init__(self, arr: Foreign) -> None:
        import pyarrow as pa

        n, self.first = len(arr), arr.offset
        self.valid: np.ndarray | None = None
        self.values: np.ndarray | None = None
        self.bits: np.ndarray | None = None
        if arr.null_count == n:  # all null (or empty): a null-type array may have no buffers
            return
        validity, data = arr.buffers()[:2]
        if arr.null_count:
            self.valid = np.frombuffer(validity, dtype=np.uint8)
        if pa.types.is_boolean(arr.type):
            self.bits = np.frombuffer(data, dtype=np.uint8)
        else:
            dtype = np.dtype(_FLOATS.get(str(arr.type), str(arr.type)))  # int8 .. uint64
            self.values = np.frombuffer(
                data, dtype=dtype, count=n, offset=dtype.itemsize * arr.offset
            )

    def take(self, src: slice | np.ndarray) -> np.ndarray | float:
        if self.bits is not None:
            v: np.ndarray = _bits_at(self.bits, self.first, src)
        elif self.values is not None:
            v = self.values[src]
        else:
            return np.nan
        if self.valid is not None:
            v = v.astype(np.float64)
            v[~_bits_at(self.valid, self.first, src)] = np.nan
        return v


# The value types columns_into copies (and casts) straight from a column's buffer.
_PLAIN = frozenset(np.dtype(t) for t in ("f8", "f4", "i1", "u1", "i2", "u2", "i4", "u4"))


# a layout's runs (see _runs): which chunks are plain, then x's first output column and
# its columns, y's first and its columns
Runs = tuple[list[bool], int, list[int], int, list[int]]


def _plain(part: _Part) -> bool:
    """Are ``part``'s values plain: a type in ``_PLAIN``, no nulls?"""
    return part.values is not None and part.valid is None and part.values.dtype in _PLAIN


def _runs(js: list[int], d: int, parts: list[list[_Part]]) -> Runs | None:
    """For a layout of columns ``js``: ``(plain, x_lo, x_js, y_lo, y_js)``, ``plain[c]``
    whether chunk ``c`` of every one of them is plain values (a type in ``_PLAIN``, no
    nulls: read in order with one :func:`~exactbatch.kernels.columns_into` a side),
    ``x_js`` its feature columns (from output column ``x_lo``, one after another) and
    ``y_js`` its labels (from ``y_lo``); None where they are not consecutive."""
    xs, ys = [j for j in js if j < d], [j - d for j in js if j >= d]
    if any(v != list(range(v[0], v[0] + len(v))) for v in (xs, ys) if v):
        return None
    chunks = len(parts[js[0]]) if js else 0
    plain = [all(_plain(parts[j][c]) for j in js) for c in range(chunks)]
    return plain, xs[0] if xs else 0, xs, ys[0] if ys else 0, [j + d for j in ys]


def _in_order(bounds: list[int], rows: slice) -> list[tuple[int, slice, slice]]:
    """:func:`_plan` of a slice of rows (``out[dst] = chunk[src]``, both slices),
    ``bounds`` its ``starts`` as a list: the chunks it crosses found by bisection, not by
    a loop over every chunk."""
    a, b = rows.start, rows.stop
    out: list[tuple[int, slice, slice]] = []
    c = max(0, bisect_right(bounds, a) - 1)
    while c < len(bounds) - 1 and bounds[c] < b:
        lo, hi = max(a, bounds[c]), min(b, bounds[c + 1])
        if lo < hi:
            out.append((c, slice(lo - a, hi - a), slice(lo - bounds[c], hi - bounds[c])))
        c += 1
    return out


def _plan(starts: np.ndarray, rows: np.ndarray) -> list[tuple[int, Any, Any]]:
    """``[(chunk, dst, src)]``: where the rows ``rows`` (an int64 array; a slice of rows:
    :func:`_in_order`) lie among chunks beginning at ``starts`` (then the end):
    ``out[dst] = chunk[src]``."""
    k = len(starts) - 1
    out: list[tuple[int, Any, Any]] = []
    # Rows in ascending order: each column is then read front to back (its pages and
    # cache lines in the order the hardware prefetches), each chunk's rows one run.
    order = np.argsort(rows, kind="stable")
    ascending = rows[order]
    cuts = np.searchsorted(ascending, starts)
    for part in range(k):
        a, z = int(cuts[part]), int(cuts[part + 1])
        if a < z:
            out.append((part, order[a:z], ascending[a:z] - starts[part]))
    return out


class ArrowColumnsReader:
    """A :class:`~exactbatch.sources.protocols.RowReader` over Arrow columns:
    ``columns`` (arrays or chunked arrays of ``n`` values each: ``d`` features then
    labels), optionally seen through ``row_map`` (row ``i`` is the columns' row
    ``row_map[i]``). ``mapped``: the columns lie in a memory-mapped file (reads then
    default to prefetch, as an ``.ndf`` file's). ``check``: called after each batch is
    gathered, to raise if the files the columns lie in changed (a
    :class:`~exactbatch.sources.file_watch.FileWatch`'s), or None."""

    def __init__(
        self,
        columns: Sequence[Foreign],
        d: int,
        row_map: np.ndarray | None = None,
        mapped: bool = False,
        check: Callable[[], None] | None = None,
    ) -> None:
        import pyarrow as pa

        chunked = [c if isinstance(c, pa.ChunkedArray) else pa.chunked_array([c]) for c in columns]
        total = len(chunked[0]) if chunked else 0
        self.n = total if row_map is None else len(row_map)
        self.d, self.l = d, len(chunked) - d
        self.mapped = mapped
        self._check = check
        self._map = row_map
        layouts: dict[tuple[int, ...], list[int]] = {}
        self._parts: list[list[_Part]] = []
        for j, col in enumerate(chunked):
            sizes = [len(a) for a in col.chunks] or [0]
            layouts.setdefault(tuple(sizes), []).append(j)
            self._parts.append([_Part(a) for a in col.chunks] or [_Part(pa.nulls(0))])
        # Columns of one layout (record batches: all of them) share each batch's plan.
        self._layouts: list[tuple[np.ndarray, list[int]]] | None = [
            (np.concatenate([[0], np.cumsum(s)]).astype(np.int64), js) for s, js in layouts.items()
        ]
        self._runs = [_runs(js, d, self._parts) for _, js in self._layouts]
        self._bounds = [starts.tolist() for starts, _ in self._layouts]

    def read(self, rows: slice | np.ndarray, out_x: np.ndarray, out_y: np.ndarray) -> None:
        # A close() during the read lets it end: the parts taken first (close lets go of
        # the layouts first, so layouts found mean these parts are whole).
        parts = self._parts
        layouts = self._layouts
        if layouts is None:
            raise ValueError("read from a closed DataLoader")
        if self._map is not None:
            rows = self._map[rows].astype(np.int64)
        elif not isinstance(rows, slice):
            rows = rows.astype(np.int64, copy=False)
        d = self.d
        # in order, into float rows (columns_into's outputs): plain chunks copied whole
        fused = isinstance(rows, slice) and out_x.dtype.char in "fd" and out_y.dtype.char in "fd"
        for (starts, columns), runs, bounds in zip(layouts, self._runs, self._bounds, strict=False):
            plan = _in_order(bounds, rows) if isinstance(rows, slice) else _plan(starts, rows)
            for c, dst, src in plan:
                if fused and runs is not None and runs[0][c]:
                    # rows in order, every column plain: one copy a side, cast as copied
                    for out, lo, js in ((out_x, runs[1], runs[2]), (out_y, runs[3], runs[4])):
                        if js:
                            view = out[dst, lo : lo + len(js)]
                            # (plain: every one's values there, _runs found)
                            values = cast("list[np.ndarray]", [parts[j][c].values for j in js])
                            columns_into(values, src.start, view)
                    continue
                for j in columns:
                    out, k = (out_x, j) if j < d else (out_y, j - d)
                    out[dst, k] = parts[j][c].take(src)
        if self._check is not None:  # after the copy: a change during it is seen too
            self._check()

    def prefetch_default(self, batch_bytes: int) -> int:
        return 2 if self.mapped and batch_bytes >= PREFETCH_MIN_BYTES else 0

    def close(self) -> None:
        self._layouts = None  # lets go of the columns (and a file's mapping) with the parts
        self._parts = []


# -- streams ---------------------------------------------------------------------------


class ArrowStream:
    """A stream of Arrow batches, read again on every pass: ``batches()`` returns a fresh
    iterable of record batches or tables, each with the columns ``features`` and
    ``labels``; iterating yields one float64 ``(x, y)`` chunk per batch (nulls as NaN).
    ``n_rows``: the rows of a pass where known without reading it, else None (the
    loader then counts them, or takes ``total_size``)."""

    def __init__(
        self,
        batches: Callable[[], Iterable[Foreign]],
        features: Sequence[str],
        labels: Sequence[str],
        owner: str,
        n_rows: int | None = None,
        categorical: dict[str, list[Any] | None] | None = None,
    ) -> None:
        self._batches = batches
        self.features, self.labels = tuple(features), tuple(labels)
        self.owner = owner
        self.n_rows = n_rows
        # the vocabularies (given, or learned in a first pass now), each built once
        self._vocab = vocabularies(categorical or {}, batches)
        self.categories = {c: list(v.values) for c, v in self._vocab.items()}

    def identity(self) -> dict[str, Any]:
        """Its kind and columns (:mod:`exactbatch.sources.identity`): a query's rows
        cannot be sampled without running it."""
        names = column_names(self.features, self.labels)
        return {"kind": f"arrow stream ({self.owner})", "names": names}

    def __repr__(self) -> str:
        return (
            f"ArrowStream({self.owner}, features={list(self.features)}, "
            f"labels={list(self.labels)}, n_rows={self.n_rows})"
        )

    def __iter__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        for x, y in self.column_chunks():
            yield np.asarray(x), np.asarray(y)

    def column_chunks(self) -> Iterator[tuple[Columns, Columns]]:
        """A fresh pass, each batch's ``(x, y)`` held column by column (the
        :class:`~exactbatch.sources.protocols.StreamHooks` hook): a loader copies
        their rows straight into its batches, with no row-major copy first."""
        names, d = self.features + self.labels, len(self.features)
        it, first = iter(self._batches()), 0
        try:
            for batch in it:
                present = set(batch.schema.names)
                missing = [c for c in names if c not in present]
                if missing:
                    raise ValueError(f"{self.owner}: a batch lacks column(s) {missing}")
                cols = [batch.column(c) for c in names]
                if self._vocab:
                    v, at = self._vocab, f"{self.owner}: a batch"
                    cols = [code(c, a, v, at, first) for c, a in zip(names, cols, strict=True)]
                first += batch.num_rows
                yield column_chunk(cols[:d], batch.num_rows), column_chunk(cols[d:], batch.num_rows)
        finally:
            close = getattr(it, "close", None)
            if close is not None:
                close()
