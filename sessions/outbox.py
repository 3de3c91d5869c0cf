"""The archive's outbox: per integration, one Redis stream of what the long-term archive has yet
to commit (finished turns' records, opened and ended sessions, changes of group memory).

Writers queue an entry in the same step that records it in Redis (``audit_put.lua`` for a turn,
``audit_session.lua`` for a new session) or in a call of its own (``outbox_add.lua``: memory,
a session's end). The one archiver (a lease, ``gateway.archive.archiver``) reads the streams
through a consumer group: :meth:`Outbox.take` first claims what is pending - entries read by an
archiver that died, or by this one before a write that failed - with ``XAUTOCLAIM``, then reads
new ones; :meth:`Outbox.ack` acknowledges and deletes them (``XACK`` + ``XDEL`` in one MULTI on
the stream's one key) only after the database committed them. The streams carry no expiry (an
entry leaves when archived) and are bounded by the writers (``archive.outboxMaxLength``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

from redis.exceptions import ResponseError

from sessions.connection import RedisClient
from sessions.keys import KeyBuilder

GROUP = "archiver"


@dataclass(frozen=True, slots=True)
class OutboxEntry:
    """One entry: ``kind`` (turn | session | session_end | memory), the id it is upserted by,
    and its JSON body, as the writer queued it."""

    stream_id: str
    integration_id: str
    kind: str
    id: str
    body: str

    @property
    def queued_ms(self) -> int:
        """When it was queued: the stream id's time (Redis' clock)."""
        return int(self.stream_id.partition("-")[0])


class Outbox:
    def __init__(self, *, client: RedisClient, keys: KeyBuilder) -> None:
        self.redis = client
        self.keys = keys
        self._groups: set[str] = set()  # streams whose group this process made sure of

    async def _group(self, key: str) -> None:
        if key in self._groups:
            return
        try:
            await self.redis.xgroup_create(key, GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(key)

    async def take(self, integration_id: str, *, consumer: str, count: int) -> list[OutboxEntry]:
        """Up to ``count`` entries for ``consumer`` to archive: what is pending first (claimed
        from whoever read it: the caller holds the archiver's lease, so a reader that has not
        acknowledged is dead or failed to write), then new entries."""
        key = self.keys.audit_outbox(integration_id)
        await self._group(key)
        try:
            claimed = await self.redis.xautoclaim(
                key, GROUP, consumer, min_idle_time=0, start_id="0-0", count=count
            )
            rows = cast(list[tuple[str, dict[str, str] | None]], claimed[1])
            # Entries deleted while pending: Redis 6.2 still lists them (7 drops them itself).
            if dead := [stream_id for stream_id, fields in rows if not fields]:
                await self.redis.xack(key, GROUP, *dead)
            rows = [row for row in rows if row[1]]
            if not rows:
                answer: Any = await self.redis.xreadgroup(GROUP, consumer, {key: ">"}, count=count)
                rows = answer[0][1] if answer else []
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            self._groups.discard(key)  # the stream went (erased, flushed): made again next time
            return []
        return [_entry(integration_id, sid, fields) for sid, fields in rows if fields is not None]

    async def ack(self, entries: Sequence[OutboxEntry]) -> None:
        """The entries are committed: acknowledged and deleted, per stream one MULTI."""
        by_key: dict[str, list[str]] = {}
        for e in entries:
            by_key.setdefault(self.keys.audit_outbox(e.integration_id), []).append(e.stream_id)
        for key, ids in by_key.items():
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.xack(key, GROUP, *ids)
                pipe.xdel(key, *ids)
                await pipe.execute()

    async def state(self, integration_ids: Sequence[str]) -> dict[str, tuple[int, int | None]]:
        """Per integration: entries waiting, and when the oldest was queued (None: none);
        one pipeline of single-key reads."""
        ids = list(dict.fromkeys(integration_ids))
        if not ids:
            return {}
        async with self.redis.pipeline(transaction=False) as pipe:
            for integration_id in ids:
                key = self.keys.audit_outbox(integration_id)
                pipe.xlen(key)
                pipe.xrange(key, count=1)
            rows: list[Any] = await pipe.execute()
        out: dict[str, tuple[int, int | None]] = {}
        for n, integration_id in enumerate(ids):
            first = rows[2 * n + 1]
            oldest = int(str(first[0][0]).partition("-")[0]) if first else None
            out[integration_id] = (int(rows[2 * n]), oldest)
        return out


def _entry(integration_id: str, stream_id: str, fields: dict[str, str]) -> OutboxEntry:
    return OutboxEntry(
        stream_id=stream_id,
        integration_id=integration_id,
        kind=fields.get("kind", ""),
        id=fields.get("id", ""),
        body=fields.get("body", ""),
    )
