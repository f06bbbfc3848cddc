"""Pure functions of the row order: epoch permutations and shard ranges."""

from exactbatch.order.permutation import derive_rng, epoch_permutation
from exactbatch.order.shards import check_shard, shard_range

__all__ = ["check_shard", "derive_rng", "epoch_permutation", "shard_range"]
