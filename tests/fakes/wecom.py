"""A fake WeCom server (platforms.md §3.7): gettoken, message/send (a response_code per
interactive card), update_template_card (each response_code once), media/get, a response_url
sink, encrypted AI-bot download links, and the AI-bot long connection. It records every call
and can inject errors."""

from __future__ import annotations

import itertools
import json
import os
from typing import Any

from aiohttp import WSMsgType, web
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

# Codes the fake uses for what WeCom refuses; the real numbers for these two are not documented
# in platforms.md (⚠), the adapter treats any non-token, non-rate-limit code the same way.
TASK_ID_EXISTS = 40099
RESPONSE_CODE_USED = 40098


class FakeWeCom:
    def __init__(
        self,
        *,
        corp_id: str = "wwcorp",
        secret: str = "s3cret",
        bot_id: str = "aib-1",
        bot_secret: str = "bs3cret",
    ) -> None:
        self.corp_id, self.secret = corp_id, secret
        self.bot_id, self.bot_secret = bot_id, bot_secret
        self.token = "tok-1"
        self.token_fetches = 0
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[dict[str, Any]] = []
        self.updates: list[dict[str, Any]] = []
        self.responses: list[dict[str, Any]] = []
        self.task_ids: set[str] = set()
        self.codes: dict[str, bool] = {}  # response_code -> used
        self.failures: dict[str, list[int]] = {}
        self.media: dict[str, tuple[bytes, str]] = {}  # media_id -> (data, content type)
        self.files: dict[str, bytes] = {}  # AI-bot download links: name -> ciphertext
        self.downloads: list[str] = []  # what was fetched: media ids and file names
        self._ids = itertools.count(1)
        # long connection
        self.sockets: list[web.WebSocketResponse] = []
        self.frames: list[dict[str, Any]] = []
        self.subscribes = 0
        self.pings = 0
        self.refuse_subscribe = False
        self.port = 0
        self._runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def fail_next(self, path: str, errcode: int, times: int = 1) -> None:
        """The next ``times`` calls of ``path`` (e.g. ``message/send``) answer ``errcode``."""
        self.failures.setdefault(path, []).extend([errcode] * times)

    def expire_token(self) -> None:
        self.token = f"tok-{next(self._ids)}-new"

    def encrypted_link(self, data: bytes, key: bytes) -> str:
        """An AI-bot download link to ``data`` encrypted as WeCom does: AES-256-CBC with
        ``key``, the IV its first 16 bytes, PKCS#7 to a 32-byte block."""
        pad = 32 - len(data) % 32
        encryptor = Cipher(algorithms.AES(key), modes.CBC(key[:16])).encryptor()
        name = f"f-{os.urandom(4).hex()}"
        self.files[name] = encryptor.update(data + bytes([pad]) * pad) + encryptor.finalize()
        return f"{self.base_url}/files/{name}"

    def issue_code(self) -> str:
        """A response_code as a click callback carries one."""
        code = f"rc-{next(self._ids)}"
        self.codes[code] = False
        return code

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/cgi-bin/gettoken", self._gettoken)
        app.router.add_post("/cgi-bin/message/send", self._send)
        app.router.add_post("/cgi-bin/message/update_template_card", self._update)
        app.router.add_post("/response/{id}", self._response)
        app.router.add_get("/cgi-bin/media/get", self._media)
        app.router.add_get("/files/{name}", self._file)
        app.router.add_get("/ws", self._ws)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        for ws in list(self.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    # --- HTTP API ------------------------------------------------------------------------------
    async def _gettoken(self, request: web.Request) -> web.Response:
        self.token_fetches += 1
        q = request.query
        if q.get("corpid") != self.corp_id or q.get("corpsecret") != self.secret:
            return web.json_response({"errcode": 40013, "errmsg": "invalid corpid or secret"})
        return web.json_response(
            {"errcode": 0, "errmsg": "ok", "access_token": self.token, "expires_in": 7200}
        )

    async def _media(self, request: web.Request) -> web.Response:
        """Bytes with their type, or (as WeCom does) a JSON error."""
        media_id = request.query.get("media_id", "")
        self.downloads.append(media_id)
        if request.query.get("access_token") != self.token:
            return web.json_response({"errcode": 42001, "errmsg": "access_token expired"})
        if media_id not in self.media:
            return web.json_response({"errcode": 40007, "errmsg": "invalid media_id"})
        data, content_type = self.media[media_id]
        return web.Response(body=data, content_type=content_type)

    async def _file(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        self.downloads.append(name)
        if name not in self.files:
            return web.Response(status=404)
        return web.Response(body=self.files[name], content_type="application/octet-stream")

    async def _common(self, request: web.Request, path: str) -> tuple[dict[str, Any], int]:
        body = await request.json()
        self.calls.append((path, body))
        queued = self.failures.get(path)
        if queued:
            return body, queued.pop(0)
        if request.query.get("access_token") != self.token:
            return body, 42001
        return body, 0

    async def _send(self, request: web.Request) -> web.Response:
        body, code = await self._common(request, "message/send")
        if code:
            return web.json_response({"errcode": code, "errmsg": "injected"})
        result: dict[str, Any] = {
            "errcode": 0,
            "errmsg": "ok",
            "invaliduser": "",
            "msgid": f"msg-{next(self._ids)}",
        }
        if body.get("msgtype") == "template_card":
            task_id = body["template_card"]["task_id"]
            if task_id in self.task_ids:
                return web.json_response({"errcode": TASK_ID_EXISTS, "errmsg": "task_id exists"})
            self.task_ids.add(task_id)
            if body["template_card"]["card_type"] == "button_interaction":
                result["response_code"] = self.issue_code()
        self.sent.append(body)
        return web.json_response(result)

    async def _update(self, request: web.Request) -> web.Response:
        body, code = await self._common(request, "message/update_template_card")
        if code:
            return web.json_response({"errcode": code, "errmsg": "injected"})
        rc = body.get("response_code")
        if rc not in self.codes or self.codes[rc]:
            return web.json_response(
                {"errcode": RESPONSE_CODE_USED, "errmsg": "response_code used"}
            )
        self.codes[rc] = True
        self.updates.append(body)
        return web.json_response({"errcode": 0, "errmsg": "ok", "invaliduser": []})

    async def _response(self, request: web.Request) -> web.Response:
        self.responses.append({"id": request.match_info["id"], **(await request.json())})
        return web.json_response({"errcode": 0, "errmsg": "ok"})

    def texts(self, touser: str | None = None) -> list[str]:
        """Markdown and text messages sent, in order."""
        out = []
        for m in self.sent:
            if touser is not None and m.get("touser") != touser:
                continue
            if m.get("msgtype") in ("markdown", "text"):
                out.append(m[m["msgtype"]]["content"])
        return out

    def cards(self) -> list[dict[str, Any]]:
        return [m["template_card"] for m in self.sent if m.get("msgtype") == "template_card"]

    # --- AI-bot long connection ------------------------------------------------------------------
    async def _ws(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        self.sockets.append(ws)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    break
                frame = json.loads(msg.data)
                self.frames.append(frame)
                await self._on_frame(ws, frame)
        finally:
            if ws in self.sockets:
                self.sockets.remove(ws)
        return ws

    async def _on_frame(self, ws: web.WebSocketResponse, frame: dict[str, Any]) -> None:
        req_id = frame.get("headers", {}).get("req_id", "")
        cmd = frame.get("cmd")
        ok = {"headers": {"req_id": req_id}, "errcode": 0, "errmsg": "ok"}
        if cmd == "aibot_subscribe":
            body = frame.get("body", {})
            if self.refuse_subscribe or (body.get("bot_id"), body.get("secret")) != (
                self.bot_id,
                self.bot_secret,
            ):
                await ws.send_json({**ok, "errcode": 40058, "errmsg": "bad secret"})
                return
            self.subscribes += 1
            # One connection per bot: a new subscription kicks the previous one (§3.5 ⚠).
            for other in [s for s in self.sockets if s is not ws]:
                await other.send_json({"cmd": "disconnected_event", "headers": {"req_id": ""}})
                await other.close()
        elif cmd == "ping":
            self.pings += 1
        await ws.send_json(ok)

    async def push(self, cmd: str, body: dict[str, Any], req_id: str) -> None:
        await self.sockets[-1].send_json({"cmd": cmd, "headers": {"req_id": req_id}, "body": body})

    async def drop(self) -> None:
        """The server closes every socket (the client must reconnect)."""
        for ws in list(self.sockets):
            await ws.close()

    def stream_frames(self, req_id: str | None = None) -> list[dict[str, Any]]:
        return [
            f
            for f in self.frames
            if f.get("cmd") == "aibot_respond_msg"
            and (req_id is None or f["headers"]["req_id"] == req_id)
        ]
