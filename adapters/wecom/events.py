"""Decrypted WeCom payloads -> Envelopes: app callback XML (docs/wecom.md, "App callbacks";
wechatpy's parser
plus the fields it lacks, e.g. ``template_card_event``) and AI-bot JSON ("AI bot"), each validated
into a typed model first: a payload of the wrong shape (``"from": "u"``, XML nested inside
``<Content>``) is a :class:`BadPayload` (400), never a message stored to fail later."""

from __future__ import annotations

import hashlib
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from wechatpy.enterprise import parse_message

from adapters.wecom.cards import parse_button_key
from gateway.edge.body import xml_text
from gateway.envelope import Action, Attachment, Chat, Envelope, ReplyTo, Sender
from gateway.errors import GatewayError, Refused

LEADING_MENTION = re.compile(r"^\s*@\S+\s*")


class BadPayload(GatewayError, ValueError):
    pass


class _Part(BaseModel):
    # Fields we do not read stay in ``raw`` only; a field we read must have its type.
    model_config = ConfigDict(extra="ignore", frozen=True, populate_by_name=True)


class AppMessage(_Part):
    """The app callback fields the gateway reads (every XML field is text)."""

    FromUserName: str
    MsgType: str
    MsgId: str | None = None
    CreateTime: str | None = None
    Content: str | None = None
    MediaId: str | None = None
    Format: str | None = None
    Recognition: str | None = None
    FileName: str | None = None
    Label: str | None = None
    Location_X: str | None = None
    Location_Y: str | None = None
    Title: str | None = None
    Description: str | None = None
    Url: str | None = None
    Event: str | None = None
    EventKey: str | None = None
    TaskId: str | None = None
    ResponseCode: str | None = None


class _Text(_Part):
    content: str = ""


class _Media(_Part):
    url: str = ""
    aeskey: str = ""


class _MixedItem(_Part):
    msgtype: str = ""
    text: _Text | None = None
    image: _Media | None = None


class _Mixed(_Part):
    msg_item: list[_MixedItem] = []


class _Click(_Part):
    event_key: str = ""
    task_id: str = ""


class _Event(_Click):
    eventtype: str = ""
    template_card_event: _Click | None = None


class _From(_Part):
    userid: str = ""


class _Stream(_Part):
    id: str = ""


class AibotMessage(_Part):
    """An AI-bot message or event (callback JSON, long-connection frame body)."""

    msgid: str = ""
    sender: _From | None = Field(None, alias="from")
    chatid: str | None = None
    chattype: str | None = None
    msgtype: str = ""
    response_url: str | None = None
    text: _Text | None = None
    voice: _Text | None = None
    image: _Media | None = None
    file: _Media | None = None
    mixed: _Mixed | None = None
    event: _Event | None = None
    stream: _Stream | None = None


def aibot_message(m: Any) -> AibotMessage:
    try:
        return AibotMessage.model_validate(m)
    except ValidationError as exc:
        errors = exc.error_count()
        raise BadPayload(f"AI-bot message of the wrong shape ({errors} errors)") from None


def parse_app_xml(xml: str) -> dict[str, Any]:
    """The decrypted callback XML as a flat dict (wechatpy's parse, raw fields kept), bounded
    before it is parsed."""
    try:
        xml_text(xml)
        msg = parse_message(xml)
    except Refused as exc:
        raise BadPayload(exc.reason) from None
    except Exception as exc:  # expat errors, missing <xml> root, a tag where text belongs
        raise BadPayload("not valid callback XML") from exc
    data = getattr(msg, "_data", None)
    if not isinstance(data, dict) or not data.get("FromUserName") or not data.get("MsgType"):
        raise BadPayload("callback XML without FromUserName/MsgType")
    return data


def app_envelope(integration_id: str, raw: dict[str, Any]) -> Envelope | None:
    """A message or a card click; None for events the gateway does not act on."""
    try:
        d = AppMessage.model_validate(raw)
    except ValidationError as exc:
        raise BadPayload(f"callback XML of the wrong shape ({exc.error_count()} errors)") from None
    user, kind = d.FromUserName, d.MsgType
    attachments: list[Attachment] = []
    text = ""
    if kind == "text":
        text = d.Content or ""
    elif kind == "image":
        # Fetched by MediaId (media/get) for experts that take images; PicUrl is not handed on.
        attachments.append(Attachment(kind="image", key=d.MediaId or ""))
        text = "[image]"
    elif kind == "voice":
        attachments.append(Attachment(kind="audio", key=d.MediaId or "", mime=d.Format))
        text = d.Recognition or "[voice]"
    elif kind == "file":
        attachments.append(Attachment(kind="file", key=d.MediaId or "", name=d.FileName))
        text = f"[file] {d.FileName or ''}".strip()
    elif kind == "location":
        text = f"[location] {d.Label or ''} ({d.Location_X}, {d.Location_Y})"
    elif kind == "link":
        text = f"[link] {d.Title or ''}\n{d.Description or ''}\n{d.Url or ''}"
    elif kind == "event" and d.Event == "template_card_event":
        return _app_click(integration_id, d, raw)
    else:
        return None
    msg_id = d.MsgId or f"{user}:{d.CreateTime}"
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
        raw=raw,
    )


def _app_click(integration_id: str, d: AppMessage, raw: dict[str, Any]) -> Envelope | None:
    value = parse_button_key(d.EventKey or "")
    if value is None:
        return None
    user, task = d.FromUserName, d.TaskId or ""
    # Events carry no MsgId: WeCom's advice is FromUserName + CreateTime (docs/wecom.md, "App
    # callbacks"). A retry repeats the whole event, so the card and button join them: two buttons
    # clicked in
    # the same second are two clicks, a retried delivery is one.
    event_id = f"{user}:{d.CreateTime}:{task}:{d.EventKey or ''}"
    return Envelope(
        integration_id=integration_id,
        platform="wecom",
        event_id=event_id,
        kind="action",
        chat=Chat(id=user, type="p2p"),
        sender=Sender(id=user),
        bot_mentioned=True,
        action=Action(id=value["action"], value=value, message_id=task),
        reply_to=ReplyTo(message_id=task, touser=user),
        raw=raw,
    )


def stream_id_for(integration_id: str, msg_id: str) -> str:
    """A stream id per inbound message, the same on every replica and every retry."""
    return "s" + hashlib.sha1(f"{integration_id}:{msg_id}".encode()).hexdigest()[:24]


def aibot_envelope(
    integration_id: str, raw: dict[str, Any], *, req_id: str | None = None
) -> Envelope | None:
    """An AI-bot message (callback JSON or long-connection body); None for events we skip."""
    m = aibot_message(raw)
    sender = m.sender.userid if m.sender else ""
    if not m.msgid or not sender:
        raise BadPayload("AI-bot message without msgid/from.userid")
    group = m.chattype == "group"
    chat = Chat(id=m.chatid or sender, type="group" if group else "p2p")
    if m.msgtype == "event":
        return _aibot_click(integration_id, m, raw, sender, chat, req_id)
    text, attachments = _aibot_content(m)
    if text is None:
        return None
    if group:
        text = LEADING_MENTION.sub("", text, count=1)
    extra: dict[str, Any] = {"stream_id": stream_id_for(integration_id, m.msgid)}
    if m.response_url:
        extra["response_url"] = m.response_url
    if req_id:
        extra["req_id"] = req_id
    return Envelope(
        integration_id=integration_id,
        platform="wecom",
        event_id=m.msgid,
        chat=chat,
        sender=Sender(id=sender),
        text=text.strip(),
        # WeCom only delivers group messages that @-mention the AI bot (docs/wecom.md, "AI bot").
        bot_mentioned=True,
        attachments=tuple(attachments),
        reply_to=ReplyTo(message_id=m.msgid, **extra),
        raw=raw,
    )


def _aibot_content(m: AibotMessage) -> tuple[str | None, list[Attachment]]:
    if m.msgtype in ("text", "voice"):
        body = m.text if m.msgtype == "text" else m.voice
        return (body.content if body else ""), []
    if m.msgtype == "image":
        return "[image]", _media("image", m.image)
    if m.msgtype == "file":
        return "[file]", _media("file", m.file)
    if m.msgtype == "mixed":
        items = m.mixed.msg_item if m.mixed else []
        texts = [i.text.content if i.text else "" for i in items if i.msgtype == "text"]
        files = [a for i in items if i.msgtype == "image" for a in _media("image", i.image)]
        return "\n".join(texts) or "[image]", files
    return None, []


AESKEY_MARK = "#aeskey="


def _media(kind: Literal["image", "file"], body: _Media | None) -> list[Attachment]:
    """An AI bot's image or file: an encrypted download link, valid for five minutes. Over the
    long connection each link comes with its own ``aeskey``, kept in the key's fragment (never
    sent with the download); callback links decrypt with the bot's EncodingAESKey."""
    if body is None or not body.url:
        return []
    key = f"{body.url}{AESKEY_MARK}{body.aeskey}" if body.aeskey else body.url
    return [Attachment(kind=kind, key=key)]


def media_link(key: str) -> tuple[str, str | None]:
    """An AI-bot attachment key as (download URL, its own aeskey or None)."""
    url, mark, aeskey = key.partition(AESKEY_MARK)
    return url, (aeskey if mark else None)


def event_type(raw: Any) -> str:
    """The ``event.eventtype`` of an AI-bot event message ("" for other messages)."""
    event = raw.get("event") if isinstance(raw, dict) and raw.get("msgtype") == "event" else None
    return str(event.get("eventtype") or "") if isinstance(event, dict) else ""


def _aibot_click(
    integration_id: str,
    m: AibotMessage,
    raw: dict[str, Any],
    sender: str,
    chat: Chat,
    req_id: str | None,
) -> Envelope | None:
    event = m.event
    if event is None or event.eventtype != "template_card_event":
        return None  # enter_chat, feedback_event: nothing for an expert to do
    # Doc 101027 nests the click under the event type (``event.template_card_event``); the
    # official node SDK's types put ``event_key``/``task_id`` on the event itself
    # (aibot-node-sdk src/types/event.ts ``TemplateCardEventData``). Both are read.
    nested = event.template_card_event
    click = nested if nested is not None and nested.event_key else event
    value = parse_button_key(click.event_key)
    if value is None:
        return None
    task_id = click.task_id or event.task_id
    extra: dict[str, Any] = {"req_id": req_id} if req_id else {}
    return Envelope(
        integration_id=integration_id,
        platform="wecom",
        event_id=m.msgid,
        kind="action",
        chat=chat,
        sender=Sender(id=sender),
        bot_mentioned=True,
        action=Action(id=value["action"], value=value, message_id=task_id),
        reply_to=ReplyTo(message_id=m.msgid, **extra),
        raw=raw,
    )
