"""Robot messages and card callbacks -> Envelopes (platforms.md §2.2, §2.6), and the one
ingest call every path shares (ack only after it returned: the event is durable)."""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

import structlog
from aiohttp import web
from pydantic import ValidationError

from adapters.dingtalk.crypto import BadSignature, verify_action, verify_robot_sign
from gateway.adapter import AdapterContext, IngestOutcome, storage_failure
from gateway.envelope import Action, Attachment, Chat, Envelope, Mention, ReplyTo, Sender
from gateway.pipeline import ShuttingDown
from gateway.routing import chat_of

log = structlog.get_logger("adapters.dingtalk")

PLATFORM = "dingtalk"
_LEADING_AT = re.compile(r"^(?:\s*@\S+)+\s*")
_MEDIA: dict[str, Literal["image", "file", "audio", "video"]] = {
    "picture": "image",
    "file": "file",
    "audio": "audio",
    "video": "video",
}


class Unavailable(RuntimeError):
    """Intake could not store the event; the platform should retry (HTTP 503 / ack 500)."""


async def ingest(
    context: AdapterContext, envelope: Envelope, *, spool: bool = False
) -> IngestOutcome:
    """``spool``: for stream events, which DingTalk never pushes again (platforms.md §2.1):
    while Redis is unreachable they wait in the local spool (outcome ``spooled``)."""
    try:
        return await (context.ingest_or_spool if spool else context.ingest)(envelope)
    except ShuttingDown as exc:
        raise Unavailable("shutting down") from exc
    except Exception as exc:
        if storage_failure(exc):
            raise Unavailable("storage unavailable") from exc
        raise


def _bot_mentioned(data: dict[str, Any], group: bool) -> bool:
    """§2.2 and xpertai.md: isInAtList, else chatbotUserId among atUsers; in a group DingTalk
    only delivers messages that @ the robot, so an unknown bot id with any mention counts."""
    if not group or data.get("isInAtList") is True:
        return True
    at_ids = {
        str(u.get("dingtalkId", "")) for u in data.get("atUsers") or [] if isinstance(u, dict)
    }
    bot = str(data.get("chatbotUserId") or "")
    return bot in at_ids if bot else bool(at_ids)


def _text_and_attachments(data: dict[str, Any]) -> tuple[str, list[Attachment]]:
    msgtype = str(data.get("msgtype", "text"))
    content = data.get("content")
    content = content if isinstance(content, dict) else {}
    if msgtype == "text":
        body = data.get("text")
        return (str(body.get("content", "")) if isinstance(body, dict) else ""), []
    if msgtype == "richText":
        parts: list[str] = []
        files: list[Attachment] = []
        for item in content.get("richText") or []:
            if not isinstance(item, dict):
                continue
            if item.get("text"):
                parts.append(str(item["text"]))
            elif item.get("downloadCode"):
                files.append(Attachment(kind="image", key=str(item["downloadCode"])))
        return "".join(parts), files
    if msgtype in _MEDIA and content.get("downloadCode"):
        kind = _MEDIA[msgtype]
        attachment = Attachment(
            kind=kind,
            key=str(content["downloadCode"]),
            name=str(content["fileName"]) if content.get("fileName") else None,
        )
        # Voice messages carry DingTalk's own transcript; use it as the text.
        return str(content.get("recognition") or ""), [attachment]
    return "", []


def robot_message(
    data: dict[str, Any], *, integration_id: str, stream_id: str | None = None
) -> Envelope:
    """A robot message (stream CALLBACK data or HTTP-mode body) as an Envelope."""
    group = str(data.get("conversationType", "1")) == "2"
    bot_id = str(data.get("chatbotUserId") or "")
    mentions = tuple(
        Mention(
            id=str(u.get("staffId") or u.get("dingtalkId")),
            is_bot=bool(bot_id) and u.get("dingtalkId") == bot_id,
        )
        for u in data.get("atUsers") or []
        if isinstance(u, dict) and (u.get("staffId") or u.get("dingtalkId"))
    )
    text, attachments = _text_and_attachments(data)
    text = text.strip()
    if group and mentions and all(m.is_bot for m in mentions):
        # Only the robot was @-mentioned, so any leading @name is the robot's.
        text = _LEADING_AT.sub("", text)
    sender_id = str(data.get("senderStaffId") or data.get("senderId") or "")
    conversation_id = str(data.get("conversationId") or sender_id)
    msg_id = str(data.get("msgId") or stream_id or "")
    if not msg_id or not sender_id:
        raise ValueError("robot message without msgId or sender")
    extras = {
        "sessionWebhook": data.get("sessionWebhook"),
        "sessionWebhookExpiredTime": data.get("sessionWebhookExpiredTime"),
        "robotCode": data.get("robotCode"),
        "conversationId": conversation_id,
        "conversationType": "2" if group else "1",
        "senderStaffId": data.get("senderStaffId"),
    }
    return Envelope(
        integration_id=integration_id,
        platform=PLATFORM,
        event_id=msg_id,
        chat=Chat(
            id=conversation_id,
            type="group" if group else "p2p",
            name=data.get("conversationTitle") or None,
        ),
        sender=Sender(
            id=sender_id,
            name=data.get("senderNick") or None,
            is_bot=bool(bot_id) and data.get("senderId") == bot_id,
        ),
        text=text,
        mentions=mentions,
        bot_mentioned=_bot_mentioned(data, group),
        attachments=tuple(attachments),
        reply_to=ReplyTo(message_id=msg_id, **{k: v for k, v in extras.items() if v}),
        raw=data,
    )


def action_envelope(
    *,
    integration_id: str,
    event_id: str,
    action_id: str,
    conversation: str,
    turn_id: str,
    chat_id: str,
    group: bool,
    sender_id: str,
    message_id: str,
    extras: dict[str, Any],
) -> Envelope:
    """A click (card callback or signed link) routed to the card's conversation."""
    return Envelope(
        integration_id=integration_id,
        platform=PLATFORM,
        event_id=event_id,
        kind="action",
        chat=Chat(id=chat_id, type="group" if group else "p2p"),
        sender=Sender(id=sender_id or "unknown"),
        bot_mentioned=True,
        action=Action(
            id=action_id,
            message_id=message_id,
            value={"conversation": conversation, "turnId": turn_id, "action": action_id},
        ),
        reply_to=ReplyTo(message_id=message_id, **{k: v for k, v in extras.items() if v}),
    )


def card_callback_params(data: dict[str, Any]) -> dict[str, Any]:
    """The button's params from a card callback: ``content`` is a JSON string (§2.6)."""
    content = data.get("content")
    if isinstance(content, str):
        content = json.loads(content) if content else {}
    private = content.get("cardPrivateData") if isinstance(content, dict) else None
    params = private.get("params") if isinstance(private, dict) else None
    return params if isinstance(params, dict) else {}


def where_from_params(params: dict[str, Any], user_id: str) -> dict[str, Any] | None:
    """Where a click came from, read off the card's own ``conversation`` param: for when the
    card's record cannot be read (Redis unreachable). Replies then go by OpenAPI."""
    chat = chat_of(str(params.get("conversation") or ""))
    if chat is None:
        return None
    group = chat[0] == "group"
    extras = {"conversationId": chat[1], "conversationType": "2" if group else "1"}
    return {"chatId": chat[1], "group": group, "extras": {**extras, "senderStaffId": user_id}}


def token_event_id(token: str) -> str:
    """A link click's dedup id: the same link clicked twice is one click."""
    return "link-" + hashlib.sha256(token.encode()).hexdigest()[:32]


# --- HTTP routes ------------------------------------------------------------------------------
if TYPE_CHECKING:
    from adapters.dingtalk import DingTalkAdapter

_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>{title}</title></head>
<body style="font-family:sans-serif;text-align:center;padding:3em 1em">
<h2>{title}</h2><p>{detail}</p></body></html>"""
_DONE = {
    "stop": "Stop requested",
    "new": "New conversation started",
    "confirm": "Confirmed",
    "reject": "Rejected",
}


def _page(status: int, title: str, detail: str) -> web.Response:
    body = _PAGE.format(title=html.escape(title), detail=html.escape(detail))
    return web.Response(status=status, text=body, content_type="text/html")


class Routes:
    def __init__(self, adapters: Mapping[str, DingTalkAdapter]) -> None:
        self.adapters = adapters

    def _adapter(self, request: web.Request) -> DingTalkAdapter:
        adapter = self.adapters.get(request.match_info["integrationId"])
        if adapter is None:
            raise web.HTTPNotFound(text="unknown integration")
        return adapter

    async def webhook(self, request: web.Request) -> web.Response:
        """HTTP mode: verify ``timestamp`` + ``sign`` before reading the body (§2.3)."""
        adapter = self._adapter(request)
        if adapter.settings.connection_mode != "http":
            raise web.HTTPNotFound(text="integration is not in http mode")
        bound = log.bind(integration_id=adapter.integration_id)
        try:
            verify_robot_sign(
                adapter.settings.client_secret.get_secret_value(),
                request.headers.get("timestamp"),
                request.headers.get("sign"),
                now_ms=int(adapter.clock() * 1000),
            )
        except BadSignature as exc:
            bound.warning("dingtalk webhook rejected", reason=str(exc))
            return web.json_response({"error": "bad signature"}, status=401)
        try:
            data = await request.json()
            if not isinstance(data, dict):
                raise ValueError("not an object")
            envelope = robot_message(data, integration_id=adapter.integration_id)
        except (ValueError, UnicodeDecodeError, ValidationError) as exc:
            bound.warning("dingtalk webhook body rejected", error=type(exc).__name__)
            return web.json_response({"error": "bad body"}, status=400)
        try:
            outcome = await ingest(adapter.context, envelope)
        except Unavailable as exc:
            bound.warning(
                "dingtalk message not stored", reason=str(exc), event_id=envelope.event_id
            )
            return web.json_response({"error": str(exc)}, status=503)
        bound.debug("dingtalk message", event_id=envelope.event_id, status=outcome.status)
        return web.json_response({"status": outcome.status})

    async def action(self, request: web.Request) -> web.Response:
        """A button link in a message: a signed, expiring token becomes an action Envelope."""
        adapter = self._adapter(request)
        token = request.query.get("t", "")
        try:
            claims = verify_action(
                adapter.settings.client_secret.get_secret_value(), token, now_s=adapter.clock()
            )
            envelope = action_envelope(
                integration_id=adapter.integration_id,
                event_id=token_event_id(token),
                action_id=str(claims["a"]),
                conversation=str(claims["c"]),
                turn_id=str(claims["tu"]),
                chat_id=str(claims["ch"]),
                group=bool(claims["g"]),
                sender_id=str(claims.get("u") or ""),
                message_id=str(claims.get("m") or ""),
                extras={
                    "conversationId": claims["ch"],
                    "conversationType": "2" if claims["g"] else "1",
                    "senderStaffId": claims.get("u"),
                },
            )
        except (BadSignature, KeyError, ValidationError) as exc:
            log.warning(
                "dingtalk action link rejected",
                integration_id=adapter.integration_id,
                reason=str(exc) if isinstance(exc, BadSignature) else "bad claims",
            )
            return _page(403, "This link is not valid", "It may have expired. Ask again in chat.")
        try:
            outcome = await ingest(adapter.context, envelope)
        except Unavailable:
            return _page(503, "Please try again", "The gateway is busy; reload in a moment.")
        assert envelope.action is not None
        title = _DONE.get(envelope.action.id, "Done")
        if outcome.status == "duplicate":
            title = "Already done"
        return _page(200, title, "You can close this page and return to DingTalk.")


def setup_routes(app: web.Application, adapters: Mapping[str, DingTalkAdapter]) -> None:
    routes = Routes(adapters)
    app.router.add_post("/api/dingtalk/webhook/{integrationId}", routes.webhook)
    app.router.add_get("/api/dingtalk/action/{integrationId}", routes.action)
