"""The console's HTTP API (a contract other tests and tools use) and its page.

Requests are validated before anything is stored; the user's message is written to the chat
timeline and handed to intake, and only then is 202 returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import structlog
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.console.outbound import ConsoleOutbound
from adapters.console.settings import ConsoleIntegration
from gateway.adapter import Adapter, AdapterContext, storage_failure
from gateway.envelope import Action, Chat, Envelope, Mention, ReplyTo, Sender
from gateway.pipeline import ShuttingDown
from gateway.progress import Progress
from sessions import TimelineStore

log = structlog.get_logger("adapters.console")
STATIC = Path(__file__).parent / "static"
ID = r"^[A-Za-z0-9_.:@-]{1,128}$"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class MessageRequest(_Request):
    integrationId: str = Field(min_length=1)
    chatId: str = Field(pattern=ID)
    chatType: Literal["group", "p2p"]
    senderId: str = Field(pattern=ID)
    senderName: str | None = Field(None, max_length=128)
    text: str = Field(min_length=1, max_length=20_000)
    mentionBot: bool = False
    eventId: str | None = Field(None, pattern=ID)


class ActionRequest(_Request):
    integrationId: str = Field(min_length=1)
    chatId: str = Field(pattern=ID)
    messageId: str = Field(min_length=1, max_length=256)
    actionId: str = Field(min_length=1, max_length=64)
    senderId: str = Field(pattern=ID)
    eventId: str | None = Field(None, pattern=ID)


class ConsoleAdapter(Adapter):
    settings: ConsoleIntegration

    def __init__(self, *, settings: ConsoleIntegration, context: AdapterContext) -> None:
        super().__init__(settings=settings, context=context)
        self.outbound = ConsoleOutbound(integration_id=settings.id, timeline=context.timeline)

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        return await self.outbound.send_card(reply_to, progress, idempotency_key=idempotency_key)

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        await self.outbound.update_card(reply_to, handle, progress)

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        await self.outbound.send_text(reply_to, text, idempotency_key=idempotency_key)

    def user_name(self, user_id: str) -> str | None:
        return next((u.name for u in self.settings.users if u.id == user_id), None)


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _validation_message(exc: ValidationError) -> str:
    err = exc.errors()[0]
    field = ".".join(str(p) for p in err["loc"]) or "body"
    msg = "unknown field" if err["type"] == "extra_forbidden" else err["msg"]
    return f"{field}: {msg}"


class ConsoleApi:
    def __init__(self, adapters: Mapping[str, ConsoleAdapter]) -> None:
        self.adapters = adapters
        self.closing = asyncio.Event()
        # One Redis subscription per replica, fanned out to every open event stream (a
        # subscription per browser tab would take a pool connection each).
        self._subscribers: set[asyncio.Queue[dict[str, Any]]] = set()
        self._pump: asyncio.Task[None] | None = None

    async def close(self, app: web.Application) -> None:
        """On shutdown, end every open event stream at once (not at its next ping)."""
        self.closing.set()
        if self._pump is not None:
            self._pump.cancel()
            await asyncio.wait([self._pump], timeout=5)

    def _subscribe(self, timeline: TimelineStore) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=10_000)
        self._subscribers.add(queue)
        if self._pump is None or self._pump.done():
            self._pump = asyncio.create_task(self._fan_out(timeline), name="console-events")
        return queue

    async def _fan_out(self, timeline: TimelineStore) -> None:
        while not self.closing.is_set():
            try:
                async for change in timeline.changes():
                    for queue in list(self._subscribers):
                        with contextlib.suppress(asyncio.QueueFull):
                            queue.put_nowait(change)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("console event subscription lost; resubscribing", error=str(exc))
                await asyncio.sleep(1)

    async def _body(self, request: web.Request, model: type[BaseModel]) -> Any:
        try:
            data = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise web.HTTPBadRequest(
                text=json.dumps({"error": "body: not valid JSON"}), content_type="application/json"
            ) from None
        if not isinstance(data, dict):
            raise web.HTTPBadRequest(
                text=json.dumps({"error": "body: expected a JSON object"}),
                content_type="application/json",
            )
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            log.info("console request rejected", reason=_validation_message(exc))
            raise web.HTTPBadRequest(
                text=json.dumps({"error": _validation_message(exc)}),
                content_type="application/json",
            ) from None

    def _adapter(self, integration_id: str) -> ConsoleAdapter:
        adapter = self.adapters.get(integration_id)
        if adapter is None:
            raise web.HTTPNotFound(
                text=json.dumps(
                    {"error": f"integrationId: unknown integration {integration_id!r}"}
                ),
                content_type="application/json",
            )
        return adapter

    async def config(self, request: web.Request) -> web.Response:
        return web.json_response(
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
                ]
            }
        )

    async def post_message(self, request: web.Request) -> web.Response:
        body: MessageRequest = await self._body(request, MessageRequest)
        adapter = self._adapter(body.integrationId)
        event_id = body.eventId or uuid.uuid4().hex
        name = body.senderName or adapter.user_name(body.senderId) or body.senderId
        bot = adapter.settings.bot_name
        envelope = Envelope(
            integration_id=adapter.integration_id,
            platform="console",
            event_id=event_id,
            chat=Chat(id=body.chatId, type=body.chatType),
            sender=Sender(id=body.senderId, name=name),
            text=body.text,
            mentions=(Mention(id="bot", name=bot, is_bot=True),) if body.mentionBot else (),
            bot_mentioned=body.mentionBot or body.chatType == "p2p",
            reply_to=ReplyTo(message_id=event_id),
        )
        record = {
            "id": event_id,
            "role": "user",
            "senderId": body.senderId,
            "senderName": name,
            "text": body.text,
            "mentionBot": body.mentionBot,
            "at": int(time.time() * 1000),
        }
        try:
            # The platform's own record first (idempotent by event id), then durable intake.
            await adapter.context.timeline.put(
                adapter.integration_id, body.chatId, record, mode="create"
            )
            outcome = await adapter.context.ingest(envelope)
        except ShuttingDown:
            return _error(503, "shutting down; retry against another replica")
        except Exception as exc:
            if storage_failure(exc):
                log.warning("console message not stored", error=str(exc))
                return _error(503, "storage unavailable; the message was not stored")
            raise
        return web.json_response({"eventId": event_id, "status": outcome.status}, status=202)

    async def post_action(self, request: web.Request) -> web.Response:
        body: ActionRequest = await self._body(request, ActionRequest)
        adapter = self._adapter(body.integrationId)
        try:
            card = await adapter.context.timeline.get(
                adapter.integration_id, body.chatId, body.messageId
            )
        except Exception:
            return _error(503, "storage unavailable")
        if card is None or card.get("type") != "card":
            return _error(404, f"messageId: no card {body.messageId!r} in chat {body.chatId!r}")
        offered = {b["actionId"] for b in card["card"]["buttons"]}
        if body.actionId not in offered:
            return _error(
                400,
                f"actionId: {body.actionId!r} is not a button of this card "
                f"(offered: {', '.join(sorted(offered)) or 'none'})",
            )
        event_id = body.eventId or uuid.uuid4().hex
        chat_type = (
            "group" if body.chatId in {c.id for c in adapter.settings.group_chats} else "p2p"
        )
        envelope = Envelope(
            integration_id=adapter.integration_id,
            platform="console",
            event_id=event_id,
            kind="action",
            chat=Chat(id=body.chatId, type=chat_type),
            sender=Sender(id=body.senderId, name=adapter.user_name(body.senderId)),
            bot_mentioned=True,
            action=Action(
                id=body.actionId,
                message_id=body.messageId,
                value={
                    "conversation": card.get("conversation", ""),
                    "turnId": card.get("turnId", ""),
                },
            ),
            reply_to=ReplyTo(message_id=str(card.get("replyTo") or body.messageId)),
        )
        try:
            outcome = await adapter.context.ingest(envelope)
        except ShuttingDown:
            return _error(503, "shutting down; retry against another replica")
        except Exception as exc:
            log.warning("console action not stored", error=str(exc))
            return _error(503, "storage unavailable; the click was not stored")
        return web.json_response({"eventId": event_id, "status": outcome.status}, status=202)

    async def list_messages(self, request: web.Request) -> web.Response:
        integration_id = request.query.get("integrationId", "")
        if not integration_id:
            return _error(400, "integrationId: query parameter required")
        adapter = self._adapter(integration_id)
        chat_id = request.match_info["chatId"]
        try:
            records = await adapter.context.timeline.list(adapter.integration_id, chat_id)
        except Exception:
            return _error(503, "storage unavailable")
        return web.json_response(
            {"integrationId": integration_id, "chatId": chat_id, "messages": records}
        )

    async def events(self, request: web.Request) -> web.StreamResponse:
        """Server-sent events: every timeline change of the console integrations."""
        wanted = request.query.get("integrationId")
        chat = request.query.get("chatId")
        if wanted:
            self._adapter(wanted)
        if not self.adapters:
            return _error(404, "no console integration configured")
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
        queue = self._subscribe(timeline)
        closing = asyncio.create_task(self.closing.wait())
        try:
            while not self.closing.is_set():
                getter = asyncio.create_task(queue.get())
                done, _ = await asyncio.wait(
                    {getter, closing}, timeout=15, return_when=asyncio.FIRST_COMPLETED
                )
                if getter not in done:
                    getter.cancel()
                    if not done:  # quiet for 15 s: a ping also finds clients that left
                        await response.write(b": ping\n\n")
                    continue
                change = getter.result()
                if wanted and change.get("integrationId") != wanted:
                    continue
                if change.get("integrationId") not in self.adapters:
                    continue
                if chat and change.get("chatId") != chat:
                    continue
                data = json.dumps(change, ensure_ascii=False, separators=(",", ":"))
                await response.write(f"event: record\ndata: {data}\n\n".encode())
        except ConnectionResetError:
            pass
        finally:
            self._subscribers.discard(queue)
            closing.cancel()
        return response

    async def page(self, request: web.Request) -> web.FileResponse:
        return web.FileResponse(STATIC / "index.html")


async def _to_slash(request: web.Request) -> web.StreamResponse:
    raise web.HTTPFound("/console/")


def setup_routes(app: web.Application, adapters: Mapping[str, ConsoleAdapter]) -> None:
    api = ConsoleApi(adapters)
    app.on_shutdown.append(api.close)
    app.router.add_get("/console", _to_slash)
    app.router.add_get("/console/", api.page)
    app.router.add_static("/console/static/", STATIC)
    app.router.add_get("/console/api/config", api.config)
    app.router.add_post("/console/api/messages", api.post_message)
    app.router.add_post("/console/api/actions", api.post_action)
    app.router.add_get("/console/api/chats/{chatId}/messages", api.list_messages)
    app.router.add_get("/console/api/events", api.events)
