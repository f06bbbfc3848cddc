"""Cutting epochs into exact batches."""

from exactbatch.batching.indexed import IndexedEpoch, num_batches

__all__ = ["IndexedEpoch", "num_batches"]
