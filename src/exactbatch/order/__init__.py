"""Pure functions of the row order: keyed epoch orders, chunk orders and shard ranges."""

from exactbatch.order.bijection import EpochBijection, epoch_rows
from exactbatch.order.keys import buffer_rng, chunk_order, derive_rng
from exactbatch.order.shards import check_shard, chunk_pieces, elastic_share, shard_range

__all__ = [
    "EpochBijection",
    "buffer_rng",
    "check_shard",
    "chunk_order",
    "chunk_pieces",
    "derive_rng",
    "elastic_share",
    "epoch_rows",
    "shard_range",
]
