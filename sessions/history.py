"""Per-session chat history for experts whose backend keeps none (OpenAI-compatible)."""

from __future__ import annotations

import json
from typing import Any, cast

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder


class HistoryStore:
    """A list of ``{"role", "content"}`` messages per session, bounded by count and characters
    (oldest dropped first), expiring ``ttl_ms`` after the last turn."""

    def __init__(
        self, *, client: RedisClient, keys: KeyBuilder, ttl_ms: int = 7 * 24 * 3_600_000
    ) -> None:
        self.redis = client
        self.keys = keys
        self.ttl_ms = ttl_ms

    async def load(self, session_id: str) -> list[dict[str, Any]]:
        """The messages as the model takes them (without ``senders``: whose words a message
        holds, kept for erasure)."""
        return [
            {k: v for k, v in m.items() if k != "senders"} for m in await self._stored(session_id)
        ]

    async def _stored(self, session_id: str) -> list[dict[str, Any]]:
        raw = cast(list[str], await self.redis.lrange(self.keys.history(session_id), 0, -1))
        return [json.loads(item) for item in raw]

    async def append(
        self,
        session_id: str,
        messages: list[dict[str, Any]],
        *,
        max_messages: int,
        max_chars: int,
    ) -> None:
        key = self.keys.history(session_id)
        current = await self._stored(session_id) + messages
        while current and (
            len(current) > max_messages or sum(len(str(m["content"])) for m in current) > max_chars
        ):
            current.pop(0)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(key)
            if current:
                pipe.rpush(key, *[json.dumps(m, ensure_ascii=False) for m in current])
                pipe.pexpire(key, self.ttl_ms)
            await pipe.execute()
