"""What the replicas of one AI bot share in Redis for its long connection.

WeCom keeps one long connection per bot, and a new one kicks the old: the old connection gets an
``aibot_event_callback`` with ``event.eventtype == "disconnected_event"`` and is closed
(docs/wecom.md, "AI bot"; ``WecomTeam/aibot-node-sdk`` ``src/ws.ts``). So:

- the **owner lease** decides which replica connects; the others stand by;
- the **displaced mark** is set when WeCom handed the connection to a client that does not hold
  our lease (another process or deployment using the same bot). While it lasts no replica
  connects: connecting at once would kick that client, which may do the same to us. The
  official SDK never reconnects after the event (``isManualClose = true``); a gateway serving
  the bot should not stay off forever either, so after ``displacedRetrySeconds`` the lease
  decides again (and the newest connection wins, as WeCom rules);
- the **outbox** holds, numbered, the frames of replicas without the connection; the owner
  relays them in order, and the relay cursor is shared so a new owner, or the same one after a
  reconnect, carries on where the last relay stopped.
"""

from __future__ import annotations

import time

from gateway.edge.leases import OwnerLease
from gateway.edge.stores import RecordStore

NS = "wecom-ws"
OUTBOX_TTL_MS = 120_000
CURSOR_TTL_MS = 24 * 3_600_000  # the sequence and cursor outlive any frame in the outbox


class BotShare:
    def __init__(self, *, records: RecordStore, bot_id: str, me: str, lease_ms: int) -> None:
        self.records = records
        self.bot_id = bot_id
        self.me = me
        self.lease_ms = lease_ms
        # The owner lease is the one every long connection uses (gateway.edge.leases), under the
        # key it always had here.
        self.lease = OwnerLease(
            records, namespace=NS, key=self._key("owner"), ttl_ms=lease_ms, me=me
        )

    def _key(self, *parts: str) -> str:
        return ":".join((self.bot_id, *parts))

    # --- the lease ----------------------------------------------------------------------------
    async def take(self) -> bool:
        """Take or renew the owner lease (both atomic: set-if-absent, extend-if-mine)."""
        return await self.lease.take()

    async def holder(self) -> str | None:
        return await self.lease.holder()

    async def release(self) -> None:
        await self.lease.release()

    # --- displacement -------------------------------------------------------------------------
    async def displaced_until(self) -> float | None:
        """When the displaced mark ends (epoch seconds), or None when there is none."""
        raw = await self.records.get(NS, self._key("displaced"))
        return int(raw) / 1000 if raw else None

    async def displace(self, hold_s: float) -> float:
        until = time.time() + hold_s
        ttl_ms = max(1, int(hold_s * 1000))
        await self.records.put(NS, self._key("displaced"), str(int(until * 1000)), ttl_ms=ttl_ms)
        return until

    # --- the outbox ---------------------------------------------------------------------------
    async def post(self, data: str) -> None:
        seq = await self.records.incr(NS, self._key("outseq"), ttl_ms=CURSOR_TTL_MS)
        await self.records.put(NS, self._key("out", str(seq)), data, ttl_ms=OUTBOX_TTL_MS)

    async def last(self) -> int:
        return int(await self.records.get(NS, self._key("outseq")) or 0)

    async def cursor(self) -> int:
        """The last frame relayed. A bot seen for the first time starts at the current end of
        the outbox; a cursor past the end (the sequence expired after a long quiet) is reset."""
        raw, last = await self.records.get(NS, self._key("relayed")), await self.last()
        if raw is None or int(raw) > last:
            await self.relayed(last)
            return last
        return int(raw)

    async def frame(self, seq: int) -> str | None:
        return await self.records.get(NS, self._key("out", str(seq)))

    async def relayed(self, seq: int) -> None:
        await self.records.put(NS, self._key("relayed"), str(seq), ttl_ms=CURSOR_TTL_MS)
