"""PyTorch adapter: ``from exactbatch.torch import as_torch``.

A thin public name for :mod:`exactbatch.adapters.torch`; see there. torch is
imported on first use, not by importing this module.
"""

from exactbatch.adapters.torch import TorchLoader, as_torch, distributed_shard

# TorchIterable is made on first access (__getattr__ below), so torch loads lazily.
__all__ = ["TorchIterable", "TorchLoader", "as_torch", "distributed_shard"]  # noqa: F822


def __getattr__(name: str):
    if name == "TorchIterable":  # defined lazily, so that torch loads on first use
        from exactbatch.adapters import torch as _adapter

        return _adapter.TorchIterable
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
