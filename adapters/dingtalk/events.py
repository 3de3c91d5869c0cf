"""DingTalk payloads -> Envelopes: robot messages (stream CALLBACK data or the HTTP-mode body,
docs/dingtalk.md, "Robot messages") validated into typed models first, card callbacks and link
clicks.

A payload of the wrong shape (``"atUsers": 5``, ``"sessionWebhookExpiredTime": "soon"``) fails
validation here, at intake, as a ``ValueError``: refused with a 400 (or a 400 ack), never stored to
fail later in a turn where the user would get no answer.
"""

from __future__ import annotations

import hashlib
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict

from gateway.conversation import ConversationId
from gateway.edge.body import json_value
from gateway.envelope import Action, Attachment, Chat, Envelope, Mention, ReplyTo, Sender
from gateway.errors import Refused

PLATFORM = "dingtalk"
_LEADING_AT = re.compile(r"^(?:\s*@\S+)+\s*")
_MEDIA: dict[str, Literal["image", "file", "audio", "video"]] = {
    "picture": "image",
    "file": "file",
    "audio": "audio",
    "video": "video",
}


def _digits_as_text(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class _Part(BaseModel):
    # Fields we do not read are kept in ``raw`` only; a known field of the wrong type is refused.
    model_config = ConfigDict(extra="ignore", frozen=True)


class AtUser(_Part):
    dingtalkId: str | None = None
    staffId: str | None = None


class TextBody(_Part):
    content: str = ""


class RichItem(_Part):
    text: str | None = None
    downloadCode: str | None = None


class MediaContent(_Part):
    downloadCode: str | None = None
    fileName: str | None = None
    recognition: str | None = None
    richText: list[RichItem] | None = None


class RobotMessage(_Part):
    """The fields of a robot message the gateway reads (docs/dingtalk.md, "Robot messages")."""

    msgId: str | None = None
    msgtype: str = "text"
    text: TextBody | None = None
    content: dict[str, Any] | str | None = None  # its shape depends on msgtype: see media()
    conversationType: Annotated[Literal["1", "2"], BeforeValidator(_digits_as_text)] = "1"
    conversationId: str | None = None
    conversationTitle: str | None = None
    chatbotUserId: str | None = None
    senderId: str | None = None
    senderStaffId: str | None = None
    senderNick: str | None = None
    isInAtList: bool | None = None
    atUsers: list[AtUser] | None = None
    sessionWebhook: str | None = None
    sessionWebhookExpiredTime: int | None = None  # epoch ms
    robotCode: str | None = None

    def media(self) -> MediaContent:
        if self.msgtype in ("richText", *_MEDIA) and self.content is not None:
            return MediaContent.model_validate(self.content)
        return MediaContent()


def _bot_mentioned(m: RobotMessage, group: bool) -> bool:
    """docs/dingtalk.md, "Robot messages": isInAtList, else chatbotUserId among atUsers; in a group
    DingTalk only delivers messages that @ the robot, so an unknown bot id with any mention
    counts."""
    if not group or m.isInAtList is True:
        return True
    at_ids = {u.dingtalkId or "" for u in m.atUsers or ()}
    return m.chatbotUserId in at_ids if m.chatbotUserId else bool(at_ids)


def _text_and_attachments(m: RobotMessage) -> tuple[str, list[Attachment]]:
    if m.msgtype == "text":
        return (m.text.content if m.text else ""), []
    content = m.media()
    if m.msgtype == "richText":
        parts = [item.text for item in content.richText or () if item.text]
        files = [
            Attachment(kind="image", key=item.downloadCode)
            for item in content.richText or ()
            if not item.text and item.downloadCode
        ]
        return "".join(parts), files
    if m.msgtype in _MEDIA and content.downloadCode:
        attachment = Attachment(
            kind=_MEDIA[m.msgtype], key=content.downloadCode, name=content.fileName or None
        )
        # Voice messages carry DingTalk's own transcript; use it as the text.
        return content.recognition or "", [attachment]
    return "", []


def robot_message(
    data: dict[str, Any], *, integration_id: str, stream_id: str | None = None
) -> Envelope:
    """A robot message as an Envelope; ``ValueError`` (a pydantic ``ValidationError`` too)
    when it is not one."""
    m = RobotMessage.model_validate(data)
    group = m.conversationType == "2"
    bot_id = m.chatbotUserId or ""
    mentions = tuple(
        Mention(
            id=str(u.staffId or u.dingtalkId),
            is_bot=bool(bot_id) and u.dingtalkId == bot_id,
        )
        for u in m.atUsers or ()
        if u.staffId or u.dingtalkId
    )
    text, attachments = _text_and_attachments(m)
    text = text.strip()
    if group and mentions and all(x.is_bot for x in mentions):
        # Only the robot was @-mentioned, so any leading @name is the robot's.
        text = _LEADING_AT.sub("", text)
    sender_id = m.senderStaffId or m.senderId or ""
    conversation_id = m.conversationId or sender_id
    msg_id = m.msgId or stream_id or ""
    if not msg_id or not sender_id:
        raise ValueError("robot message without msgId or sender")
    extras = {
        "sessionWebhook": m.sessionWebhook,
        "sessionWebhookExpiredTime": m.sessionWebhookExpiredTime,
        "robotCode": m.robotCode,
        "conversationId": conversation_id,
        "conversationType": "2" if group else "1",
        "senderStaffId": m.senderStaffId,
    }
    return Envelope(
        integration_id=integration_id,
        platform=PLATFORM,
        event_id=msg_id,
        chat=Chat(
            id=conversation_id,
            type="group" if group else "p2p",
            name=m.conversationTitle or None,
        ),
        sender=Sender(
            id=sender_id,
            name=m.senderNick or None,
            is_bot=bool(bot_id) and m.senderId == bot_id,
        ),
        text=text,
        mentions=mentions,
        bot_mentioned=_bot_mentioned(m, group),
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
    """The button's params from a card callback: ``content`` is a JSON string (docs/dingtalk.md); {}
    when there are none or they do not parse."""
    content = data.get("content")
    if isinstance(content, str):
        try:
            content = json_value(content, "content") if content else {}
        except Refused:
            return {}
    private = content.get("cardPrivateData") if isinstance(content, dict) else None
    params = private.get("params") if isinstance(private, dict) else None
    return params if isinstance(params, dict) else {}


def where_from_params(params: dict[str, Any], user_id: str) -> dict[str, Any] | None:
    """Where a click came from, read off the card's own ``conversation`` param: for when the
    card's record cannot be read (Redis unreachable). Replies then go by OpenAPI."""
    conversation = ConversationId.parse(str(params.get("conversation") or ""))
    if conversation is None:
        return None
    group, chat = conversation.chat_type == "group", conversation.chat_id
    extras = {"conversationId": chat, "conversationType": "2" if group else "1"}
    return {"chatId": chat, "group": group, "extras": {**extras, "senderStaffId": user_id}}


def link_event_id(signed_payload: str) -> str:
    """A link click's dedup id, from the signed part of its token (the claims as signed, which
    no other spelling of the token verifies): the same link clicked twice is one click."""
    return "link-" + hashlib.sha256(signed_payload.encode()).hexdigest()[:32]
