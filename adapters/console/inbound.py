"""The console's HTTP API (a contract other tests and tools use) and its page.

Requests are read with the core's bounded readers (``gateway.edge.body``: size, charset, JSON
depth) and validated before anything is stored; the user's message is written to the chat
timeline and handed to intake, and only then is 202 returned. A refusal is a short JSON error
and one log line. The event streams (``/console/api/events``) share one Redis subscription: a
pump writes each change to every stream that shows it, at once where the client's socket has
room, else queues it for the stream's own task. Over 300 lines: the handlers and the streams
share ConsoleApi."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import orjson
import structlog
from aiohttp import web
from pydantic import BaseModel, ValidationError

from adapters.console.events import (
    ActionRequest,
    MessageRequest,
    action_envelope,
    message_envelope,
    message_record,
)
from adapters.console.outbound import route
from adapters.console.settings import ConsoleIntegration
from gateway.edge.adapter import Adapter
from gateway.edge.body import HttpRequest, body_text, json_object, read_body
from gateway.edge.ingest import IngestUnavailable
from gateway.edge.stores import StoreUnavailable, TimelineStore
from gateway.errors import Refused, first_problem

log = structlog.get_logger("adapters.console")
STATIC = Path(__file__).parent / "static"
M = TypeVar("M", bound=BaseModel)
# A quiet event stream gets a ping (finding clients that left) at each tick that wrote nothing.
PING_SECONDS = 15.0
_PING: dict[str, Any] = {}  # queued to every stream at each tick (compared by identity)
DIRECT_BYTES = 32_768  # see _Stream.ready
R = TypeVar("R", bound=HttpRequest)


def _json(data: Any, status: int = 200) -> web.Response:
    """A JSON answer: compact UTF-8 by orjson (aiohttp's json_response runs the stdlib's)."""
    return web.Response(
        body=orjson.dumps(data), status=status, content_type="application/json", charset="utf-8"
    )


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status=status)


def _guarded(
    handler: Callable[[R], Awaitable[web.StreamResponse]],
) -> Callable[[R], Awaitable[web.StreamResponse]]:
    async def guarded(request: R) -> web.StreamResponse:
        try:
            return await handler(request)
        except Refused as exc:
            level = log.warning if exc.status >= 500 else log.info
            level("console request refused", status=exc.status, reason=exc.reason)
            return _error(exc.status, exc.public)

    return guarded


class ChatAdapter(Adapter):
    """A console adapter as its API sees it (``ConsoleAdapter``): its bot, users and chats."""

    settings: ConsoleIntegration

    def user_name(self, user_id: str) -> str | None:
        return next((u.name for u in self.settings.users if u.id == user_id), None)


class _Stream:
    """An open event stream: what it shows, and the changes not written to it yet."""

    __slots__ = ("chat", "integration_id", "queue", "response", "transport", "writing", "wrote")

    def __init__(
        self,
        response: web.StreamResponse,
        transport: asyncio.Transport | None,
        integration_id: str | None,
        chat: str | None,
    ) -> None:
        self.response = response
        self.transport = transport
        self.integration_id = integration_id
        self.chat = chat
        # what the pump could not write at once; None wakes the stream to end it
        self.queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=10_000)
        self.writing = False  # the stream's own task is in a write
        self.wrote = False  # a record since the last ping tick

    def ready(self, size: int) -> bool:
        """Whether the pump may write ``size`` bytes itself, now, without waiting: nothing
        queued before them, no write of the stream's own under way, and the socket's buffer far
        below the point where a write waits for the client (asyncio's 64 KiB)."""
        transport = self.transport
        return (
            not self.writing
            and self.queue.empty()
            and transport is not None
            and not transport.is_closing()
            and transport.get_write_buffer_size() + size <= DIRECT_BYTES
        )


def _frame(change: dict[str, Any]) -> bytes:
    # the JSON as published (compact UTF-8), else encoded here the same way
    raw = getattr(change, "raw", None) or orjson.dumps(change)
    return b"".join((b"event: record\ndata: ", raw, b"\n\n"))


class ConsoleApi:
    def __init__(self, adapters: Mapping[str, ChatAdapter]) -> None:
        self.adapters = adapters
        self.closing = asyncio.Event()
        # One Redis subscription per replica, fanned out to every open event stream (a
        # subscription per browser tab would take a pool connection each).
        self._streams: tuple[_Stream, ...] = ()
        self._pump: asyncio.Task[None] | None = None
        # One timer for every stream's pings, rather than a timeout around each stream's wait
        # (a timer armed and cancelled per change, issue 15).
        self._ticker: asyncio.TimerHandle | None = None

    def _tell_all(self, item: dict[str, Any] | None) -> None:
        for stream in self._streams:
            with contextlib.suppress(asyncio.QueueFull):
                stream.queue.put_nowait(item)

    def _tick(self) -> None:
        self._tell_all(_PING)
        loop = asyncio.get_running_loop()
        self._ticker = loop.call_later(PING_SECONDS, self._tick) if self._streams else None

    async def close(self, app: web.Application) -> None:
        """On shutdown, end every open event stream at once (not at its next ping)."""
        self.closing.set()
        self._tell_all(None)  # wakes every stream, which then sees ``closing``
        if self._ticker is not None:
            self._ticker.cancel()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.wait([self._pump], timeout=5)

    def _subscribe(self, timeline: TimelineStore, stream: _Stream) -> None:
        self._streams = (*self._streams, stream)
        if self._ticker is None:
            self._ticker = asyncio.get_running_loop().call_later(PING_SECONDS, self._tick)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._fan_out(timeline), name="console-events")

    def _unsubscribe(self, stream: _Stream) -> None:
        self._streams = tuple(s for s in self._streams if s is not stream)

    async def _fan_out(self, timeline: TimelineStore) -> None:
        while not self.closing.is_set():
            try:
                async for change in timeline.changes():
                    await self._deliver(change)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if self.adapters and all(getattr(a, "stopped", 0) for a in self.adapters.values()):
                    return  # the gateway is stopping and closed Redis: nothing was lost
                log.warning("console event subscription lost; resubscribing", error=str(exc))
                await asyncio.sleep(1)

    async def _deliver(self, change: dict[str, Any]) -> None:
        """Write ``change`` to each stream that shows it: here, at once, where the socket has
        room (no wake-up of the stream's task per change, issue 15); else into its queue, which
        its own task writes as the client reads, so a slow client holds up nobody else."""
        frame: bytes | None = None
        for stream in self._streams:
            if not self._wanted(change, stream.integration_id, stream.chat):
                continue
            if frame is None:
                frame = _frame(change)
            if stream.ready(len(frame)):
                stream.wrote = True
                try:
                    await stream.response.write(frame)  # done at once: the buffer has room
                except (ConnectionResetError, RuntimeError):  # gone, or its handler returned
                    stream.transport = None
                    with contextlib.suppress(asyncio.QueueFull):
                        stream.queue.put_nowait(None)
            else:
                with contextlib.suppress(asyncio.QueueFull):
                    stream.queue.put_nowait(change)

    def _wanted(self, change: dict[str, Any], integration_id: str | None, chat: str | None) -> bool:
        """Whether a stream asking for ``integration_id`` and ``chat`` (None: any) shows it."""
        if integration_id and change.get("integrationId") != integration_id:
            return False
        if change.get("integrationId") not in self.adapters:
            return False
        return not (chat and change.get("chatId") != chat)

    async def _body(self, request: HttpRequest, model: type[M]) -> M:
        data = json_object(body_text(request, await read_body(request)))
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            # the first problem, naming its field (the page shows it next to the input)
            raise Refused(
                400, first_problem(exc, unknown="unknown field", nowhere="body")
            ) from None

    def _adapter(self, integration_id: str) -> ChatAdapter:
        adapter = self.adapters.get(integration_id)
        if adapter is None:
            raise Refused(404, f"integrationId: unknown integration {integration_id!r}")
        return adapter

    async def config(self, request: web.Request) -> web.Response:
        return _json(
            {
                "integrations": [
                    {
                        "id": a.settings.id,
                        "botName": a.settings.bot_name,
                        "users": [u.model_dump(by_alias=True) for u in a.settings.users],
                        "chats": [
                            c.model_dump(by_alias=True, exclude_none=True)
                            for c in a.settings.chats()
                        ],
                        "summaryWindowSeconds": a.settings.summary_window_seconds,
                    }
                    for a in self.adapters.values()
                ],
                # The Sessions tab says the admin API is off rather than ask for its token.
                "adminApi": any(a.context.admin_api() for a in self.adapters.values()),
            }
        )

    async def post_message(self, request: HttpRequest) -> web.Response:
        body = await self._body(request, MessageRequest)
        adapter = self._adapter(body.integrationId)
        event_id = body.eventId or uuid.uuid4().hex
        name = body.senderName or adapter.user_name(body.senderId) or body.senderId
        envelope = message_envelope(
            adapter.integration_id,
            body,
            event_id=event_id,
            name=name,
            bot_name=adapter.settings.bot_name,
        )
        record = message_record(body, event_id=event_id, name=name, at=int(time.time() * 1000))
        try:
            # The platform's own record first (idempotent by event id), then durable intake:
            # sent together (one write to Redis, which runs them in this order), the record
            # queued first. A record that failed answers 503 whatever intake did: the retry
            # is then a duplicate intake ignores, and its record is written.
            ingesting = asyncio.ensure_future(adapter.context.ingest(envelope))
            try:
                await adapter.context.timeline.put(
                    adapter.integration_id, body.chatId, record, mode="create"
                )
            finally:
                outcome = await ingesting
        except StoreUnavailable as exc:  # IngestUnavailable and ShuttingDown included
            raise Refused(
                503, f"not stored: {exc}", public="storage unavailable; the message was not stored"
            ) from None
        return _json({"eventId": event_id, "status": outcome.status}, status=202)

    async def post_action(self, request: HttpRequest) -> web.Response:
        body = await self._body(request, ActionRequest)
        adapter = self._adapter(body.integrationId)
        try:
            card = await adapter.context.timeline.get(
                adapter.integration_id, body.chatId, body.messageId
            )
        except StoreUnavailable as exc:
            raise Refused(503, f"card unreadable: {exc}", public="storage unavailable") from None
        if card is None or card.get("type") != "card":
            raise Refused(404, f"messageId: no card {body.messageId!r} in chat {body.chatId!r}")
        offered = {b["actionId"] for b in card["card"]["buttons"]}
        if body.actionId not in offered:
            raise Refused(
                400,
                f"actionId: {body.actionId!r} is not a button of this card "
                f"(offered: {', '.join(sorted(offered)) or 'none'})",
            )
        event_id = body.eventId or uuid.uuid4().hex
        envelope = action_envelope(
            adapter.integration_id,
            body,
            card,
            event_id=event_id,
            group=body.chatId in {c.id for c in adapter.settings.group_chats},
            sender_name=adapter.user_name(body.senderId),
        )
        try:
            outcome = await adapter.context.ingest(envelope)
        except IngestUnavailable as exc:
            raise Refused(
                503, f"not stored: {exc}", public="storage unavailable; the click was not stored"
            ) from None
        answer = {"eventId": event_id, "status": outcome.status}
        if outcome.notice:  # for the clicker alone (a platform's toast)
            answer["notice"] = outcome.notice
        return _json(answer, status=202)

    async def list_messages(self, request: web.Request) -> web.Response:
        integration_id = request.query.get("integrationId", "")
        if not integration_id:
            raise Refused(400, "integrationId: query parameter required")
        adapter = self._adapter(integration_id)
        chat_id = request.match_info["chatId"]
        try:
            records = await adapter.context.timeline.list(adapter.integration_id, chat_id)
        except StoreUnavailable as exc:
            raise Refused(
                503, f"timeline unreadable: {exc}", public="storage unavailable"
            ) from None
        return _json({"integrationId": integration_id, "chatId": chat_id, "messages": records})

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: every timeline change of the console integrations."""
        wanted = request.query.get("integrationId")
        chat = request.query.get("chatId")
        if wanted:
            self._adapter(wanted)
        if not self.adapters:
            raise Refused(404, "no console integration configured")
        timeline = next(iter(self.adapters.values())).context.timeline
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await response.prepare(request)
        await response.write(b": connected\n\nretry: 1000\n\n")
        stream = _Stream(response, request.transport, wanted, chat)
        self._subscribe(timeline, stream)
        try:
            while not self.closing.is_set() and stream.transport is not None:
                # Whatever the pump could not write at once, and the ping ticks: wait for the
                # next, take whatever else came meanwhile and write it all at once.
                change: dict[str, Any] | None = await stream.queue.get()
                out: list[bytes] = []
                while change is not None:
                    if change is _PING:
                        if not stream.wrote:
                            out.append(b": ping\n\n")
                        stream.wrote = False
                    else:
                        stream.wrote = True
                        out.append(_frame(change))
                    queue = stream.queue
                    change = queue.get_nowait() if not queue.empty() else None
                if out:
                    stream.writing = True
                    try:
                        await response.write(b"".join(out))
                    finally:
                        stream.writing = False
        except ConnectionResetError:
            pass
        finally:
            stream.transport = None  # the pump writes here no more
            self._unsubscribe(stream)
        return response

    async def page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")


async def _to_slash(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/console/")


def setup_routes(app: web.Application, adapters: Mapping[str, ChatAdapter]) -> None:
    api = ConsoleApi(adapters)
    app.on_shutdown.append(api.close)
    app.router.add_get("/console", _to_slash)
    app.router.add_get("/console/", api.page)
    app.router.add_static("/console/static/", STATIC)
    app.router.add_get("/console/api/config", api.config)
    app.router.add_post("/console/api/messages", _guarded(api.post_message))
    app.router.add_post("/console/api/actions", _guarded(api.post_action))
    app.router.add_get("/console/api/chats/{chatId}/messages", _guarded(api.list_messages))
    app.router.add_get("/console/api/chats/{chatId}/files/{fileId}", _guarded(route(adapters)))
    app.router.add_get("/console/api/events", _guarded(api.events))
