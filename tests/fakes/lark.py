"""A fake Lark OpenAPI and long-connection server (platforms.md §1.11), in aiohttp.

It records every call, keeps the messages, reactions and CardKit cards it was asked to make,
enforces what the real one enforces where tests depend on it (``uuid`` dedup, strictly
increasing CardKit ``sequence``, ``update_multi`` on patched cards, a bearer token), and can
inject rate-limit answers. The WebSocket speaks the SDK's protobuf frames (``pbbp2.Frame``).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from adapters.lark.connection import sdk_client

sdk_client()  # importing lark_oapi makes an event loop at import time; this closes it

TOKEN = "t-fake"
BOT_OPEN_ID = "ou_bot"


@dataclass
class Call:
    op: str
    method: str
    path: str
    query: dict[str, str]
    body: Any
    at: float = field(default_factory=time.monotonic)


@dataclass
class Failure:
    op: str
    status: int
    code: int
    times: int


class FakeLark:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.messages: dict[str, dict[str, Any]] = {}
        self.by_uuid: dict[str, str] = {}
        self.reactions: dict[str, dict[str, str]] = {}  # reaction_id -> {message_id, emoji}
        self.cards: dict[str, dict[str, Any]] = {}
        self.users: dict[str, dict[str, Any]] = {}  # open_id -> contact profile
        self.failures: list[Failure] = []
        self.acks: dict[str, dict[str, Any]] = {}
        self.sockets: list[web.WebSocketResponse] = []
        self.endpoint_calls = 0
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    # --- lifecycle -------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        app = web.Application()
        r = app.router
        r.add_post("/open-apis/auth/v3/tenant_access_token/internal", self.token)
        r.add_get("/open-apis/bot/v3/info", self.bot_info)
        r.add_get("/open-apis/contact/v3/users/{uid}", self.user)
        r.add_post("/open-apis/im/v1/messages", self.create)
        r.add_post("/open-apis/im/v1/messages/{mid}/reply", self.reply)
        r.add_patch("/open-apis/im/v1/messages/{mid}", self.patch)
        r.add_post("/open-apis/im/v1/messages/{mid}/reactions", self.add_reaction)
        r.add_delete("/open-apis/im/v1/messages/{mid}/reactions/{rid}", self.delete_reaction)
        r.add_get("/open-apis/im/v1/messages/{mid}/resources/{key}", self.resource)
        r.add_post("/open-apis/cardkit/v1/cards", self.card_create)
        r.add_put("/open-apis/cardkit/v1/cards/{cid}/elements/{eid}/content", self.card_content)
        r.add_patch("/open-apis/cardkit/v1/cards/{cid}/settings", self.card_settings)
        r.add_put("/open-apis/cardkit/v1/cards/{cid}", self.card_update)
        r.add_post("/callback/ws/endpoint", self.ws_endpoint)
        r.add_get("/ws", self.ws)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for ws in list(self.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- test controls ---------------------------------------------------------------------
    def fail(self, op: str, *, status: int = 200, code: int = 230020, times: int = 1) -> None:
        """The next ``times`` calls of ``op`` answer ``status`` / ``code`` instead."""
        self.failures.append(Failure(op, status, code, times))

    def of(self, op: str) -> list[Call]:
        return [c for c in self.calls if c.op == op]

    def card_of(self, message_id: str) -> dict[str, Any]:
        """The card a message shows now (inline JSON, or the CardKit entity it points at)."""
        content = json.loads(self.messages[message_id]["content"])
        if content.get("type") == "card":
            card: dict[str, Any] = self.cards[content["data"]["card_id"]]["card"]
            return card
        return dict(content)

    def apply_callback(self, message_id: str, answer: dict[str, Any]) -> None:
        """What Lark does with a callback answer that carries a card: the message shows it at
        once (``{"type": "raw", "data": <card JSON 2.0>}``). Raises on a card it would refuse."""
        card = answer["card"]
        assert card["type"] == "raw", card
        content = json.dumps(card["data"])
        assert self._bad_card({"msg_type": "interactive", "content": content}) is None
        assert self.messages[message_id]["msg_type"] == "interactive"
        self.calls.append(Call("callback_card", "ANSWER", message_id, {}, card["data"]))
        self.messages[message_id]["content"] = content

    # --- helpers ---------------------------------------------------------------------------
    async def _enter(self, request: web.Request, op: str) -> tuple[Any, web.Response | None]:
        body = None
        if request.can_read_body:
            body = await request.json()
        self.calls.append(Call(op, request.method, request.path, dict(request.query), body))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return body, web.json_response({"code": 99991663, "msg": "invalid token"}, status=400)
        for failure in self.failures:
            if failure.op == op and failure.times > 0:
                failure.times -= 1
                headers = {"x-ogw-ratelimit-reset": "0"} if failure.status == 429 else None
                return body, web.json_response(
                    {"code": failure.code, "msg": "injected"},
                    status=failure.status,
                    headers=headers,
                )
        return body, None

    @staticmethod
    def _ok(data: dict[str, Any] | None = None) -> web.Response:
        return web.json_response({"code": 0, "msg": "success", "data": data or {}})

    def _new_message(self, body: dict[str, Any], chat_id: str, parent: str | None) -> str:
        key = body.get("uuid")
        if key and key in self.by_uuid:
            return self.by_uuid[key]
        mid = f"om_fake{next(self._ids)}"
        self.messages[mid] = {
            "message_id": mid,
            "chat_id": chat_id,
            "parent_id": parent,
            "msg_type": body["msg_type"],
            "content": body["content"],
            "patches": 0,
        }
        if key:
            self.by_uuid[key] = mid
        return mid

    @staticmethod
    def _bad_card(body: dict[str, Any]) -> str | None:
        if body.get("msg_type") != "interactive":
            return None
        card = json.loads(body["content"])
        if card.get("type") == "card":
            return None
        if card.get("schema") != "2.0" or card.get("config", {}).get("update_multi") is not True:
            return "card must be JSON 2.0 with update_multi"
        return None

    # --- OpenAPI ---------------------------------------------------------------------------
    async def token(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.calls.append(Call("token", "POST", request.path, {}, body))
        return web.json_response(
            {"code": 0, "msg": "ok", "tenant_access_token": TOKEN, "expire": 7200}
        )

    async def bot_info(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "bot")
        return error or web.json_response(
            {"code": 0, "msg": "ok", "bot": {"open_id": BOT_OPEN_ID, "app_name": "Fake"}}
        )

    async def user(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "user")
        if error:
            return error
        profile = self.users.get(request.match_info["uid"])
        if request.query.get("user_id_type") != "open_id" or profile is None:
            return web.json_response({"code": 41050, "msg": "no user authority"}, status=400)
        return self._ok({"user": profile})

    async def create(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "create")
        if error:
            return error
        if bad := self._bad_card(body):
            return web.json_response({"code": 230099, "msg": bad}, status=400)
        mid = self._new_message(body, body["receive_id"], None)
        return self._ok({"message_id": mid, "chat_id": body["receive_id"]})

    async def reply(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "reply")
        if error:
            return error
        if bad := self._bad_card(body):
            return web.json_response({"code": 230099, "msg": bad}, status=400)
        parent = request.match_info["mid"]
        mid = self._new_message(body, "oc_unknown", parent)
        return self._ok({"message_id": mid, "parent_id": parent})

    async def patch(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "patch")
        if error:
            return error
        msg = self.messages.get(request.match_info["mid"])
        if msg is None or msg["msg_type"] != "interactive":
            return web.json_response({"code": 230001, "msg": "not a card message"}, status=400)
        if bad := self._bad_card({"msg_type": "interactive", "content": body["content"]}):
            return web.json_response({"code": 230099, "msg": bad}, status=400)
        msg["content"] = body["content"]
        msg["patches"] += 1
        return self._ok()

    async def add_reaction(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "reaction_add")
        if error:
            return error
        rid = f"r_{uuid.uuid4().hex[:8]}"
        self.reactions[rid] = {
            "message_id": request.match_info["mid"],
            "emoji": body["reaction_type"]["emoji_type"],
        }
        return self._ok({"reaction_id": rid})

    async def delete_reaction(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "reaction_delete")
        if error:
            return error
        self.reactions.pop(request.match_info["rid"], None)
        return self._ok()

    async def resource(self, request: web.Request) -> web.Response:
        _, error = await self._enter(request, "resource")
        return error or web.Response(body=b"\x89PNG fake bytes", content_type="image/png")

    # --- CardKit ---------------------------------------------------------------------------
    def _sequence(self, cid: str, body: dict[str, Any]) -> web.Response | None:
        card = self.cards.get(cid)
        if card is None:
            return web.json_response({"code": 300300, "msg": "no such card"}, status=400)
        seq = body.get("sequence")
        if not isinstance(seq, int) or seq <= card["sequence"]:
            card["rejected"].append(seq)
            return web.json_response(
                {"code": 300317, "msg": "sequence number compare failed"}, status=400
            )
        card["sequence"] = seq
        card["sequences"].append(seq)
        return None

    async def card_create(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "card_create")
        if error:
            return error
        cid = f"70000000000000{next(self._ids):05d}"
        card = json.loads(body["data"])
        self.cards[cid] = {
            "card": card,
            "sequence": 0,
            "sequences": [],
            "rejected": [],
            "streaming": bool(card.get("config", {}).get("streaming_mode")),
        }
        return self._ok({"card_id": cid})

    async def card_content(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "card_content")
        if error:
            return error
        cid, eid = request.match_info["cid"], request.match_info["eid"]
        if bad := self._sequence(cid, body):
            return bad
        for el in self.cards[cid]["card"]["body"]["elements"]:
            if el.get("element_id") == eid:
                el["content"] = body["content"]
        return self._ok()

    async def card_settings(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "card_settings")
        if error:
            return error
        cid = request.match_info["cid"]
        if bad := self._sequence(cid, body):
            return bad
        config = json.loads(body["settings"]).get("config", {})
        if "streaming_mode" in config:
            self.cards[cid]["streaming"] = bool(config["streaming_mode"])
        return self._ok()

    async def card_update(self, request: web.Request) -> web.Response:
        body, error = await self._enter(request, "card_update")
        if error:
            return error
        cid = request.match_info["cid"]
        if bad := self._sequence(cid, body):
            return bad
        self.cards[cid]["card"] = json.loads(body["card"]["data"])
        return self._ok()

    # --- long connection -------------------------------------------------------------------
    async def ws_endpoint(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.endpoint_calls += 1
        self.calls.append(Call("ws_endpoint", "POST", request.path, {}, {"AppID": body["AppID"]}))
        if not body.get("AppSecret"):
            return web.json_response({"code": 403, "msg": "forbidden"})
        url = f"ws://127.0.0.1:{self.port}/ws?device_id=d{self.endpoint_calls}&service_id=1"
        config = {"ReconnectCount": -1, "ReconnectInterval": 1, "ReconnectNonce": 0}
        return web.json_response(
            {
                "code": 0,
                "msg": "ok",
                "data": {"URL": url, "ClientConfig": config | {"PingInterval": 30}},
            }
        )

    async def ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.BINARY:
                    continue
                frame = Frame()
                frame.ParseFromString(msg.data)
                headers = {h.key: h.value for h in frame.headers}
                if frame.method == 0 and headers.get("type") == "ping":
                    pong = Frame(SeqID=0, LogID=0, service=frame.service, method=0)
                    pong.headers.add(key="type", value="pong")
                    await ws.send_bytes(pong.SerializeToString())
                elif frame.method == 1:
                    self.acks[headers["message_id"]] = json.loads(frame.payload)
        finally:
            self.sockets.remove(ws)
        return ws

    async def push(self, payload: dict[str, Any], *, kind: str = "event") -> str:
        """Push one event frame to the first connected client; returns the frame's message id."""
        mid = f"ws_{uuid.uuid4().hex[:12]}"
        frame = Frame(SeqID=1, LogID=1, service=1, method=1)
        for key, value in (
            ("type", kind),
            ("message_id", mid),
            ("trace_id", "tr1"),
            ("sum", "1"),
            ("seq", "0"),
        ):
            frame.headers.add(key=key, value=value)
        frame.payload = json.dumps(payload).encode()
        await self.sockets[0].send_bytes(frame.SerializeToString())
        return mid

    async def wait_ack(self, mid: str, timeout: float = 5.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while mid not in self.acks:
            if time.monotonic() > deadline:
                raise AssertionError(f"no ack for frame {mid}")
            await asyncio.sleep(0.02)
        return self.acks[mid]
