"""Ray adapter: ``from exactbatch.ray import NdfDatasink, to_ndf_dataset``.

A thin public name for :mod:`exactbatch.adapters.ray`; see there. ray is
imported on first use, not by importing this module. Inside a Ray Train
worker, ``DataLoader(num_shards="auto", shard_index="auto")`` shards by the
worker's world rank and size (:mod:`exactbatch.distributed`); ``report_with_loader``,
``restore_loader`` and ``certify_run`` (:mod:`exactbatch.adapters.ray_train`) keep
every worker's loader state in Ray Train's checkpoints and certify the run from them.
"""

from exactbatch.adapters.ray import to_ndf_dataset
from exactbatch.adapters.ray_train import certify_run, report_with_loader, restore_loader

# NdfDatasink is made on first access (__getattr__ below), so ray loads lazily.
__all__ = [  # noqa: F822
    "NdfDatasink",
    "certify_run",
    "report_with_loader",
    "restore_loader",
    "to_ndf_dataset",
]


def __getattr__(name: str) -> type:
    if name == "NdfDatasink":  # defined lazily, so that ray loads on first use
        from exactbatch.adapters import ray as _adapter

        made: type = _adapter.NdfDatasink
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
