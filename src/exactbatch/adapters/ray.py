"""Ray: write a Ray Dataset as a sharded ``.ndf`` dataset, and shard loaders by Ray Train.

* :class:`NdfDatasink` (``ds.write_datasink(NdfDatasink(path, ...))``) and
  :func:`to_ndf_dataset` write a Ray Dataset of numeric columns as a sharded
  dataset by the protocol of :mod:`exactbatch.ndf.dataset_protocol`, as
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

from types import ModuleType
from typing import Any

from exactbatch.extras import need
from exactbatch.hints import PathLike

# NdfDatasink (exactbatch.adapters.ray_sink) is imported on first access (module
# __getattr__), so ray loads lazily.
__all__ = ["NdfDatasink", "import_ray", "to_ndf_dataset"]  # noqa: F822


def import_ray() -> ModuleType:
    """ray (with Ray Data), or an ImportError saying how to install it."""
    need("ray.data", by="exactbatch.ray", package="Ray Data", extra="ray")
    return need("ray", by="exactbatch.ray", package="Ray Data", extra="ray")


def __getattr__(name: str) -> type:
    if name == "NdfDatasink":  # its module imports ray: on first use only
        from exactbatch.adapters.ray_sink import NdfDatasink

        return NdfDatasink
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def to_ndf_dataset(
    dataset: Any,
    path: PathLike,
    *,
    features: Any = None,
    labels: Any = (),
    storage_options: dict[str, Any] | None = None,
    rows_per_part: int | None = None,
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
    ``rows_per_part``: at least this many rows to a write task, so to a part
    (Ray's ``min_rows_per_write``; see :class:`NdfDatasink`).
    """
    ray = import_ray()
    if not isinstance(dataset, ray.data.Dataset):
        raise TypeError(f"to_ndf_dataset needs a ray.data.Dataset; got {type(dataset).__name__}")
    from exactbatch.adapters.ray_sink import NdfDatasink, schema_dtypes

    sink = NdfDatasink(
        path,
        features=features,
        labels=labels,
        storage_options=storage_options,
        rows_per_part=rows_per_part,
    )
    sink.ordered = True  # preserve_order is on for this write (below)
    schema = dataset.schema()
    if schema is None:
        raise ValueError(f"{sink.path}: no parts to write (the Dataset has no blocks)")
    sink.choose(*schema_dtypes(schema))
    options = dataset.context.execution_options
    before = options.preserve_order
    options.preserve_order = True
    try:
        dataset.write_datasink(sink)
    finally:
        options.preserve_order = before
