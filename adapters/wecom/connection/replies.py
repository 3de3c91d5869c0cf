"""What the AI bot long connection sends back (``aibot_ws``, docs/wecom.md "AI bot").

Replies are ``aibot_respond_msg`` stream frames reusing the inbound ``req_id``, full content each
frame. WeCom ends a stream 6 minutes after the message (846608), whether or not new progress
arrived, so each open stream has a watchdog: while the expert is silent it repeats the current
content every ``keepalive_s`` (a keep-alive frame), and when ``streamWindowSeconds`` is reached it
finishes the stream with a note; the final answer then follows with ``aibot_send_msg``.

A turn with a Stop button in a direct chat also gets a ``button_interaction`` template card
(``aibot_send_msg``; WeCom sends cards only to direct chats); a click on it is answered with
``aibot_respond_update_msg`` (``update_template_card``).

Each frame waits for its ack (``connection.link``). A stream WeCom no longer takes (846608, "stream
message update expired": ``WecomTeam/wecom-openclaw-plugin`` ``src/message-sender.ts``) is
treated like one cut at the window's end: the answer follows with ``aibot_send_msg``. A click is
an event, and an event's req_id cannot carry ``aibot_respond_msg`` (846605 "invalid req_id",
same source), so texts answering a click go out with ``aibot_send_msg`` too.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog

import adapters.wecom.cards as cards
from adapters.wecom.connection.link import STREAM_EXPIRED, WsRefused
from adapters.wecom.connection.upload import NotUploaded, upload
from adapters.wecom.outbound.media import msg_items
from adapters.wecom.outbound.stream import CUT_NOTE, STREAM_TTL_MS
from adapters.wecom.settings import WeComIntegration
from gateway.edge.long_answer import is_answer_file, whole_answer
from gateway.edge.stores import RecordStore
from gateway.envelope import Envelope
from gateway.progress import Progress

log = structlog.get_logger("adapters.wecom")

NS = "wecom-ws"
ONCE_TTL_MS = 120_000
KEEPALIVE_S = 60.0  # the longest a stream goes without a frame; a third of a short window

Send = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]


@dataclass
class _Live:
    """An open stream on this replica: what was last sent, and when."""

    reply_to: Envelope
    content: str = ""
    sent_at: float = 0.0
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    over: asyncio.Event = field(default_factory=asyncio.Event)


def req_id_of(reply_to: Envelope) -> str:
    extra = reply_to.reply_to.model_extra if reply_to.reply_to is not None else None
    return str((extra or {}).get("req_id") or "")


def streamable(reply_to: Envelope) -> bool:
    """A message's req_id can carry stream replies; an event's (a click) cannot (846605)."""
    return bool(req_id_of(reply_to)) and reply_to.kind != "action"


class WsReplies:
    def __init__(self, *, settings: WeComIntegration, records: RecordStore, send: Send) -> None:
        self.settings = settings
        self.records = records
        self._send = send
        self.window_s = settings.stream_window_seconds
        self.keepalive_s = min(KEEPALIVE_S, self.window_s / 3)
        self._live: dict[str, _Live] = {}
        self._watchdogs: set[asyncio.Task[None]] = set()

    def _key(self, *parts: str) -> str:
        return ":".join((self.settings.bot_id, *parts))

    async def close(self) -> None:
        """Watchdogs end at their next wait (never cancelled inside a Redis call)."""
        for live in self._live.values():
            live.over.set()
        if self._watchdogs:
            await asyncio.wait(list(self._watchdogs), timeout=5)

    def _frame(
        self,
        reply_to: Envelope,
        stream_id: str,
        content: str,
        finish: bool,
        items: list[dict[str, Any]] | None = None,
    ) -> Any:
        stream: dict[str, Any] = {
            "id": stream_id,
            "finish": finish,
            "content": cards.clip_bytes(content, cards.STREAM_BYTES),
        }
        if items and finish:  # images only in the last frame (004-被动回复消息.md l.136-144)
            stream["msg_item"] = items
        return {
            "cmd": "aibot_respond_msg",
            "headers": {"req_id": req_id_of(reply_to)},
            "body": {"msgtype": "stream", "stream": stream},
        }

    async def _once(self, name: str) -> bool:
        return await self.records.put_new(NS, self._key(name), "1", ttl_ms=ONCE_TTL_MS)

    # --- the renderer's side ------------------------------------------------------------------
    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        stream_id = (
            "t" + hashlib.sha1(f"{self.settings.id}:{idempotency_key}".encode()).hexdigest()[:24]
        )
        await self.update_card(reply_to, stream_id, progress)
        if (
            streamable(reply_to)
            and reply_to.chat.type == "p2p"
            and progress.buttons
            and await self._once(f"card:{stream_id}")
        ):
            card = cards.template_card(progress, cards.task_id_for(idempotency_key))
            try:
                await self._send_msg(reply_to, {"msgtype": "template_card", "template_card": card})
            except WsRefused as exc:  # the stream goes on without the Stop card
                log.warning("stop card refused", stream=stream_id, errcode=exc.errcode)
        return stream_id

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        if not streamable(reply_to):
            # No message to answer (a scheduled task, a click): only the final answer, as a
            # message of its own.
            if progress.final:
                await self._send_markdown(reply_to, cards.final_text(progress), f"late:{handle}")
                await self._answer_file(reply_to, progress, f"file:{handle}")
            return
        live = self._live.setdefault(handle, _Live(reply_to=reply_to))
        async with live.lock:
            if await self.records.get(NS, self._key("cut", handle)) is not None:
                self._end(handle, live)
                if progress.final:
                    await self._send_markdown(
                        reply_to, cards.final_text(progress), f"late:{handle}"
                    )
                    await self._answer_file(reply_to, progress, f"file:{handle}")
                return
            first, *rest = cards.stream_parts(progress) or [""]
            if not progress.final and self._remaining(reply_to) <= 0:
                await self._cut(handle, live, first)
                return
            items = msg_items(progress) if progress.final else None
            if not await self._push(handle, live, first, progress.final, items):
                if progress.final:
                    await self._send_markdown(
                        reply_to, cards.final_text(progress), f"late:{handle}"
                    )
                    await self._answer_file(reply_to, progress, f"file:{handle}")
                return
            if progress.final:
                self._end(handle, live)
                # The stream holds part (1/n); parts (2/n)..(n/n) follow, each sent once.
                await self._send_parts(reply_to, rest, f"rest:{handle}", start=1)
                await self._answer_file(reply_to, progress, f"file:{handle}")
            elif not any(t.get_name() == f"wecom-keepalive:{handle}" for t in self._watchdogs):
                task = asyncio.create_task(
                    self._watch(handle, live), name=f"wecom-keepalive:{handle}"
                )
                self._watchdogs.add(task)
                task.add_done_callback(self._watchdogs.discard)

    async def _push(
        self,
        handle: str,
        live: _Live,
        content: str,
        finish: bool,
        items: list[dict[str, Any]] | None = None,
    ) -> bool:
        """One stream frame (the last with the answer's images, ``items``); False when WeCom
        takes no more frames on this stream (846608)."""
        try:
            await self._send(self._frame(live.reply_to, handle, content, finish, items))
        except WsRefused as exc:
            if exc.errcode != STREAM_EXPIRED:
                raise
            await self.records.put(NS, self._key("cut", handle), "1", ttl_ms=STREAM_TTL_MS)
            self._end(handle, live)
            log.info("stream expired at WeCom; the answer follows as a new message", stream=handle)
            return False
        live.content, live.sent_at = content, asyncio.get_running_loop().time()
        return True

    def _remaining(self, reply_to: Envelope) -> float:
        return self.window_s - (datetime.now(UTC) - reply_to.received_at).total_seconds()

    def _end(self, handle: str, live: _Live) -> None:
        live.over.set()
        if self._live.get(handle) is live:
            del self._live[handle]

    async def _cut(self, handle: str, live: _Live, content: str) -> None:
        """The window is used up: finish the stream with a note; the answer follows later."""
        await self.records.put(NS, self._key("cut", handle), "1", ttl_ms=STREAM_TTL_MS)
        if await self._push(handle, live, content + CUT_NOTE, True):
            self._end(handle, live)
            log.info("stream window ending; the answer follows as a new message", stream=handle)

    async def _watch(self, handle: str, live: _Live) -> None:
        """Keep-alive frames while the expert is silent; the cut when the window runs out."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._remaining(live.reply_to)
        try:
            while not live.over.is_set():
                wake = min(live.sent_at + self.keepalive_s, deadline)
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, wake - loop.time())):
                        await live.over.wait()
                async with live.lock:
                    if live.over.is_set():
                        return
                    if loop.time() >= deadline:
                        await self._cut(handle, live, live.content)
                    elif loop.time() >= live.sent_at + self.keepalive_s:
                        await self._push(handle, live, live.content, False)
        except Exception as exc:  # Redis or socket trouble: the next progress update retries
            log.warning("stream keep-alive failed", stream=handle, error=str(exc))
            self._end(handle, live)

    async def _send_msg(self, reply_to: Envelope, body: dict[str, Any]) -> None:
        frame = {
            "cmd": "aibot_send_msg",
            "headers": {"req_id": uuid.uuid4().hex},
            "body": {"chatid": reply_to.chat.id, **body},
        }
        await self._send(frame)

    async def _send_markdown(self, reply_to: Envelope, text: str, key: str) -> None:
        """``text`` whole as markdown messages of at most STREAM_BYTES each, numbered."""
        await self._send_parts(reply_to, cards.split_bytes(text, cards.STREAM_BYTES), key)

    async def _send_parts(
        self, reply_to: Envelope, parts: list[str], key: str, *, start: int = 0
    ) -> None:
        """Each part as a markdown message once for ``key`` (claimed before, released when it
        fails, so a retried final sends only what did not go out)."""
        for i, part in enumerate(parts, start=start):
            if not await self._once(f"{key}#p{i}"):
                continue
            try:
                await self._send_msg(
                    reply_to, {"msgtype": "markdown", "markdown": {"content": part}}
                )
            except BaseException:
                await self.records.delete(NS, self._key(f"{key}#p{i}"))
                raise

    async def _answer_file(self, reply_to: Envelope, progress: Progress, key: str) -> None:
        """An answer too long for the chat (gateway/edge/long_answer.py), whole: the file
        answer.md, uploaded on the connection and sent once (upload.py). Where this replica
        cannot upload (another holds the connection) the whole answer goes in parts."""
        if not (progress.media and is_answer_file(progress.media[0])):
            return
        if not await self._once(key):
            return
        try:
            try:
                media_id = await upload(self._send, progress.media[0])
            except NotUploaded as exc:
                log.warning("answer file not uploaded; sending it in parts", error=str(exc))
                await self._send_markdown(reply_to, whole_answer(progress), f"{key}:parts")
                return
            await self._send_msg(reply_to, {"msgtype": "file", "file": {"media_id": media_id}})
        except BaseException:
            await self.records.delete(NS, self._key(key))
            raise

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        if not await self._once(f"text:{idempotency_key}"):
            return
        if not streamable(reply_to):
            await self._send_markdown(reply_to, text, f"text:{idempotency_key}")
            return
        stream_id = "x" + hashlib.sha1(idempotency_key.encode()).hexdigest()[:24]
        await self._send(self._frame(reply_to, stream_id, text, True))

    async def notice(self, reply_to: Envelope, text: str) -> None:
        """One finished stream frame answering the event, sent without Redis (it is for when
        the event could not be stored)."""
        stream_id = "n" + hashlib.sha1(req_id_of(reply_to).encode()).hexdigest()[:24]
        await self._send(self._frame(reply_to, stream_id, text, True))

    # --- answers to events --------------------------------------------------------------------
    async def answer_click(self, envelope: Envelope) -> None:
        """``update_template_card`` for the clicked card (WeCom wants it within 5 s)."""
        assert envelope.action is not None
        card = cards.clicked_card(envelope.action, envelope.sender.id)
        body = {"response_type": "update_template_card", "template_card": card}
        frame = {
            "cmd": "aibot_respond_update_msg",
            "headers": {"req_id": req_id_of(envelope)},
            "body": body,
        }
        await self._send(frame)

    async def welcome(self, req_id: str) -> None:
        frame = {
            "cmd": "aibot_respond_welcome_msg",
            "headers": {"req_id": req_id},
            "body": {"msgtype": "text", "text": {"content": cards.WELCOME}},
        }
        await self._send(frame)
