"""The Ray Data datasink of :mod:`exactbatch.ray` (see :mod:`exactbatch.adapters.ray`).

A module of its own, with what its write tasks run, because it imports ray
as it is imported (a Datasink subclass needs its base class):
:mod:`exactbatch.ray` imports it on first access of ``NdfDatasink``.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from exactbatch.adapters.dask_plan import Column, Columns, frame_columns
from exactbatch.checks import check_int
from exactbatch.errors import NdfOrderWarning
from exactbatch.extras import need
from exactbatch.hints import Foreign, PathLike
from exactbatch.ndf.dataset_protocol import abort_dataset, finish_dataset, start_dataset, write_part
from exactbatch.ndf.manifest import Manifest, PartInfo, file_not_dataset
from exactbatch.ndf.storage import location

__all__ = ["NdfDatasink", "block_frame", "schema_dtypes"]

# ray and Ray Data, or the ImportError saying how to install them (as import_ray says it)
need("ray.data", by="exactbatch.ray", package="Ray Data", extra="ray")

from ray.data import Datasink  # noqa: E402

if TYPE_CHECKING:
    from ray.data.datasource.datasink import WriteResult

CALLER = "NdfDatasink"

# What a write task returns (plain data: Ray keeps it in a table): its index, its
# part's file name, rows and bytes, and the names of the features and the labels it
# chose; a task given no block before the widths are known: (index, None, 0, 0, None, None)
Written = tuple[int, str | None, int, int, list[str] | None, list[str] | None]


def schema_dtypes(schema: Foreign) -> tuple[list[str], dict[str, np.dtype]]:
    """A Ray Dataset schema's column names, and each column's NumPy dtype (object for a
    type with no NumPy counterpart: strings, tensors, lists)."""
    names = list(schema.names)
    dtypes: dict[str, np.dtype] = {}
    for name, t in zip(names, schema.types, strict=True):
        try:
            dt = np.dtype(t.to_pandas_dtype() if hasattr(t, "to_pandas_dtype") else t)
        except (TypeError, NotImplementedError, ValueError):
            dt = np.dtype(object)
        dtypes[name] = dt
    return names, dtypes


def block_frame(blocks: Iterable[Foreign]) -> Foreign:
    """One write task's blocks as one pandas DataFrame (None for no block)."""
    import pandas as pd
    from ray.data.block import BlockAccessor

    frames = [BlockAccessor.for_block(b).to_pandas() for b in blocks]
    if not frames:
        return None
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]


class NdfDatasink(Datasink[Written]):
    """A Ray Data datasink that writes a sharded ``.ndf`` dataset at ``path``.

    ``ds.write_datasink(NdfDatasink(path, features=..., labels=...))``: one
    part per write task (the blocks Ray hands it), each written atomically
    by the task, in parallel; the manifest last, by the driver, listing the
    parts in the order of the tasks' indices, which is the Dataset's order
    when Ray keeps it (``execution_options.preserve_order``, which
    :func:`to_ndf_dataset` sets). ``path``: a local folder (made if missing;
    every node writing must see it) or a URL with ``storage_options``.
    A file at ``path`` is an :class:`~exactbatch.NdfError`; bad columns
    are refused by each write task before it writes its part. On any
    failure the parts of this write are removed and no manifest is
    written; a dataset already at ``path`` stays as it was. (A part that a
    task Ray failed to stop in time writes after the clean-up is removed by
    the next write to the folder, as the parts of a killed write are.)
    ``manifest`` (after the write): the manifest written.

    ``rows_per_part``: Ray's ``min_rows_per_write``: Ray bundles at least
    this many rows into each write task (the last task takes what is left),
    so a part holds about ``rows_per_part`` rows (a block is never cut: a
    part can hold more) and the parts are written in parallel. None (the
    default) leaves the bundling to Ray, which may hand one task most of
    the rows.

    Row order: the parts follow the write tasks' indices, which follow the
    Dataset's order only when Ray's ``preserve_order`` is on.
    :func:`~exactbatch.ray.to_ndf_dataset` turns it on for its write, so row
    i written is row i of the Dataset. A plain ``ds.write_datasink(sink)``
    under ``preserve_order=False`` (Ray's default) writes the same rows,
    each once, in the order Ray's tasks received their blocks (which can
    differ from the Dataset's, run to run), and warns
    (``NdfOrderWarning``) as the write starts.
    """

    def __init__(
        self,
        path: PathLike,
        *,
        features: Any = None,
        labels: Any = (),
        storage_options: dict[str, Any] | None = None,
        rows_per_part: int | None = None,
    ) -> None:
        if rows_per_part is not None:
            rows_per_part = check_int("rows_per_part", rows_per_part, 1)
        self.rows_per_part = rows_per_part
        self.ordered = False  # set by to_ndf_dataset, which turns preserve_order on
        where = location(path, storage_options)
        self.path = where.path
        if not where.url and where.is_file():  # free locally (a URL's start_dataset checks)
            raise file_not_dataset(self.path)
        self.features, self.labels = features, labels
        self.storage_options = storage_options
        self.columns: Columns | None = None  # chosen by each task from its blocks
        # the names of the features and the labels
        self.names: tuple[tuple[str, ...], tuple[str, ...]] = ((), ())
        self.write_id: str | None = None
        self.manifest: Manifest | None = None

    def choose(
        self, names: Sequence[Column], dtypes: Foreign
    ) -> tuple[Columns, tuple[str, ...], tuple[str, ...]]:
        """The columns to read of a table with these column ``names`` and ``dtypes``
        (checked: an error naming a bad one); they become the sink's once chosen."""
        chosen = frame_columns(names, dtypes, self.features, self.labels, CALLER, "Dataset")
        self.columns, self.names = chosen[0], chosen[1:]
        return chosen

    def on_write_start(self, schema: Foreign = None) -> None:
        # ``schema`` is not used to choose the columns: when Ray fuses the write with
        # the operators before it, it is the schema of their input, not of the rows
        # written. Each task checks its own blocks instead (to_ndf_dataset checks
        # ``dataset.schema()`` first).
        if self.write_id is None:  # (Ray calls this once, on the driver)
            self._warn_unordered()
            self.write_id = start_dataset(self.path, storage_options=self.storage_options)

    @property
    def min_rows_per_write(self) -> int | None:
        """Ray bundles at least this many rows into a write task: ``rows_per_part``."""
        return self.rows_per_part

    def _warn_unordered(self) -> None:
        from ray.data import DataContext

        if self.ordered or DataContext.get_current().execution_options.preserve_order:
            return
        warnings.warn(
            f"{CALLER}({self.path!r}): Ray's preserve_order is off, so the parts are "
            "written in the order Ray's tasks receive their blocks, which can differ from "
            "the Dataset's (row ids then do not match its row numbers). For the Dataset's "
            "order use exactbatch.ray.to_ndf_dataset, or set "
            "DataContext.get_current().execution_options.preserve_order = True",
            NdfOrderWarning,
            stacklevel=2,
        )

    def write(self, blocks: Iterable[Foreign], ctx: Foreign) -> Written:
        if self.write_id is None:
            raise RuntimeError(f"{CALLER}: a write task ran before on_write_start")
        frame = block_frame(blocks)
        if frame is None:  # a task given no block: an empty part, if the widths are known
            if self.columns is None:
                return (ctx.task_idx, None, 0, 0, None, None)
            d, l = len(self.columns.features), len(self.columns.labels)  # noqa: E741
            x, y = np.empty((0, d)), np.empty((0, l))
        else:
            columns, *names = self.choose(list(frame.columns), frame.dtypes)
            x, y = columns.to_xy(frame)
        info = write_part(
            self.path,
            ctx.task_idx,
            (x, y),
            write_id=self.write_id,
            storage_options=self.storage_options,
        )
        features, labels = self.names
        # plain data (Ray keeps it in a table): the part, and the names its task chose
        return (ctx.task_idx, *info, list(features), list(labels))

    def on_write_complete(self, write_result: WriteResult[Written]) -> None:
        if self.write_id is None:
            raise ValueError(f"{self.path}: no parts to write (the Dataset has no blocks)")
        try:
            done = sorted(
                (r for r in write_result.write_returns if r is not None and r[1] is not None),
                key=lambda r: r[0],
            )
            if not done:
                raise ValueError(f"{self.path}: no parts to write (the Dataset has no rows)")
            # (a part written has its names: a list each, never None)
            names = {(tuple(r[4] or ()), tuple(r[5] or ())) for r in done}
            if len(names) > 1:
                raise ValueError(
                    f"{self.path}: the Dataset's blocks have different columns: {sorted(names)}"
                )
            ((features, labels),) = names
            parts = [PartInfo(str(r[1]), int(r[2]), int(r[3])) for r in done]
            self.manifest = finish_dataset(
                self.path,
                self.write_id,
                parts,
                len(features),
                len(labels),
                features=features,
                labels=labels,
                storage_options=self.storage_options,
            )
        except BaseException:
            abort_dataset(self.path, self.write_id, storage_options=self.storage_options)
            raise

    def on_write_failed(self, error: Exception) -> None:
        # Ray has cancelled the tasks still running (without waiting for them): a part
        # one of them renames into place after this is left for the next write to the
        # folder to remove (its write's marker is gone), as after a killed write.
        if self.write_id is not None:
            abort_dataset(self.path, self.write_id, storage_options=self.storage_options)

    def get_name(self) -> str:
        return "NdfDataset"

    def __repr__(self) -> str:
        return f"NdfDatasink({self.path!r})"
