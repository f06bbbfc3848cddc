"""Pure functions of the row order: epoch permutations and shard ranges."""

from exactbatch.order.bijection import EpochBijection, epoch_rows
from exactbatch.order.permutation import buffer_rng, chunk_order, derive_rng, epoch_permutation
from exactbatch.order.shards import check_shard, chunk_pieces, elastic_positions, shard_range

__all__ = [
    "EpochBijection",
    "buffer_rng",
    "check_shard",
    "chunk_order",
    "chunk_pieces",
    "derive_rng",
    "elastic_positions",
    "epoch_permutation",
    "epoch_rows",
    "shard_range",
]
