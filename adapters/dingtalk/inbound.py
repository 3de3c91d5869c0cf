"""DingTalk's way in: :class:`DingTalkInbound` (the integration's ``gateway.edge.inbound.Inbound``)
reads robot messages and card callbacks into Envelopes and answers them, for the HTTP-mode robot
webhook (:class:`RobotWebhook`, docs/dingtalk.md, "HTTP mode") and the stream's frames alike
(``connection.StreamFrames``, "Stream mode"). Every path acks only after intake returned: the event
is durable. The signed button links of markdown messages are ``links.py``'s."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from adapters.dingtalk.cards import clicked_params
from adapters.dingtalk.crypto import BadSignature, verify_robot_sign
from adapters.dingtalk.events import (
    action_envelope,
    card_callback_params,
    robot_message,
    where_from_params,
)
from adapters.dingtalk.outbound.ai_card import CardOutbound
from adapters.dingtalk.outbound.robot import reply_extras, webhook_allowed
from adapters.dingtalk.settings import DingTalkIntegration
from gateway.edge.adapter import Adapter
from gateway.edge.body import HttpRequest, ascii_text, json_object, utf8, utf8_safe
from gateway.edge.inbound import Inbound
from gateway.edge.ingest import IngestOutcome
from gateway.edge.stores import StoreUnavailable
from gateway.edge.webhook import EventWebhook
from gateway.envelope import Envelope
from gateway.errors import Refused

log = structlog.get_logger("adapters.dingtalk")

Answer = dict[str, Any] | None  # a stream ack's data (None: nothing but the ack)


@dataclass(frozen=True, slots=True)
class Message:
    """A robot message: its JSON, and the id of the stream frame it came in (None over HTTP)."""

    data: dict[str, Any]
    stream_id: str | None = None
    signed: str = ""  # HTTP mode: the (timestamp, sign) pair it came with


@dataclass(frozen=True, slots=True)
class CardClick:
    """A card button's callback (stream mode) and where the card is (``CardOutbound.where``)."""

    data: dict[str, Any]
    stream_id: str | None
    where: dict[str, Any]


class DingTalkInbound(Inbound[Message | CardClick, Answer]):
    def __init__(self, *, integration_id: str, cards: CardOutbound | None) -> None:
        self.integration_id = integration_id
        self.cards = cards

    def verify(self, meta: Mapping[str, str], body: bytes) -> Message:
        """The robot webhook's body (its sign, over the timestamp header alone, is checked
        before the body is read: ``RobotWebhook.check``)."""
        pair = f"{meta.get('timestamp') or ''}:{meta.get('sign') or ''}"
        return Message(json_object(utf8(body)), signed=pair if pair != ":" else "")

    async def card(self, data: dict[str, Any], stream_id: str | None) -> CardClick | None:
        """A card callback and the card it was on; None for a card unknown here."""
        params = card_callback_params(data)
        track = str(data.get("outTrackId") or "")
        cards = self.cards
        try:
            where = await cards.where(track) if cards is not None and track else None
        except StoreUnavailable:
            where = where_from_params(params, str(data.get("userId") or ""))
        if where is None or not params.get("action") or not params.get("conversation"):
            log.info("card callback for an unknown card", integration_id=self.integration_id)
            return None
        return CardClick(data, stream_id, where)

    def envelope(self, payload: Message | CardClick) -> Envelope:
        if isinstance(payload, CardClick):
            return self._click(payload)
        try:
            if not utf8_safe(payload.data):
                raise ValueError("invalid unicode")
            return robot_message(
                payload.data, integration_id=self.integration_id, stream_id=payload.stream_id
            )
        except ValueError as exc:  # pydantic's ValidationError included
            raise Refused(400, f"bad body ({type(exc).__name__})", public="bad body") from None

    def _click(self, payload: CardClick) -> Envelope:
        """A card button (docs/dingtalk.md): its params carry action, conversation and turnId."""
        data, where = payload.data, payload.where
        params = card_callback_params(data)
        track = str(data.get("outTrackId") or "")
        action = str(params.get("action") or "")
        return action_envelope(
            integration_id=self.integration_id,
            event_id=f"card-{payload.stream_id or track + ':' + action}",
            action_id=action,
            conversation=str(params["conversation"]),
            turn_id=str(params.get("turnId") or ""),
            chat_id=str(where["chatId"]),
            group=bool(where["group"]),
            sender_id=str(data.get("userId") or ""),
            message_id=f"card:{track}",
            extras=where["extras"],
        )

    async def answer(self, envelope: Envelope, outcome: IngestOutcome) -> Answer:
        if envelope.action is None:
            return None
        if outcome.notice:  # refused (not the clicker's to answer): the card stays as it is
            return {}
        return {
            "cardData": {"cardParamMap": clicked_params(envelope.action.id)},
            "cardUpdateOptions": {"updateCardDataByKey": True},
        }


SIGNED = "dingtalk-signed"  # RecordStore namespace: a sign pair -> the chat and sender it spoke for


class RobotAdapter(Adapter):
    """A DingTalk adapter as its routes see it (``RobotAdapter``): its settings, its clock
    (signature windows, link expiry) and its Inbound."""

    settings: DingTalkIntegration
    clock: Callable[[], float]
    inbound: DingTalkInbound


# --- HTTP mode: POST /api/dingtalk/webhook/{integrationId} -------------------------------------
class RobotWebhook(EventWebhook[RobotAdapter, Message | CardClick, Answer]):
    """The sign covers the ``timestamp`` header only, so it is checked before the body is read
    (docs/dingtalk.md, "HTTP mode"), within ``signWindowSeconds``.

    Because the body is not signed, whoever saw one request's (timestamp, sign) can send any body
    with it while the window lasts. A pair is still not single-use: DingTalk's doc
    (https://open.dingtalk.com/document/development/robot-message-type, "机器人接收消息 / 相关内容")
    defines ``timestamp`` as the message's send time in ms and ``sign`` as a function of it and
    the AppSecret alone, so two messages sent to the robot in the same millisecond (two people,
    one app) come with the same pair, and refusing the second would lose a real message. What a
    forged body can do is bounded instead: the window; replies that go only to DingTalk's own
    origin (``webhook_origins``): a body naming any other sessionWebhook is refused; and the
    pair is bound to the first body's chat and sender for its window (issue 36): a body under
    it naming another chat or sender is refused (401), so a captured pair speaks only as the
    one who sent it, where they sent it."""

    platform = "dingtalk"

    def serves(self, adapter: RobotAdapter) -> bool:
        return adapter.settings.connection_mode == "http"

    def check(self, adapter: RobotAdapter, request: HttpRequest) -> None:
        try:
            verify_robot_sign(
                adapter.settings.client_secret.get_secret_value(),
                ascii_text(request.headers.get("timestamp"), "timestamp"),
                ascii_text(request.headers.get("sign"), "sign"),
                now_ms=int(adapter.clock() * 1000),
                window_ms=adapter.settings.sign_window_seconds * 1000,
            )
        except BadSignature as exc:
            raise Refused(401, str(exc), public="bad signature") from None

    def inbound(self, adapter: RobotAdapter) -> DingTalkInbound:
        return adapter.inbound

    async def parse(
        self, adapter: RobotAdapter, payload: Message | CardClick
    ) -> Envelope | web.StreamResponse | None:
        envelope = await super().parse(adapter, payload)
        extras = reply_extras(envelope) if isinstance(envelope, Envelope) else {}
        webhook = extras.get("sessionWebhook")
        if webhook and not webhook_allowed(str(webhook), adapter.settings.webhook_origins):
            raise Refused(400, "sessionWebhook not on DingTalk's origin", public="bad body")
        if isinstance(payload, Message) and payload.signed and isinstance(envelope, Envelope):
            await self._bind(adapter, payload.signed, envelope)
        return envelope

    async def _bind(self, adapter: RobotAdapter, pair: str, envelope: Envelope) -> None:
        """The first body under a (timestamp, sign) pair binds it to its chat and sender for
        twice the window (the pair is accepted that long at most); another body under it must
        name the same, or is refused. One record per pair, shared by the replicas."""
        extras = reply_extras(envelope)
        bound = json.dumps(
            [str(extras.get("conversationId") or envelope.chat.id), envelope.sender.id]
        )
        key = hashlib.sha256(f"{adapter.settings.id}\n{pair}".encode()).hexdigest()
        ttl_ms = adapter.settings.sign_window_seconds * 2000
        records = adapter.context.records
        if await records.put_new(SIGNED, key, bound, ttl_ms=ttl_ms):
            return
        if await records.get(SIGNED, key) != bound:
            raise Refused(
                401, "signature already used for another chat or sender", public="bad signature"
            )

    def respond(
        self,
        adapter: RobotAdapter,
        payload: Message | CardClick,
        outcome: IngestOutcome,
        answer: Answer,
    ) -> web.StreamResponse:
        return web.json_response({"status": outcome.status})


def setup_routes(app: web.Application, adapters: Mapping[str, RobotAdapter]) -> None:
    app.router.add_post("/api/dingtalk/webhook/{integrationId}", RobotWebhook(adapters).handle)
