"""Stream mode (docs/dingtalk.md, "Stream mode"): the dingtalk-stream client's frame routing and
acks, with our own connect loop. The SDK's ``start`` opens the connection with blocking ``requests``
on the
event loop and sleeps a fixed 10 s after a failure; here the open call is async, points at
``apiBase``, reconnects with backoff and a fresh ticket, and reports its state to ``/readyz``.

A frame is acked only after its handler returned, and the handlers (:class:`StreamFrames`: the
integration's ``DingTalkInbound``, the same the HTTP webhook runs) return only after intake
stored the event (docs/architecture.md, invariant 1).

One process of all (workers and replicas) holds the robot's stream: the one holding its owner
lease (``gateway.edge.leases``); the others stand by (ready: their replies go out over
HTTP) and take over when the lease runs out. DingTalk would accept several connections and push
each event to one of them, but N workers times M replicas would be N x M sockets for one robot."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote_plus

import aiohttp
import structlog
from dingtalk_stream import (
    AckMessage,
    CallbackHandler,
    CallbackMessage,
    Credential,
    DingTalkStreamClient,
)
from websockets.asyncio.client import connect

from adapters.dingtalk.inbound import DingTalkInbound, Message
from gateway.edge.ingest import Ingest, IngestOutcome, IngestUnavailable
from gateway.edge.leases import LeasedConnection, OwnerLease
from gateway.envelope import Envelope
from gateway.errors import Refused

log = structlog.get_logger("adapters.dingtalk")

# What readiness() reports as "state" (the socket's, "standby" while another process holds it).
STATES = ("idle", "connecting", "connected", "reconnecting", "standby", "closed")

ROBOT_TOPIC = "/v1.0/im/bot/messages/get"
CARD_TOPIC = "/v1.0/card/instances/callback"
DRAIN_S = 5.0  # on a disconnect frame, in-flight frames get this long to be stored and acked

Handle = Callable[[dict[str, Any], str | None], Awaitable[tuple[int, Any]]]


class _Handler(CallbackHandler):  # type: ignore[misc]
    def __init__(self, handle: Handle) -> None:
        super().__init__()
        self.handle = handle

    async def process(self, message: CallbackMessage) -> tuple[int, Any]:
        return await self.handle(message.data, message.headers.message_id)


class StreamFrames:
    """Stream frames, which DingTalk never pushes again (docs/dingtalk.md): read and answered
    by the integration's Inbound (``Inbound.take``); while Redis is unreachable they wait in the
    local spool (``ingest_or_spool``); a frame that cannot be taken at all is acked with an
    error."""

    def __init__(self, *, inbound: DingTalkInbound, ingest_or_spool: Ingest) -> None:
        self.inbound = inbound
        self.integration_id = inbound.integration_id
        self.ingest_or_spool = ingest_or_spool

    async def _ingest(self, envelope: Envelope) -> IngestOutcome:
        try:
            return await self.ingest_or_spool(envelope)
        except IngestUnavailable as exc:
            log.warning(
                "dingtalk event not stored",
                integration_id=self.integration_id,
                event_id=envelope.event_id,
                reason=str(exc),
            )
            raise

    async def robot_message(self, data: dict[str, Any], stream_id: str | None) -> tuple[int, Any]:
        try:
            taken = await self.inbound.take(Message(data, stream_id), self._ingest)
        except Refused as exc:
            log.warning(
                "dingtalk frame rejected", integration_id=self.integration_id, error=exc.reason
            )
            return 400, {"error": "bad message"}
        except IngestUnavailable:
            return ack_error()
        assert taken is not None  # a robot message is always an event
        log.debug(
            "dingtalk message",
            integration_id=self.integration_id,
            event_id=taken.envelope.event_id,
            status=taken.outcome.status,
        )
        return 200, taken.answer

    async def card_callback(self, data: dict[str, Any], stream_id: str | None) -> tuple[int, Any]:
        """A card button (docs/dingtalk.md): the card it was on first (an unknown card is acked as
        is)."""
        click = await self.inbound.card(data, stream_id)
        if click is None:
            return 200, {}
        try:
            taken = await self.inbound.take(click, self._ingest)
        except IngestUnavailable:
            return ack_error()
        assert taken is not None
        return 200, taken.answer


class StreamConnection(DingTalkStreamClient):  # type: ignore[misc]
    def __init__(
        self,
        *,
        api_base: str,
        client_id: str,
        client_secret: str,
        integration_id: str,
        on_message: Handle,
        on_card: Handle,
        lease: OwnerLease,
        min_backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
    ) -> None:
        super().__init__(
            Credential(client_id, client_secret), logger=logging.getLogger("adapters.dingtalk.sdk")
        )
        self.open_url = api_base.rstrip("/") + "/v1.0/gateway/connections/open"
        self.integration_id = integration_id
        self.min_backoff_s = min_backoff_s
        self.max_backoff_s = max_backoff_s
        self.register_callback_handler(ROBOT_TOPIC, _Handler(on_message))
        self.register_callback_handler(CARD_TOPIC, _Handler(on_card))
        self.state = "idle"
        self.connects = 0
        self.last_error = ""
        self.connected_since: float | None = None
        self._inflight: set[asyncio.Task[None]] = set()
        self._task: asyncio.Task[None] | None = None
        self.lease = LeasedConnection(
            lease, connect=self._open, disconnect=self._close, integration_id=integration_id
        )

    def begin(self) -> None:
        """Connect once this process holds the robot's lease (at once when no one else does)."""
        self.lease.start()

    async def close(self) -> None:
        await self.lease.stop()
        self.state = "closed"

    async def _open(self) -> None:
        self._task = asyncio.create_task(self.run(), name=f"dingtalk-stream:{self.integration_id}")

    async def _close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if self._inflight:
            await asyncio.wait(self._inflight, timeout=DRAIN_S)
        self.state = "standby"

    def readiness(self) -> dict[str, Any]:
        role = self.lease.role
        state = {"owner": self.state, "standby": "standby", "stopped": "closed"}.get(role, "idle")
        return {
            "ready": state in ("connected", "standby"),
            "mode": "stream",
            "state": state,
            "connects": self.connects,
            **self.lease.readiness(),
            **({"error": self.last_error} if self.last_error and role == "owner" else {}),
        }

    async def open(self) -> dict[str, Any]:
        """``POST /v1.0/gateway/connections/open`` -> endpoint + single-use ticket ("Stream
        mode")."""
        topics = [{"type": "CALLBACK", "topic": t} for t in self.callback_handler_map]
        body = {
            "clientId": self.credential.client_id,
            "clientSecret": self.credential.client_secret,
            "subscriptions": topics,
            "ua": "xpert-gateway/0.1",
            "localIp": "",
        }
        timeout = aiohttp.ClientTimeout(total=15)
        async with (
            aiohttp.ClientSession(timeout=timeout) as http,
            http.post(self.open_url, json=body) as resp,
        ):
            data = await resp.json(content_type=None)
            if resp.status >= 300 or not isinstance(data, dict) or "endpoint" not in data:
                raise ConnectionError(f"connections/open answered {resp.status}")
            return data

    async def run(self) -> None:
        self.pre_start()
        delay = self.min_backoff_s
        while True:
            clean = False
            try:
                self.state = "connecting"
                conn = await self.open()
                uri = f"{conn['endpoint']}?ticket={quote_plus(str(conn['ticket']))}"
                async with connect(uri, max_size=4 * 1024 * 1024) as ws:
                    self.websocket = ws
                    self.state = "connected"
                    self.connects += 1
                    self.connected_since = time.time()
                    self.last_error = ""
                    delay = self.min_backoff_s
                    log.info("stream connected", integration_id=self.integration_id)
                    clean = await self._read(ws)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.last_error = f"{type(exc).__name__}: {exc}"[:200]
                log.warning(
                    "stream connection lost",
                    integration_id=self.integration_id,
                    error=self.last_error,
                )
            self.state = "reconnecting"
            if clean:  # disconnect frame: reconnect at once, fresh ticket (docs/dingtalk.md)
                continue
            await asyncio.sleep(delay * (0.75 + random.random() / 2))
            delay = min(delay * 2, self.max_backoff_s)

    async def _read(self, ws: Any) -> bool:
        """Route frames until the socket ends; True when the server asked us to disconnect."""
        async for raw in ws:
            try:
                frame = json.loads(raw)
            except ValueError:
                log.warning("stream frame is not JSON", integration_id=self.integration_id)
                continue
            if frame.get("type") == "SYSTEM" and frame.get("headers", {}).get("topic") == (
                self.TAG_DISCONNECT
            ):
                log.info("stream disconnect requested", integration_id=self.integration_id)
                if self._inflight:
                    await asyncio.wait(self._inflight, timeout=DRAIN_S)
                await ws.close()
                return True
            task = asyncio.create_task(self._route(frame))
            self._inflight.add(task)
            task.add_done_callback(self._inflight.discard)
        return False

    async def _route(self, frame: dict[str, Any]) -> None:
        try:
            await self.route_message(frame)
        except Exception as exc:  # the ack could not be sent: the socket went away
            log.warning(
                "stream frame not acked",
                integration_id=self.integration_id,
                error=type(exc).__name__,
            )


def ack_error() -> tuple[int, Any]:
    return AckMessage.STATUS_SYSTEM_EXCEPTION, {"error": "retry later"}
