"""Cutting epochs into exact batches: random-access epochs, streamed passes,
re-batching, and the shuffle buffers (one module per algorithm)."""

from exactbatch.batching.indexed_epoch import IndexedEpoch, num_batches

__all__ = ["IndexedEpoch", "num_batches"]
