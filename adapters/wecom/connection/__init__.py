"""AI bot long connection (``aibot_ws``, docs/wecom.md "AI bot").

The replica holding the bot's owner lease (``connection.shared``) connects, subscribes, sends an
application ping every ``pingIntervalSeconds`` and renews the lease; two pings without an ack
mean the connection is dead, and it reconnects with backoff (the official SDK's rules,
``WecomTeam/aibot-node-sdk`` ``src/ws.ts``). Frames are read by one loop and handled, in order,
by one consumer task, so a handler that waits for an ack never blocks the reading of that ack.
Replies wait for their acks one req_id at a time (``connection.link``); what is sent is built in
``connection.replies``; replicas without the connection hand their frames to the owner's relay.

When WeCom hands the connection to another client (``disconnected_event``): if another replica of
ours now holds the lease, this one stands by; otherwise the bot is marked displaced for
``displacedRetrySeconds``, during which no replica connects and ``/readyz`` says ``displaced``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from datetime import UTC, datetime
from typing import Any

import aiohttp
import structlog

from adapters.wecom.api import LinkDownloads
from adapters.wecom.connection.link import ReplyQueues
from adapters.wecom.connection.replies import WsReplies
from adapters.wecom.connection.session import SubscribeRefused, WsSession
from adapters.wecom.connection.shared import BotShare
from adapters.wecom.events import event_type
from adapters.wecom.inbound import AibotInbound, Callback
from adapters.wecom.settings import WeComIntegration
from gateway.edge.context import AdapterContext
from gateway.edge.downloads import FetchedFile
from gateway.edge.ingest import IngestOutcome, IngestUnavailable
from gateway.edge.leases import holder_token
from gateway.envelope import Attachment, Envelope
from gateway.errors import Refused
from gateway.progress import Progress

log = structlog.get_logger("adapters.wecom")

# What readiness() reports as "state" ("standby" while another process holds the bot's socket).
STATES = (
    "starting", "connecting", "connected", "reconnecting", "refused", "displaced", "standby",
    "stopped",
)  # fmt: skip

BACKOFF_MAX_S = 30.0  # ws.ts: 1 s doubling, at most 30 s


class AibotFrames(AibotInbound[None]):
    """The long connection's frames: the AI bot's ``envelope`` (as its callbacks read them),
    answered by frames of its own (a click: ``update_template_card``; a message: the turn's
    stream, sent by the renderer)."""

    def __init__(self, *, integration_id: str, replies: WsReplies) -> None:
        self.integration_id = integration_id
        self.replies = replies

    async def answer(self, envelope: Envelope, outcome: IngestOutcome) -> None:
        if envelope.kind == "action":
            await self.replies.answer_click(envelope)


class AibotConnection:
    def __init__(
        self, *, settings: WeComIntegration, context: AdapterContext, lease_ms: int | None = None
    ) -> None:
        self.settings = settings
        self.context = context
        self.records = context.records
        self.lease_ms = lease_ms or context.connection_lease_ms  # runtime.connectionLeaseSeconds
        self.me = holder_token()  # host:pid:random, telling an operator who holds the bot
        self.share = BotShare(
            records=self.records, bot_id=settings.bot_id, me=self.me, lease_ms=self.lease_ms
        )
        self.state = "stopped"
        self.connects = 0
        self.last_error = ""
        self.displaced_until: float | None = None
        self._ws: aiohttp.ClientWebSocketResponse | None = None
        self._queues: ReplyQueues | None = None
        self._http: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._inbound: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._consumer: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()
        self.replies = WsReplies(settings=settings, records=self.records, send=self._send)
        self.frames = AibotFrames(integration_id=settings.id, replies=self.replies)
        self.downloads = LinkDownloads(
            integration_id=settings.id, bot_key=None, api_base=settings.api_base
        )

    async def pause(self, seconds: float, *events: asyncio.Event) -> bool:
        """Sleep; True at once when stopping (or any of ``events``) is set."""
        waits = [asyncio.ensure_future(e.wait()) for e in (self._stopping, *events)]
        try:
            done, _ = await asyncio.wait(
                waits, timeout=max(0.0, seconds), return_when="FIRST_COMPLETED"
            )
        finally:
            for w in waits:
                w.cancel()
        return bool(done)

    def readiness(self) -> dict[str, Any]:
        # A standby replica is ready: it relays its replies through the owner. A displaced bot
        # is not: nobody of ours receives its messages until the mark ends.
        ready = self.state in ("connected", "standby")
        state: dict[str, Any] = {"ready": ready, "state": self.state, "connects": self.connects}
        if self.state == "displaced" and self.displaced_until is not None:
            until = datetime.fromtimestamp(self.displaced_until, UTC)
            state["displacedUntil"] = until.isoformat(timespec="seconds")
        if self.last_error and not ready:
            state["error"] = self.last_error
        return state

    async def start(self) -> None:
        self._http = aiohttp.ClientSession()
        self.state = "starting"
        self._consumer = asyncio.create_task(self._consume(), name=f"wecom-in:{self.settings.id}")
        self._task = asyncio.create_task(self._run(), name=f"wecom-ws:{self.settings.id}")

    async def stop(self) -> None:
        """Loops end at their next pause (never cancelled inside a Redis call, which would
        leak the pooled connection); cancelling is only the fallback."""
        self._stopping.set()
        await self.replies.close()
        if self._ws is not None:
            await self._ws.close()
        for task in (self._task, self._consumer):
            if task is None:
                continue
            if task is self._consumer:
                self._inbound.put_nowait(None)  # frames already read are still handled
            try:
                await asyncio.wait_for(asyncio.shield(task), 5)
            except TimeoutError:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        try:
            await self.share.release()  # another replica may take over at once
        except Exception as exc:  # Redis unreachable: the lease simply runs out
            log.warning("owner lease not released", integration_id=self.settings.id, error=str(exc))
        if self._http is not None:
            await self._http.close()
        await self.downloads.close()
        self.state = "stopped"

    # --- what the session reports ---------------------------------------------------------------
    def connected(self, ws: aiohttp.ClientWebSocketResponse, queues: ReplyQueues) -> None:
        self._ws, self._queues = ws, queues
        self.state, self.last_error = "connected", ""
        self.connects += 1
        log.info("long connection subscribed", integration_id=self.settings.id)

    def disconnected(self) -> None:
        self._ws, self._queues = None, None
        if not self.last_error:
            self.last_error = "connection closed"

    def inbound(self, frame: dict[str, Any]) -> None:
        self._inbound.put_nowait(frame)

    def displaced(self, until: float) -> None:
        if self.state != "displaced":
            log.warning(
                "bot displaced: another client holds its long connection; not connecting",
                integration_id=self.settings.id,
                retry_in_s=round(until - time.time()),
            )
        self.state, self.displaced_until = "displaced", until

    async def _run(self) -> None:
        failures = 0
        while not self._stopping.is_set():
            refused = False
            try:
                until = await self.share.displaced_until()
                if until is not None and until > time.time():
                    self.displaced(until)
                    await self.pause(min(until - time.time(), self.lease_ms / 3000))
                    continue
                self.displaced_until = None
                if not await self.share.take():
                    self.state = "standby"
                    await self.pause(self.lease_ms / 3000)
                    continue
                self.state = "connecting"
                assert self._http is not None
                ended = await WsSession(self, self._http).run()
                failures = 0
                if ended == "handover":
                    self.state = "standby"
                if ended != "closed":
                    continue  # displaced or handed over: the top of the loop decides
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                refused = isinstance(exc, SubscribeRefused)
                self.last_error = str(exc)
                log.warning(
                    "long connection failed", integration_id=self.settings.id, error=str(exc)
                )
            if self._stopping.is_set():
                break
            self.state = "refused" if refused else "reconnecting"
            await self.pause(min(BACKOFF_MAX_S, 2.0**failures))
            failures += 1

    async def _consume(self) -> None:
        """Handle inbound frames one at a time, in arrival order."""
        while True:
            frame = await self._inbound.get()
            if frame is None:
                return
            try:
                await self._on_frame(frame)
            except Exception as exc:
                log.warning("frame not handled", integration_id=self.settings.id, error=str(exc))

    async def _on_frame(self, frame: dict[str, Any]) -> None:
        cmd = frame.get("cmd")
        req_id = str((frame.get("headers") or {}).get("req_id") or "")
        if cmd in ("aibot_msg_callback", "aibot_event_callback"):
            body = frame.get("body") or {}
            if event_type(body) == "enter_chat":
                await self.replies.welcome(req_id)
                return
            try:
                # No redelivery on this connection: while Redis is unreachable the event waits
                # in the local spool (and is acked by going on as usual).
                await self.frames.take(Callback(body, req_id=req_id), self._ingest)
            except Refused as exc:
                log.info("frame skipped", integration_id=self.settings.id, reason=exc.reason)
            except IngestUnavailable:
                pass  # not stored: a click gets no answer (the user retries); see _ingest

    async def _ingest(self, envelope: Envelope) -> IngestOutcome:
        try:
            outcome = await self.context.ingest_or_spool(envelope)
        except IngestUnavailable as exc:
            log.warning(
                "frame not stored",
                integration_id=self.settings.id,
                event_id=envelope.event_id,
                error=str(exc),
            )
            if envelope.kind != "action":
                # Not stored (the spool full, too): the user is told rather than left
                # waiting, in a frame that needs no Redis.
                await self.replies.notice(
                    envelope, "Sorry, that message could not be taken; please send it again."
                )
            raise
        log.info("frame ingested", integration_id=self.settings.id, status=outcome.status)
        return outcome

    # --- outbound -----------------------------------------------------------------------------
    async def _send(self, frame: dict[str, Any]) -> dict[str, Any] | None:
        """Send over this replica's connection and wait for the ack, or (no connection here)
        leave the frame to the owner's relay and return None. Raises ``WsRefused`` when WeCom
        refuses it, ``TimeoutError`` or ``ConnectionError`` when the outcome is unknown."""
        queues = self._queues
        if queues is not None:
            return await queues.submit(frame)
        await self.share.post(json.dumps(frame, ensure_ascii=False))
        return None

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        return await self.replies.send_card(reply_to, progress, idempotency_key=idempotency_key)

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        await self.replies.update_card(reply_to, handle, progress)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        await self.replies.send_text(reply_to, text, idempotency_key=idempotency_key)

    async def fetch(self, attachment: Attachment, max_bytes: int) -> FetchedFile | None:
        return await self.downloads.fetch(attachment, max_bytes)
