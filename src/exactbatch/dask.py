"""Dask adapter: ``from exactbatch.dask import to_ndf_dataset, dask_source, column_stats``.

A thin public name for :mod:`exactbatch.adapters.dask`; see there. dask is
imported on first use, not by importing this module.
"""

from exactbatch.adapters.dask import (
    DaskPartitions,
    DaskStream,
    column_stats,
    dask_source,
    to_ndf_dataset,
)

__all__ = ["DaskPartitions", "DaskStream", "column_stats", "dask_source", "to_ndf_dataset"]
