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
  choice for ``.npy``. Features default to every column not a label and not
  in ``exclude``. Values are stored as float64; nulls and empty CSV cells
  become NaN.
* No column is coerced silently: a non-numeric column chosen (by default
  too) is refused, naming it and the options: ``categorical`` (store it as
  integer codes), ``exclude`` (leave it out), or ``features``. With
  ``categorical`` (Parquet and CSV), each named column is coded by the rule
  of :mod:`exactbatch.sources.categorical`: its vocabulary is learned in a
  first pass over that column only and sorted, so code ``j`` is its
  ``j``-th smallest value; the vocabularies go beside the names (the
  sidecar or the manifest: ``exactbatch.categories(DST)``). A numeric column
  may be categorical too.
* Several CSV files make one ``.ndf``: ``src`` a folder (its ``.csv``,
  ``.tsv`` and ``.tab`` files, compressed too, at any depth, hidden names
  skipped), a glob pattern (``"data/2024-*.csv"``) or a list of files. They
  are read in sorted path order (as Python sorts the paths, whatever order
  they were given in), one after the other; every one must have the first
  one's columns (a ``CliError`` naming the file otherwise). The write stays
  atomic: a bad file leaves nothing at ``dst``.
* A Parquet folder partitioned Hive-style (``year=2024/month=01/``) has its
  partition keys as columns after the files' own (see ``parquet_source``).
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
from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np

from exactbatch.checks import check_flag, check_int
from exactbatch.hints import Foreign, PathLike
from exactbatch.ndf.dataset_write import NdfDatasetWriter
from exactbatch.ndf.write import NdfWriter, atomic_path, leaves_no_temps
from exactbatch.sources.parquet import LABELS_METADATA_KEY
from exactbatch.tools.column_args import shown_names, split_columns
from exactbatch.tools.common import (
    CliError,
    check_dataset_output,
    check_interrupt,
    check_output,
    detect_format,
    output_format,
    progress,
)
from exactbatch.tools.convert_csv import CsvInput, csv_inputs, csv_schema
from exactbatch.tools.convert_inputs import (
    ConvertInput,
    NdfInput,
    NpyInput,
    ParquetInput,
    arrow,
    read_errors,
)
from exactbatch.urls import for_arrow

__all__ = ["convert", "csv_schema", "render"]


def convert(
    src: PathLike | list[str] | list[PathLike] | tuple[PathLike, ...],
    dst: PathLike,
    *,
    features: str | None = None,
    labels: str | None = None,
    exclude: str | None = None,
    categorical: str | None = None,
    force: bool = False,
    delimiter: str | None = None,
    header: bool = True,
    row_group_rows: int = 65536,
    names: str | None = None,
    part_rows: int | None = None,
    bar: bool = True,
) -> dict[str, Any]:
    """Convert ``src`` to ``dst`` (formats from the files); returns a summary dict.

    ``src``: a file, a folder, a glob pattern or a list of files (several: CSV
    only, read in sorted path order). ``features``, ``labels``, ``exclude``
    and ``categorical``: comma-separated column names (or positions);
    see the module's docstring. With ``part_rows``, ``dst`` is a folder to write
    a sharded dataset into, a new part every ``part_rows`` rows (from Parquet, CSV, .npy, an .ndf or
    another dataset). A sharded dataset reads like an .ndf file as ``src``.
    ``delimiter`` (CSV) None: a tab for ``.tsv``/``.tab``, else a comma.
    """
    force, header = check_flag("force", force), check_flag("header", header)
    bar = check_flag("bar", bar)
    row_group_rows = check_int("row_group_rows", row_group_rows, 1)
    dst = os.fspath(dst)
    src, many = csv_inputs(src)
    src_fmt = "csv" if many is not None else detect_format(src)
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
        inp: NdfInput | ParquetInput | CsvInput | NpyInput
        if from_ndf:
            if any(c is not None for c in (features, labels, exclude, categorical)):
                raise CliError(
                    f"{src}: --features/--labels choose columns of Parquet, CSV, .npy (and so "
                    "do --exclude and --categorical); an .ndf is converted whole"
                )
            inp = NdfInput(src)
        elif src_fmt == "parquet":
            inp = ParquetInput(src, features, labels, exclude, categorical)
        elif src_fmt == "csv":
            inp = CsvInput(many or src, features, labels, delimiter, header, exclude, categorical)
        else:
            if categorical is not None:
                raise CliError(
                    f"{src}: --categorical codes Parquet and CSV columns; a .npy holds numbers only"
                )
            inp = NpyInput(src, features, labels, exclude)
        out = _to_ndf(inp, src, dst, bar, part_rows)
    elif from_ndf:
        if exclude is not None or categorical is not None:
            raise CliError(f"{src}: --exclude/--categorical choose columns of Parquet, CSV, .npy")
        out = _ndf_to_parquet(src, dst, features, labels, row_group_rows, names, bar)
    else:
        raise CliError(f"{src}: can only convert {src_fmt} to .ndf; name the output .ndf")
    out.update(
        src=src,
        dst=dst,
        src_format=src_fmt,
        dst_format=dst_fmt,
        seconds=round(time.perf_counter() - t0, 3),
    )
    out.setdefault("size_bytes", os.path.getsize(dst))  # a dataset's: its parts' bytes
    if many is not None:
        out["files"] = len(many)
    return out


def _to_ndf(
    inp: ConvertInput, src: str, dst: str, bar: bool, part_rows: int | None = None
) -> dict[str, Any]:
    errors = read_errors() if not isinstance(inp, NdfInput) else (OSError, ValueError)
    # the columns' names, where they have some: to the file's sidecar or the manifest
    names: dict[str, Any] = {}
    if inp.names:
        names = {"features": inp.columns[: inp.d], "labels": inp.columns[inp.d :]}
    categories = getattr(inp, "categories", None) or {}
    if categories:
        names["categories"] = categories
    writer: Callable[..., NdfWriter | NdfDatasetWriter]
    if part_rows is None:
        writer = partial(NdfWriter, dst, inp.d, inp.l, inp.n, **names)
    else:
        writer = partial(NdfDatasetWriter, dst, inp.d, inp.l, part_rows, n=inp.n, **names)
    # made inside leaves_no_temps: a Ctrl-C just after it made its temporary file
    with (
        leaves_no_temps(dst),
        writer(before_rename=check_interrupt) as w,
        progress(inp.total, f"convert {_shown(inp, src)}", inp.unit, bar) as pb,
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
        "categories": categories,
    }
    if part_rows is not None:  # the parts this write made (the folder may hold others')
        assert isinstance(w, NdfDatasetWriter)  # (part_rows: a dataset's writer)
        out.update(parts=len(w.parts), size_bytes=sum(p.nbytes for p in w.parts))
    return out


def _shown(inp: ConvertInput, src: str) -> str:
    """What the progress bar says is being converted: the file, or how many files."""
    paths: list[str] = getattr(inp, "paths", None) or [src]
    return os.path.basename(src) if len(paths) == 1 else f"{len(paths)} CSV files"


def _ndf_to_parquet(
    src: str,
    dst: str,
    features: str | None,
    labels: str | None,
    row_group_rows: int,
    names_out: str | None,
    bar: bool,
) -> dict[str, Any]:
    pa = arrow()
    import pyarrow.parquet as pq

    inp = NdfInput(src)
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
            pq.ParquetWriter(for_arrow(tmp), schema) as w,
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


def _float64_array(values: np.ndarray) -> Foreign:
    """A float64 Arrow array holding a copy of ``values`` (built from its buffer:
    ``pa.array`` of a NumPy array imports pandas, see :mod:`exactbatch.sources.arrow`)."""
    pa = arrow()
    data = np.ascontiguousarray(values, dtype=np.float64)
    return pa.Array.from_buffers(pa.float64(), len(data), [None, pa.py_buffer(data)])


def render(out: dict[str, Any]) -> str:
    """The summary line of a conversion."""
    cats = out.get("categories") or {}
    coded = ", ".join(f"{c} ({len(v)} values)" for c, v in cats.items())
    files = f" from {out['files']} files" if out.get("files") else ""
    return (
        f"wrote {out['dst']}{files}: {out['rows']:,} rows, {out['d']} features "
        f"{shown_names(out['features'])}, {out['l']} labels {shown_names(out['labels'])}"
        + (f"; coded as integers: {coded}" if coded else "")
        + f"; {out['size_bytes']:,} bytes in {out['seconds']:.1f} s"
    )
