"""``exactbatch shuffle``: the one-time shuffle on disk, in bounded memory.

For data sorted on disk (by time, say) a streaming loader's bounded buffer
only mixes locally; shuffling the file once cures it. This does it for an
``.ndf`` file of any size with a fixed memory budget.

Algorithm (an external-memory form of Sanders, "Random permutations on
distributed, external and hierarchical memory", 1998):

1. scatter: read the input front to back in slabs; every row draws one of K
   bucket files uniformly at random, and is appended to it;
2. for each bucket in turn: if it fits in the budget, load it, shuffle it in
   memory (Fisher-Yates) and append it to the output; if not (bad luck, or
   more data than K buckets of budget), scatter it again into sub-buckets,
   recursively.

The output keeps the input's column names (its names sidecar, if any).
The output is a uniformly random permutation of the input rows: the chance
of any order is a sum over bucket assignments that does not depend on the
order, and by induction each bucket comes out uniformly shuffled. It is a
pure function of (input, seed, memory budget).

What it costs:

* Memory: at most the budget above the interpreter's baseline. K is chosen
  so that a bucket holds about half the budget (K = ceil(2 * data / budget),
  at most 256 open bucket files; more data recurses); scattering holds two
  slabs of a quarter of the budget plus 10 bytes of bookkeeping per row.
* Disk: the buckets (as large as the data) in a temporary folder (the
  output's folder unless told otherwise), removed as they are consumed, plus
  the output, written atomically (temp file, fsync, rename).
* I/O: the data is read twice and written twice (three times per extra
  level of recursion).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any

import numpy as np

from exactbatch.arrays import byte_view
from exactbatch.checks import check_flag, check_int
from exactbatch.hints import PathLike
from exactbatch.ndf.dataset_write import NdfDatasetWriter
from exactbatch.ndf.write import NdfWriter, leaves_no_temps
from exactbatch.tools.common import (
    Bar,
    CliError,
    check_dataset_output,
    check_interrupt,
    check_output,
    detect_format,
    format_bytes,
    named_format,
    progress,
    refuse_url,
)
from exactbatch.tools.ndf_stream import (
    Region,
    ndf_regions,
    read_regions_into,
    region_blocks,
    row_dtype,
)

__all__ = ["external_shuffle", "render", "shuffle_file", "shuffle_regions"]

# what takes shuffled rows (whole rows in the file's layout, valid during the call)
_Write = Callable[[np.ndarray], object]
_Scattered = Callable[[int], object]  # told how many rows pass 1 scattered

_TAG_DISK = 0x65786473  # keeps this generator's stream apart from the loader's
MAX_BUCKETS = 256  # open bucket files at once; more data recurses instead
_MAX_DEPTH = 64  # recursion guard: each level shrinks buckets about K-fold
_EMPTY_ROWS = 1 << 59  # rows of no values written at once


def shuffle_rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([_TAG_DISK, int(seed)])))


def external_shuffle(
    path: str,
    offset: int,
    rows: int,
    row_bytes: int,
    write: _Write,
    rng: np.random.Generator,
    memory: int,
    workdir: str,
    on_scatter: _Scattered | None = None,
) -> None:
    """Append the ``rows`` rows at ``offset`` of ``path`` to ``write`` in uniform random order.

    ``write(view)`` receives whole rows in the file's layout (bytes-like;
    valid only during the call). Buckets go to files in ``workdir``;
    ``memory`` is the budget in bytes (at least one row). ``on_scatter(rows)``
    is called as the top level scatters rows (for progress).
    """
    shuffle_regions([(path, offset, rows)], row_bytes, write, rng, memory, workdir, on_scatter)


def shuffle_regions(
    regions: Sequence[Region],
    row_bytes: int,
    write: _Write,
    rng: np.random.Generator,
    memory: int,
    workdir: str,
    on_scatter: _Scattered | None = None,
    _depth: int = 0,
) -> None:
    """:func:`external_shuffle` of the rows of ``regions`` (``[(path, offset, rows), ...]``,
    the parts of a dataset, say) taken in turn: the same order as for one file holding
    them all."""
    rows = sum(r for _, _, r in regions)
    if rows == 0:
        return
    if rows * row_bytes <= memory:
        block = read_regions_into(regions, row_bytes, np.empty(rows, dtype=row_dtype(row_bytes)))
        rng.shuffle(block)  # (rows,) whole rows, shuffled in place
        write(block)
        return
    if _depth >= _MAX_DEPTH:  # pragma: no cover - probability ~0
        raise RuntimeError(f"external shuffle did not converge after {_depth} levels")
    k = min(MAX_BUCKETS, max(2, math.ceil(2 * rows * row_bytes / memory)))
    names = [os.path.join(workdir, f"bucket-{_depth}-{j}") for j in range(k)]
    counts = _scatter(regions, rows, row_bytes, rng, k, names, memory, on_scatter)
    try:
        for name, count in zip(names, counts.tolist(), strict=True):
            shuffle_regions(
                [(name, 0, count)], row_bytes, write, rng, memory, workdir, None, _depth + 1
            )
            os.unlink(name)  # free the disk as we go
    finally:
        for name in names:
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass


def _scatter(
    regions: Sequence[Region],
    rows: int,
    row_bytes: int,
    rng: np.random.Generator,
    k: int,
    names: list[str],
    memory: int,
    on_scatter: _Scattered | None,
) -> np.ndarray:
    """Pass 1: every row to a uniformly random one of ``k`` bucket files; their row counts."""
    slab = max(1, memory // (4 * row_bytes))
    counts = np.zeros(k, dtype=np.int64)
    gathered = np.empty(min(slab, rows), dtype=row_dtype(row_bytes))
    files = [open(name, "wb", buffering=0) for name in names]  # noqa: SIM115
    try:
        for part in region_blocks(regions, row_bytes, slab):
            r = part.shape[0]
            label = rng.integers(0, k, size=r, dtype=np.uint16)
            order = np.argsort(label, kind="stable")  # radix sort: group rows by bucket
            np.take(part, order, out=gathered[:r], mode="clip")  # "raise" would buffer
            del order
            ends = np.cumsum(np.bincount(label, minlength=k))
            counts += np.diff(ends, prepend=0)
            start = 0
            for f, end in zip(files, ends.tolist(), strict=True):
                if end > start:
                    view = byte_view(gathered[start:end])
                    while view:
                        view = view[f.write(view) :]
                start = end
            if on_scatter is not None:
                on_scatter(r)
    finally:
        for f in files:
            f.close()
    return counts


def shuffle_file(
    src: PathLike,
    dst: PathLike,
    *,
    seed: int,
    memory: int,
    force: bool = False,
    tmp_dir: PathLike | None = None,
    bar: bool = True,
    part_rows: int | None = None,
) -> dict[str, Any]:
    """Shuffle the rows of the ``.ndf`` file or sharded dataset ``src`` into ``dst`` (see
    the module docstring).

    ``dst`` is a sharded dataset when ``src`` is one or ``part_rows`` is given:
    a new part every ``part_rows`` rows (default: as many as ``src``'s largest
    part), the manifest last (keeping ``src``'s column names). The order is
    the one a shuffle of one file holding ``src``'s rows would give.
    """
    seed, memory = check_int("seed", seed, 0, maximum=None), check_int("memory", memory, 1)
    force, bar = check_flag("force", force), check_flag("bar", bar)
    if part_rows is not None:
        part_rows = check_int("part_rows", part_rows, 1)
    src, dst = os.fspath(src), os.fspath(dst)
    fmt = detect_format(src)
    if fmt not in ("ndf", "dataset"):
        raise CliError(
            f"{src}: shuffle reads .ndf files and sharded datasets; convert this {fmt} data "
            "first (exactbatch convert SRC NAME.ndf)"
        )
    named = named_format(dst)
    if named not in (None, "ndf"):  # an .ndf written under a name that says otherwise
        raise CliError(
            f"{dst}: shuffle writes an .ndf file (or a sharded dataset), not {named}; name "
            f"it NAME.ndf, then convert it: exactbatch convert NAME.ndf {dst}"
        )
    inp = ndf_regions(src)
    n, d, l = inp.n, inp.d, inp.l  # noqa: E741
    sharded = fmt == "dataset" or part_rows is not None
    if sharded:
        part_rows = part_rows or max([rows for _, _, rows in inp.regions] + [1])
        check_dataset_output(dst, force)
    else:
        check_output(dst, force)
    row_bytes = 8 * (d + l)
    data = n * row_bytes
    if row_bytes and memory < row_bytes:
        raise CliError(f"--memory {memory} bytes cannot hold one row of {src} ({row_bytes} bytes)")
    tmp_root = os.fspath(tmp_dir) if tmp_dir else os.path.dirname(os.path.abspath(dst))
    refuse_url(tmp_root, "writing")
    in_memory = data <= memory
    _check_space(dst, tmp_root, data, in_memory)
    rng = shuffle_rng(seed)
    desc = os.path.basename(src)
    names: dict[str, Any] = {"features": inp.features, "labels": inp.labels}  # kept
    writer: Callable[..., NdfWriter | NdfDatasetWriter]
    if part_rows is not None:  # (sharded: set above)
        writer = partial(NdfDatasetWriter, dst, d, l, part_rows, **names)
    else:
        writer = partial(NdfWriter, dst, d, l, **names)
    # made inside leaves_no_temps: a Ctrl-C just after it made its temporary file
    with leaves_no_temps(dst), writer(n=n, before_rename=check_interrupt) as w:
        if row_bytes == 0 or n == 0:
            # nothing to move: the row count says it all (a header may claim 2**63 - 1
            # rows of no values; NumPy shapes at most 2**59 float64 rows, even empty ones)
            for a in range(0, n, _EMPTY_ROWS):
                w.write(np.empty((min(_EMPTY_ROWS, n - a), 0)))
        elif in_memory:
            with progress(n, f"shuffle {desc} (in memory)", "rows", bar) as pb:

                def write(v: np.ndarray) -> None:
                    w.write_raw(v)
                    pb.update(len(v))

                shuffle_regions(
                    inp.regions,
                    row_bytes,
                    write,
                    rng,
                    memory,
                    "",
                )
        else:
            with _bucket_folder(tmp_root) as workdir, _TwoPassOutput(w, n, desc, bar) as out:
                shuffle_regions(
                    inp.regions,
                    row_bytes,
                    out.write,
                    rng,
                    memory,
                    workdir,
                    on_scatter=out.scattered,
                )
    report: dict[str, Any] = {
        "src": src,
        "dst": dst,
        "n": n,
        "d": d,
        "l": l,
        "seed": seed,
        "memory": memory,
        "data_bytes": data,
        "passes": 1 if in_memory or not data else 2,
    }
    if sharded:
        assert isinstance(w, NdfDatasetWriter)  # (sharded: a dataset's writer)
        report.update(parts=len(w.parts), part_rows=part_rows)
    return report


def render(out: dict[str, Any]) -> str:
    """The summary line of a shuffle."""
    how = "in memory" if out["passes"] == 1 else "in two passes through bucket files"
    parts = f" in {out['parts']:,} parts" if "parts" in out else ""
    return (
        f"wrote {out['dst']}: {out['n']:,} rows{parts} shuffled {how} (seed {out['seed']}, "
        f"memory budget {out['memory']:,} bytes)"
    )


class _TwoPassOutput:
    """Feeds the writer and shows pass 1 (scatter), then pass 2 (write), as progress bars."""

    def __init__(self, writer: NdfWriter | NdfDatasetWriter, n: int, desc: str, bar: bool) -> None:
        self.writer, self.n, self.desc, self.bar = writer, n, desc, bar
        self.pass1 = progress(n, f"shuffle {desc}: pass 1/2 scatter", "rows", bar)
        self.pass2: Bar | None = None

    def scattered(self, rows: int) -> None:
        self.pass1.update(rows)

    def write(self, rows: np.ndarray) -> None:
        if self.pass2 is None:
            self.pass1.close()
            self.pass2 = progress(self.n, f"shuffle {self.desc}: pass 2/2 write", "rows", self.bar)
        self.writer.write_raw(rows)
        self.pass2.update(len(rows))

    def close(self) -> None:
        self.pass1.close()
        if self.pass2 is not None:
            self.pass2.close()

    def __enter__(self) -> _TwoPassOutput:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def _bucket_folder(root: str) -> Iterator[str]:
    """A new folder in ``root`` for the bucket files, removed with them at the end.

    Its name carries this process's id, so that one a Ctrl-C left between its
    creation and the code that would remove it is found (and removed) too.
    """
    prefix = f".exactbatch-shuffle-{os.getpid()}-"
    try:
        yield tempfile.mkdtemp(prefix=prefix, dir=root)
    finally:
        with contextlib.suppress(OSError):
            for name in os.listdir(root):
                if name.startswith(prefix):
                    shutil.rmtree(os.path.join(root, name), ignore_errors=True)


def _check_space(dst: str, tmp_root: str, data: int, in_memory: bool) -> None:
    """Refuse early when the output (and the buckets) cannot fit on disk."""
    if not os.path.isdir(tmp_root):
        raise CliError(f"{tmp_root}: temporary folder does not exist")
    need: dict[int, tuple[str, int]] = {}
    out_folder = os.path.dirname(os.path.abspath(dst))
    for folder, size in ((out_folder, data), (tmp_root, 0 if in_memory else data)):
        dev = os.stat(folder).st_dev
        need[dev] = (folder, need.get(dev, (folder, 0))[1] + size)
    for folder, size in need.values():
        free = shutil.disk_usage(folder).free
        if size > free:
            raise CliError(
                f"{folder}: the shuffle needs about {format_bytes(size)} free here "
                f"(output{' and buckets' if not in_memory else ''}); {format_bytes(free)} free"
            )
