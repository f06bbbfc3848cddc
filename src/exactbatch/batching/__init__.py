"""Cutting epochs into exact batches: random-access epochs, streamed passes,
re-batching, and the shuffle buffers (one module per algorithm)."""

from exactbatch.batching.random_access_epoch import RandomAccessEpoch, num_batches

IndexedEpoch = RandomAccessEpoch  # the old name, kept working

__all__ = ["IndexedEpoch", "RandomAccessEpoch", "num_batches"]
