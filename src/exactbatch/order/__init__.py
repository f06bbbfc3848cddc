"""Pure functions of the row order: keyed epoch orders, chunk orders and shards."""

from exactbatch.order.bijection import EpochBijection, epoch_rows
from exactbatch.order.keys import buffer_rng, chunk_order, derive_rng
from exactbatch.order.shards import Shard, check_shard, chunk_pieces

__all__ = [
    "EpochBijection",
    "Shard",
    "buffer_rng",
    "check_shard",
    "chunk_order",
    "chunk_pieces",
    "derive_rng",
    "epoch_rows",
]
