"""The inputs of ``exactbatch convert``: Parquet, CSV, ``.npy`` and ``.ndf`` (or a
sharded dataset), each read front to back in slabs of float64 rows, with the
columns chosen and named (see :mod:`exactbatch.tools.convert`).
"""

from __future__ import annotations

import os

import numpy as np

from exactbatch.extras import need
from exactbatch.ndf.names import default_names
from exactbatch.ndf.regular import check_regular, regular_file
from exactbatch.sources.arrow import fill_columns as _fill_columns
from exactbatch.sources.parquet import recorded_labels
from exactbatch.tools.common import (
    CliError,
    csv_delimiter,
    parquet_files,
    resolve_columns,
    split_columns,
)
from exactbatch.tools.ndf_stream import SLAB_BYTES, ndf_regions, read_blocks, region_blocks
from exactbatch.urls import for_arrow

__all__ = ["CsvInput", "NdfInput", "NpyInput", "ParquetInput", "arrow", "csv_schema", "read_errors"]

_CSV_BLOCK_BYTES = 1 << 20


def arrow():
    """pyarrow, or a CliError saying how to install it."""
    return need("pyarrow", by="reading Parquet and CSV", package="pyarrow", error=CliError)


def read_errors():
    """The errors that reading a Parquet or CSV input may raise on bad data."""
    pa = arrow()
    return (pa.ArrowException, OSError, ValueError)


class _Blocks:
    """Record batches to float64 (rows, columns) blocks in one reused buffer.

    Reusing it keeps the allocator from piling up freed slabs; each block is
    valid until the next one is made (the writer consumes it at once).
    """

    def __init__(self, columns):
        self.columns = columns
        self.buf = np.empty((0, len(columns)), dtype=np.float64)

    def __call__(self, batch) -> np.ndarray:
        r = batch.num_rows
        if r > len(self.buf):
            size = max(r, 2 * len(self.buf))
            self.buf = None  # let the old one go first
            self.buf = np.empty((size, len(self.columns)), dtype=np.float64)
        block = self.buf[:r]
        _fill_columns([batch.column(name) for name in self.columns], block)
        return block


def _is_number_type(t) -> bool:
    import pyarrow.types as pat

    return pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t) or pat.is_null(t)


class ParquetInput:
    """A Parquet file or folder; every file's schema checked by parquet_source."""

    def __init__(self, path, features, labels):
        import pyarrow.parquet as pq

        from exactbatch.sources.parquet import parquet_source

        arrow()
        self.path = path
        files = parquet_files(path)
        try:
            schema = pq.ParquetFile(for_arrow(files[0])).schema_arrow
        except (OSError, ValueError) as e:
            raise CliError(f"{files[0]}: not a readable Parquet file ({e})") from e
        names = schema.names
        if labels is None:  # as parquet_source: the recorded labels, less chosen features
            taken = set(resolve_columns(features, names, path, "--features") or ())
            recorded = [
                c
                for c in recorded_labels(schema) or ()
                if c not in names or names.index(c) not in taken
            ]
            labels = ",".join(recorded) or None
        feat, lab = split_columns(features, labels, names, path)
        try:  # checks that every file has these columns, numeric
            src = parquet_source(
                files, features=[names[j] for j in feat], labels=[names[j] for j in lab]
            )
        except ValueError as e:
            raise CliError(f"{e} (choose columns with --features/--labels)") from e
        self.files, self.n = src.files, src.n_rows
        self.columns = [*src.features, *src.labels]
        self.d, self.l = src.d, src.l
        self.total, self.unit = self.n, "rows"
        self.names = True

    def blocks(self):
        import pyarrow.parquet as pq

        rows = max(1, SLAB_BYTES // (8 * max(1, len(self.columns))))
        to_block = _Blocks(self.columns)
        for f in self.files:
            # Without pre-buffering, pages are read as they are decoded: memory is about
            # one record batch, not a whole row group's column chunks at once.
            pf = pq.ParquetFile(for_arrow(f), pre_buffer=False, buffer_size=1 << 20)
            for batch in pf.iter_batches(batch_size=rows, columns=self.columns, use_threads=False):
                block = to_block(batch)
                yield block, block.shape[0]


def csv_schema(path, delimiter: str | None = None, header: bool = True):
    """The columns of a CSV file and the types pyarrow infers from its first block;
    ``delimiter`` None: :func:`~exactbatch.tools.common.csv_delimiter` (tabs for .tsv)."""
    pa = arrow()
    import pyarrow.csv as pcsv

    check_regular(path, "a CSV file")  # pyarrow would wait on a FIFO
    delimiter = csv_delimiter(path, delimiter)
    try:
        reader = pcsv.open_csv(for_arrow(path), **_csv_options(delimiter, header))
    except pa.ArrowException as e:
        raise CliError(f"{path}: cannot read as CSV ({e})") from e
    schema = reader.schema
    reader.close()
    return schema


def _csv_options(delimiter, header, **convert) -> dict:
    import pyarrow.csv as pcsv

    return {
        "read_options": pcsv.ReadOptions(
            block_size=_CSV_BLOCK_BYTES, autogenerate_column_names=not header
        ),
        "parse_options": pcsv.ParseOptions(delimiter=delimiter),
        "convert_options": pcsv.ConvertOptions(**convert),
    }


class CsvInput:
    """A CSV file read block by block; every chosen column parsed as float64.
    ``delimiter`` None: a tab for ``.tsv``/``.tab``, else a comma."""

    def __init__(self, path, features, labels, delimiter, header):
        pa = arrow()
        self.path, self.header = os.fspath(path), header
        self.delimiter = csv_delimiter(path, delimiter)
        schema = csv_schema(path, delimiter, header)
        names = schema.names
        feat, lab = split_columns(features, labels, names, path)
        self.columns = [names[j] for j in feat + lab]
        bad = [
            f"{c} ({schema.field(c).type})"
            for c in self.columns
            if not _is_number_type(schema.field(c).type)
        ]
        if bad:
            raise CliError(
                f"{path}: non-numeric column(s) {bad}; choose numeric columns with "
                "--features/--labels"
            )
        self.types = {
            c: pa.bool_() if pa.types.is_boolean(schema.field(c).type) else pa.float64()
            for c in self.columns
        }
        self.d, self.l, self.n = len(feat), len(lab), None
        self.names = True
        self.compressed = self.path.lower().endswith((".gz", ".bz2", ".zst", ".lz4"))
        self.total = None if self.compressed else os.path.getsize(self.path)
        self.unit = "rows" if self.compressed else "B"

    def blocks(self):
        pa = arrow()
        import pyarrow.csv as pcsv

        opts = _csv_options(
            self.delimiter, self.header, column_types=self.types, include_columns=self.columns
        )
        local = for_arrow(self.path)
        source = local if self.compressed else pa.OSFile(local)
        reader = pcsv.open_csv(source, **opts)
        to_block = _Blocks(self.columns)
        try:
            pos = 0
            for batch in reader:
                block = to_block(batch)
                if self.compressed:
                    yield block, block.shape[0]
                else:
                    now = min(source.tell(), self.total)
                    yield block, now - pos
                    pos = now
        finally:
            reader.close()
            if not self.compressed:
                source.close()


class NpyInput:
    """A 2-D (or 1-D: one column) numeric .npy, read in slabs of rows.

    A C-ordered array is read with plain reads into one reused buffer, so no
    mapped pages pile up in the process's resident memory; a Fortran-ordered
    one is sliced from a read-only memory map (np.load(mmap_mode="r")).
    """

    def __init__(self, path, features, labels):
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
        feat, lab = split_columns(features, labels, [str(j) for j in range(shape[1])], path)
        self.cols = feat + lab
        self.columns = [str(j) for j in self.cols]
        self.d, self.l, self.n = len(feat), len(lab), shape[0]
        self.total, self.unit = self.n, "rows"
        self.names = None  # positions, not names

    def blocks(self):
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

    def __init__(self, path):
        inp = self.inp = ndf_regions(path)
        self.d, self.l, self.n = inp.d, inp.l, inp.n
        if self.n == 0:  # before a name a column: no rows may come with 2**31 - 1 columns
            raise CliError(f"{path}: no rows of data to convert")
        self.names = None if inp.features is None and inp.labels is None else True
        fx, fy = default_names(inp.d, inp.l)
        self.columns = [*(inp.features or fx), *(inp.labels or fy)]
        self.total, self.unit = self.n, "rows"

    def blocks(self, rows: int | None = None):
        width = self.d + self.l
        rows = rows or max(1, SLAB_BYTES // max(8, 8 * width))
        for raw in region_blocks(self.inp.regions, 8 * width, rows):
            yield raw.view("<f8").reshape(len(raw), width), len(raw)
