"""``exactbatch info``: what a file holds, read from its header or footer only.

For an ``.ndf``: n, d, l, the column names (from its names sidecar;
``x0..``, ``y0..`` without one: at most 1,000 of those a side are listed,
``features_more``/``labels_more`` counting the rest), the size on disk, the size the header
implies, and whether they agree (a malformed file, or a sidecar that does
not match it, is reported with its error, and ``valid`` is False). For a
sharded dataset (a folder holding ``manifest.json``): n, d, l, the parts
and their sizes and the names from the manifest, and every part opened and
checked against it, with a progress bar (each bad part reported with its
error, and ``valid`` False). For Parquet (a file or a folder): rows, files,
row groups and their sizes, columns and types, all from the footers: no
data is read. For ``.npy``: shape and dtype; for CSV: the columns and the
types pyarrow infers from the first block (rows are not counted).

``path`` may be a URL (``s3://bucket/ds``, any fsspec protocol) of an
``.ndf`` or a sharded dataset, read with ``storage_options`` (``exactbatch
info --storage-options JSON``): the same report, each part of a dataset
opened and checked by ranged reads.

``stats=True`` (``exactbatch info --stats``) adds per-column count, mean,
sd, min and max, computed in one streaming pass over the rows (slab by
slab; see :mod:`exactbatch.stats`): for an ``.ndf`` or a sharded dataset
every column, for Parquet every numeric column; nothing for data without
rows. Memory: one slab (Parquet: one row group).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from exactbatch.checks import check_flag
from exactbatch.errors import NdfError
from exactbatch.extras import need
from exactbatch.hints import PathLike
from exactbatch.ndf import open_ndf, open_ndf_dataset
from exactbatch.ndf.format import HEADER, HEADER_SIZE, MAGIC, expected_size
from exactbatch.ndf.names import DefaultNames
from exactbatch.ndf.regular import regular_file
from exactbatch.stats import ColumnStats
from exactbatch.tools.common import (
    CliError,
    format_bytes,
    input_format,
    open_ndf_input,
    parquet_columns,
    parquet_files,
    progress,
)
from exactbatch.tools.ndf_stream import SLAB_BYTES
from exactbatch.urls import for_arrow, is_url, url_to_fs

__all__ = ["info", "render"]


def info(
    path: PathLike,
    *,
    stats: bool = False,
    bar: bool = True,
    storage_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A plain-data report on ``path``; ``report["valid"]`` is False for a malformed .ndf.

    ``stats``: add ``report["stats"]``, one dict per column (``name``,
    ``count``, ``nan``, ``mean``, ``sd``, ``min``, ``max``), from one pass
    over the data (.ndf and Parquet only); ``bar``: a progress bar meanwhile.
    ``storage_options``: for a URL (an ``.ndf`` or a sharded dataset), as for
    :func:`~exactbatch.open_ndf`; only for URLs.
    """
    stats, bar = check_flag("stats", stats), check_flag("bar", bar)
    path = os.fspath(path)
    so = storage_options
    fmt = input_format(path, so, "info")
    if fmt == "dataset":
        report = _dataset(path, bar, so)
    elif fmt == "ndf":
        report = _ndf(path, so)
    else:
        report = {"parquet": _parquet, "npy": _npy, "csv": _csv}[fmt](path)
    if stats:
        if fmt not in ("ndf", "dataset", "parquet"):
            raise CliError(f"{path}: --stats reads .ndf or Parquet; convert this {fmt} first")
        if report.get("valid") is not False:
            if fmt == "parquet":
                report["stats"] = _parquet_stats(path, fmt, bar)
            else:
                report["stats"] = _ndf_stats(path, fmt, bar, so)
    return report


def _ndf_stats(
    path: str, fmt: str, bar: bool, storage_options: dict[str, Any] | None = None
) -> list[dict[str, Any]]:
    """One pass over an .ndf or a sharded dataset, slab by slab (a slab never
    straddles two parts of a dataset: one read each)."""
    import numpy as np

    with open_ndf_input(path, fmt, storage_options) as src:
        n, d, l = src.n, src.d, src.l  # noqa: E741
        if n == 0:  # nothing to sum; and a header of no rows may claim 2**31 - 1 columns
            return []
        names = [*src.features, *src.labels]
        acc = ColumnStats(d + l)
        step = max(1, SLAB_BYTES // (8 * max(1, d + l)))
        starts = np.asarray(getattr(src, "starts", [0, n]))[:-1].tolist()  # parts' first rows
        bounds = sorted({*range(0, n, step), *starts, n})
        slab = np.empty((min(step, n), d + l))
        with progress(n, f"stats {os.path.basename(path)}", "rows", bar) as pb:
            for a, b in zip(bounds[:-1], bounds[1:], strict=True):
                block = slab[: b - a]  # (rows, d + l), x then y
                src.read_block_into(a, block)
                acc.update(block)
                pb.update(b - a)
    return acc.table(names)


def _parquet_stats(path: str, fmt: str, bar: bool) -> list[dict[str, Any]]:
    """Every numeric column the loader reads by default (partition keys included), in
    its order: features, then the labels the files record."""
    import numpy as np
    import pyarrow.parquet as pq

    from exactbatch.sources.parquet import is_numeric_type, parquet_source, recorded_labels

    names, types, _ = parquet_columns(path)
    labels = recorded_labels(pq.ParquetFile(parquet_files(path)[0]).schema_arrow) or []
    numeric = [c for c in names if is_numeric_type(types[c]) and c not in labels]
    src = parquet_source(path, features=numeric, labels=labels)
    acc = ColumnStats(src.d + src.l)
    with progress(src.n_rows, f"stats {os.path.basename(path)}", "rows", bar) as pb:
        for x, y in src:
            acc.update(np.concatenate((x, y), axis=1))  # (rows, d + l)
            pb.update(len(x))
    return acc.table([*src.features, *src.labels])


_MAX_SHOWN = 20  # bad parts listed at most (their count is always given)


def _dataset(path: str, bar: bool, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"path": path, "format": "dataset"}
    try:
        ds = open_ndf_dataset(path, storage_options=storage_options)
    except NdfError as e:
        return {**out, "valid": False, "error": str(e)}
    sizes = sorted(p.n for p in ds.parts)
    out.update(
        n=ds.n,
        d=ds.d,
        l=ds.l,
        parts=len(ds.parts),
        size_bytes=sum(p.nbytes for p in ds.parts),
    )
    if sizes:
        out["part_rows"] = {"min": sizes[0], "median": sizes[len(sizes) // 2], "max": sizes[-1]}
    _list_names(out, ds.features, ds.labels)
    bad = []
    desc = f"check {os.path.basename(path)}"
    with ds, progress(len(ds.parts), desc, "parts", bar, unit_scale=False) as pb:
        for k in range(len(ds.parts)):
            try:
                ds.check_part(k)
            except (NdfError, OSError) as e:
                bad.append(str(e))
            pb.update(1)
    out["valid"] = not bad
    if bad:
        out["bad_parts"] = len(bad)
        out["error"] = bad[0] if len(bad) == 1 else f"{len(bad)} parts failed; first: {bad[0]}"
        out["errors"] = bad[:_MAX_SHOWN]
    return out


def _ndf(path: str, storage_options: dict[str, Any] | None = None) -> dict[str, Any]:
    if is_url(path):
        fs, where = url_to_fs(path, storage_options)
        size, opened = fs.size(where), fs.open(where, "rb")
    else:
        opened = regular_file(path, "an .ndf file")
        size = os.fstat(opened.fileno()).st_size
    out = {"path": path, "format": "ndf", "size_bytes": size}
    with opened as f:
        head = f.read(HEADER_SIZE)
    if len(head) == HEADER_SIZE and head[:4] == MAGIC:
        _, n, d, l = HEADER.unpack(head)  # noqa: E741
        out.update(n=n, d=d, l=l, expected_bytes=expected_size(n, d, l))
    try:
        with open_ndf(path, storage_options=storage_options) as f:
            _list_names(out, f.features, f.labels)
    except NdfError as e:
        out.update(valid=False, error=str(e))
    else:
        out.update(valid=True)
    return out


_DEFAULTS_LISTED = 1000  # default names (x0.., y0..) listed at most, a side


def _list_names(out: dict[str, Any], features: Sequence[str], labels: Sequence[str]) -> None:
    """The names into the report: stored ones all; default ones (made one by one: a
    header of no rows may claim 2**31 - 1 columns) the first 1,000, and how many more."""
    for key, names in (("features", features), ("labels", labels)):
        more = len(names) - _DEFAULTS_LISTED
        if isinstance(names, DefaultNames) and more > 0:
            out[key], out[f"{key}_more"] = list(names[:_DEFAULTS_LISTED]), more
        else:
            out[key] = list(names)


def _names_line(report: dict[str, Any], key: str) -> str:
    more = report.get(f"{key}_more")
    return ", ".join(report[key]) + (f", ... ({more:,} more)" if more else "")


def _parquet(path: str) -> dict[str, Any]:
    pq = need("pyarrow.parquet", by=f"{path}: reading Parquet", package="pyarrow", error=CliError)
    from exactbatch.sources.parquet import list_local_files

    files = list_local_files(path)
    rows, groups, group_rows, nbytes = 0, 0, [], 0
    schema: Any = None
    differ = []
    for f in files:
        try:
            pf = pq.ParquetFile(for_arrow(f))
        except (OSError, ValueError) as e:
            raise CliError(f"{f}: not a readable Parquet file ({e})") from e
        md = pf.metadata
        rows += md.num_rows
        groups += md.num_row_groups
        group_rows += [md.row_group(g).num_rows for g in range(md.num_row_groups)]
        nbytes += os.path.getsize(f)
        if schema is None:
            schema = pf.schema_arrow
        elif not pf.schema_arrow.equals(schema):
            differ.append(f)
    names, types, keys = parquet_columns(path)  # the loader's: partition keys last
    out = {
        "path": path,
        "format": "parquet",
        "rows": rows,
        "files": len(files),
        "row_groups": groups,
        "size_bytes": nbytes,
        "columns": [
            {"name": c, "type": str(types[c]), **({"partition_key": True} if c in keys else {})}
            for c in names
        ],
        "files_with_another_schema": differ,
    }
    if group_rows:
        out["row_group_rows"] = {
            "min": min(group_rows),
            "median": sorted(group_rows)[len(group_rows) // 2],
            "max": max(group_rows),
        }
    return out


def _npy(path: str) -> dict[str, Any]:
    import numpy as np

    try:
        arr = np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as e:  # object arrays, a damaged header
        raise CliError(f"{path}: cannot read as .npy ({e})") from e
    return {
        "path": path,
        "format": "npy",
        "shape": list(arr.shape),
        "dtype": str(arr.dtype),
        "fortran_order": bool(arr.flags.f_contiguous and not arr.flags.c_contiguous),
        "size_bytes": os.path.getsize(path),
    }


def _csv(path: str) -> dict[str, Any]:
    from exactbatch.tools.convert import csv_schema

    schema = csv_schema(path)
    return {
        "path": path,
        "format": "csv",
        "size_bytes": os.path.getsize(path),
        "columns": [{"name": f.name, "type": str(f.type)} for f in schema],
        "note": "types inferred from the first block; rows are not counted",
    }


def render(report: dict[str, Any]) -> str:
    """The report as aligned ``key: value`` lines for a person."""
    lines = []
    fmt = report["format"]
    if fmt == "dataset":
        return _render_dataset(report)
    if fmt == "ndf":
        lines.append(f"{report['path']}: .ndf file")
        for key in ("n", "d", "l"):
            if key in report:
                lines.append(f"  {key:<14}{report[key]:,}")
        lines.append(
            f"  {'size':<14}{report['size_bytes']:,} bytes ({format_bytes(report['size_bytes'])})"
        )
        if "expected_bytes" in report:
            lines.append(
                f"  {'expected size':<14}{report['expected_bytes']:,} bytes (28 + 8*n*(d+l))"
            )
        for key in ("features", "labels"):
            if key in report:
                lines.append(f"  {key:<14}{_names_line(report, key) or '-'}")
        verdict = "yes" if report["valid"] else f"NO: {report['error']}"
        lines.append(f"  {'valid':<14}{verdict}")
        return "\n".join(lines + _stats_lines(report))
    lines.append(f"{report['path']}: {fmt}")
    for key, value in report.items():
        if key in ("path", "format", "columns", "stats"):  # columns and stats: tables below
            continue
        if key == "size_bytes":
            value = f"{value:,} bytes ({format_bytes(value)})"
        elif key == "row_group_rows":
            value = f"min {value['min']:,}, median {value['median']:,}, max {value['max']:,}"
        elif key == "files_with_another_schema":
            if not value:
                continue
            value = ", ".join(value)
        elif isinstance(value, int) and not isinstance(value, bool):  # a bool: as it is
            value = f"{value:,}"
        label = "size" if key == "size_bytes" else key.replace("_", " ")
        lines.append(f"  {label + ' ':<16}{value}")  # a long label keeps a space
    if "columns" in report:
        lines.append(f"  columns ({len(report['columns'])}):")
        width = max((len(c["name"]) for c in report["columns"]), default=0)
        for c in report["columns"]:
            key = "  (partition key)" if c.get("partition_key") else ""
            lines.append(f"    {c['name']:<{width}}  {c['type']}{key}")
    return "\n".join(lines + _stats_lines(report))


def _stats_lines(report: dict[str, Any]) -> list[str]:
    """The ``--stats`` table: one line per column."""
    rows = report.get("stats")
    if rows is None:
        return []
    if not rows:
        return ["  statistics    none (no rows, or no numeric columns)"]
    width = max([6, *(len(r["name"]) for r in rows)])
    lines = [
        "  statistics (sd with divisor n; NaN left out):",
        f"    {'column':<{width}}  {'mean':>12}  {'sd':>12}  {'min':>12}  {'max':>12}  nan",
    ]
    for r in rows:
        cells = ["-" if r[k] is None else f"{r[k]:12.6g}" for k in ("mean", "sd", "min", "max")]
        lines.append(
            f"    {r['name']:<{width}}  {cells[0]:>12}  {cells[1]:>12}  {cells[2]:>12}  "
            f"{cells[3]:>12}  {r['nan']:,}"
        )
    return lines


def _render_dataset(report: dict[str, Any]) -> str:
    lines = [f"{report['path']}: sharded .ndf dataset"]
    for key in ("n", "d", "l", "parts"):
        if key in report:
            lines.append(f"  {key:<14}{report[key]:,}")
    if "part_rows" in report:
        r = report["part_rows"]
        lines.append(
            f"  {'part rows':<14}min {r['min']:,}, median {r['median']:,}, max {r['max']:,}"
        )
    if "size_bytes" in report:
        size = report["size_bytes"]
        lines.append(f"  {'size':<14}{size:,} bytes ({format_bytes(size)}) in parts")
    for key in ("features", "labels"):
        if key in report:
            lines.append(f"  {key:<14}{_names_line(report, key)}")
    if report["valid"]:
        lines.append(f"  {'valid':<14}yes: every part matches the manifest")
    else:
        bad = report.get("bad_parts")
        what = f"{bad} of {report['parts']} parts failed" if bad else "the manifest failed"
        lines.append(f"  {'valid':<14}NO: {what}")
        lines += [f"    {e}" for e in report.get("errors", [report["error"]])]
    return "\n".join(lines + _stats_lines(report))
