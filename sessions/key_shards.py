"""The due shards of the key layout (sessions.keys): which shard an id falls in, and the hash
tag of each shard, spread evenly over the slot space."""

from __future__ import annotations

import zlib
from functools import cache

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

MAX_SHARDS = 1024


def shard_of(name: str, shards: int) -> int:
    """The shard of a conversation (or any other id): stable across processes and versions."""
    return zlib.crc32(name.encode()) % shards


@cache
def shard_tag(shard: int, shards: int) -> str:
    """The hash tag of shard ``shard`` of ``shards``: the first ``<shard>.<n>`` whose slot lies in
    the shard's share of the 16384 slots (about ``shards`` CRC16s to find it)."""
    if not 0 <= shard < shards <= MAX_SHARDS:
        raise ValueError(f"shard {shard} of {shards}")
    low = shard * REDIS_CLUSTER_HASH_SLOTS // shards
    high = (shard + 1) * REDIS_CLUSTER_HASH_SLOTS // shards
    n = 0
    while not low <= key_slot(f"{shard}.{n}".encode()) < high:
        n += 1
    return f"{shard}.{n}"
