"""``exactbatch convert``: Parquet, CSV or .npy to .ndf, and .ndf to Parquet.

What it promises, and what it costs:

* Streamed: memory is one slab of rows whatever the input's size - a
  Parquet record batch (at most one row group), a CSV block read with
  pyarrow's streaming reader, a slab of a memory-mapped ``.npy``, or, for
  ``.ndf`` -> Parquet, one row group of the output.
* Atomic: the output is written to a temporary file in the destination's
  folder, fsynced and renamed at the end. A bad value in row ten million, a
  full disk or Ctrl-C leaves no file (and no partial file) at the
  destination; a file that was there keeps its old bytes.
* Columns are chosen with ``features``/``labels``: comma-separated names,
  or integer positions (negative from the end) - positions are the only
  choice for ``.npy``. Features default to every column not a label.
  Values are stored as float64; nulls and empty CSV cells become NaN.
* A CSV's row count is not known until its end, so the .ndf header is
  written last (see :class:`~exactbatch.ndf.write.NdfWriter`).
* Column names travel: Parquet and CSV -> .ndf writes the chosen columns'
  names to the .ndf's names sidecar (``DST.json``, see
  :mod:`exactbatch.ndf.names`), or to the manifest of a sharded dataset (a
  ``.npy`` has none to write).
* ``.ndf`` -> Parquet writes float64 columns named from the .ndf's sidecar
  or the dataset's manifest (``x0..x{d-1}, y0..y{l-1}`` without one, or
  ``names``) in row groups of ``row_group_rows`` rows and records the label
  columns in the schema metadata, so converting back (and
  ``parquet_source``) keeps the split.
* With ``part_rows`` the output is a sharded dataset (a folder): a new part
  every ``part_rows`` rows, each atomic, the manifest last (a failure leaves
  no manifest and no part). A sharded dataset is read as input like an
  ``.ndf`` (its parts in order, each checked against the manifest first).
"""

from __future__ import annotations

import os
import time
from functools import partial

import numpy as np

from exactbatch.checks import check_flag, check_int
from exactbatch.ndf.dataset_write import NdfDatasetWriter
from exactbatch.ndf.write import NdfWriter, atomic_path, leaves_no_temps
from exactbatch.sources.arrow import fill_float64 as _fill_float64
from exactbatch.sources.parquet import LABELS_METADATA_KEY, recorded_labels
from exactbatch.tools.common import (
    CliError,
    check_dataset_output,
    check_interrupt,
    check_output,
    detect_format,
    output_format,
    progress,
    resolve_columns,
    split_columns,
)
from exactbatch.tools.ndf_stream import SLAB_BYTES, ndf_regions, read_blocks, region_blocks

__all__ = ["convert", "csv_schema", "render"]

_CSV_BLOCK_BYTES = 1 << 20


def _arrow():
    try:
        import pyarrow as pa
    except ImportError as e:
        raise CliError("Parquet and CSV need pyarrow: pip install pyarrow") from e
    return pa


def _read_errors():
    pa = _arrow()
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
        for j, name in enumerate(self.columns):
            _fill_float64(batch.column(name), block[:, j])
        return block


def _is_number_type(t) -> bool:
    import pyarrow.types as pat

    return pat.is_integer(t) or pat.is_floating(t) or pat.is_boolean(t) or pat.is_null(t)


class _ParquetInput:
    """A Parquet file or folder; every file's schema checked by parquet_source."""

    def __init__(self, path, features, labels):
        import pyarrow.parquet as pq

        from exactbatch.sources.parquet import list_local_files, parquet_source

        _arrow()
        self.path = path
        files = list_local_files(path, "*.parquet")
        try:
            schema = pq.ParquetFile(files[0]).schema_arrow
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
            pf = pq.ParquetFile(f, pre_buffer=False, buffer_size=1 << 20)
            for batch in pf.iter_batches(batch_size=rows, columns=self.columns, use_threads=False):
                block = to_block(batch)
                yield block, block.shape[0]


def csv_schema(path, delimiter: str = ",", header: bool = True):
    """The columns of a CSV file and the types pyarrow infers from its first block."""
    pa = _arrow()
    import pyarrow.csv as pcsv

    try:
        reader = pcsv.open_csv(os.fspath(path), **_csv_options(delimiter, header))
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


class _CsvInput:
    """A CSV file read block by block; every chosen column parsed as float64."""

    def __init__(self, path, features, labels, delimiter, header):
        pa = _arrow()
        self.path, self.delimiter, self.header = os.fspath(path), delimiter, header
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
        pa = _arrow()
        import pyarrow.csv as pcsv

        opts = _csv_options(
            self.delimiter, self.header, column_types=self.types, include_columns=self.columns
        )
        source = self.path if self.compressed else pa.OSFile(self.path)
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


class _NpyInput:
    """A 2-D (or 1-D: one column) numeric .npy, read in slabs of rows.

    A C-ordered array is read with plain reads into one reused buffer, so no
    mapped pages pile up in the process's resident memory; a Fortran-ordered
    one is sliced from a read-only memory map (np.load(mmap_mode="r")).
    """

    def __init__(self, path, features, labels):
        self.path = os.fspath(path)
        try:
            with open(self.path, "rb") as f:
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


class _NdfInput:
    """An .ndf file or a sharded dataset (every part checked first), read front to back
    in slabs; a dataset's column names come from its manifest."""

    def __init__(self, path):
        inp = self.inp = ndf_regions(path)
        self.d, self.l, self.n = inp.d, inp.l, inp.n
        self.names = None if inp.features is None and inp.labels is None else True
        feats = inp.features or [f"x{j}" for j in range(inp.d)]
        self.columns = [*feats, *(inp.labels or [f"y{k}" for k in range(inp.l)])]
        self.total, self.unit = self.n, "rows"

    def blocks(self, rows: int | None = None):
        width = self.d + self.l
        rows = rows or max(1, SLAB_BYTES // max(8, 8 * width))
        for raw in region_blocks(self.inp.regions, 8 * width, rows):
            yield raw.view("<f8").reshape(len(raw), width), len(raw)


def convert(
    src,
    dst,
    *,
    features=None,
    labels=None,
    force=False,
    delimiter=",",
    header=True,
    row_group_rows=65536,
    names=None,
    part_rows=None,
    bar=True,
) -> dict:
    """Convert ``src`` to ``dst`` (formats from the files); returns a summary dict.

    With ``part_rows``, ``dst`` is a folder to write a sharded dataset into,
    a new part every ``part_rows`` rows (from Parquet, CSV, .npy, an .ndf or
    another dataset). A sharded dataset reads like an .ndf file as ``src``.
    """
    force, header = check_flag("force", force), check_flag("header", header)
    bar = check_flag("bar", bar)
    row_group_rows = check_int("row_group_rows", row_group_rows, 1)
    src, dst = os.fspath(src), os.fspath(dst)
    src_fmt = detect_format(src)
    if part_rows is not None:
        part_rows, dst_fmt = check_int("part_rows", part_rows, 1), "dataset"
        check_dataset_output(dst, force)
    else:
        dst_fmt = output_format(dst)
        check_output(dst, force)
    t0 = time.perf_counter()
    from_ndf = src_fmt in ("ndf", "dataset")
    if names is not None and not (from_ndf and dst_fmt == "parquet"):
        raise CliError(f"{src}: --names only names the columns of an .ndf written as Parquet")
    if dst_fmt in ("ndf", "dataset"):
        if src_fmt == "ndf" and dst_fmt == "ndf":
            raise CliError(
                f"{src}: already an .ndf file (to reorder it: exactbatch shuffle; to cut it "
                "into parts: --part-rows)"
            )
        if from_ndf:
            if features is not None or labels is not None:
                raise CliError(f"{src}: --features/--labels choose columns of Parquet, CSV, .npy")
            inp = _NdfInput(src)
        elif src_fmt == "parquet":
            inp = _ParquetInput(src, features, labels)
        elif src_fmt == "csv":
            inp = _CsvInput(src, features, labels, delimiter, header)
        else:
            inp = _NpyInput(src, features, labels)
        out = _to_ndf(inp, src, dst, bar, part_rows)
    elif from_ndf:
        out = _ndf_to_parquet(src, dst, features, labels, row_group_rows, names, bar)
    else:
        raise CliError(f"{src}: can only convert {src_fmt} to .ndf; name the output .ndf")
    out.update(
        src=src,
        dst=dst,
        src_format=src_fmt,
        dst_format=dst_fmt,
        seconds=round(time.perf_counter() - t0, 3),
        size_bytes=_size(dst),
    )
    return out


def _size(path: str) -> int:
    """Bytes of a file, or of the files of a folder (a dataset)."""
    if not os.path.isdir(path):
        return os.path.getsize(path)
    return sum(e.stat().st_size for e in os.scandir(path) if e.is_file())


def _to_ndf(inp, src, dst, bar, part_rows=None) -> dict:
    errors = _read_errors() if not isinstance(inp, _NdfInput) else (OSError, ValueError)
    # the columns' names, where they have some: to the file's sidecar or the manifest
    names = {}
    if inp.names:
        names = {"features": inp.columns[: inp.d], "labels": inp.columns[inp.d :]}
    if part_rows is None:
        writer = partial(NdfWriter, dst, inp.d, inp.l, inp.n, **names)
    else:
        writer = partial(NdfDatasetWriter, dst, inp.d, inp.l, part_rows, n=inp.n, **names)
    # made inside leaves_no_temps: a Ctrl-C just after it made its temporary file
    with (
        leaves_no_temps(dst),
        writer(before_rename=check_interrupt) as w,
        progress(inp.total, f"convert {os.path.basename(src)}", inp.unit, bar) as pb,
    ):
        try:
            for block, advance in inp.blocks():
                w.write(block)
                pb.update(advance)
        except errors as e:
            msg = " ".join(str(e).split())
            raise CliError(f"{src}: {msg} (after {w.rows:,} rows; nothing written to {dst})") from e
        if w.rows == 0:  # a header-only CSV, say: an .ndf of it would give empty epochs
            raise CliError(f"{src}: no rows of data to convert; nothing written to {dst}")
    out = {
        "rows": w.rows,
        "d": inp.d,
        "l": inp.l,
        "features": inp.columns[: inp.d],
        "labels": inp.columns[inp.d :],
    }
    if part_rows is not None:
        out["parts"] = len(w.parts)
    return out


def _ndf_to_parquet(src, dst, features, labels, row_group_rows, names_out, bar) -> dict:
    pa = _arrow()
    import pyarrow.parquet as pq

    inp = _NdfInput(src)
    n, d, l, names = inp.n, inp.d, inp.l, inp.columns  # the sidecar's or manifest's names  # noqa: E741
    if labels is None and features is None:
        feat, lab = list(range(d)), list(range(d, d + l))
    else:
        feat, lab = split_columns(features, labels, names, src)
    cols = feat + lab
    if not cols:
        raise CliError(f"{src}: no columns to write (d = l = 0)")
    columns = [names[j] for j in cols]
    if names_out is not None:
        given = [c.strip() for c in names_out.split(",")]
        if len(given) != len(cols) or len(set(given)) != len(given) or "" in given:
            raise CliError(
                f"{src}: --names needs {len(cols)} distinct names (one per column "
                f"written: {', '.join(columns)}); got {names_out!r}"
            )
        columns = given
    schema = pa.schema(
        [(c, pa.float64()) for c in columns],
        metadata={LABELS_METADATA_KEY: ",".join(columns[len(feat) :]).encode()},
    )
    rows = 0
    with leaves_no_temps(dst), atomic_path(dst, before_rename=check_interrupt) as tmp:
        with (
            pq.ParquetWriter(tmp, schema) as w,
            progress(n, f"convert {os.path.basename(src)}", "rows", bar) as pb,
        ):
            for block, _ in inp.blocks(row_group_rows):  # (rows, d + l)
                arrays = [_float64_array(block[:, j]) for j in cols]
                w.write_table(
                    pa.Table.from_arrays(arrays, schema=schema), row_group_size=row_group_rows
                )
                rows += len(block)
                pb.update(len(block))
    return {
        "rows": rows,
        "d": len(feat),
        "l": len(lab),
        "features": columns[: len(feat)],
        "labels": columns[len(feat) :],
    }


def _float64_array(values: np.ndarray):
    """A float64 Arrow array holding a copy of ``values`` (built from its buffer:
    ``pa.array`` of a NumPy array imports pandas, see :mod:`exactbatch.sources.arrow`)."""
    pa = _arrow()
    data = np.ascontiguousarray(values, dtype=np.float64)
    return pa.Array.from_buffers(pa.float64(), len(data), [None, pa.py_buffer(data)])


def render(out: dict) -> str:
    """The summary line of a conversion."""
    return (
        f"wrote {out['dst']}: {out['rows']:,} rows, {out['d']} features {out['features']}, "
        f"{out['l']} labels {out['labels']}; {out['size_bytes']:,} bytes in "
        f"{out['seconds']:.1f} s"
    )
