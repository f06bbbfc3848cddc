"""The inputs of ``exactbatch convert``: Parquet, ``.npy`` and ``.ndf`` (or a sharded
dataset), each read front to back in slabs of float64 rows, with the columns chosen and
named (see :mod:`exactbatch.tools.convert`); CSV is
:mod:`exactbatch.tools.convert_csv`'s, with the helpers here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from types import ModuleType
from typing import Protocol

import numpy as np

from exactbatch.extras import need
from exactbatch.hints import Foreign, PathLike
from exactbatch.ndf.names import default_names
from exactbatch.ndf.regular import regular_file
from exactbatch.sources.arrow import fill_columns as _fill_columns
from exactbatch.sources.parquet import recorded_labels
from exactbatch.sources.parquet_columns import hive_partitions
from exactbatch.tools.column_args import resolve_columns, shown_names, split_columns
from exactbatch.tools.common import (
    CliError,
    parquet_files,
)
from exactbatch.tools.ndf_stream import SLAB_BYTES, ndf_regions, read_blocks, region_blocks
from exactbatch.urls import for_arrow

__all__ = [
    "Blocks",
    "ConvertInput",
    "NdfInput",
    "NpyInput",
    "ParquetInput",
    "arrow",
    "categorical_columns",
    "read_errors",
    "refuse_non_numeric",
]


def arrow() -> ModuleType:
    """pyarrow, or a CliError saying how to install it."""
    return need("pyarrow", by="reading Parquet and CSV", package="pyarrow", error=CliError)


def read_errors() -> tuple[type[Exception], ...]:
    """The errors that reading a Parquet or CSV input may raise on bad data."""
    pa = arrow()
    return (pa.ArrowException, OSError, ValueError)


class ConvertInput(Protocol):
    """What ``convert`` reads of an input (:class:`ParquetInput`, :class:`NpyInput`,
    :class:`NdfInput`, :class:`~exactbatch.tools.convert_csv.CsvInput`): its widths,
    rows (None: known at the end), column names (``names``: True when they are the
    data's own), the progress bar's ``total`` and ``unit``, and its ``blocks()``:
    float64 (rows, d + l) slabs, each with how far the bar advances."""

    @property
    def d(self) -> int: ...
    @property
    def l(self) -> int: ...  # noqa: E743
    @property
    def n(self) -> int | None: ...
    @property
    def columns(self) -> list[str]: ...
    @property
    def names(self) -> bool | None: ...
    @property
    def total(self) -> int | None: ...
    @property
    def unit(self) -> str: ...

    def blocks(self) -> Iterator[tuple[np.ndarray, int]]: ...


class Blocks:
    """Lists of Arrow columns to float64 (rows, columns) blocks in one reused buffer.

    Reusing it keeps the allocator from piling up freed slabs; each block is
    valid until the next one is made (the writer consumes it at once).
    """

    def __init__(self, width: int) -> None:
        self.buf = np.empty((0, width), dtype=np.float64)

    def __call__(self, columns: Sequence[Foreign]) -> np.ndarray:
        r = len(columns[0]) if columns else 0
        if r > len(self.buf):
            size = max(r, 2 * len(self.buf))
            width = self.buf.shape[1]
            self.buf = np.empty((0, width), dtype=np.float64)  # let the old one go first
            self.buf = np.empty((size, width), dtype=np.float64)
        block = self.buf[:r]
        _fill_columns(columns, block)
        return block


def _is_number_type(t: Foreign) -> bool:
    import pyarrow.types as pat

    return bool(pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t) or pat.is_null(t))


def categorical_columns(spec: object, chosen: list[str], path: object) -> list[str]:
    """``--categorical``'s names, each a chosen column (a CliError otherwise)."""
    cats = [c.strip() for c in str(spec or "").split(",") if c.strip()]
    outside = [c for c in cats if c not in chosen]
    if outside:
        raise CliError(
            f"{path}: --categorical names column(s) {outside} that are not converted "
            f"(columns converted: {shown_names(chosen)}); name existing columns, "
            "not --exclude'd ones"
        )
    return list(dict.fromkeys(cats))


def refuse_non_numeric(path: object, types: dict[str, Foreign], cats: list[str]) -> None:
    """A CliError naming the chosen columns that are neither numeric nor categorical, with
    the options that deal with them: nothing is ever coerced silently."""
    bad = [c for c, t in types.items() if c not in cats and not _is_number_type(t)]
    if bad:
        shown = [f"{c} ({types[c]})" for c in bad]
        listed = ",".join(bad)
        raise CliError(
            f"{path}: non-numeric column(s) {shown}; code them as integers with --categorical "
            f"{listed}, leave them out with --exclude {listed}, or choose columns with "
            "--features/--labels"
        )


class ParquetInput:
    """A Parquet file or folder (Hive partition keys as columns), read through
    parquet_source, which checks every file's schema and codes the categorical columns."""

    def __init__(
        self,
        path: str,
        features: object,
        labels: object,
        exclude: object = None,
        categorical: object = None,
    ) -> None:
        import pyarrow.parquet as pq

        from exactbatch.sources.parquet import parquet_source

        arrow()
        self.path = path
        files = parquet_files(path)
        try:
            schema = pq.ParquetFile(for_arrow(files[0])).schema_arrow
        except (OSError, ValueError) as e:
            raise CliError(f"{files[0]}: not a readable Parquet file ({e})") from e
        parts = None
        if os.path.isdir(path):
            try:
                parts = hive_partitions(for_arrow(path), files)
            except ValueError as e:
                raise CliError(str(e)) from e
        keys = parts.names if parts is not None else ()
        ptypes = parts.types if parts is not None else {}
        names = [*schema.names, *keys]
        if labels is None:  # as parquet_source: the recorded labels, less chosen features
            taken = set(resolve_columns(features, names, path, "--features") or ())
            recorded = [
                c
                for c in recorded_labels(schema) or ()
                if c not in names or names.index(c) not in taken
            ]
            labels = ",".join(recorded) or None
        feat, lab = split_columns(features, labels, names, path, exclude)
        chosen = [names[j] for j in feat + lab]
        cats = categorical_columns(categorical, chosen, path)
        types = {c: ptypes[c] if c in keys else schema.field(c).type for c in chosen}
        refuse_non_numeric(path, types, cats)
        try:  # checks that every file has these columns, numeric or categorical
            src = parquet_source(
                path,
                features=chosen[: len(feat)],
                labels=chosen[len(feat) :],
                categorical=cats or None,
            )
        except (ValueError, TypeError) as e:
            raise CliError(f"{e} (choose columns with --features/--labels/--exclude)") from e
        self.src, self.n = src, src.n_rows
        self.columns = [*src.features, *src.labels]
        self.categories = src.categories
        self.d, self.l = src.d, src.l
        self.total, self.unit = self.n, "rows"
        self.names = True

    def blocks(self) -> Iterator[tuple[np.ndarray, int]]:
        rows = max(1, SLAB_BYTES // (8 * max(1, len(self.columns))))
        to_block = Blocks(len(self.columns))
        for columns in self.src.iter_batches(rows):
            block = to_block(columns)
            yield block, block.shape[0]


class NpyInput:
    """A 2-D (or 1-D: one column) numeric .npy, read in slabs of rows.

    A C-ordered array is read with plain reads into one reused buffer, so no
    mapped pages pile up in the process's resident memory; a Fortran-ordered
    one is sliced from a read-only memory map (np.load(mmap_mode="r")).
    """

    def __init__(
        self, path: PathLike, features: object, labels: object, exclude: object = None
    ) -> None:
        self.path = os.fspath(path)
        try:
            with regular_file(self.path, "a .npy file") as f:
                version = np.lib.format.read_magic(f)
                if version == (1, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
                elif version == (2, 0):
                    shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
                else:
                    raise ValueError(f"unsupported .npy format version {version}")
                self.offset = f.tell()
        except ValueError as e:
            raise CliError(f"{path}: cannot read as .npy ({e})") from e
        if len(shape) == 1:
            shape = (shape[0], 1)
        if len(shape) != 2 or dtype.kind not in "biuf":
            raise CliError(
                f"{path}: expected a 2-D array of numbers (rows, columns); found shape "
                f"{shape}, dtype {dtype}"
            )
        self.shape, self.fortran, self.dtype = shape, fortran, dtype
        positions = [str(j) for j in range(shape[1])]
        feat, lab = split_columns(features, labels, positions, path, exclude)
        self.cols = feat + lab
        self.columns = [str(j) for j in self.cols]
        self.d, self.l, self.n = len(feat), len(lab), shape[0]
        self.total, self.unit = self.n, "rows"
        self.names = None  # positions, not names

    def blocks(self) -> Iterator[tuple[np.ndarray, int]]:
        n, k = self.shape
        whole = self.cols == list(range(k))
        step = max(1, SLAB_BYTES // (max(8, self.dtype.itemsize) * max(1, k)))
        if self.fortran and k > 1:
            arr = np.load(self.path, mmap_mode="r", allow_pickle=False).reshape(n, k, order="A")
            for a in range(0, n, step):
                yield np.array(arr[a : a + step, self.cols], dtype=np.float64), min(step, n - a)
            return
        if n == 0 or k == 0:
            return
        for rows in read_blocks(self.path, self.offset, n, k * self.dtype.itemsize, step):
            slab = rows.view(self.dtype).reshape(len(rows), k)  # (rows, columns)
            yield np.array(slab if whole else slab[:, self.cols], dtype=np.float64), len(rows)


class NdfInput:
    """An .ndf file or a sharded dataset (every part checked first), read front to back
    in slabs; a dataset's column names come from its manifest."""

    def __init__(self, path: PathLike) -> None:
        inp = self.inp = ndf_regions(path)
        self.d, self.l, self.n = inp.d, inp.l, inp.n
        if self.n == 0:  # before a name a column: no rows may come with 2**31 - 1 columns
            raise CliError(f"{path}: no rows of data to convert")
        self.names = None if inp.features is None and inp.labels is None else True
        fx, fy = default_names(inp.d, inp.l)
        self.columns = [*(inp.features or fx), *(inp.labels or fy)]
        self.total, self.unit = self.n, "rows"

    def blocks(self, rows: int | None = None) -> Iterator[tuple[np.ndarray, int]]:
        width = self.d + self.l
        rows = rows or max(1, SLAB_BYTES // max(8, 8 * width))
        for raw in region_blocks(self.inp.regions, 8 * width, rows):
            yield raw.view("<f8").reshape(len(raw), width), len(raw)
