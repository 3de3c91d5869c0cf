"""The due backlog for ``/metrics``: how many conversations are due now across the due shards,
and since when the oldest of them has waited.

A bounded read, cheap enough for every scrape: per shard one ZCOUNT of the members due by now and
one ZRANGE of the soonest member with its score, all pipelined (one round trip on a single
server, one per node in parallel on a cluster; each command touches one shard's key). A member
whose turn is running is scored at its lease's expiry (``claim.lua``, ``renew.lua``), so it is
not counted while the lease is held; one whose replica died is, once the lease has expired."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder


@dataclass(frozen=True, slots=True)
class DueBacklog:
    due: int  # conversations due now, all shards
    oldest_ms: int | None  # the soonest due time among them (epoch ms); None: nothing due


async def due_backlog(client: RedisClient, keys: KeyBuilder, now_ms: int) -> DueBacklog:
    """What is due at ``now_ms``: 2 commands per shard, one pipelined round trip."""
    pipe: Any
    async with client.pipeline(transaction=False) as pipe:
        for shard in range(keys.shards):
            key = keys.due(shard)
            pipe.zcount(key, "-inf", now_ms)
            pipe.zrange(key, 0, 0, withscores=True)
        replies = cast(list[Any], await pipe.execute())
    due = 0
    oldest: float | None = None
    for count, head in zip(replies[0::2], replies[1::2], strict=True):
        due += int(count)
        if head:
            score = float(head[0][1])
            if score <= now_ms and (oldest is None or score < oldest):
                oldest = score
    return DueBacklog(due=due, oldest_ms=None if oldest is None else int(oldest))
