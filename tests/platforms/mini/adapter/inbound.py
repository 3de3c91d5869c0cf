"""Mini's webhook, ``POST /api/mini/webhook/{integrationId}``, through the kit's skeleton
(``gateway.edge.webhook``): the timestamp window and the signature over the raw body first, then
the JSON (read by the kit's bounded reader), then the event as an Envelope."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gateway.edge.adapter import Adapter
from gateway.edge.body import ascii_text, json_object
from gateway.edge.inbound import Inbound
from gateway.edge.ingest import IngestOutcome
from gateway.edge.webhook import EventWebhook
from gateway.envelope import Action, Chat, Envelope, Mention, ReplyTo, Sender
from gateway.errors import Refused
from gateway.progress import ACTION_ANSWER
from tests.platforms.mini.adapter.settings import MiniIntegration

PLATFORM = "mini"
TOASTS = {
    "stop": "Stopping…",
    "new": "Starting a new conversation",
    "confirm": "Confirmed",
    "reject": "Rejected",
    "retry": "Retrying…",
    "answer": "Answer sent",  # an option of a question
}
ID = r"^[A-Za-z0-9_.:-]{1,128}$"


class _Event(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(pattern=ID)
    chat: str = Field(pattern=ID)
    chatType: Literal["dm", "group"]
    user: str = Field(pattern=ID)
    userName: str | None = Field(None, max_length=128)
    messageId: str = Field(pattern=ID)


class MessageEvent(_Event):
    type: Literal["message"]
    text: str = Field(max_length=150_000)
    mentioned: bool = False


class ClickEvent(_Event):
    type: Literal["click"]
    value: dict[str, str]


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """``v1=`` and the hex HMAC-SHA256 of ``{timestamp}.{body}`` under ``secret``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "v1=" + mac.hexdigest()


class MiniInbound(Inbound[dict[str, Any], dict[str, Any]]):
    def __init__(self, settings: MiniIntegration, clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.clock = clock

    def verify(self, meta: Mapping[str, str], body: bytes) -> dict[str, Any]:
        timestamp = ascii_text(meta.get("X-Mini-Timestamp"), "timestamp")
        given = ascii_text(meta.get("X-Mini-Signature"), "signature")
        if not timestamp.isdigit() or len(timestamp) > 12:
            raise Refused(401, "missing or bad timestamp")
        if abs(self.clock() - int(timestamp)) > self.settings.timestamp_tolerance_seconds:
            raise Refused(401, "stale timestamp")
        secret = self.settings.signing_secret.get_secret_value()
        if not hmac.compare_digest(signature(secret, timestamp, body), given):
            raise Refused(401, "bad signature")
        return json_object(body)

    def envelope(self, payload: dict[str, Any]) -> Envelope | None:
        try:
            if payload.get("type") == "message":
                return self._message(MessageEvent.model_validate(payload))
            if payload.get("type") == "click":
                return self._click(ClickEvent.model_validate(payload))
        except ValidationError:
            raise Refused(400, "event fields of the wrong type") from None
        return None

    def _message(self, event: MessageEvent) -> Envelope:
        group = event.chatType == "group"
        return Envelope(
            integration_id=self.settings.id,
            platform=PLATFORM,
            event_id=event.id,
            chat=Chat(id=event.chat, type="group" if group else "p2p"),
            sender=Sender(id=event.user, name=event.userName),
            text=event.text,
            mentions=(Mention(id="bot", is_bot=True),) if event.mentioned else (),
            bot_mentioned=event.mentioned or not group,
            reply_to=ReplyTo(message_id=event.messageId),
        )

    def _click(self, event: ClickEvent) -> Envelope:
        action = event.value.get("action", "")
        if not action:
            raise Refused(400, "value.action: missing")
        group = event.chatType == "group"
        return Envelope(
            integration_id=self.settings.id,
            platform=PLATFORM,
            event_id=event.id,
            kind="action",
            chat=Chat(id=event.chat, type="group" if group else "p2p"),
            sender=Sender(id=event.user, name=event.userName),
            bot_mentioned=True,
            action=Action(id=action, value=dict(event.value), message_id=event.messageId),
            reply_to=ReplyTo(message_id=event.messageId),
        )

    async def answer(self, envelope: Envelope, outcome: IngestOutcome) -> dict[str, Any]:
        """``ok``; for a click, the ``toast`` Mini shows the clicker alone: the refusal's
        notice, else what the click does."""
        answer: dict[str, Any] = {"ok": True, "status": outcome.status}
        if envelope.action is not None:
            action = envelope.action.id
            kind = "answer" if action.startswith(ACTION_ANSWER) else action
            answer["toast"] = outcome.notice or TOASTS.get(kind, "")
        return answer


class MiniBot(Adapter):
    settings: MiniIntegration
    inbound: MiniInbound


class MiniWebhook(EventWebhook[MiniBot, dict[str, Any], dict[str, Any]]):
    platform = PLATFORM

    def inbound(self, adapter: MiniBot) -> MiniInbound:
        return adapter.inbound

    def respond(
        self,
        adapter: MiniBot,
        payload: dict[str, Any],
        outcome: IngestOutcome,
        answer: dict[str, Any],
    ) -> web.StreamResponse:
        return web.json_response(answer)


def setup_routes(app: web.Application, adapters: Mapping[str, MiniBot]) -> None:
    app.router.add_post("/api/mini/webhook/{integrationId}", MiniWebhook(adapters).handle)
