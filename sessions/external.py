"""External events' cards: the card handle of each open object (a pull request, a merge request,
a CI run), so that its next event updates that card rather than posting another. One key per
object's conversation, in the conversation's slot, always written with an expiry."""

from __future__ import annotations

from typing import cast

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder
from sessions.records import unavailable


class EventCardStore:
    """Raises ``StoreUnavailable`` when Redis cannot serve a call."""

    def __init__(self, *, client: RedisClient, keys: KeyBuilder) -> None:
        self.redis = client
        self.keys = keys

    async def get(self, conversation: str) -> str | None:
        with unavailable():
            return cast(str | None, await self.redis.get(self.keys.event_card(conversation)))

    async def put(self, conversation: str, handle: str, *, ttl_ms: int) -> None:
        with unavailable():
            await self.redis.set(self.keys.event_card(conversation), handle, px=ttl_ms)

    async def drop(self, conversation: str) -> None:
        with unavailable():
            await self.redis.delete(self.keys.event_card(conversation))
