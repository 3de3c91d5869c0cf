"""The AI-bot long connection of the fake WeCom server (``wss://openws.work.weixin.qq.com``).

Each behaviour below names where it was learned. Sources:

- [ws.ts], [client.ts], [api.ts], [event.ts], [message.ts]: the official SDK,
  ``WecomTeam/aibot-node-sdk`` @80615b9, ``src/ws.ts``, ``src/client.ts``, ``src/types/*.ts``.
- [claw]: WeCom's own integration built on that SDK, ``WecomTeam/wecom-openclaw-plugin``
  ``src/message-sender.ts`` (errcodes 846605, 846608) and ``src/monitor.ts`` (93006).
- [101463]: developer.work.weixin.qq.com/document/path/101463 (智能机器人长连接). Only its table
  of contents is stored here; details marked ⚠ come from a third-party transcription of that page
  (a Markdown copy in a public repository headed "整理自企业微信官方 API 文档（doc_id: 60904）"),
  not the page itself.
- [101027]: developer.work.weixin.qq.com/document/path/101027 (event format, ``event.<eventtype>``).

Behaviours:

1. Frames are JSON text ``{cmd, headers: {req_id}, body}``. Every command the client sends is
   answered by an ack without ``cmd``: ``{headers: {req_id}, errcode, errmsg}`` [ws.ts
   ``handleFrame`` comment; api.ts ``WsFrame`` comment; 101463 ⚠ "统一响应格式"].
2. ``aibot_subscribe`` with the bot's id and secret is acked 0; a wrong pair is refused with
   853000 "invalid bot_id or secret" (⚠ the code is only a third-party project's measurement)
   and the socket is left open: the client closes it [ws.ts: auth failure → ``terminate``].
3. One subscribed connection per bot: when a second socket subscribes, the older one gets an
   ``aibot_event_callback`` whose ``body.event.eventtype`` is ``disconnected_event`` (not a cmd of
   its own), then the server closes it [event.ts ``EventType.Disconnected``: "有新连接建立时，
   服务端向旧连接推送此事件并主动断开旧连接"; ws.ts; body fields per 101463 ⚠ and event.ts
   ``EventMessage``: msgid, create_time, aibotid, msgtype ``event``, no ``from``].
4. ``ping`` is acked 0 [ws.ts: a ping ack resets ``missedPongCount``]. ``answer_pings = False``
   makes the server stop answering (a connection gone silent), to test the client's rule.
5. Callbacks are pushed as ``aibot_msg_callback`` / ``aibot_event_callback``, each with a fresh
   req_id [api.ts ``WsCmd``; 101463 ⚠]. An event body nests its data as ``event.<eventtype>``
   [101027], e.g. ``event.template_card_event.{event_key, task_id}``.
6. ``aibot_respond_msg`` must reuse the req_id of an ``aibot_msg_callback``: an event's req_id is
   refused with 846605 "invalid req_id" [claw message-sender.ts: "事件回调…没有可用于 replyStream
   的有效 req_id … 避免 846605 invalid req_id"]; a req_id never pushed gets the same (inferred).
   A ``stream`` needs ``stream.id`` and at most 20480 bytes of content [api.ts
   ``StreamReplyBody``]; a stream takes updates for 6 minutes from its first frame, later frames
   are refused with 846608 [claw: "846608：流式消息超过6分钟无法更新"; 101463 ⚠ "从首次发送起
   6 分钟内"]; ``stream_lifetime_s`` shortens that for tests. A frame after ``finish: true`` is
   refused with 846608 too (⚠ 101463 says a finished stream "不可再更新"; the code is inferred).
7. ``aibot_respond_welcome_msg`` only with the req_id of an ``enter_chat`` event and
   ``aibot_respond_update_msg`` only with that of a ``template_card_event``, each within 5 s of
   the event [client.ts ``replyWelcome`` / ``updateTemplateCard``: "收到事件回调后需在 5 秒内发送
   回复"]; the update's ``template_card.task_id`` must be the clicked card's [client.ts]. Refusal
   codes are not documented: 846605 for a wrong or late req_id, 40058 for a bad body (inferred).
8. ``aibot_send_msg`` (new req_id) needs ``body.chatid`` of a chat that has written to the bot
   [101463 ⚠ "前提条件"], else 93006 "invalid chatid" (the code is from [claw] monitor.ts for
   ``aibot_send_biz_msg``; inferred here); msgtype ∈ markdown, template_card, file, image, voice,
   video [api.ts ``SendMsgBody``]; a template card only in a direct chat [101463 ⚠].
9. Each chat may get 30 new messages a minute, replies and pushes together [101463 ⚠]; stream
   updates of one message do not count. Over it: 45009 (the WeCom frequency code, inferred).
10. Temporary media go up in three steps on the connection [client.ts ``uploadMedia``; api.ts
   ``WsCmd``; 101463 "上传临时素材"]: ``aibot_upload_media_init`` ``{type, filename, total_size,
   total_chunks, md5}`` is acked with ``body.upload_id``; ``aibot_upload_media_chunk``
   ``{upload_id, chunk_index, base64_data}`` carries at most 512 KB before Base64, at most 100
   chunks; ``aibot_upload_media_finish`` ``{upload_id}`` is acked with ``body.media_id`` once
   every chunk came and the MD5 matches. A ``file`` message of ``aibot_send_msg`` names such a
   ``media_id`` [client.ts ``sendMediaMessage``]. Refusals (40058) are inferred.
11. Instruments, not server behaviour: ``ack_delay_s`` (network latency before each ack) and
    ``overlaps``: frames that arrived for a req_id while an earlier frame with that req_id was
    still unacked, which the official SDK never does [ws.ts ``sendReply``: "同一个 req_id 的消息
    会被放入队列中串行发送"].

(Longer than 300 lines because each rule carries its source; the rules belong together.)

Not traced to any source (so not modelled): how the server treats commands on a socket that has
not subscribed, unknown cmds (recorded in ``unknown``, not answered), the 24 h reply window and
idle disconnects [101463 ⚠], the subscribe frequency protection.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web

INVALID_REQ_ID = 846605
STREAM_EXPIRED = 846608
BAD_CREDENTIALS = 853000
INVALID_CHATID = 93006
INVALID_PARAM = 40058
FREQUENCY_LIMIT = 45009
STREAM_BYTES = 20_480
SEND_TYPES = {"markdown", "template_card", "file", "image", "voice", "video"}
MEDIA_TYPES = {"file", "image", "voice", "video"}
CHUNK_BYTES = 512 * 1024


@dataclass
class _Callback:
    kind: str  # "msg" or the event's eventtype
    at: float
    chat: str
    chattype: str
    task_id: str = ""


@dataclass
class _Stream:
    started: float
    finished: bool = False


@dataclass
class _Socket:
    ws: web.WebSocketResponse
    bot_id: str = ""
    pings: int = 0
    unanswered: int = 0  # pings not answered (``answer_pings`` off)
    unacked: dict[str, int] = field(default_factory=lambda: defaultdict(int))


class FakeAibotSocket:
    """The long-connection side of :class:`tests.fakes.wecom.FakeWeCom`."""

    def __init__(self, *, bot_id: str, bot_secret: str) -> None:
        self.bot_id, self.bot_secret = bot_id, bot_secret
        self.sockets: list[_Socket] = []
        self.closed: list[_Socket] = []  # sockets that have ended, oldest first
        self.frames: list[dict[str, Any]] = []
        self.acks: list[dict[str, Any]] = []
        self.subscribes = 0
        self.pings = 0
        self.answer_pings = True
        self.ack_delay_s = 0.0
        self.stream_lifetime_s = 360.0
        self.event_reply_window_s = 5.0
        self.minute_s = 60.0
        self.per_chat_per_minute = 30
        self.overlaps: list[dict[str, Any]] = []
        self.unknown: list[dict[str, Any]] = []
        self.kicked = 0
        self.media: dict[str, tuple[bytes, str, str]] = {}  # media_id -> data, filename, type
        self._uploads: dict[str, _Upload] = {}
        self._ids = itertools.count(1)
        self._callbacks: dict[str, _Callback] = {}
        self._streams: dict[str, _Stream] = {}
        self._chats: set[str] = set()
        self._sent_at: dict[str, deque[float]] = defaultdict(deque)
        self._tasks: set[asyncio.Task[None]] = set()

    # --- the test's side ------------------------------------------------------------------------
    @property
    def subscribed(self) -> list[web.WebSocketResponse]:
        return [s.ws for s in self.sockets if s.bot_id and not s.ws.closed]

    async def push(self, cmd: str, body: dict[str, Any], req_id: str | None = None) -> str:
        """Push a callback to the subscribed connection; returns its req_id."""
        req_id = req_id or f"req-{next(self._ids)}"
        event = body.get("event") or {}
        kind = str(event.get("eventtype") or "") if cmd == "aibot_event_callback" else "msg"
        click = event.get("template_card_event") or event
        chat = str(body.get("chatid") or (body.get("from") or {}).get("userid") or "")
        self._callbacks[req_id] = _Callback(
            kind=kind,
            at=time.monotonic(),
            chat=chat,
            chattype=str(body.get("chattype") or "single"),
            task_id=str(click.get("task_id") or ""),
        )
        if chat:
            self._chats.add(chat)
        assert self.subscribed, "no subscribed connection to push to"
        await self.subscribed[-1].send_json(
            {"cmd": cmd, "headers": {"req_id": req_id}, "body": body}
        )
        return req_id

    async def drop(self) -> None:
        """The server closes every socket (the client must reconnect)."""
        for s in list(self.sockets):
            await s.ws.close()

    async def close(self) -> None:
        await self.drop()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks)

    def stream_frames(self, req_id: str | None = None) -> list[dict[str, Any]]:
        return [
            f
            for f in self.frames
            if f.get("cmd") == "aibot_respond_msg"
            and (req_id is None or f["headers"]["req_id"] == req_id)
        ]

    def refused(self) -> list[dict[str, Any]]:
        """Acks with a non-zero errcode, in order."""
        return [a for a in self.acks if a["errcode"] != 0]

    # --- the server ----------------------------------------------------------------------------
    async def handle(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        sock = _Socket(ws=ws)
        self.sockets.append(sock)
        try:
            async for msg in ws:
                if msg.type != WSMsgType.TEXT:
                    break
                frame = json.loads(msg.data)
                self.frames.append(frame)
                await self._on_frame(sock, frame)
        finally:
            self.sockets.remove(sock)
            self.closed.append(sock)
        return ws

    async def _ack(
        self,
        sock: _Socket,
        req_id: str,
        errcode: int = 0,
        errmsg: str = "ok",
        body: dict[str, Any] | None = None,
    ) -> None:
        if self.ack_delay_s:
            await asyncio.sleep(self.ack_delay_s)
        sock.unacked[req_id] -= 1
        ack: dict[str, Any] = {"headers": {"req_id": req_id}, "errcode": errcode, "errmsg": errmsg}
        if body is not None:
            ack["body"] = body
        self.acks.append(ack)
        if not sock.ws.closed:
            with contextlib.suppress(ConnectionError):
                await sock.ws.send_json(ack)

    async def _on_frame(self, sock: _Socket, frame: dict[str, Any]) -> None:
        cmd = str(frame.get("cmd") or "")
        req_id = str((frame.get("headers") or {}).get("req_id") or "")
        body = frame.get("body") or {}
        if cmd == "ping":
            self.pings += 1
            sock.pings += 1
            if not self.answer_pings:
                sock.unanswered += 1
            else:
                await sock.ws.send_json(
                    {"headers": {"req_id": req_id}, "errcode": 0, "errmsg": "ok"}
                )
            return
        if cmd == "aibot_subscribe":
            await self._subscribe(sock, req_id, body)
            return
        if cmd not in HANDLERS and cmd not in UPLOADS:
            self.unknown.append(frame)
            return
        if sock.unacked[req_id] > 0:
            self.overlaps.append(frame)
        sock.unacked[req_id] += 1
        # Acks go out in their own task so a slow ack does not hold up reading the socket.
        task = asyncio.get_running_loop().create_task(self._answer(sock, cmd, req_id, body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _answer(self, sock: _Socket, cmd: str, req_id: str, body: dict[str, Any]) -> None:
        if cmd in UPLOADS:
            errcode, errmsg, answer = UPLOADS[cmd](self, body)
            await self._ack(sock, req_id, errcode, errmsg, answer)
            return
        errcode, errmsg = HANDLERS[cmd](self, req_id, body)
        await self._ack(sock, req_id, errcode, errmsg)

    async def _subscribe(self, sock: _Socket, req_id: str, body: dict[str, Any]) -> None:
        if (body.get("bot_id"), body.get("secret")) != (self.bot_id, self.bot_secret):
            await sock.ws.send_json(
                {
                    "headers": {"req_id": req_id},
                    "errcode": BAD_CREDENTIALS,
                    "errmsg": "invalid bot_id or secret",
                }
            )
            return
        self.subscribes += 1
        for other in [s for s in self.sockets if s is not sock and s.bot_id == self.bot_id]:
            other.bot_id = ""
            self.kicked += 1
            kick = {
                "msgid": f"kick-{next(self._ids)}",
                "create_time": int(time.time()),
                "aibotid": self.bot_id,
                "msgtype": "event",
                "event": {"eventtype": "disconnected_event"},
            }
            frame = {
                "cmd": "aibot_event_callback",
                "headers": {"req_id": f"req-{next(self._ids)}"},
                "body": kick,
            }
            if not other.ws.closed:
                await other.ws.send_json(frame)
                await other.ws.close()
        sock.bot_id = self.bot_id
        await sock.ws.send_json({"headers": {"req_id": req_id}, "errcode": 0, "errmsg": "ok"})

    # --- commands (each returns errcode, errmsg) ------------------------------------------------
    def _quota(self, chat: str) -> bool:
        """Count one new message to ``chat``; False when the minute's quota is used up."""
        now, sent = time.monotonic(), self._sent_at[chat]
        while sent and sent[0] <= now - self.minute_s:
            sent.popleft()
        if len(sent) >= self.per_chat_per_minute:
            return False
        sent.append(now)
        return True

    def _respond(self, req_id: str, body: dict[str, Any]) -> tuple[int, str]:
        cb = self._callbacks.get(req_id)
        if cb is None or cb.kind != "msg":
            return INVALID_REQ_ID, "invalid req_id"
        if body.get("msgtype") != "stream":
            if body.get("msgtype") not in ("template_card", "stream_with_template_card"):
                return INVALID_PARAM, "invalid msgtype"
            return (0, "ok") if self._quota(cb.chat) else (FREQUENCY_LIMIT, "freq limit")
        stream = body.get("stream") or {}
        stream_id = str(stream.get("id") or "")
        if not stream_id or len(str(stream.get("content") or "").encode()) > STREAM_BYTES:
            return INVALID_PARAM, "invalid stream"
        if stream.get("msg_item") and (not stream.get("finish") or len(stream["msg_item"]) > 10):
            return INVALID_PARAM, "invalid msg_item"
        state = self._streams.get(stream_id)
        now = time.monotonic()
        if state is None:
            if not self._quota(cb.chat):
                return FREQUENCY_LIMIT, "freq limit"
            state = self._streams[stream_id] = _Stream(started=now)
        if state.finished or now - state.started > self.stream_lifetime_s:
            return STREAM_EXPIRED, "stream message update expired"
        state.finished = bool(stream.get("finish"))
        return 0, "ok"

    def _event_reply(self, req_id: str, kind: str) -> _Callback | None:
        cb = self._callbacks.get(req_id)
        if cb is None or cb.kind != kind or time.monotonic() - cb.at > self.event_reply_window_s:
            return None
        return cb

    def _welcome(self, req_id: str, body: dict[str, Any]) -> tuple[int, str]:
        if self._event_reply(req_id, "enter_chat") is None:
            return INVALID_REQ_ID, "invalid req_id"
        if body.get("msgtype") not in ("text", "template_card"):
            return INVALID_PARAM, "invalid msgtype"
        return 0, "ok"

    def _update(self, req_id: str, body: dict[str, Any]) -> tuple[int, str]:
        cb = self._event_reply(req_id, "template_card_event")
        if cb is None:
            return INVALID_REQ_ID, "invalid req_id"
        card = body.get("template_card") or {}
        if body.get("response_type") != "update_template_card" or card.get("task_id") != cb.task_id:
            return INVALID_PARAM, "invalid template_card"
        return 0, "ok"

    def _send_msg(self, req_id: str, body: dict[str, Any]) -> tuple[int, str]:
        chat = str(body.get("chatid") or "")
        if chat not in self._chats:
            return INVALID_CHATID, "invalid chatid"
        msgtype = body.get("msgtype")
        if msgtype not in SEND_TYPES or not isinstance(body.get(msgtype), dict):
            return INVALID_PARAM, "invalid msgtype"
        if msgtype == "markdown" and len(str(body["markdown"].get("content") or "").encode()) > (
            STREAM_BYTES
        ):
            return INVALID_PARAM, "content too long"
        if msgtype == "file" and str(body["file"].get("media_id") or "") not in self.media:
            return INVALID_PARAM, "invalid media_id"
        if msgtype == "template_card" and any(
            c.chat == chat and c.chattype == "group" for c in self._callbacks.values()
        ):
            return INVALID_PARAM, "template_card only in single chat"
        return (0, "ok") if self._quota(chat) else (FREQUENCY_LIMIT, "freq limit")

    # --- temporary media (each returns errcode, errmsg, the ack's body) -------------------------
    def _upload_init(self, body: dict[str, Any]) -> tuple[int, str, dict[str, Any] | None]:
        chunks, size = body.get("total_chunks"), body.get("total_size")
        if not (isinstance(chunks, int) and 1 <= chunks <= 100 and isinstance(size, int)):
            return INVALID_PARAM, "invalid total_chunks", None
        if body.get("type") not in MEDIA_TYPES or not body.get("filename") or not body.get("md5"):
            return INVALID_PARAM, "invalid param", None
        upload_id = f"up-{next(self._ids)}"
        self._uploads[upload_id] = _Upload(dict(body), {})
        return 0, "ok", {"upload_id": upload_id}

    def _upload_chunk(self, body: dict[str, Any]) -> tuple[int, str, dict[str, Any] | None]:
        upload = self._uploads.get(str(body.get("upload_id") or ""))
        index = body.get("chunk_index")
        if upload is None or not isinstance(index, int):
            return INVALID_PARAM, "invalid upload_id", None
        data = base64.b64decode(str(body.get("base64_data") or ""))
        if not 0 <= index < upload.init["total_chunks"] or len(data) > CHUNK_BYTES:
            return INVALID_PARAM, "invalid chunk", None
        upload.chunks[index] = data
        return 0, "ok", None

    def _upload_finish(self, body: dict[str, Any]) -> tuple[int, str, dict[str, Any] | None]:
        upload = self._uploads.pop(str(body.get("upload_id") or ""), None)
        if upload is None or len(upload.chunks) != upload.init["total_chunks"]:
            return INVALID_PARAM, "invalid upload_id", None
        data = b"".join(upload.chunks[i] for i in range(len(upload.chunks)))
        if len(data) != upload.init["total_size"] or (
            hashlib.md5(data).hexdigest() != upload.init["md5"]
        ):
            return INVALID_PARAM, "md5 mismatch", None
        media_id = f"media-{next(self._ids)}"
        self.media[media_id] = (data, str(upload.init["filename"]), str(upload.init["type"]))
        return 0, "ok", {"type": upload.init["type"], "media_id": media_id}


@dataclass
class _Upload:
    init: dict[str, Any]
    chunks: dict[int, bytes]


UPLOADS = {
    "aibot_upload_media_init": FakeAibotSocket._upload_init,
    "aibot_upload_media_chunk": FakeAibotSocket._upload_chunk,
    "aibot_upload_media_finish": FakeAibotSocket._upload_finish,
}
HANDLERS = {
    "aibot_respond_msg": FakeAibotSocket._respond,
    "aibot_respond_welcome_msg": FakeAibotSocket._welcome,
    "aibot_respond_update_msg": FakeAibotSocket._update,
    "aibot_send_msg": FakeAibotSocket._send_msg,
}
