"""Ray: write a Ray Dataset as a sharded ``.ndf`` dataset, and shard loaders by Ray Train.

* :class:`NdfDatasink` (``ds.write_datasink(NdfDatasink(path, ...))``) and
  :func:`to_ndf_dataset` write a Ray Dataset of numeric columns as a sharded
  dataset by the protocol of :mod:`exactbatch.ndf.dataset_write`, as
  ``exactbatch.dask.to_ndf_dataset`` does for Dask: the driver starts the
  write (``on_write_start``); each Ray write task converts its blocks and
  writes them as one part, atomically, named by the task's index (so a task
  Ray retries rewrites the same part); the driver writes the manifest last
  (``on_write_complete``), listing the parts in task order, so the new
  dataset appears only when every part is there, replacing the old one at
  once. A failed write (a task that raises, ``on_write_failed``) removes the
  parts written and leaves no manifest: the old dataset is as it was. Costs:
  a write task holds its blocks (and their float64 copy) at a time; the
  driver one small record per part.
* Ray Train: inside a Ray Train worker, ``DataLoader(num_shards="auto",
  shard_index="auto")`` takes the worker's world rank and world size from
  ``ray.train.get_context()`` (see :mod:`exactbatch.distributed`), so a run
  that Ray Train restarts at another worker count shards by the new count;
  with ``elastic=True`` the loader's state resumes there exactly.

Columns are chosen and checked as for a Dask DataFrame
(:func:`~exactbatch.adapters.dask_plan.frame_columns`, which both share):
``labels`` names the label columns, ``features`` the features (None: every
column not a label); every chosen column must hold real numbers, else a
``TypeError`` naming it (a column of tensors, as ``ray.data.from_numpy``
makes, included: give each feature a column of its own). The names go into
the manifest. ray is imported on first use, not by importing this module.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from exactbatch.adapters.dask_plan import Columns, check_real, frame_columns
from exactbatch.extras import need
from exactbatch.hints import PathLike
from exactbatch.ndf.dataset_write import abort_dataset, finish_dataset, start_dataset, write_part
from exactbatch.ndf.manifest import PartInfo, dataset_path, file_not_dataset
from exactbatch.urls import is_url

# NdfDatasink is made on first access (module __getattr__), so ray loads lazily.
__all__ = ["NdfDatasink", "to_ndf_dataset"]  # noqa: F822

_CALLER = "NdfDatasink"


def _ray():
    """ray (with Ray Data), or an ImportError saying how to install it."""
    need("ray.data", by="exactbatch.ray", package="Ray Data", extra="ray")
    return need("ray", by="exactbatch.ray", package="Ray Data", extra="ray")


def _schema_dtypes(schema) -> tuple[list, dict]:
    """A Ray Dataset schema's column names, and each column's NumPy dtype (object for a
    type with no NumPy counterpart: strings, tensors, lists)."""
    names = list(schema.names)
    dtypes = {}
    for name, t in zip(names, schema.types, strict=True):
        try:
            dt = np.dtype(t.to_pandas_dtype() if hasattr(t, "to_pandas_dtype") else t)
        except (TypeError, NotImplementedError, ValueError):
            dt = np.dtype(object)
        dtypes[name] = dt
    return names, dtypes


def _block_xy(blocks, columns: Columns) -> tuple[np.ndarray, np.ndarray]:
    """One write task's blocks, concatenated, as float64 ``(x, y)``; a block whose chosen
    columns do not hold real numbers is a ``TypeError`` naming them."""
    import pandas as pd
    from ray.data.block import BlockAccessor

    frames = [BlockAccessor.for_block(b).to_pandas() for b in blocks]
    if not frames:  # a task given no block: an empty part of the right widths
        return np.empty((0, len(columns.features))), np.empty((0, len(columns.labels)))
    frame = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    chosen = [*columns.features, *columns.labels]
    missing = [c for c in chosen if c not in frame.columns]
    if missing:
        raise ValueError(f"{_CALLER}: a block has no column(s) {missing}")
    check_real(chosen, frame.dtypes, _CALLER)
    return columns.to_xy(frame)


def _datasink_class():
    """The ``NdfDatasink`` class, defined on first use so that ray loads lazily."""
    global _DATASINK
    if _DATASINK is not None:
        return _DATASINK
    Datasink = _ray().data.Datasink

    class NdfDatasink(Datasink):
        """A Ray Data datasink that writes a sharded ``.ndf`` dataset at ``path``.

        ``ds.write_datasink(NdfDatasink(path, features=..., labels=...))``: one
        part per write task (the blocks Ray hands it), each written atomically
        by the task, in parallel; the manifest last, by the driver, listing the
        parts in the order of the tasks' indices, which is the Dataset's order
        when Ray keeps it (``execution_options.preserve_order``, which
        :func:`to_ndf_dataset` sets). ``path``: a local folder (made if missing;
        every node writing must see it) or a URL with ``storage_options``.
        A file at ``path`` is an :class:`~exactbatch.NdfError`; bad columns
        are refused at the first block, before any part is written. On any
        failure the parts of this write are removed and no manifest is
        written; a dataset already at ``path`` stays as it was.
        ``manifest`` (after the write): the manifest written.
        """

        def __init__(
            self,
            path: PathLike,
            *,
            features: Any = None,
            labels: Any = (),
            storage_options: dict | None = None,
        ) -> None:
            self.path = dataset_path(path, storage_options)
            if not is_url(self.path) and os.path.isfile(self.path):
                raise file_not_dataset(self.path)
            self.features, self.labels = features, labels
            self.storage_options = storage_options
            self.columns: Columns | None = None  # chosen at the first block's schema
            self.names: tuple = ((), ())
            self.write_id: str | None = None
            self.manifest = None

        def choose(self, schema) -> None:
            """Choose and check the columns from the Dataset's ``schema``."""
            names, dtypes = _schema_dtypes(schema)
            self.columns, *names_ = frame_columns(
                names, dtypes, self.features, self.labels, _CALLER, frame="Dataset"
            )
            self.names = tuple(names_)

        def on_write_start(self, schema=None) -> None:
            if schema is not None and self.columns is None:
                self.choose(schema)
            if self.write_id is None:  # (Ray calls this once, on the driver)
                self.write_id = start_dataset(self.path, storage_options=self.storage_options)

        def write(self, blocks, ctx) -> tuple:
            if self.write_id is None or self.columns is None:
                raise RuntimeError(f"{_CALLER}: a write task ran before on_write_start")
            x, y = _block_xy(list(blocks), self.columns)
            info = write_part(
                self.path,
                ctx.task_idx,
                (x, y),
                write_id=self.write_id,
                storage_options=self.storage_options,
            )
            return (ctx.task_idx, *info)  # plain data: Ray keeps it in a table

        def on_write_complete(self, write_result) -> None:
            if self.write_id is None or self.columns is None:
                raise ValueError(f"{self.path}: no parts to write (the Dataset has no blocks)")
            try:
                done = sorted(tuple(r) for r in write_result.write_returns if r is not None)
                parts = [PartInfo(str(name), int(n), int(b)) for _, name, n, b in done]
                features, labels = self.names
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
            # Ray raises the error once its executor has stopped: no task writes any more.
            if self.write_id is not None:
                abort_dataset(self.path, self.write_id, storage_options=self.storage_options)

        def get_name(self) -> str:
            return "NdfDataset"

        def __repr__(self) -> str:
            return f"NdfDatasink({self.path!r})"

    NdfDatasink.__module__ = __name__
    NdfDatasink.__qualname__ = "NdfDatasink"  # pickled by name via __getattr__
    _DATASINK = NdfDatasink
    return NdfDatasink


_DATASINK: Any = None


def __getattr__(name: str):
    if name == "NdfDatasink":  # module attribute, made (and ray imported) on first use
        return _datasink_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_ndf_dataset(
    dataset: Any,
    path: PathLike,
    *,
    features: Any = None,
    labels: Any = (),
    storage_options: dict | None = None,
) -> None:
    """Write a Ray Dataset as a sharded ``.ndf`` dataset at ``path``: row i of the
    dataset written is row i of ``dataset``.

    ``features``, ``labels`` and ``storage_options`` as for
    ``exactbatch.dask.to_ndf_dataset`` (a Dataset's columns are named, as a
    DataFrame's). The columns are checked against ``dataset.schema()`` before
    anything is written. Then ``dataset.write_datasink(NdfDatasink(...))``
    runs with Ray's ``preserve_order`` on (for this write only), so the parts
    come in the Dataset's order: one part per write task, each written
    atomically by the task, the manifest last by the driver. A dataset
    already at ``path`` stays readable until the new manifest replaces it; on
    any failure the parts written are removed, and the error is raised.
    """
    ray = _ray()
    if not isinstance(dataset, ray.data.Dataset):
        raise TypeError(f"to_ndf_dataset needs a ray.data.Dataset; got {type(dataset).__name__}")
    sink = _datasink_class()(
        path, features=features, labels=labels, storage_options=storage_options
    )
    schema = dataset.schema()
    if schema is None:
        raise ValueError(f"{sink.path}: no parts to write (the Dataset has no blocks)")
    sink.choose(schema)
    options = dataset.context.execution_options
    before = options.preserve_order
    options.preserve_order = True
    try:
        dataset.write_datasink(sink)
    finally:
        options.preserve_order = before
