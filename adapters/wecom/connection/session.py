"""One AI-bot long connection, from ``aibot_subscribe`` to its end (docs/wecom.md, "AI bot").

While it lasts: inbound frames go to the connection's consumer, acks to the reply queues
(``connection.link``), an application ping goes out every ``pingIntervalSeconds`` together with the
owner lease renewal, and the outbox of other replicas is relayed. It ends ``closed`` (the socket
was lost, two pings went unacked, or the lease was lost), ``displaced`` or ``handover`` (WeCom
gave the bot's connection to another client: ``disconnected_event``). The rules are the
official SDK's (``WecomTeam/aibot-node-sdk`` ``src/ws.ts``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable
from typing import Any, Protocol

import aiohttp
import structlog

from adapters.wecom.connection.link import (
    MISSED_PINGS,
    PING,
    SUBSCRIBE,
    ReplyQueues,
    is_disconnected,
    new_req_id,
    req_id_of,
)
from adapters.wecom.connection.shared import BotShare
from adapters.wecom.settings import WeComIntegration
from gateway.edge.stores import StoreUnavailable
from gateway.errors import GatewayError

log = structlog.get_logger("adapters.wecom")

GAP_GIVE_UP_S = 2.0  # the newest numbered frame never written (its writer died): skip it
GAP_GRACE_S = 0.2  # an older missing frame (expired, or its writer died) is skipped sooner
CLOSE_TIMEOUT_S = 2.0  # a dead peer does not answer the close handshake
STORAGE_RETRY_S = 1.0  # Redis unreachable: the outbox is read again after this


class SubscribeRefused(GatewayError, RuntimeError):
    pass


class SessionOwner(Protocol):
    """What a session reports to and reads of the connection that opened it
    (``connection.AibotConnection``)."""

    settings: WeComIntegration
    share: BotShare
    me: str
    lease_ms: int
    last_error: str

    def connected(self, ws: aiohttp.ClientWebSocketResponse, queues: ReplyQueues) -> None: ...

    def disconnected(self) -> None: ...

    def inbound(self, frame: dict[str, Any]) -> None: ...

    def displaced(self, until: float) -> None: ...

    async def pause(self, seconds: float, *events: asyncio.Event) -> bool: ...


class WsSession:
    def __init__(self, conn: SessionOwner, http: aiohttp.ClientSession) -> None:
        self.conn = conn
        self.http = http
        self.settings = conn.settings
        self.share = conn.share
        self.missed = 0  # pings sent since the last ping ack

    async def run(self) -> str:
        secret = self.settings.bot_secret.get_secret_value() if self.settings.bot_secret else ""
        timeout = aiohttp.ClientWSTimeout(ws_close=CLOSE_TIMEOUT_S)
        async with self.http.ws_connect(
            self.settings.ws_url, heartbeat=None, timeout=timeout
        ) as ws:
            sub = new_req_id(SUBSCRIBE)
            body = {"bot_id": self.settings.bot_id, "secret": secret}
            await ws.send_json({"cmd": SUBSCRIBE, "headers": {"req_id": sub}, "body": body})
            ack = await ws.receive_json(timeout=10)
            if req_id_of(ack) != sub or int(ack.get("errcode") or 0) != 0:
                code, msg = ack.get("errcode"), ack.get("errmsg")
                raise SubscribeRefused(f"subscribe refused: {code} {msg}")
            queues = ReplyQueues(ws.send_str)
            self.conn.connected(ws, queues)
            over = asyncio.Event()
            helpers = [
                asyncio.create_task(self._guard(self._ping(ws, over), ws)),
                asyncio.create_task(self._guard(self._relay(queues, over), ws)),
            ]
            ended = "closed"
            try:
                async for message in ws:
                    if message.type != aiohttp.WSMsgType.TEXT:
                        break
                    frame = json.loads(message.data)
                    if is_disconnected(frame):
                        ended = await self._taken_over()
                        break
                    if frame.get("cmd"):
                        self.conn.inbound(frame)
                    else:
                        self._on_ack(frame, queues)
            finally:
                self.conn.disconnected()
                over.set()
                unsent = queues.close("long connection closed")
                await asyncio.gather(*helpers, return_exceptions=True)
                await ws.close()
                await queues.wait_closed()
                await self._hand_over(unsent)
        log.info("long connection closed", integration_id=self.settings.id, ended=ended)
        return ended

    async def _taken_over(self) -> str:
        """``disconnected_event``: WeCom gave the bot's connection to another client. Another
        replica of ours holding the lease is a hand-over; anyone else displaces the bot."""
        holder = await self.share.holder()
        if holder is not None and holder != self.conn.me:
            log.info("another replica took the long connection", integration_id=self.settings.id)
            return "handover"
        until = await self.share.displace(self.settings.displaced_retry_seconds)
        await self.share.release()
        self.conn.displaced(until)
        return "displaced"

    def _on_ack(self, frame: dict[str, Any], queues: ReplyQueues) -> None:
        req_id = req_id_of(frame)
        errcode = int(frame.get("errcode") or 0)
        if req_id.startswith(PING + "_"):
            if errcode == 0:
                self.missed = 0
            else:  # ws.ts: an error ack does not count as an answer
                log.warning("ping refused", integration_id=self.settings.id, errcode=errcode)
        elif not queues.on_ack(frame) and errcode != 0:
            log.warning("frame refused", req_id=req_id, errcode=errcode)

    async def _hand_over(self, frames: list[dict[str, Any]]) -> None:
        """Frames queued but never written go to the outbox, for the next connection."""
        try:
            for frame in frames:
                await self.share.post(json.dumps(frame, ensure_ascii=False))
        except Exception as exc:
            log.warning("unsent frames lost", count=len(frames), error=str(exc))

    async def _guard(self, work: Awaitable[None], ws: aiohttp.ClientWebSocketResponse) -> None:
        """A helper that fails ends the connection, so two replicas never both hold it."""
        try:
            await work
        except Exception as exc:
            log.warning("long connection helper failed", error=str(exc))
            await ws.close()

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse, over: asyncio.Event) -> None:
        """The application ping (JSON, not a WS ping) and the owner lease renewal. As the SDK
        does (``ws.ts`` ``sendHeartbeat``), each tick first counts the pings still unacked: at
        two the connection is dead and is closed (the reconnect follows)."""
        loop = asyncio.get_running_loop()
        interval, renew_s = self.settings.ping_interval_seconds, self.conn.lease_ms / 3000
        next_ping, next_renew = loop.time() + interval, loop.time() + renew_s
        while True:
            if await self.conn.pause(min(next_ping, next_renew) - loop.time(), over):
                return
            now = loop.time()
            if now >= next_renew:
                next_renew += renew_s
                if not await self._still_owner():
                    log.warning(
                        "lost the connection lease; closing", integration_id=self.settings.id
                    )
                    self.conn.last_error = "lease lost"
                    await ws.close()
                    return
            if now >= next_ping:
                next_ping += interval
                if self.missed >= MISSED_PINGS:
                    log.warning(
                        "no ack for two pings: the connection is dead; reconnecting",
                        integration_id=self.settings.id,
                    )
                    self.conn.last_error = "no ping ack"
                    await ws.close()
                    return
                self.missed += 1
                await ws.send_json({"cmd": PING, "headers": {"req_id": new_req_id(PING)}})

    async def _still_owner(self) -> bool:
        """Renew the owner lease. While Redis is unreachable the connection is kept (its events
        go to the local spool): no other replica can take the lease meanwhile, and one that does
        later makes WeCom close this connection (one per bot; aibot-node-sdk
        src/types/event.ts, ``disconnected_event``)."""
        try:
            return await self.share.take()
        except StoreUnavailable:
            log.warning(
                "owner lease not renewed (storage unavailable); keeping the connection",
                integration_id=self.settings.id,
            )
            return True

    async def _relay(self, queues: ReplyQueues, over: asyncio.Event) -> None:
        """Send, in order, the frames other replicas (or this one, while it was reconnecting)
        left in the outbox, carrying on from the shared cursor."""
        cursor: int | None = None
        waited = 0.0
        while not queues.closed:
            try:
                if cursor is None:
                    cursor = await self.share.cursor()
                raw = await self.share.frame(cursor + 1)
                last = cursor if raw is not None else await self.share.last()
                if raw is not None:
                    if queues.closed:  # no await since: the frame stays for the next owner
                        return
                    queues.submit(json.loads(raw)).add_done_callback(_relayed)
                gap = GAP_GRACE_S if last > cursor + 1 else GAP_GIVE_UP_S
                if last < cursor:  # the sequence expired in a long quiet and starts again
                    cursor = last
                    await self.share.relayed(cursor)
                    continue
                if raw is not None or (last > cursor and waited >= gap):
                    cursor, waited = cursor + 1, 0.0
                    await self.share.relayed(cursor)
                    continue
            except StoreUnavailable:
                # While Redis is unreachable the relay waits rather than ending the connection
                # (events are spooled meanwhile).
                if await self.conn.pause(STORAGE_RETRY_S, over):
                    return
                continue
            if await self.conn.pause(0.05, over):
                return
            waited += 0.05


def _relayed(done: asyncio.Future[dict[str, Any] | None]) -> None:
    """A relayed frame has no caller waiting: its refusal is only logged."""
    if not done.cancelled() and done.exception() is not None:
        log.info("relayed frame not delivered", error=str(done.exception()))
