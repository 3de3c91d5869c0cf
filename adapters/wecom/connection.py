"""AI bot long connection (``aibot_ws``, platforms.md §3.5).

WeCom allows one connection per bot and a new one kicks the old, so replicas do not fight: the
connection belongs to whoever holds an owner record (``put_new`` with a lease, renewed while
connected). What is sent is built in ``ws_replies``; a replica without the connection hands its
frames to the owner through a numbered outbox of records, which the owner relays in order.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import Awaitable
from typing import Any

import aiohttp
import structlog

from adapters.wecom.inbound import ingest
from adapters.wecom.messages import BadPayload, aibot_envelope, event_type
from adapters.wecom.settings import WeComIntegration
from adapters.wecom.ws_replies import WsReplies
from gateway.adapter import AdapterContext, IngestOutcome
from gateway.envelope import Envelope
from gateway.progress import Progress

log = structlog.get_logger("adapters.wecom")

NS = "wecom-ws"
LEASE_MS = 45_000
OUTBOX_TTL_MS = 120_000
GAP_GIVE_UP_S = 2.0  # a numbered frame never written (its writer died): skip it after this


class AibotConnection:
    def __init__(
        self, *, settings: WeComIntegration, context: AdapterContext, lease_ms: int = LEASE_MS
    ) -> None:
        self.settings = settings
        self.context = context
        self.records = context.records
        self.lease_ms = lease_ms
        self.me = uuid.uuid4().hex
        self.state = "stopped"
        self.connects = 0
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._http: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._backoff = [1.0, 2.0, 5.0, 10.0, 30.0]
        self._stopping = asyncio.Event()
        self.replies = WsReplies(settings=settings, records=self.records, send=self._send)

    async def _pause(self, seconds: float, *events: asyncio.Event) -> bool:
        """Sleep; True at once when stopping (or any of ``events``) is set."""
        waits = [asyncio.ensure_future(e.wait()) for e in (self._stopping, *events)]
        try:
            done, _ = await asyncio.wait(waits, timeout=seconds, return_when="FIRST_COMPLETED")
        finally:
            for w in waits:
                w.cancel()
        return bool(done)

    def _key(self, *parts: str) -> str:
        return ":".join((self.settings.bot_id, *parts))

    def readiness(self) -> dict[str, Any]:
        # A standby replica is ready: it relays its replies through the owner.
        ready = self.state in ("connected", "standby")
        return {"ready": ready, "state": self.state, "connects": self.connects}

    async def start(self) -> None:
        self._http = aiohttp.ClientSession()
        self.state = "starting"
        self._task = asyncio.create_task(self._run(), name=f"wecom-ws:{self.settings.id}")

    async def stop(self) -> None:
        """Loops end at their next pause (never cancelled inside a Redis call, which would
        leak the pooled connection); cancelling is only the fallback."""
        self._stopping.set()
        await self.replies.close()
        if self._ws is not None:
            await self._ws.close()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 5)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        await self.records.release(NS, self._key("owner"), self.me)
        if self._http is not None:
            await self._http.close()
        self.state = "stopped"

    # --- ownership and reconnects -------------------------------------------------------------
    async def _owns(self) -> bool:
        """Take or renew the owner lease (both atomic: set-if-absent, extend-if-mine)."""
        key = self._key("owner")
        if await self.records.put_new(NS, key, self.me, ttl_ms=self.lease_ms):
            return True
        return await self.records.renew(NS, key, self.me, ttl_ms=self.lease_ms)

    async def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            try:
                if not await self._owns():
                    self.state = "standby"
                    await self._pause(self.lease_ms / 3000)
                    continue
                await self._session()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning(
                    "long connection failed", integration_id=self.settings.id, error=str(exc)
                )
            self.state = "reconnecting"
            delay = self._backoff[min(failures, len(self._backoff) - 1)]
            failures += 1
            await self._pause(delay)

    async def _session(self) -> None:
        assert self._http is not None
        secret = self.settings.bot_secret.get_secret_value() if self.settings.bot_secret else ""
        async with self._http.ws_connect(self.settings.ws_url, heartbeat=None) as ws:
            sub = f"sub-{uuid.uuid4().hex[:8]}"
            await ws.send_json(
                {
                    "cmd": "aibot_subscribe",
                    "headers": {"req_id": sub},
                    "body": {"bot_id": self.settings.bot_id, "secret": secret},
                }
            )
            ack = await ws.receive_json(timeout=10)
            if ack.get("errcode", 0) != 0:
                raise RuntimeError(f"subscribe refused: {ack.get('errcode')} {ack.get('errmsg')}")
            self._ws = ws
            self.state = "connected"
            self.connects += 1
            log.info("long connection subscribed", integration_id=self.settings.id)
            over = asyncio.Event()
            helpers = [
                asyncio.create_task(self._guard(self._ping(ws, over), ws)),
                asyncio.create_task(self._guard(self._relay(ws, over), ws)),
            ]
            try:
                async for frame in ws:
                    if frame.type != aiohttp.WSMsgType.TEXT:
                        break
                    await self._on_frame(json.loads(frame.data))
            finally:
                self._ws = None
                over.set()
                await asyncio.gather(*helpers, return_exceptions=True)
        log.info("long connection closed", integration_id=self.settings.id)

    async def _guard(self, work: Awaitable[None], ws: aiohttp.ClientWebSocketResponse) -> None:
        """A helper that fails (Redis down: the lease cannot be renewed) ends the connection,
        so two replicas never both hold it."""
        try:
            await work
        except Exception as exc:
            log.warning("long connection helper failed", error=str(exc))
            await ws.close()

    async def _ping(self, ws: aiohttp.ClientWebSocketResponse, over: asyncio.Event) -> None:
        """Application-level ping (JSON, not a WS ping) and the owner lease renewal."""
        loop = asyncio.get_running_loop()
        renew_s = self.lease_ms / 3000
        next_ping = next_renew = loop.time()
        while True:
            next_ping += self.settings.ping_interval_seconds if next_ping <= loop.time() else 0
            next_renew += renew_s if next_renew <= loop.time() else 0
            if await self._pause(min(next_ping, next_renew) - loop.time(), over):
                return
            if loop.time() >= next_renew and not await self._owns():
                log.warning("lost the connection lease; closing", integration_id=self.settings.id)
                await ws.close()
                return
            if loop.time() >= next_ping:
                req_id = f"ping-{uuid.uuid4().hex[:8]}"
                await ws.send_json({"cmd": "ping", "headers": {"req_id": req_id}})

    async def _on_frame(self, frame: dict[str, Any]) -> None:
        cmd = frame.get("cmd")
        req_id = str((frame.get("headers") or {}).get("req_id") or "")
        if cmd in ("aibot_msg_callback", "aibot_event_callback"):
            if event_type(frame.get("body") or {}) == "enter_chat":
                await self.replies.welcome(req_id)
                return
            try:
                envelope = aibot_envelope(self.settings.id, frame.get("body") or {}, req_id=req_id)
            except BadPayload as exc:
                log.info("frame skipped", integration_id=self.settings.id, reason=str(exc))
                return
            if envelope is not None:
                outcome = await ingest(self.context, envelope)
                if envelope.kind == "action":
                    if isinstance(outcome, IngestOutcome):  # else not stored: no answer, retry
                        await self.replies.answer_click(envelope)
                elif not isinstance(outcome, IngestOutcome):
                    # Not stored (Redis trouble, shutting down): there is no redelivery on this
                    # connection, so the user is told rather than left waiting.
                    await self.send_text(
                        envelope,
                        "Sorry, that message could not be taken; please send it again.",
                        idempotency_key=envelope.event_id,
                    )
        elif cmd == "disconnected_event":
            log.warning("WeCom closed this connection (another one took over)")
        elif frame.get("errcode", 0) != 0:
            log.warning("frame refused", req_id=req_id, errcode=frame.get("errcode"))

    # --- outbound -----------------------------------------------------------------------------
    async def _relay(self, ws: aiohttp.ClientWebSocketResponse, over: asyncio.Event) -> None:
        """Send, in order, the frames other replicas left in the outbox."""
        cursor = int(await self.records.get(NS, self._key("outseq")) or 0)
        waited = 0.0
        while True:
            raw = await self.records.get(NS, self._key("out", str(cursor + 1)))
            if raw is not None:
                await ws.send_str(raw)
                cursor, waited = cursor + 1, 0.0
                continue
            last = int(await self.records.get(NS, self._key("outseq")) or 0)
            if last > cursor and waited >= GAP_GIVE_UP_S:
                cursor, waited = cursor + 1, 0.0
                continue
            if await self._pause(0.05, over):
                return
            waited += 0.05

    async def _send(self, frame: dict[str, Any]) -> None:
        data = json.dumps(frame, ensure_ascii=False, separators=(",", ":"))
        ws = self._ws
        if ws is not None and not ws.closed:
            await ws.send_str(data)
            return
        seq = await self.records.incr(NS, self._key("outseq"), ttl_ms=24 * 3_600_000)
        await self.records.put(NS, self._key("out", str(seq)), data, ttl_ms=OUTBOX_TTL_MS)

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        return await self.replies.send_card(reply_to, progress, idempotency_key=idempotency_key)

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        await self.replies.update_card(reply_to, handle, progress)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        await self.replies.send_text(reply_to, text, idempotency_key=idempotency_key)
