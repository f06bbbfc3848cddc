"""``exactbatch bench``: rows/s and peak memory of the loader on the user's own data.

For each batch size, one epoch (or its first ``max_rows`` rows) of
``for xb, yb in DataLoader(source, batch_size, ...)`` is timed, against a
bare read of the same data in the same run: for an ``.ndf`` (or a sharded
dataset, part after part), a sequential read of the rows with ``readinto``
into one reused 8 MiB buffer; at a URL, one ranged read per block of about
8 MiB, in order; for Parquet, pyarrow reading row group by row group into
NumPy. The bare read runs once untimed first so both see the same page
cache. ``src`` is anything ``exactbatch info`` reads but CSV and ``.npy``.

Peak memory is the process's peak resident set (``VmHWM``), reset before
each run through ``/proc/self/clear_refs`` where Linux allows it (else it is
the peak so far). Pages of a memory-mapped ``.ndf`` that a run touches count
as resident. Timings on a shared machine are noisy: read them as rough.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from exactbatch.checks import check_flag, check_int
from exactbatch.extras import need
from exactbatch.hints import PathLike
from exactbatch.tools.common import (
    CliError,
    format_bytes,
    input_format,
    open_ndf_input,
    progress,
)
from exactbatch.urls import for_arrow, is_url

if TYPE_CHECKING:
    from exactbatch.ndf import NdfDataset, NdfFile
    from exactbatch.sources.parquet import ParquetSource
    from exactbatch.tools.common import Bar
    from exactbatch.tools.ndf_stream import Region

__all__ = ["bench", "peak_rss", "render"]

_READ_BYTES = 8 << 20


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss() -> int | None:
    """This process's peak resident set in bytes (``VmHWM``), None where unknown."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _bare_ndf(regions: Sequence[Region], d: int, l: int, limit: int, pb: Bar) -> int:  # noqa: E741
    """The first ``limit`` rows of the file ``regions`` of a local .ndf or sharded
    dataset, front to back with ``readinto`` into one reused buffer (part after part)."""
    from exactbatch.tools.ndf_stream import region_blocks

    row_bytes = 8 * (d + l)
    if row_bytes == 0:
        return limit
    rows = 0
    for block in region_blocks(regions, row_bytes, max(1, _READ_BYTES // row_bytes)):
        k = min(len(block), limit - rows)
        rows += k
        pb.update(k)
        if rows >= limit:
            break
    return rows


def _bare_url(source: NdfFile | NdfDataset, limit: int, pb: Bar) -> int:
    """The first ``limit`` rows of an .ndf or dataset at a URL: one ranged read per
    block of about 8 MiB, in order (a block never crosses a part)."""
    from exactbatch.sources.blocks import ndf_blocks

    blocks = ndf_blocks(source, max(1, _READ_BYTES // (8 * max(1, source.d + source.l))))
    rows = 0
    for i in range(len(blocks)):
        if rows >= limit:
            break
        blocks.read_chunk(i)
        k = min(int(blocks.chunk_rows[i]), limit - rows)
        rows += k
        pb.update(k)
    return rows


def _bare_parquet(source: ParquetSource, limit: int, pb: Bar) -> int:
    import pyarrow.parquet as pq

    chosen = [*source.features, *source.labels]
    rows = 0
    for path in source.files:
        pf = pq.ParquetFile(for_arrow(path))
        held = set(pf.schema_arrow.names)  # a Hive key is in the path, not read
        names = [c for c in chosen if c in held]
        for g in range(pf.metadata.num_row_groups):
            if rows >= limit:
                return rows
            t = pf.read_row_group(g, columns=names)
            x = np.empty((t.num_rows, len(names)))
            for j, name in enumerate(names):
                x[:, j] = t.column(name).to_numpy()
            rows += t.num_rows
            pb.update(t.num_rows)
    return rows


def _loader_run(
    source: NdfFile | NdfDataset | ParquetSource,
    batch: int,
    limit: int,
    shuffle: bool,
    seed: int,
    buffer_size: int | None,
    pb: Bar,
    out: dict[str, Any],
) -> int:
    """The rows of one timed loader run; its ``stats()["run"]`` into ``out["stats"]``."""
    from exactbatch import DataLoader

    rows = 0
    with DataLoader(source, batch, shuffle=shuffle, seed=seed, buffer_size=buffer_size) as loader:
        for xb, _ in loader:
            rows += len(xb)
            pb.update(len(xb))
            if rows >= limit:
                break
        out["stats"] = loader.stats()["run"]
    return rows


def bench(
    src: PathLike,
    *,
    batch_sizes: Sequence[int] = (64, 1024, 4096),
    shuffle: bool = True,
    seed: int = 0,
    buffer_size: int | None = None,
    max_rows: int | None = None,
    features: str | None = None,
    labels: str | None = None,
    storage_options: dict[str, Any] | None = None,
    bar: bool = True,
) -> dict[str, Any]:
    """Time the loader at each batch size against a bare read; a dict of the runs.

    ``src``: what ``exactbatch info`` reads: an ``.ndf``, a sharded dataset, Parquet
    (a file or a folder), or the URL of an ``.ndf`` or a dataset (with
    ``storage_options``).
    """
    sizes = [check_int(f"batch_sizes[{i}]", b, 1) for i, b in enumerate(batch_sizes)]
    shuffle, bar = check_flag("shuffle", shuffle), check_flag("bar", bar)
    seed = check_int("seed", seed, 0, maximum=None)
    buffer_size = check_int("buffer_size", buffer_size, 1, optional=True)
    max_rows = check_int("max_rows", max_rows, 1, optional=True)
    src = os.fspath(src)
    fmt = input_format(src, storage_options, "bench")
    source: NdfFile | NdfDataset | ParquetSource
    opened: NdfFile | NdfDataset | None = None  # closed at the end
    bare: Callable[[int, Bar], int]
    if fmt in ("ndf", "dataset"):
        if features is not None or labels is not None:
            raise CliError(
                f"{src}: --features/--labels choose Parquet columns; an .ndf has its own"
            )
        source = opened = open_ndf_input(src, fmt, storage_options)
        n, d, l = opened.n, opened.d, opened.l  # noqa: E741
        if d + l == 0:  # rows of no bytes: nothing to time, and n may be 2**63 - 1
            opened.close()
            raise CliError(f"{src}: no columns to read (d = l = 0)")
        if is_url(src):
            url_source = opened

            def bare(limit: int, pb: Bar) -> int:
                return _bare_url(url_source, limit, pb)

            bare_name = "bare read (ranged)"
        else:
            from exactbatch.tools.ndf_stream import ndf_regions

            regions = ndf_regions(src).regions  # a dataset's parts checked once, here

            def bare(limit: int, pb: Bar) -> int:
                return _bare_ndf(regions, d, l, limit, pb)

            bare_name = "bare read (readinto)"
    elif fmt == "parquet":
        from exactbatch.sources.parquet import parquet_source
        from exactbatch.tools.column_args import split_columns

        need("pyarrow.parquet", by="reading Parquet", package="pyarrow", error=CliError)
        from exactbatch.tools.common import parquet_columns

        names = parquet_columns(src)[0]  # the loader's columns: partition keys last
        feat, lab = split_columns(features, labels, names, src)
        source = pq_source = parquet_source(
            src, features=[names[j] for j in feat], labels=[names[j] for j in lab]
        )
        n, d, l = pq_source.n_rows, pq_source.d, pq_source.l  # noqa: E741

        def bare(limit: int, pb: Bar) -> int:
            return _bare_parquet(pq_source, limit, pb)

        bare_name = "bare read (pyarrow)"
    else:
        raise CliError(
            f"{src}: bench reads an .ndf, a sharded dataset or Parquet; convert {fmt} first"
        )
    limit = n if max_rows is None else min(n, max_rows)
    if limit == 0:
        raise CliError(f"{src}: no rows to read")
    name = os.path.basename(src)
    runs: list[dict[str, Any]] = []

    def timed(
        label: str,
        batch: int | None,
        fn: Callable[[Bar], int],
        more: dict[str, Any] | None = None,
    ) -> None:
        with progress(limit, f"{label} {name}", "rows", bar) as pb:
            reset = _reset_peak()
            t0 = time.perf_counter()
            rows = fn(pb)
            dt = time.perf_counter() - t0
        runs.append(
            {
                **(more or {}),
                "path": label,
                "batch": batch,
                "rows": rows,
                "seconds": dt,
                "rows_per_s": rows / dt if dt > 0 else float("inf"),
                "peak_rss": peak_rss(),
                "peak_reset": reset,
            }
        )

    with progress(limit, f"warm-up {name}", "rows", bar) as pb:
        bare(limit, pb)
    timed(bare_name, None, lambda pb: bare(limit, pb))
    for b in sizes:
        more: dict[str, Any] = {}  # the run's loader.stats()["run"], as "stats"
        timed(
            "loader",
            b,
            partial(_loader_run, source, b, limit, shuffle, seed, buffer_size, out=more),
            more,
        )
    if opened is not None:  # (not Parquet)
        opened.close()
    base = runs[0]["rows_per_s"]
    for r in runs:
        r["ratio"] = r["rows_per_s"] / base if base else None
    return {
        "src": src,
        "format": fmt,
        "n": n,
        "d": d,
        "l": l,
        "rows_per_run": limit,
        "shuffle": shuffle,
        "seed": seed,
        "buffer_size": buffer_size,
        "runs": runs,
    }


def _rate(v: float) -> str:
    return f"{v / 1e6:.2f} M" if v >= 1e5 else f"{v / 1e3:.1f} k"


def render(r: dict[str, Any]) -> str:
    """The runs as a table for a person."""
    mode = "shuffled" if r["shuffle"] else "in file order"
    lines = [
        f"{r['src']}: {r['format']}, n={r['n']:,} rows, d={r['d']}, l={r['l']}; "
        f"{r['rows_per_run']:,} rows per run, {mode}, seed {r['seed']}",
        f"  {'path':<24}{'batch':>7}{'rows/s':>12}{'x bare':>9}{'peak RSS':>13}",
    ]
    for run in r["runs"]:
        batch = "-" if run["batch"] is None else f"{run['batch']:,}"
        peak = "n/a" if run["peak_rss"] is None else format_bytes(run["peak_rss"])
        if run["peak_rss"] is not None and not run["peak_reset"]:
            peak += "*"
        lines.append(
            f"  {run['path']:<24}{batch:>7}{_rate(run['rows_per_s']):>12}"
            f"{run['ratio']:>8.2f}x{peak:>13}"
        )
    if any(not run["peak_reset"] for run in r["runs"]):
        lines.append("  * peak since the process started (this system cannot reset it)")
    lines += _where_time_went(r["runs"])
    return "\n".join(lines)


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v * 1e3:.3g}"


def _where_time_went(runs: list[dict[str, Any]]) -> list[str]:
    """Each loader run's ``stats()`` (docs/usage/telemetry.md): the source's reads, their
    latency percentiles, and the share of the run spent waiting for batches."""
    stats = [run for run in runs if run.get("stats")]
    if not stats:
        return []
    lines = [
        "  where the loader's time went (loader.stats()):",
        f"  {'batch':>7}{'reads':>9}{'read ms p50/p90/p99':>24}{'waited':>9}{'MB out':>9}",
    ]
    for run in stats:
        s, lat = run["stats"], run["stats"]["read_latency_s"]
        share = s["wait_s"] / run["seconds"] if run["seconds"] > 0 else 0.0
        pct = f"{_ms(lat['p50'])}/{_ms(lat['p90'])}/{_ms(lat['p99'])}"
        lines.append(
            f"  {run['batch']:>7,}{s['reads']:>9,}{pct:>24}{share:>8.0%} {s['bytes'] / 1e6:>8.1f}"
        )
    return lines
