"""PyTorch adapter: ``from exactbatch.torch import as_torch``.

A thin public name for :mod:`exactbatch.adapters.torch`; see there; and for the
checkpoints of a torchrun job, ``save_checkpoint``, ``load_checkpoint`` and
``certify_folder`` (:mod:`exactbatch.adapters.torch_checkpoint`). torch is imported
on first use, not by importing this module.
"""

from exactbatch.adapters.torch import TorchLoader, as_torch, distributed_shard
from exactbatch.adapters.torch_checkpoint import certify_folder, load_checkpoint, save_checkpoint

# TorchIterable is made on first access (__getattr__ below), so torch loads lazily.
__all__ = [  # noqa: F822
    "TorchIterable",
    "TorchLoader",
    "as_torch",
    "certify_folder",
    "distributed_shard",
    "load_checkpoint",
    "save_checkpoint",
]


def __getattr__(name: str) -> type:
    if name == "TorchIterable":  # defined lazily, so that torch loads on first use
        from exactbatch.adapters import torch as _adapter

        made: type = _adapter.TorchIterable
        return made
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
