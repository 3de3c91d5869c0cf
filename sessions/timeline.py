"""Chat transcripts kept in Redis, with every change published to all replicas.

The console adapter uses this as its "platform server": user messages and bot cards are records
of a chat, visible to whichever replica serves the browser. Calls raise ``StoreUnavailable``
when Redis cannot serve them. A chat's records and the channel its changes are published on are
in one due shard (``sessions.keys``), so the script writing a record publishes in its own slot;
it goes through the session store's auto-pipeline (which waits out a migration of that slot).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any, Literal, cast

import orjson

from sessions.autopipe import ScriptPipe
from sessions.connection import RedisClient
from sessions.keys import KeyBuilder
from sessions.pubsub import PubSubHub
from sessions.records import unavailable
from sessions.scripts import lua


class TimelineStore:
    def __init__(
        self,
        *,
        client: RedisClient,
        keys: KeyBuilder,
        pubsub: PubSubHub | None = None,
        pipe: ScriptPipe | None = None,
        ttl_ms: int = 7 * 24 * 3_600_000,
        max_records: int = 500,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.ttl_ms = ttl_ms
        self.max_records = max_records
        self.pubsub = pubsub or PubSubHub(client, sharded=False)
        self.pipe = pipe
        self._put = client.register_script(lua("timeline_put.lua"))

    async def put(
        self,
        integration_id: str,
        chat_id: str,
        record: dict[str, Any],
        *,
        mode: Literal["create", "upsert"] = "upsert",
    ) -> bool:
        """Store ``record`` (which has an ``id``) and publish it; create never overwrites."""
        body = orjson.dumps(record)  # compact UTF-8, as json.dumps(separators, ensure_ascii=False)
        # The change is the record spliced into its envelope: encoded once.
        change = b"".join(
            (
                b'{"integrationId":',
                orjson.dumps(integration_id),
                b',"chatId":',
                orjson.dumps(chat_id),
                b',"record":',
                body,
                b"}",
            )
        )
        keys = [
            self.keys.timeline_messages(integration_id, chat_id),
            self.keys.timeline_order(integration_id, chat_id),
        ]
        args = [
            record["id"],
            body,
            mode,
            self.ttl_ms,
            self.max_records,
            self.keys.timeline_channel(integration_id, chat_id, self.pubsub.sharded),
            change,
            "SPUBLISH" if self.pubsub.sharded else "PUBLISH",
        ]
        with unavailable():
            if self.pipe is not None:
                ok = await self.pipe.evalsha(self._put, keys, args)
            else:
                ok = await self._put(keys=keys, args=args)
        return bool(ok)

    async def get(self, integration_id: str, chat_id: str, record_id: str) -> dict[str, Any] | None:
        with unavailable():
            raw = await self.redis.hget(
                self.keys.timeline_messages(integration_id, chat_id), record_id
            )
        return orjson.loads(raw) if raw else None

    async def list(self, integration_id: str, chat_id: str) -> list[dict[str, Any]]:
        order_key = self.keys.timeline_order(integration_id, chat_id)
        with unavailable():
            ids = cast(list[str], await self.redis.lrange(order_key, 0, -1))
            if not ids:
                return []
            raws = await self.redis.hmget(self.keys.timeline_messages(integration_id, chat_id), ids)
        return [orjson.loads(r) for r in raws if r]

    async def changes(self) -> AsyncIterator[dict[str, Any]]:
        """Every change published by any replica, until the consumer stops iterating; each as
        a dict whose ``raw`` is the JSON it was published as, UTF-8 bytes (to pass on without
        encoding)."""
        channels = self.keys.timeline_channels(self.pubsub.sharded)
        with unavailable():
            async for data in self.pubsub.listen_bytes(channels):
                yield Change(orjson.loads(data), raw=data)


class Change(dict[str, Any]):
    """A published change: the parsed JSON, and the JSON itself (``raw``, UTF-8 bytes)."""

    __slots__ = ("raw",)

    def __init__(self, parsed: dict[str, Any], *, raw: bytes) -> None:
        super().__init__(parsed)
        self.raw = raw
