"""The stream half of the fake DingTalk: ``POST /v1.0/gateway/connections/open`` and the
WebSocket gateway, behaving as the real one does. Sources (cited per behaviour below):

- DOC = the stream protocol, open-dingtalk/developerpedia ``docs/learn/stream/protocol.md``
  (mirrors https://open.dingtalk.com/document/direction/stream-mode-protocol-access-description)
- SDK = dingtalk-stream 0.24.3 ``dingtalk_stream/stream.py``, ``frames.py``, ``handlers.py``

What it refuses, like the real gateway: a ticket used twice or older than 90 s; a push on a
topic no connection subscribed to. What it never does: push a CALLBACK (robot message, card
callback) again, whatever its ack said or if none came. Only EVENT frames are redelivered.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

TICKET_TTL_S = 90.0  # DOC step 1: "ticket的有效期为90秒且只能用来建立一条连接"
DISCONNECT_GRACE_S = 10.0  # DOC disconnect: "服务端在静默10s之后会主动断开 tcp 连接"


def message_id() -> str:
    """Shaped like the doc's examples, e.g. ``212ca9d7_974_1898c159aa6_1783b``."""
    h = uuid.uuid4().hex
    return f"{h[:8]}_{int(h[8:11], 16)}_{h[11:22]}_{h[22:27]}"


@dataclass
class Connection:
    ws: web.WebSocketResponse
    subscriptions: list[dict[str, Any]]
    number: int
    draining: bool = False  # a disconnect frame was sent: nothing more is pushed on it
    frames: list[dict[str, Any]] = field(default_factory=list)

    def wants(self, frame_type: str, topic: str) -> bool:
        if frame_type == "SYSTEM":
            return True
        return any(
            s.get("type") == frame_type and (frame_type == "EVENT" or s.get("topic") == topic)
            for s in self.subscriptions
        )


@dataclass
class StreamState:
    tickets: dict[str, tuple[float, list[dict[str, Any]]]] = field(default_factory=dict)
    connections: list[Connection] = field(default_factory=list)
    connects: int = 0
    refused_handshakes: int = 0
    opens: list[dict[str, Any]] = field(default_factory=list)
    acks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    pushes: dict[str, int] = field(default_factory=dict)  # messageId -> times sent
    drop_acks: bool = False  # acks sent meanwhile are lost on the way (a network fault)

    @property
    def sockets(self) -> list[web.WebSocketResponse]:
        return [c.ws for c in self.connections]


class FakeStreamGateway:
    def __init__(
        self,
        *,
        client_id: str,
        client_secret: str,
        ws_base: str,
        clock: Callable[[], float] = time.monotonic,
        event_ack_timeout_s: float = 5.0,
        event_attempts: int = 3,
        disconnect_grace_s: float = DISCONNECT_GRACE_S,
    ) -> None:
        self.client_id = client_id
        self.client_secret = client_secret
        self.ws_base = ws_base
        self.clock = clock
        self.event_ack_timeout_s = event_ack_timeout_s
        self.event_attempts = event_attempts
        self.disconnect_grace_s = disconnect_grace_s
        self.state = StreamState()
        self._tasks: set[asyncio.Task[None]] = set()
        self._ack_events: dict[str, asyncio.Event] = {}

    def routes(self, app: web.Application) -> None:
        """``/connect``; the open call is routed by FakeDingTalk (which records calls and
        injects faults, as for every api.dingtalk.com path) to ``open``."""
        app.router.add_get("/connect", self.connect)

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for conn in self.state.connections:
            await conn.ws.close()

    # --- step 1: register a connection (DOC "步骤一") -------------------------------------------
    async def open(self, body: dict[str, Any]) -> web.Response:
        self.state.opens.append(body)
        if body.get("clientId") != self.client_id or body.get("clientSecret") != self.client_secret:
            # Status and code not documented for this endpoint (untraced): we reuse the token
            # endpoint's documented refusal, 400 invalidClientIdOrSecret.
            return error_response(400, "invalidClientIdOrSecret", "无效的clientId或者clientSecret")
        subs = body.get("subscriptions")
        valid = (
            isinstance(subs, list)
            and subs
            and all(
                isinstance(s, dict)
                and s.get("type") in ("EVENT", "CALLBACK")
                and isinstance(s.get("topic"), str)
                # DOC topic table: EVENT "仅支持星号(*)".
                and (s["type"] != "EVENT" or s["topic"] == "*")
                for s in subs
            )
        )
        if not valid:
            return error_response(400, "invalidParameter", "subscriptions")  # code untraced
        ticket = str(uuid.uuid4())
        self.state.tickets[ticket] = (self.clock() + TICKET_TTL_S, list(subs))
        # DOC response example: endpoint + ticket (a uuid).
        return web.json_response({"endpoint": f"{self.ws_base}/connect", "ticket": ticket})

    # --- step 2: the WebSocket (DOC "步骤二") -------------------------------------------------
    async def connect(self, request: web.Request) -> web.StreamResponse:
        entry = self.state.tickets.pop(request.query.get("ticket", ""), None)  # single use
        if entry is None or entry[0] < self.clock():
            self.state.refused_handshakes += 1
            # DOC: the server checks the ticket during the handshake; the refusal's status
            # is not documented (untraced): 401.
            return web.Response(status=401, text="invalid ticket")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.state.connects += 1
        conn = Connection(ws=ws, subscriptions=entry[1], number=self.state.connects)
        self.state.connections.append(conn)
        async for msg in ws:
            if msg.type != WSMsgType.TEXT or self.state.drop_acks:
                continue
            try:
                ack = json.loads(msg.data)
            except ValueError:
                continue
            mid = str(ack.get("headers", {}).get("messageId", ""))
            self.state.acks.setdefault(mid, []).append({**ack, "connection": conn.number})
            if mid in self._ack_events:
                self._ack_events[mid].set()
        return ws

    def live(self, frame_type: str = "SYSTEM", topic: str = "") -> list[Connection]:
        return [
            c
            for c in self.state.connections
            if not c.ws.closed and not c.draining and c.wants(frame_type, topic)
        ]

    async def _pick(self, frame_type: str, topic: str, timeout: float) -> Connection:
        # DOC FAQ "负载均衡": each push goes to one connection picked at random; only topics a
        # client registered are pushed ("只会推送 Stream Client 注册的 Topic").
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if conns := self.live(frame_type, topic):
                return random.choice(conns)
            await asyncio.sleep(0.02)
        raise AssertionError(f"no stream connection subscribed to {frame_type} {topic}")

    async def _send(self, conn: Connection, frame: dict[str, Any]) -> None:
        mid = frame["headers"].get("messageId")
        if mid:
            self.state.pushes[mid] = self.state.pushes.get(mid, 0) + 1
        conn.frames.append(frame)
        await conn.ws.send_str(json.dumps(frame, ensure_ascii=False))

    # --- pushes -----------------------------------------------------------------------------
    async def push(
        self,
        frame_type: str,
        topic: str,
        data: dict[str, Any],
        mid: str | None = None,
        *,
        timeout: float = 10.0,
    ) -> str:
        """Push one frame; returns its messageId ("" for a disconnect, which has none)."""
        if frame_type == "SYSTEM" and topic == "disconnect":
            await self.disconnect(str(data.get("reason", "")), timeout=timeout)
            return ""
        if frame_type == "SYSTEM" and topic == "ping":
            return await self.ping(data.get("opaque"), timeout=timeout)
        mid = mid or message_id()
        # DOC "通用字段说明": headers topic, contentType, messageId, time (ms, a string in the
        # examples) and appId; data is a JSON *string*. EVENT adds the event headers.
        headers: dict[str, Any] = {
            "appId": "fake-app-uuid",
            "contentType": "application/json",
            "messageId": mid,
            "time": str(int(time.time() * 1000)),
            "topic": topic,
        }
        if frame_type == "EVENT":
            headers.update(
                eventType=topic,
                eventId=uuid.uuid4().hex,
                eventCorpId="dingcorp",
                eventBornTime=headers["time"],
                eventUnifiedAppId="fake-app-uuid",
            )
            headers["topic"] = "*"  # the doc's two EVENT examples say "dingTalk" and "*"
        frame = {
            "specVersion": "1.0",
            "type": frame_type,
            "headers": headers,
            "data": json.dumps(data, ensure_ascii=False),
        }
        conn = await self._pick(frame_type, topic, timeout)
        await self._send(conn, frame)
        if frame_type == "EVENT":
            self._spawn(self._redeliver(frame))
        # CALLBACK and SYSTEM frames are pushed once and never again (DOC FAQ: robot messages
        # are "fire-forgot"; outside event subscriptions the ACK "仅用于问题诊断和分析").
        return mid

    async def ping(self, opaque: str | None = None, *, timeout: float = 10.0) -> str:
        """DOC "ping 请求处理": data holds only ``opaque``; the ack must echo it."""
        mid = message_id()
        frame = {
            "type": "SYSTEM",
            "headers": {"topic": "ping", "messageId": mid, "contentType": "application/json"},
            "data": json.dumps({"opaque": opaque or uuid.uuid4().hex}),
        }
        await self._send(await self._pick("SYSTEM", "ping", timeout), frame)
        return mid

    async def disconnect(self, reason: str = "connection is expired", *, timeout: float = 10.0):
        """DOC "disconnect 请求处理": headers carry no messageId, data only ``reason``; no ack
        is expected; the server pushes nothing more and closes the TCP connection after
        ``disconnect_grace_s`` of silence (10 s on the real server)."""
        conn = await self._pick("SYSTEM", "disconnect", timeout)
        conn.draining = True
        frame = {
            "type": "SYSTEM",
            "headers": {"topic": "disconnect", "contentType": "application/json"},
            "data": json.dumps({"reason": reason}),
        }
        await self._send(conn, frame)
        self._spawn(self._close_later(conn))

    async def _close_later(self, conn: Connection) -> None:
        await asyncio.sleep(self.disconnect_grace_s)
        await conn.ws.close()

    async def _redeliver(self, frame: dict[str, Any]) -> None:
        """DOC FAQ: an EVENT not acked in time, or acked ``{"status": "LATER"}``, is pushed
        again (the retry interval is not documented; ``event_ack_timeout_s`` stands in)."""
        mid = frame["headers"]["messageId"]
        acked = self._ack_events.setdefault(mid, asyncio.Event())
        for _attempt in range(1, self.event_attempts):
            seen = len(self.state.acks.get(mid, []))
            acked.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(acked.wait(), self.event_ack_timeout_s)
            acks = self.state.acks.get(mid, [])[seen:]
            if acks and _event_consumed(acks[-1]):
                return
            conns = self.live("EVENT", "*")
            if not conns:
                return
            await self._send(random.choice(conns), frame)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _event_consumed(ack: dict[str, Any]) -> bool:
    """DOC "事件推送": the ack's data must carry ``status`` SUCCESS (LATER = failed)."""
    with contextlib.suppress(ValueError, TypeError):
        data = json.loads(ack.get("data") or "{}")
        return ack.get("code") == 200 and isinstance(data, dict) and data.get("status") == "SUCCESS"
    return False


def error_response(status: int, code: str, message: str) -> web.Response:
    """An OpenAPI refusal as api.dingtalk.com sends it: HTTP 4xx/5xx and
    ``{"code", "message", "requestid"}`` (developerpedia docs/develop/best-practices/
    permission-deny.md; satorijs/satori#240 shows a real 400 InvalidAuthentication body), the
    request id also in the ``x-acs-request-id`` header (alibabacloud-sdk-php/dingtalk#1)."""
    request_id = str(uuid.uuid4()).upper()
    body = {"code": code, "requestid": request_id, "message": message}
    return web.json_response(body, status=status, headers={"x-acs-request-id": request_id})
