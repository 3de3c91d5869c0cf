"""DingTalk's hooks into the core's webhook skeleton (``gateway.edge.webhook``): the HTTP-mode robot
webhook (platforms.md §2.3) and the signed button links (``links.py``); and the stream-mode
frame handlers (§2.1, §2.6). Every path acks only after intake returned: the event is durable."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web

from adapters.dingtalk import links
from adapters.dingtalk.cards import clicked_params
from adapters.dingtalk.connection import ack_error
from adapters.dingtalk.crypto import BadSignature, verify_robot_sign
from adapters.dingtalk.events import (
    action_envelope,
    card_callback_params,
    robot_message,
    where_from_params,
)
from adapters.dingtalk.outbound.robot import reply_extras, webhook_allowed
from gateway.edge.body import HttpRequest, ascii_text, body_text, json_object, utf8_safe
from gateway.edge.ingest import IngestOutcome, IngestUnavailable
from gateway.edge.stores import StoreUnavailable
from gateway.edge.webhook import Webhook
from gateway.envelope import Envelope
from gateway.errors import Refused

if TYPE_CHECKING:
    from adapters.dingtalk import DingTalkAdapter

log = structlog.get_logger("adapters.dingtalk")


# --- HTTP mode: POST /api/dingtalk/webhook/{integrationId} -------------------------------------
class RobotWebhook(Webhook["DingTalkAdapter", dict[str, Any]]):
    """The sign covers the ``timestamp`` header only, so it is checked before the body is read
    (§2.3), within ``signWindowSeconds``.

    Because the body is not signed, whoever saw one request's (timestamp, sign) can send any body
    with it while the window lasts. A pair is still not single-use: DingTalk's doc
    (https://open.dingtalk.com/document/development/robot-message-type, "机器人接收消息 / 相关内容")
    defines ``timestamp`` as the message's send time in ms and ``sign`` as a function of it and
    the AppSecret alone, so two messages sent to the robot in the same millisecond (two people,
    one app) come with the same pair, and refusing the second would lose a real message. What a
    forged body can do is bounded instead: the window, and replies that go only to DingTalk's
    own origin (``webhook_origins``): a body naming any other sessionWebhook is refused."""

    platform = "dingtalk"

    def serves(self, adapter: DingTalkAdapter) -> bool:
        return adapter.settings.connection_mode == "http"

    def check(self, adapter: DingTalkAdapter, request: HttpRequest) -> None:
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

    def verify(self, adapter: DingTalkAdapter, request: HttpRequest, body: bytes) -> dict[str, Any]:
        return json_object(body_text(request, body))

    async def parse(self, adapter: DingTalkAdapter, payload: dict[str, Any]) -> Envelope:
        try:
            envelope = robot_message(payload, integration_id=adapter.integration_id)
        except ValueError as exc:  # pydantic's ValidationError included
            raise Refused(400, f"bad body ({type(exc).__name__})", public="bad body") from None
        webhook = reply_extras(envelope).get("sessionWebhook")
        if webhook and not webhook_allowed(str(webhook), adapter.settings.webhook_origins):
            raise Refused(400, "sessionWebhook not on DingTalk's origin", public="bad body")
        return envelope


def setup_routes(app: web.Application, adapters: Mapping[str, DingTalkAdapter]) -> None:
    app.router.add_post("/api/dingtalk/webhook/{integrationId}", RobotWebhook(adapters).handle)
    links.setup_routes(app, adapters)


# --- stream mode --------------------------------------------------------------------------------
class StreamInbound:
    """Stream frames, which DingTalk never pushes again (platforms.md §2.1): while Redis is
    unreachable they wait in the local spool (``ingest_or_spool``); a frame that cannot be
    taken at all is acked with an error."""

    def __init__(self, adapter: DingTalkAdapter) -> None:
        self.adapter = adapter
        self.integration_id = adapter.integration_id

    async def _ingest(self, envelope: Envelope) -> IngestOutcome | None:
        try:
            return await self.adapter.context.ingest_or_spool(envelope)
        except IngestUnavailable as exc:
            log.warning(
                "dingtalk event not stored",
                integration_id=self.integration_id,
                event_id=envelope.event_id,
                reason=str(exc),
            )
            return None

    async def robot_message(self, data: dict[str, Any], stream_id: str | None) -> tuple[int, Any]:
        try:
            if not utf8_safe(data):
                raise ValueError("invalid unicode")
            envelope = robot_message(data, integration_id=self.integration_id, stream_id=stream_id)
        except ValueError as exc:  # pydantic's ValidationError included
            log.warning(
                "dingtalk frame rejected",
                integration_id=self.integration_id,
                error=type(exc).__name__,
            )
            return 400, {"error": "bad message"}
        outcome = await self._ingest(envelope)
        if outcome is None:
            return ack_error()
        log.debug(
            "dingtalk message",
            integration_id=self.integration_id,
            event_id=envelope.event_id,
            status=outcome.status,
        )
        return 200, None

    async def card_callback(self, data: dict[str, Any], stream_id: str | None) -> tuple[int, Any]:
        """A card button (§2.6): its params carry action, conversation and turnId."""
        params = card_callback_params(data)
        track = str(data.get("outTrackId") or "")
        cards = self.adapter.outbound.cards
        try:
            where = await cards.where(track) if cards is not None and track else None
        except StoreUnavailable:
            where = where_from_params(params, str(data.get("userId") or ""))
        action = str(params.get("action") or "")
        if where is None or not action or not params.get("conversation"):
            log.info("card callback for an unknown card", integration_id=self.integration_id)
            return 200, {}
        envelope = action_envelope(
            integration_id=self.integration_id,
            event_id=f"card-{stream_id or track + ':' + action}",
            action_id=action,
            conversation=str(params["conversation"]),
            turn_id=str(params.get("turnId") or ""),
            chat_id=str(where["chatId"]),
            group=bool(where["group"]),
            sender_id=str(data.get("userId") or ""),
            message_id=f"card:{track}",
            extras=where["extras"],
        )
        outcome = await self._ingest(envelope)
        if outcome is None:
            return ack_error()
        if outcome.notice:  # refused (not the clicker's to answer): the card stays as it is
            return 200, {}
        return 200, {
            "cardData": {"cardParamMap": clicked_params(action)},
            "cardUpdateOptions": {"updateCardDataByKey": True},
        }
