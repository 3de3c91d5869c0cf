"""Runtime principal entries (a sender mapped to an XpertAI user, added through the admin API):
one hash, entry id -> JSON this module does not interpret, and under the field ``=version`` (no
entry id starts with ``=``) a counter every change raises. A turn asks for the version alone
(one HGET) and reads the entries again only when it moved, so a map of thousands of entries costs
a turn one small reply, and their parsing is done once per change (:meth:`entries_as`). Every
call is one command on that one key, so each runs on a Redis Cluster as on a single server
(keys.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder

T = TypeVar("T")
VERSION = "=version"

# Add an entry unless its id is taken (0) or the hash holds ``ARGV[3]`` entries already (-1).
_ADD = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
if redis.call('HLEN', KEYS[1]) - redis.call('HEXISTS', KEYS[1], ARGV[4]) >= tonumber(ARGV[3])
then return -1 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[1], ARGV[4], 1)
return 1
"""
# Remove an entry (1) or say there was none (0).
_REMOVE = """
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
return 1
"""


class PrincipalStore:
    def __init__(self, *, client: RedisClient, keys: KeyBuilder) -> None:
        self.redis = client
        self.keys = keys
        self._add = client.register_script(_ADD)
        self._remove = client.register_script(_REMOVE)
        self._version: str | None = None  # of the entries converted below
        self._converted: dict[str, Any] = {}
        self._raw: dict[str, str] = {}

    async def entries(self) -> dict[str, str]:
        """Every runtime entry: id -> JSON."""
        raw = cast(dict[str, str], await self.redis.hgetall(self.keys.principals()))
        raw.pop(VERSION, None)
        return raw

    async def entries_as(self, name: str, convert: Callable[[dict[str, str]], T]) -> T:
        """``convert(entries)`` as of now, converted again only after a change (``name`` tells
        one conversion from another)."""
        key = self.keys.principals()
        version = cast(str | None, await self.redis.hget(key, VERSION)) or "0"
        if version != self._version:
            raw = cast(dict[str, str], await self.redis.hgetall(key))
            version = raw.pop(VERSION, "0")
            self._version, self._converted = version, {}
            self._raw = raw
        if name not in self._converted:
            self._converted[name] = convert(self._raw)
        return cast(T, self._converted[name])

    async def add(self, entry_id: str, data: str, *, limit: int) -> int:
        """1 stored, 0 the id is taken, -1 there are ``limit`` entries already."""
        args: list[str | int] = [entry_id, data, limit, VERSION]
        return int(await self._add(keys=[self.keys.principals()], args=args))

    async def remove(self, entry_id: str) -> bool:
        return bool(await self._remove(keys=[self.keys.principals()], args=[entry_id, VERSION]))
