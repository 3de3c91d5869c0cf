"""Lark event payloads (schema 2.0, already verified and decrypted) -> Envelopes.

``im.message.receive_v1`` (docs/lark.md, "Message events") becomes a message Envelope: text and rich
text flattened to markdown-ish text, attachments by key, mentions resolved against the bot's own
open_id. ``card.action.trigger`` ("Card callbacks") becomes an action Envelope.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from gateway.edge.body import json_value
from gateway.envelope import Action, Attachment, Chat, Envelope, ReplyTo, Sender
from gateway.errors import GatewayError, Refused
from gateway.progress import (
    ACTION_CONFIRM,
    ACTION_NEW,
    ACTION_REJECT,
    ACTION_RETRY,
    ACTION_ROUTINE_CANCEL,
    ACTION_ROUTINE_CONFIRM,
    ACTION_STOP,
    MAX_OPTIONS,
    option_of,
)

PLATFORM = "lark"
# Every button Progress can carry: a click Lark gets a 4xx for shows the user an error.
ACTIONS = (
    ACTION_STOP,
    ACTION_NEW,
    ACTION_CONFIRM,
    ACTION_REJECT,
    ACTION_RETRY,
    ACTION_ROUTINE_CONFIRM,
    ACTION_ROUTINE_CANCEL,
)
OPTION_SLOTS = tuple(str(i) for i in range(MAX_OPTIONS))  # answer_1 .. answer_<MAX_OPTIONS>
# message_type -> (attachment kind, content key holding the resource key)
RESOURCES: dict[str, tuple[str, str]] = {
    "image": ("image", "image_key"),
    "file": ("file", "file_key"),
    "audio": ("audio", "file_key"),
    "media": ("video", "file_key"),
}
# Lark does not serve stickers ("暂不支持获取表情包资源", get message resource doc): a sticker is
# no attachment, only a mark in the text, so no turn waits on a download that always fails.
STICKER_TEXT = "[sticker]"


_SPACES = re.compile(r"[ \t]{2,}")


class BadEvent(GatewayError, ValueError):
    """A verified payload whose shape is not what Lark sends; answered 400."""


def _dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadEvent(f"{what}: expected an object")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise BadEvent(f"{what}: expected a non-empty string")
    return value


def sub(data: dict[str, Any], key: str) -> dict[str, Any]:
    """``data[key]`` when it is an object, else empty (optional parts of a payload)."""
    value = data.get(key)
    return value if isinstance(value, dict) else {}


def event_type(payload: dict[str, Any]) -> str:
    if isinstance(payload.get("header"), dict):
        return str(sub(payload, "header").get("event_type") or "")
    # schema 1.0: {"uuid", "token", "event": {"type": ...}}
    return str(sub(payload, "event").get("type") or "")


class _Mentions:
    """The message's ``mentions``: placeholder key -> (open_id, name), and which is the bot."""

    def __init__(self, raw: Any, bot_open_id: str | None) -> None:
        self.by_key: dict[str, tuple[str, str]] = {}
        self.items: list[dict[str, Any]] = []  # Mention fields; validated with the Envelope
        self.bot_keys: set[str] = set()
        for m in raw if isinstance(raw, list) else []:
            if not isinstance(m, dict):
                continue
            ids = sub(m, "id")
            open_id = str(ids.get("open_id") or "")
            name = str(m.get("name") or "")
            key = str(m.get("key") or "")
            is_bot = bool(bot_open_id) and open_id == bot_open_id
            if key:
                self.by_key[key] = (open_id, name)
                if is_bot:
                    self.bot_keys.add(key)
            if open_id:
                self.items.append({"id": open_id, "name": name or None, "is_bot": is_bot})

    def render(self, key: str) -> str:
        """The bot's own placeholder is stripped; others read ``@Name``."""
        if key in self.bot_keys:
            return ""
        if key == "@_all" or key == "all":
            return "@all"
        found = self.by_key.get(key)
        return f"@{found[1]}" if found and found[1] else key

    def replace(self, text: str) -> str:
        # Longest keys first so @_user_10 is not eaten by @_user_1.
        for key in sorted(self.by_key, key=len, reverse=True):
            text = text.replace(key, self.render(key))
        return text


def _post_paragraphs(content: dict[str, Any]) -> tuple[str, list[list[Any]]]:
    """A received post may come with or without the locale wrapper (docs/lark.md, "Message
    events")."""
    if "content" not in content:
        for value in content.values():
            if isinstance(value, dict) and "content" in value:
                content = value
                break
    rows = content.get("content")
    return str(content.get("title") or ""), rows if isinstance(rows, list) else []


def _flatten_post(
    content: dict[str, Any], mentions: _Mentions, attachments: list[Attachment]
) -> str:
    title, rows = _post_paragraphs(content)
    lines = [f"**{title}**"] if title else []
    for row in rows:
        parts: list[str] = []
        for el in row if isinstance(row, list) else []:
            if not isinstance(el, dict):
                continue
            tag = el.get("tag")
            text = str(el.get("text") or "")
            if tag in ("text", "md"):
                parts.append(text)
            elif tag == "a":
                href = str(el.get("href") or "")
                parts.append(f"[{text or href}]({href})" if href else text)
            elif tag == "at":
                key = str(el.get("user_id") or "")
                known = key in mentions.by_key or key in ("all", "@_all")
                parts.append(mentions.render(key) if known else f"@{el.get('user_name') or key}")
            elif tag == "img" and el.get("image_key"):
                attachments.append(Attachment(kind="image", key=str(el["image_key"])))
                parts.append("[image]")
            elif tag == "media" and el.get("file_key"):
                attachments.append(Attachment(kind="video", key=str(el["file_key"])))
                parts.append("[video]")
            elif tag == "code_block":
                parts.append(f"```{el.get('language') or ''}\n{text}\n```")
            elif tag == "emotion":
                parts.append(f":{el.get('emoji_type') or ''}:")
            elif tag == "hr":
                parts.append("---")
        lines.append("".join(parts).strip(" "))
    return "\n".join(lines)


def _content(message: dict[str, Any]) -> dict[str, Any]:
    raw = message.get("content")
    if not isinstance(raw, str):
        raise BadEvent("event.message.content: expected a JSON string")
    try:
        content = json_value(raw, "event.message.content")
    except Refused as exc:
        raise BadEvent(exc.reason) from None
    return _dict(content, "event.message.content")


def message_envelope(
    integration_id: str, payload: dict[str, Any], bot_open_id: str | None, *, keep_raw: bool = True
) -> Envelope:
    """``im.message.receive_v1`` -> a message Envelope, deduplicated by ``message_id``.

    Lark re-pushes an unacknowledged event with the same ``event_id`` and ``message_id``; the
    message id also catches one message delivered through two paths (webhook and long
    connection during a switch-over), so it is the stronger dedup key (docs/lark.md, "Retries and
    dedup").
    """
    event = _dict(payload.get("event"), "event")
    message = _dict(event.get("message"), "event.message")
    sender = _dict(event.get("sender"), "event.sender")
    sender_ids = sub(sender, "sender_id")
    message_id = _str(message.get("message_id"), "event.message.message_id")
    chat_id = _str(message.get("chat_id"), "event.message.chat_id")
    chat_type: Literal["p2p", "group"] = "p2p" if message.get("chat_type") == "p2p" else "group"
    msg_type = str(message.get("message_type") or "")
    sender_id = str(sender_ids.get("open_id") or sender_ids.get("user_id") or "")
    content = _content(message)
    mentions = _Mentions(message.get("mentions"), bot_open_id)
    attachments: list[Attachment] = []
    if msg_type == "text":
        text = mentions.replace(str(content.get("text") or ""))
    elif msg_type == "post":
        text = _flatten_post(content, mentions, attachments)
    elif msg_type == "sticker":
        text = STICKER_TEXT
    elif msg_type in RESOURCES:
        kind, field = RESOURCES[msg_type]
        key = str(content.get(field) or "")
        if key:
            attachments.append(
                Attachment(kind=kind, key=key, name=content.get("file_name") or None)
            )
        text = ""
    else:
        text = f"[{msg_type or 'unknown'} message]"
    bot_mentioned = bool(mentions.bot_keys) or any(m["is_bot"] for m in mentions.items)
    is_bot = sender.get("sender_type") not in (None, "user") or (
        bool(bot_open_id) and sender_id == bot_open_id
    )
    header = sub(payload, "header")
    # One validation pass for the whole Envelope from plain dicts: building the sub-models
    # first would validate them twice, and pydantic's model_construct is slower still.
    return Envelope.model_validate(
        {
            "integration_id": integration_id,
            "platform": PLATFORM,
            "event_id": message_id,
            "chat": {
                "id": chat_id,
                "type": chat_type,
                "thread_id": str(message.get("thread_id") or message.get("root_id") or "") or None,
            },
            "sender": {"id": sender_id or "unknown", "is_bot": is_bot},
            "text": _SPACES.sub(" ", text).strip(),
            "mentions": mentions.items,
            "bot_mentioned": bot_mentioned or chat_type == "p2p",
            "attachments": attachments,
            "reply_to": {
                "message_id": message_id,
                "chat_id": chat_id,
                "lark_event_id": header.get("event_id"),
            },
            "raw": payload if keep_raw else None,  # validated and dropped again otherwise
        }
    )


def action_envelope(integration_id: str, payload: dict[str, Any]) -> Envelope:
    """``card.action.trigger`` on one of our buttons -> an action Envelope."""
    header = _dict(payload.get("header"), "header")
    event = _dict(payload.get("event"), "event")
    action = _dict(event.get("action"), "event.action")
    value = _dict(action.get("value"), "event.action.value")
    context = _dict(event.get("context"), "event.context")
    operator = _dict(event.get("operator"), "event.operator")
    action_id = str(value.get("action") or "")
    if action_id not in ACTIONS and option_of(action_id, OPTION_SLOTS) is None:
        raise BadEvent("event.action.value.action: not a button of ours")
    message_id = _str(context.get("open_message_id"), "event.context.open_message_id")
    chat_id = _str(context.get("open_chat_id"), "event.context.open_chat_id")
    chat_type = "p2p" if value.get("chatType") == "p2p" else "group"
    return Envelope(
        integration_id=integration_id,
        platform=PLATFORM,
        event_id=_str(header.get("event_id"), "header.event_id"),
        kind="action",
        chat=Chat(id=chat_id, type=chat_type),
        sender=Sender(id=str(operator.get("open_id") or operator.get("user_id") or "unknown")),
        bot_mentioned=True,
        action=Action(id=action_id, value=value, message_id=message_id),
        reply_to=ReplyTo(message_id=message_id, chat_id=chat_id),
        raw=payload,
    )
