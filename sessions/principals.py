"""Runtime principal entries (a sender mapped to an XpertAI user, added through the admin API):
one hash, entry id -> JSON this module does not interpret. Every call is one command on that one
key, so each runs on a Redis Cluster as on a single server (keys.py)."""

from __future__ import annotations

from typing import cast

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder

# Add an entry unless its id is taken (0) or the hash holds ``ARGV[3]`` entries already (-1).
_ADD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return 1
"""


class PrincipalStore:
    def __init__(self, *, client: RedisClient, keys: KeyBuilder) -> None:
        self.redis = client
        self.keys = keys
        self._add = client.register_script(_ADD)

    async def entries(self) -> dict[str, str]:
        """Every runtime entry: id -> JSON."""
        return cast(dict[str, str], await self.redis.hgetall(self.keys.principals()))

    async def add(self, entry_id: str, data: str, *, limit: int) -> int:
        """1 stored, 0 the id is taken, -1 there are ``limit`` entries already."""
        return int(await self._add(keys=[self.keys.principals()], args=[entry_id, data, limit]))

    async def remove(self, entry_id: str) -> bool:
        return bool(await self.redis.hdel(self.keys.principals(), entry_id))
