"""A fake DingTalk (platforms.md §2.7): OpenAPI (token, robot sends, AI cards, file download),
conversation sessionWebhooks, and the stream gateway (connection open + WebSocket pushing
CALLBACK / SYSTEM frames and recording acks). Everything is recorded; errors and flow control
can be injected per path."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

from tests.helpers import free_port

TOKEN = "fake-access-token"
SEND_PATHS = ("/v1.0/robot/groupMessages/send", "/v1.0/robot/oToMessages/batchSend")

PNG = b"\x89PNG\r\n\x1a\n"  # the signature is enough for a fake image


@dataclass
class Call:
    method: str
    path: str
    body: dict[str, Any]
    status: int = 200


@dataclass
class Fault:
    status: int
    body: dict[str, Any]
    times: int


@dataclass
class StreamState:
    tickets: set[str] = field(default_factory=set)
    sockets: list[web.WebSocketResponse] = field(default_factory=list)
    connects: int = 0
    acks: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    unacked: dict[str, dict[str, Any]] = field(default_factory=dict)
    opens: list[dict[str, Any]] = field(default_factory=list)
    drop_acks: bool = False  # acks sent meanwhile are lost on the way


class FakeDingTalk:
    def __init__(self, *, redeliver_unacked: bool = True) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.calls: list[Call] = []
        self.faults: dict[str, list[Fault]] = {}
        self.flow_controlled: int = 0  # batchSend answers list the recipients this many times
        self.expired_webhooks: set[str] = set()
        self.token_requests = 0
        self.stream = StreamState()
        self.redeliver_unacked = redeliver_unacked
        self._runner: web.AppRunner | None = None
        app = web.Application()
        app.router.add_post("/v1.0/oauth2/accessToken", self._token)
        app.router.add_post("/v1.0/gateway/connections/open", self._open)
        app.router.add_get("/connect", self._connect)
        app.router.add_get("/f/{code}", self._file)
        app.router.add_post("/session/{sid}", self._webhook)
        app.router.add_post("/v1.0/robot/messageFiles/download", self._download)
        app.router.add_route("*", "/v1.0/{tail:.*}", self._openapi)
        self.app = app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app, handle_signals=False)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        for ws in self.stream.sockets:
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- test controls ------------------------------------------------------------------------
    def fail(self, path: str, *, status: int, body: dict[str, Any] | None = None, times: int = 1):
        self.faults.setdefault(path, []).append(Fault(status, body or {}, times))

    def flow_control(self, path: str, times: int = 1) -> None:
        """DingTalk's throttling answer: 403 Forbidden.AccessDenied.QpsLimitForApi."""
        body = {"code": "Forbidden.AccessDenied.QpsLimitForApi", "message": "qps limit"}
        self.fail(path, status=403, body=body, times=times)

    def session_webhook(self, *, expired: bool = False) -> tuple[str, int]:
        """A conversation's sessionWebhook URL and its expiry (ms); ``expired`` makes DingTalk
        refuse it although the expiry says it is valid (errcode 300001)."""
        sid = uuid.uuid4().hex
        if expired:
            self.expired_webhooks.add(sid)
        return f"{self.base}/session/{sid}", int(time.time() * 1000) + 5_400_000

    def bodies(self, path: str, method: str | None = None) -> list[dict[str, Any]]:
        return [
            c.body
            for c in self.calls
            if c.path.startswith(path) and c.status < 300 and (method is None or c.method == method)
        ]

    def sent(self) -> list[dict[str, Any]]:
        """Every delivered robot message, webhook or OpenAPI, normalised to title/text/urls."""
        out: list[dict[str, Any]] = []
        for c in self.calls:
            if c.status >= 300:
                continue
            if c.path.startswith("/session/"):
                kind = c.body["msgtype"]
                content = c.body[kind]
                out.append({"via": "webhook", **_normalise(content)})
            elif c.path in SEND_PATHS:
                param = json.loads(c.body["msgParam"])
                out.append({"via": "openapi", "msgKey": c.body["msgKey"], **_normalise(param)})
        return out

    # --- stream gateway -----------------------------------------------------------------------
    async def push(
        self, frame_type: str, topic: str, data: dict[str, Any], message_id: str | None = None
    ) -> str:
        """Send a frame on the newest connection (waiting for one); returns its messageId."""
        message_id = message_id or uuid.uuid4().hex
        frame = {
            "specVersion": "1.0",
            "type": frame_type,
            "headers": {
                "topic": topic,
                "messageId": message_id,
                "contentType": "application/json",
                "time": str(int(time.time() * 1000)),
                "appId": "fake-app",
            },
            "data": json.dumps(data),
        }
        ws = await self._socket()
        if frame_type == "CALLBACK":
            self.stream.unacked[message_id] = frame
        await ws.send_str(json.dumps(frame))
        return message_id

    async def _socket(self, timeout: float = 10.0) -> web.WebSocketResponse:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            live = [ws for ws in self.stream.sockets if not ws.closed]
            if live:
                return live[-1]
            await asyncio.sleep(0.02)
        raise AssertionError("no stream connection")

    async def _open(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", request.path, body))
        self.stream.opens.append(body)
        if (fault := self._fault(request.path)) is not None:
            return fault
        ticket = uuid.uuid4().hex
        self.stream.tickets.add(ticket)
        return web.json_response(
            {"endpoint": f"ws://127.0.0.1:{self.port}/connect", "ticket": ticket}
        )

    async def _connect(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self.stream.tickets:  # single use (§2.1)
            return web.Response(status=403, text="bad ticket")
        self.stream.tickets.discard(ticket)
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.stream.sockets.append(ws)
        self.stream.connects += 1
        if self.redeliver_unacked:  # EVENT-style re-push of what was never acked
            for frame in list(self.stream.unacked.values()):
                await ws.send_str(json.dumps(frame))
        async for msg in ws:
            if msg.type != WSMsgType.TEXT:
                continue
            if self.stream.drop_acks:
                continue
            ack = json.loads(msg.data)
            mid = ack.get("headers", {}).get("messageId", "")
            self.stream.acks.setdefault(mid, []).append(ack)
            if ack.get("code") == 200:
                self.stream.unacked.pop(mid, None)
        return ws

    # --- OpenAPI --------------------------------------------------------------------------------
    def _fault(self, path: str) -> web.Response | None:
        queue = self.faults.get(path)
        if not queue:
            return None
        fault = queue[0]
        fault.times -= 1
        if fault.times <= 0:
            queue.pop(0)
        self.calls[-1].status = fault.status
        return web.json_response(fault.body, status=fault.status)

    async def _token(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", request.path, {"appKey": body.get("appKey")}))
        self.token_requests += 1
        if (fault := self._fault(request.path)) is not None:
            return fault
        return web.json_response({"accessToken": TOKEN, "expireIn": 7200})

    async def _webhook(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", request.path, body))
        if request.match_info["sid"] in self.expired_webhooks:
            self.calls[-1].status = 410
            return web.json_response({"errcode": 300001, "errmsg": "session webhook expired"})
        if (fault := self._fault("/session")) is not None:
            return fault
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    async def _file(self, request: web.Request) -> web.Response:
        """The download URL the robot file API hands out: a tiny PNG per download code."""
        self.calls.append(Call("GET", request.path, {}))
        return web.Response(
            body=PNG + request.match_info["code"].encode(), content_type="image/png"
        )

    async def _download(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("POST", request.path, body))
        return web.json_response({"downloadUrl": f"{self.base}/f/{body.get('downloadCode')}"})

    async def _openapi(self, request: web.Request) -> web.Response:
        body = await request.json() if request.can_read_body else {}
        self.calls.append(Call(request.method, request.path, body))
        if request.headers.get("x-acs-dingtalk-access-token") != TOKEN:
            self.calls[-1].status = 401
            return web.json_response({"code": "InvalidAuthentication"}, status=401)
        if (fault := self._fault(request.path)) is not None:
            return fault
        if request.path == "/v1.0/robot/oToMessages/batchSend":
            throttled = body.get("userIds", []) if self.flow_controlled > 0 else []
            self.flow_controlled -= 1
            if throttled:
                self.calls[-1].status = 399  # answered 200, but delivered nothing
            return web.json_response(
                {
                    "processQueryKey": "pq1",
                    "invalidStaffIdList": [],
                    "flowControlledStaffIdList": throttled,
                }
            )
        if request.path.startswith("/v1.0/robot/"):
            return web.json_response({"processQueryKey": "pq1"})
        if request.path.startswith("/v1.0/card/"):
            return web.json_response(
                {"success": True, "result": {"outTrackId": body.get("outTrackId")}}
            )
        self.calls[-1].status = 404
        return web.json_response({"code": "NotFound"}, status=404)


def _normalise(content: dict[str, Any]) -> dict[str, Any]:
    urls = [v for k, v in content.items() if k.lower().startswith(("singleurl", "actionurl"))]
    urls += [b["actionURL"] for b in content.get("btns", [])]
    titles = [v for k, v in content.items() if k.startswith(("singleTitle", "actionTitle"))]
    titles += [b["title"] for b in content.get("btns", [])]
    return {
        "title": content.get("title"),
        "text": content.get("text"),
        "urls": urls,
        "buttons": titles,
    }
