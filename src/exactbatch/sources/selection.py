"""A loader's column selection: ``DataLoader(..., features=[...], labels=[...])``.

Which of a source's columns a loader reads, and in which role, on every kind
of source. Each entry names a column (a ``str``, where the source has
column names: an ``.ndf`` file's names sidecar, a sharded dataset's
manifest, a DataFrame's columns, a Parquet, Arrow, polars, DuckDB or
Hugging Face source's columns) or gives its position (an ``int``) among the
source's columns counted features first, then labels (``x[:, j]`` for
``j < d``, else ``y[:, j - d]``; the columns the loader reads from it
unselected: a DataFrame's are all its columns, a pyarrow Table's its numeric
ones): the only way to pick a column of a source without names (an array,
a pair, a ``Dataset``, an ``.ndf`` file written without names, plain
chunks). ``features=None`` is the source's features
not chosen as labels; ``labels=None`` the source's labels (``()``: none).
So ``features=["age", "income"]`` leaves a ``customer_id`` feature out and
keeps the labels; ``labels=["y"]`` makes the feature ``y`` the label. A
column chosen twice, a name the source lacks, a name on a source without
names, or a position out of range is a ``ValueError`` (``TypeError`` for an
entry of another type) naming the argument.

How it reads:

* a pyarrow ``Table``, a polars ``LazyFrame``, a Hugging Face ``Dataset`` or
  a DuckDB relation handed to the loader as it is is opened with the
  selection (its source function's ``features=``/``labels=``): only the
  chosen columns are read;
* any other source is read whole and the chosen columns taken from each
  batch (random access: :class:`SelectedRows`) or chunk (streams:
  :class:`SelectedChunks` for a chunk-indexed source, whose chunks a shard
  still picks and shuffles; :class:`SelectedStream` for one read front to
  back). On an ``.ndf`` file a row's bytes lie together, so reading whole
  rows then selecting costs a copy of the batch, not more I/O (a page holds
  whole rows): see docs/usage/ndf-files.md for the figure.

Every law holds over the selection as over any source (the rows are the
source's, each once an epoch). The state's fingerprint records the chosen
columns (``selection``: their positions in the source, and their names), so
a state taken under another selection is refused on load.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from exactbatch.hints import ColumnSelection, Foreign, Source
from exactbatch.ndf import NdfDataset, NdfFile
from exactbatch.sources.arrow_table import arrow_source, is_arrow_table
from exactbatch.sources.chunks import Stream, Widths
from exactbatch.sources.columns import column_names, is_frame, source_categories
from exactbatch.sources.duckdb_relations import duckdb_source, is_duckdb_relation
from exactbatch.sources.hf_datasets import hf_source, is_hf_dataset
from exactbatch.sources.identity import ndf_identity, source_facts, stream_identity
from exactbatch.sources.kinds import open_source
from exactbatch.sources.polars_frames import is_lazy_frame, polars_source
from exactbatch.sources.protocols import RowReader, StreamHooks
from exactbatch.sources.random_access import WrappedReader

# a selection's entries (column names or positions), and a source's (features, labels)
Entries = tuple[str | int, ...]
Names = tuple[list[str], list[str]]
# take(x, y, out_x, out_y): the chosen columns of rows x, y into the outputs
Take = Callable[[Any, Any, np.ndarray, np.ndarray], None]

__all__ = ["SelectedChunks", "SelectedRows", "SelectedStream", "Selection", "select_columns"]

_MAKERS = (  # the kinds opened by their own source function, which selects as it reads
    (is_arrow_table, arrow_source),
    (is_lazy_frame, polars_source),
    (is_hf_dataset, hf_source),
    (is_duckdb_relation, duckdb_source),
)


def _entries(arg: str, value: object) -> Entries | None:
    """``value`` as a tuple of column entries (str or int), or None (not given)."""
    if value is None:
        return None
    if isinstance(value, (str, int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        value = [value]
    if not isinstance(value, Sequence) and not isinstance(value, np.ndarray):
        raise TypeError(
            f"{arg} must be a list of column names (str) or positions (int), or None; "
            f"got {type(value).__name__}"
        )
    out: list[str | int] = []
    for v in value:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (str, int, np.integer)):
            raise TypeError(
                f"{arg} entries must be column names (str) or positions (int); got {v!r:.60}"
            )
        out.append(v if isinstance(v, str) else int(v))
    return tuple(out)


class Selection:
    """The ``features``/``labels`` a loader was given (module docs), checked for type;
    :meth:`resolve` places them in a source's columns."""

    def __init__(self, features: ColumnSelection, labels: ColumnSelection) -> None:
        self.features, self.labels = _entries("features", features), _entries("labels", labels)

    def given(self) -> dict[str, Any]:
        """The arguments as plain data (recorded while the widths are unknown)."""
        return {"features": _plain(self.features), "labels": _plain(self.labels)}

    def resolve(
        self,
        d: int,
        l: int,  # noqa: E741
        names: tuple[Sequence[str], Sequence[str]] | None,
    ) -> tuple[list[int], list[int]]:
        """``(xcols, ycols)``: the chosen columns' positions among the source's ``d + l``
        (``names``: its ``(features, labels)``, or None)."""
        every = None if names is None else list(names[0]) + list(names[1])
        lab = (
            list(range(d, d + l))
            if self.labels is None
            else [_place("labels", e, d + l, every) for e in self.labels]
        )
        if self.features is None:
            feat = [j for j in range(d) if j not in set(lab)]
        else:
            feat = [_place("features", e, d + l, every) for e in self.features]
        for arg, cols in (("features", feat), ("labels", lab)):
            if len(set(cols)) != len(cols):
                raise ValueError(f"{arg} chooses a column more than once: {_shown(cols, every)}")
        both = sorted(set(feat) & set(lab))
        if both:
            raise ValueError(
                f"column(s) {_shown(both, every)} are chosen both as features and as labels "
                "(with labels=None the source's labels stay labels): a label among the "
                "features hands the model its answer; choose each in one only"
            )
        return feat, lab


def _plain(entries: Entries | None) -> list[str | int] | None:
    return None if entries is None else list(entries)


def _place(arg: str, entry: str | int, width: int, every: list[str] | None) -> int:
    if isinstance(entry, int):
        if not 0 <= entry < width:
            raise ValueError(
                f"{arg}: column position {entry} is out of range: the source has {width} "
                "columns (features then labels, from 0)"
            )
        return entry
    if every is None:
        raise ValueError(
            f"{arg}: {entry!r} names a column, but this source has no column names: "
            f"give positions (ints, 0..{width - 1}: features then labels)"
        )
    try:
        return every.index(entry)
    except ValueError:
        shown = every if len(every) <= 40 else [*every[:40], "..."]
        raise ValueError(f"{arg}: no column {entry!r}; the source has {shown}") from None


def _shown(cols: list[int], every: list[str] | None) -> list[str | int]:
    return [every[c] if every is not None else c for c in cols]


def _taker(xcols: list[int], ycols: list[int], d: int) -> Take:
    """``take(x, y, out_x, out_y)``: the chosen columns of the rows ``x``, ``y``."""
    cols = np.array(xcols + ycols, dtype=np.intp)
    nx = len(xcols)
    same = all(c < d for c in xcols) and all(c >= d for c in ycols)
    xs, ys = cols[:nx], cols[nx:] - d

    def take(x: Any, y: Any, out_x: np.ndarray, out_y: np.ndarray) -> None:
        if same:  # each side from its own side: no joined copy
            np.take(x, xs, axis=1, out=out_x)
            np.take(y, ys, axis=1, out=out_y)
        else:
            both = np.concatenate([x, y], axis=1)
            np.take(both, cols[:nx], axis=1, out=out_x)
            np.take(both, cols[nx:], axis=1, out=out_y)

    return take


def _chosen_names(
    names: tuple[Sequence[str], Sequence[str]] | None, xcols: list[int], ycols: list[int]
) -> tuple[list[str], list[str]] | tuple[None, None]:
    if names is None:
        return None, None
    every = list(names[0]) + list(names[1])
    return [every[c] for c in xcols], [every[c] for c in ycols]


class _Described:
    """What both selected kinds say of their columns: ``features``, ``labels`` (None
    without names), ``categories`` (the chosen coded columns') and ``selection``."""

    features: list[str] | None
    labels: list[str] | None
    categories: dict[str, list[Any]]
    selection: dict[str, Any]

    def _describe(self, source: Source, opened: object, xcols: list[int], ycols: list[int]) -> None:
        names = column_names(source, opened)
        self.features, self.labels = _chosen_names(names, xcols, ycols)
        chosen = set((self.features or []) + (self.labels or []))
        cats = source_categories(source, opened)
        self.categories = {c: v for c, v in cats.items() if c in chosen}
        self.selection = {"features": list(xcols), "labels": list(ycols)}
        if names is not None:
            self.selection["names"] = [self.features, self.labels]


class SelectedRows(_Described):
    """A random-access source's chosen columns: a
    :class:`~exactbatch.sources.protocols.RowSource` whose reader reads the source's
    rows whole and takes the chosen columns from them."""

    def __init__(self, source: Source, opened: RowReader, selection: Selection) -> None:
        self.source = source
        self._opened: RowReader | None = opened
        self.n, d, l = opened.n, opened.d, opened.l  # noqa: E741
        xcols, ycols = selection.resolve(d, l, column_names(source, opened))
        self._describe(source, opened, xcols, ycols)
        self.d, self.l = len(xcols), len(ycols)
        self._take = _taker(xcols, ycols, d)
        self._about = _inner_identity(source, opened)

    def open_reader(self) -> _SelectedReader:
        opened, self._opened = self._opened, None  # the first reader is the one opened
        reader = opened or open_source(self.source)
        if isinstance(reader, Stream):  # (opened as a reader before: the same kind again)
            raise TypeError(f"{type(self.source).__name__} opened as a stream, not a reader")
        return _SelectedReader(reader, self)

    def identity(self) -> dict[str, Any]:
        return {**self._about, "names": _names_of(self), "selection": self.selection}


def _names_of(obj: _Described) -> dict[str, list[str]] | None:
    if obj.features is None:
        return None
    return {"features": list(obj.features), "labels": list(obj.labels or ())}


def _inner_identity(source: Source, opened: object) -> dict[str, Any]:
    """What names the source under the selection (its file's, manifest's or own
    identity; its rows' sample is the selected reader's, taken by the loader)."""
    f = getattr(opened, "file", None)
    if isinstance(f, NdfDataset):
        return ndf_identity(f)
    if isinstance(f, NdfFile):
        out = ndf_identity(f)
        out.pop("sample", None)
        return out
    return source_facts(source) or {"kind": "memory"}


class _SelectedReader(WrappedReader):
    """The reader of :class:`SelectedRows`: the source's rows read whole (in the batch's
    dtype), the chosen columns taken from them."""

    fuses = False  # a transform is applied after the take

    def __init__(self, inner: RowReader, owner: SelectedRows) -> None:
        self.inner, self._take = inner, owner._take
        self.n, self.d, self.l = inner.n, owner.d, owner.l

    def read(self, rows: slice | np.ndarray, out_x: np.ndarray, out_y: np.ndarray) -> None:
        k = len(range(*rows.indices(self.n))) if isinstance(rows, slice) else len(rows)
        inner = self.inner
        x = np.empty((k, inner.d), dtype=out_x.dtype)
        y = np.empty((k, inner.l), dtype=out_y.dtype)
        inner.read(rows, x, y)
        self._take(x, y, out_x, out_y)


class _StreamSelected(_Described):
    """What both selected streams share: the chosen columns of each chunk, resolved when
    the widths are known (from the source's hooks or names, else its first chunk)."""

    def _setup(self, stream: Stream, selection: Selection) -> None:
        self._stream, self._selection = stream, selection
        hooks: StreamHooks = stream.hooks
        self.n_rows, self.block_rows = hooks.n_rows, hooks.block_rows
        self._names = column_names(stream.source, stream)
        d, l = hooks.d, hooks.l  # noqa: E741
        if d is None and self._names is not None:
            d, l = len(self._names[0]), len(self._names[1])  # noqa: E741
        self._take: Take | None = None
        self.features = self.labels = None
        self.categories, self.selection = {}, selection.given()
        if d is not None and l is not None:
            self._resolve(d, l)

    def _resolve(self, d: int, l: int) -> None:  # noqa: E741
        xcols, ycols = self._selection.resolve(d, l, self._names)
        self._describe(self._stream.source, self._stream, xcols, ycols)
        self._take = _taker(xcols, ycols, d)
        self.d, self.l = len(xcols), len(ycols)

    def _select(self, chunk: object, widths: Widths, index: int) -> tuple[np.ndarray, np.ndarray]:
        x, y = widths.normalize(chunk, index)
        if self._take is None:
            self._resolve(x.shape[1], y.shape[1])
        assert self._take is not None
        ox, oy = np.empty((len(x), self.d)), np.empty((len(x), self.l))
        self._take(x, y, ox, oy)
        return ox, oy

    def identity(self) -> dict[str, Any]:
        hooks = self._stream.hooks
        inner = stream_identity(self._stream.source, hooks.identity)
        return {**inner, "names": _names_of(self), "selection": self.selection}


class SelectedChunks(_StreamSelected):
    """A chunk-indexed stream's chosen columns: a
    :class:`~exactbatch.sources.protocols.ChunkSource` (a shard still reads only its
    chunks, in a shuffled order); each chunk is read whole, then selected."""

    def __init__(self, stream: Stream, selection: Selection):
        self._setup(stream, selection)
        self.chunk_rows = stream.hooks.chunk_rows
        self._widths = Widths(stream.hooks.d, stream.hooks.l)
        self.will_need = stream.hooks.will_need
        read = stream.hooks.read_chunk
        assert read is not None  # (a chunk-indexed stream's)
        self._read = read
        self.fresh_chunks = stream.hooks.fresh_chunks  # (all columns chosen: its arrays)

    def read_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self._select(self._read(i), self._widths, i)


class SelectedStream(_StreamSelected):
    """A stream read front to back, its chunks' chosen columns: a zero-argument callable
    returning a fresh iterator a pass."""

    def __init__(self, stream: Stream, selection: Selection):
        self._setup(stream, selection)

    def __call__(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        widths = Widths()
        for i, chunk in enumerate(self._stream.open()):
            yield self._select(chunk, widths, i)


def select_columns(
    source: Source, features: ColumnSelection = None, labels: ColumnSelection = None
) -> Source:
    """``source`` as a loader with ``features``/``labels`` reads it (module docs): the
    source itself when both are None."""
    selection = Selection(features, labels)
    if selection.features is None and selection.labels is None:
        return source
    for accepts, make in _MAKERS:
        if accepts(source):
            return _made(source, make, selection)
    if is_frame(source):
        return _frame_columns(source, selection)
    opened = open_source(source)
    if isinstance(opened, Stream):
        kind = SelectedChunks if opened.chunk_indexed else SelectedStream
        return kind(opened, selection)
    try:
        return SelectedRows(source, opened, selection)
    except BaseException:
        opened.close()
        raise


def _made(source: Source, make: Callable[..., Any], selection: Selection) -> Any:
    """A kind opened by its own source function ``make``, given the chosen names."""
    entries = (selection.features or ()) + (selection.labels or ())
    if all(isinstance(e, str) for e in entries):
        labels = () if selection.labels is None else list(selection.labels)
        return make(source, features=_plain(selection.features), labels=labels)
    whole = make(source)  # positions: placed among the columns it reads by default
    names = (list(whole.features), list(whole.labels))
    xcols, ycols = selection.resolve(len(names[0]), len(names[1]), names)
    chosen = _chosen_names(names, xcols, ycols)
    return make(source, features=chosen[0], labels=chosen[1])


def _frame_columns(frame: Foreign, selection: Selection) -> Foreign:
    """The frame's chosen columns: a frame of features, or a pair (features, labels), which
    the loader reads as any frame (their names are the columns' names)."""
    names = [str(c) for c in frame.columns]
    xcols, ycols = selection.resolve(len(names), 0, (names, []))

    def part(cols: list[int]) -> Foreign:
        if hasattr(frame, "iloc"):  # pandas: by position (names may repeat, or be ints)
            return frame.iloc[:, cols]
        return frame.select([frame.columns[c] for c in cols])

    return (part(xcols), part(ycols)) if ycols else part(xcols)
