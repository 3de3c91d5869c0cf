"""Decrypted WeCom payloads -> Envelopes: app callback XML (platforms.md §3.2, wechatpy's parser
plus the fields it lacks, e.g. ``template_card_event``) and AI-bot JSON (§3.5)."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from wechatpy.enterprise import parse_message

from adapters.wecom.cards import parse_button_key
from gateway.envelope import Action, Attachment, Chat, Envelope, ReplyTo, Sender

LEADING_MENTION = re.compile(r"^\s*@\S+\s*")


class BadPayload(ValueError):
    pass


def parse_app_xml(xml: str) -> dict[str, Any]:
    """The decrypted callback XML as a flat dict (wechatpy's parse, raw fields kept)."""
    try:
        msg = parse_message(xml)
    except Exception as exc:  # expat errors, missing <xml> root
        raise BadPayload("not valid callback XML") from exc
    data = getattr(msg, "_data", None)
    if not isinstance(data, dict) or not data.get("FromUserName") or not data.get("MsgType"):
        raise BadPayload("callback XML without FromUserName/MsgType")
    return data


def app_envelope(integration_id: str, d: dict[str, Any]) -> Envelope | None:
    """A message or a card click; None for events the gateway does not act on."""
    user = str(d["FromUserName"])
    kind = str(d["MsgType"])
    attachments: list[Attachment] = []
    text = ""
    if kind == "text":
        text = str(d.get("Content") or "")
    elif kind == "image":
        # Fetched by MediaId (media/get) for experts that take images; PicUrl is not handed on.
        attachments.append(Attachment(kind="image", key=str(d.get("MediaId", ""))))
        text = "[image]"
    elif kind == "voice":
        attachments.append(
            Attachment(kind="audio", key=str(d.get("MediaId", "")), mime=d.get("Format"))
        )
        text = str(d.get("Recognition") or "") or "[voice]"
    elif kind == "file":
        attachments.append(
            Attachment(kind="file", key=str(d.get("MediaId", "")), name=d.get("FileName"))
        )
        text = f"[file] {d.get('FileName') or ''}".strip()
    elif kind == "location":
        text = f"[location] {d.get('Label') or ''} ({d.get('Location_X')}, {d.get('Location_Y')})"
    elif kind == "link":
        text = f"[link] {d.get('Title') or ''}\n{d.get('Description') or ''}\n{d.get('Url') or ''}"
    elif kind == "event" and d.get("Event") == "template_card_event":
        return _app_click(integration_id, d)
    else:
        return None
    msg_id = str(d.get("MsgId") or f"{user}:{d.get('CreateTime')}")
    return Envelope(
        integration_id=integration_id,
        platform="wecom",
        event_id=msg_id,
        chat=Chat(id=user, type="p2p"),
        sender=Sender(id=user),
        text=text.strip(),
        bot_mentioned=True,
        attachments=tuple(attachments),
        reply_to=ReplyTo(message_id=msg_id, touser=user),
        raw=d,
    )


def _app_click(integration_id: str, d: dict[str, Any]) -> Envelope | None:
    value = parse_button_key(str(d.get("EventKey") or ""))
    if value is None:
        return None
    user = str(d["FromUserName"])
    # Events carry no MsgId: WeCom's advice is FromUserName + CreateTime (platforms.md §3.2). A
    # retry repeats the whole event, so the card and button join them: two buttons clicked in
    # the same second are two clicks, a retried delivery is one.
    event_id = f"{user}:{d.get('CreateTime')}:{d.get('TaskId') or ''}:{d.get('EventKey') or ''}"
    return Envelope(
        integration_id=integration_id,
        platform="wecom",
        event_id=event_id,
        kind="action",
        chat=Chat(id=user, type="p2p"),
        sender=Sender(id=user),
        bot_mentioned=True,
        action=Action(id=value["action"], value=value, message_id=str(d.get("TaskId") or "")),
        reply_to=ReplyTo(message_id=str(d.get("TaskId") or ""), touser=user),
        raw=d,
    )


def stream_id_for(integration_id: str, msg_id: str) -> str:
    """A stream id per inbound message, the same on every replica and every retry."""
    return "s" + hashlib.sha1(f"{integration_id}:{msg_id}".encode()).hexdigest()[:24]


def aibot_envelope(
    integration_id: str, m: dict[str, Any], *, req_id: str | None = None
) -> Envelope | None:
    """An AI-bot message (callback JSON or long-connection body); None for events we skip."""
    msg_id = str(m.get("msgid") or "")
    sender = str((m.get("from") or {}).get("userid") or "")
    if not msg_id or not sender:
        raise BadPayload("AI-bot message without msgid/from.userid")
    group = m.get("chattype") == "group"
    chat_id = str(m.get("chatid") or sender)
    kind = str(m.get("msgtype") or "")
    text, attachments = _aibot_content(kind, m)
    if kind == "event":
        return _aibot_click(integration_id, m, msg_id, sender, chat_id, group, req_id)
    if text is None:
        return None
    if group:
        text = LEADING_MENTION.sub("", text, count=1)
    extra: dict[str, Any] = {"stream_id": stream_id_for(integration_id, msg_id)}
    if m.get("response_url"):
        extra["response_url"] = str(m["response_url"])
    if req_id:
        extra["req_id"] = req_id
    return Envelope(
        integration_id=integration_id,
        platform="wecom",
        event_id=msg_id,
        chat=Chat(id=chat_id, type="group" if group else "p2p"),
        sender=Sender(id=sender),
        text=text.strip(),
        # WeCom only delivers group messages that @-mention the AI bot (xpertai.md §1.4).
        bot_mentioned=True,
        attachments=tuple(attachments),
        reply_to=ReplyTo(message_id=msg_id, **extra),
        raw=m,
    )


def _aibot_content(kind: str, m: dict[str, Any]) -> tuple[str | None, list[Attachment]]:
    body = m.get(kind) or {}
    if kind in ("text", "voice"):
        return str(body.get("content") or ""), []
    if kind == "image":
        return "[image]", _media("image", body)
    if kind == "file":
        return "[file]", _media("file", body)
    if kind == "mixed":
        texts: list[str] = []
        files: list[Attachment] = []
        for item in body.get("msg_item") or []:
            sub = str(item.get("msgtype") or "")
            if sub == "text":
                texts.append(str((item.get("text") or {}).get("content") or ""))
            elif sub == "image":
                files += _media("image", item.get("image") or {})
        return "\n".join(texts) or "[image]", files
    return None, []


AESKEY_MARK = "#aeskey="


def _media(kind: Literal["image", "file"], body: dict[str, Any]) -> list[Attachment]:
    """An AI bot's image or file: an encrypted download link, valid for five minutes. Over the
    long connection each link comes with its own ``aeskey``, kept in the key's fragment (never
    sent with the download); callback links decrypt with the bot's EncodingAESKey."""
    url = str(body.get("url") or "")
    if not url:
        return []
    aeskey = str(body.get("aeskey") or "")
    return [Attachment(kind=kind, key=f"{url}{AESKEY_MARK}{aeskey}" if aeskey else url)]


def media_link(key: str) -> tuple[str, str | None]:
    """An AI-bot attachment key as (download URL, its own aeskey or None)."""
    url, mark, aeskey = key.partition(AESKEY_MARK)
    return url, (aeskey if mark else None)


def event_type(m: dict[str, Any]) -> str:
    """The ``event.eventtype`` of an AI-bot event message ("" for other messages)."""
    if m.get("msgtype") != "event":
        return ""
    return str((m.get("event") or {}).get("eventtype") or "")


def _aibot_click(
    integration_id: str,
    m: dict[str, Any],
    msg_id: str,
    sender: str,
    chat_id: str,
    group: bool,
    req_id: str | None,
) -> Envelope | None:
    event = m.get("event") or {}
    if event.get("eventtype") != "template_card_event":
        return None  # enter_chat, feedback_event: nothing for an expert to do
    # Doc 101027 nests the click under the event type (``event.template_card_event``); the
    # official node SDK's types put ``event_key``/``task_id`` on the event itself
    # (aibot-node-sdk src/types/event.ts ``TemplateCardEventData``). Both are read.
    nested = event.get("template_card_event")
    click = nested if isinstance(nested, dict) and nested.get("event_key") else event
    value = parse_button_key(str(click.get("event_key") or ""))
    if value is None:
        return None
    task_id = str(click.get("task_id") or event.get("task_id") or "")
    extra: dict[str, Any] = {"req_id": req_id} if req_id else {}
    return Envelope(
        integration_id=integration_id,
        platform="wecom",
        event_id=msg_id,
        kind="action",
        chat=Chat(id=chat_id, type="group" if group else "p2p"),
        sender=Sender(id=sender),
        bot_mentioned=True,
        action=Action(id=value["action"], value=value, message_id=task_id),
        reply_to=ReplyTo(message_id=msg_id, **extra),
        raw=m,
    )
