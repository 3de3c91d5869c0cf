"""Console API requests -> Envelopes: the message and click bodies the page (and other tools)
post, validated field by field before anything is stored."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gateway.envelope import Action, Chat, Envelope, Mention, ReplyTo, Sender

PLATFORM = "console"
ID = r"^[A-Za-z0-9_.:@-]{1,128}$"


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=False)


class MessageRequest(_Request):
    integrationId: str = Field(min_length=1)
    chatId: str = Field(pattern=ID)
    chatType: Literal["group", "p2p"]
    senderId: str = Field(pattern=ID)
    senderName: str | None = Field(None, max_length=128)
    # The sender's email as a platform's directory would tell it (sys.user_email, principals).
    senderEmail: str | None = Field(None, pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)
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


def message_envelope(
    integration_id: str, body: MessageRequest, *, event_id: str, name: str, bot_name: str
) -> Envelope:
    return Envelope(
        integration_id=integration_id,
        platform=PLATFORM,
        event_id=event_id,
        chat=Chat(id=body.chatId, type=body.chatType),
        sender=Sender(id=body.senderId, name=name, email=body.senderEmail),
        text=body.text,
        mentions=(Mention(id="bot", name=bot_name, is_bot=True),) if body.mentionBot else (),
        bot_mentioned=body.mentionBot or body.chatType == "p2p",
        reply_to=ReplyTo(message_id=event_id),
    )


def message_record(body: MessageRequest, *, event_id: str, name: str, at: int) -> dict[str, Any]:
    """The user's message as the chat timeline keeps it."""
    return {
        "id": event_id,
        "role": "user",
        "senderId": body.senderId,
        "senderName": name,
        "text": body.text,
        "mentionBot": body.mentionBot,
        "at": at,
    }


def action_envelope(
    integration_id: str,
    body: ActionRequest,
    card: dict[str, Any],
    *,
    event_id: str,
    group: bool,
    sender_name: str | None,
) -> Envelope:
    """A click on one of ``card``'s buttons, routed to the card's conversation."""
    return Envelope(
        integration_id=integration_id,
        platform=PLATFORM,
        event_id=event_id,
        kind="action",
        chat=Chat(id=body.chatId, type="group" if group else "p2p"),
        sender=Sender(id=body.senderId, name=sender_name),
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
