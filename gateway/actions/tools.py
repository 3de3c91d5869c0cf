"""The four chat tools: their input schemas (what ``tools/list`` answers) and what each does
through the chat's adapter. A send goes through the adapter's own outbound (the budget and the
platform's counting as for a turn's card) at the priority of a button's answer; a file named by
URL is fetched only from its expert's allowed origins, every redirect checked, size capped."""

from __future__ import annotations

import base64
import binascii
import mimetypes
from typing import Any, Literal

import aiohttp
from yarl import URL

from gateway.actions.chats import ActedFor, ToolRefused
from gateway.config.mcp import McpSettings
from gateway.edge.adapter import Adapter
from gateway.edge.chat_actions import HISTORY, MEMBERS, SEND_FILE, SEND_MESSAGE, ChatMessage
from gateway.edge.downloads import (
    GENERIC_TYPES,
    DownloadTooLarge,
    RedirectRefused,
    body_type,
    get_checked,
    read_body,
)
from gateway.edge.media import MediaSources
from gateway.progress import Media
from sessions import SessionRecords

MAX_TEXT = 20_000  # characters of one message (long texts go out in parts, as answers do)
_WHERE = {
    "integrationId": {"type": "string", "description": "The integration (bot) of the chat"},
    "chatId": {"type": "string", "description": "The chat, as the platform names it"},
}
SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    SEND_MESSAGE: (
        "Send a Markdown message into a chat the agent has a session in. The platform's "
        "mention syntax is escaped unless allowMentions is true.",
        {
            **_WHERE,
            "text": {"type": "string", "minLength": 1, "maxLength": MAX_TEXT},
            "allowMentions": {"type": "boolean", "default": False},
        },
    ),
    SEND_FILE: (
        "Send a file (or an image) into a chat: by url (from the agent's allowed origins) or "
        "as contentBase64.",
        {
            **_WHERE,
            "name": {"type": "string", "minLength": 1, "maxLength": 200},
            "url": {"type": "string"},
            "contentBase64": {"type": "string"},
        },
    ),
    HISTORY: (
        "Read a chat's recent history: the turns the gateway keeps (transcript) and the "
        "platform's own history where it offers one.",
        {**_WHERE, "limit": {"type": "integer", "minimum": 1, "default": 20}},
    ),
    MEMBERS: ("List a chat's members, where the platform lists them.", dict(_WHERE)),
}
REQUIRED = {
    SEND_MESSAGE: ["integrationId", "chatId", "text"],
    SEND_FILE: ["integrationId", "chatId", "name"],
    HISTORY: ["integrationId", "chatId"],
    MEMBERS: ["integrationId", "chatId"],
}
IMAGE_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
)


def input_schema(tool: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": SCHEMAS[tool][1],
        "required": REQUIRED[tool],
        "additionalProperties": False,
    }


def text_arg(args: dict[str, Any], name: str, *, limit: int = MAX_TEXT) -> str:
    value = args.get(name)
    if not isinstance(value, str) or not value.strip():
        raise ToolRefused(f"{name}: a non-empty string is required")
    if len(value) > limit:
        raise ToolRefused(f"{name}: at most {limit} characters")
    return value


async def send_message(
    adapter: Adapter, acted: ActedFor, args: dict[str, Any], key: str
) -> tuple[dict[str, Any], int]:
    text = text_arg(args, "text")
    mentions = args.get("allowMentions") is True
    await adapter.post_message(acted.chat, text, mentions=mentions, idempotency_key=key)
    return {"sent": True, "chars": len(text)}, len(text.encode())


def _file_type(name: str, mime: str, data: bytes) -> tuple[Literal["image", "file"], str]:
    """(kind, media type): an image by its first bytes, else a file by its type or name; an
    HTML page is no file (a sign-in page where the file was) and is refused."""
    for magic, kind in IMAGE_MAGIC:
        if data.startswith(magic):
            return "image", kind
    if mime in GENERIC_TYPES:
        mime = mimetypes.MimeTypes(filenames=()).guess_type(name, strict=False)[0] or mime
    head = data[:64].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if mime in ("text/html", "application/xhtml+xml") or head.startswith(
        (b"<!doctype html", b"<html")
    ):
        raise ToolRefused("the file is a web page, not a file: nothing sent")
    return "file", mime or "application/octet-stream"


async def fetched(url: str, sources: MediaSources, limit: int) -> tuple[bytes, str]:
    try:
        allowed = sources.allows(URL(url))
    except ValueError:
        allowed = False
    if not allowed:
        raise ToolRefused("url: not one of the expert's allowed origins (mediaHosts)")
    timeout = aiohttp.ClientTimeout(total=20)
    try:
        async with aiohttp.ClientSession(timeout=timeout) as http:
            async with get_checked(http, url, sources.allows) as resp:
                if resp.status != 200:
                    raise ToolRefused(f"url: answered {resp.status}")
                return await read_body(resp, limit), body_type(resp).lower()
    except RedirectRefused:
        raise ToolRefused("url: redirected to an origin that is not allowed") from None
    except DownloadTooLarge:
        raise ToolRefused(f"url: larger than {limit} bytes", "refused") from None
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        raise ToolRefused(f"url: not fetched ({type(exc).__name__})") from None


async def send_file(
    adapter: Adapter,
    acted: ActedFor,
    args: dict[str, Any],
    key: str,
    *,
    mcp: McpSettings,
    sources: MediaSources,
) -> tuple[dict[str, Any], int]:
    name = text_arg(args, "name", limit=200).replace("/", "_").replace("\\", "_")
    url, content = args.get("url"), args.get("contentBase64")
    if (url is None) == (content is None):
        raise ToolRefused("give exactly one of url and contentBase64")
    limit = mcp.max_file_bytes
    if isinstance(content, str):
        if len(content) > (limit * 4) // 3 + 4:
            raise ToolRefused(f"contentBase64: larger than {limit} bytes")
        try:
            data, mime = base64.b64decode(content, validate=True), ""
        except (binascii.Error, ValueError):
            raise ToolRefused("contentBase64: not base64") from None
    elif isinstance(url, str):
        data, mime = await fetched(url, sources, limit)
    else:
        raise ToolRefused("url and contentBase64 are strings")
    if not data:
        raise ToolRefused("the file is empty")
    if len(data) > limit:
        raise ToolRefused(f"the file is larger than {limit} bytes")
    kind, mime = _file_type(name, mime, data)
    item = Media(kind, url if isinstance(url, str) else f"mcp:{key}", data, mime, name)
    await adapter.post_file(acted.chat, item, idempotency_key=key)
    return {"sent": True, "kind": kind, "bytes": len(data), "mime": mime}, len(data)


def _message(m: ChatMessage) -> dict[str, Any]:
    out: dict[str, Any] = {"sender": m.sender, "text": m.text, "kind": m.kind}
    if m.sender_name:
        out["senderName"] = m.sender_name
    if m.at_ms is not None:
        out["at"] = m.at_ms
    if m.id:
        out["id"] = m.id
    return out


async def transcript(
    records: SessionRecords, integration_id: str, chat_id: str, limit: int
) -> list[dict[str, Any]]:
    """The turns the gateway audited in the chat (as long as the audit trail keeps them), oldest
    first: each its input and answer."""
    turns = await records.audit.records(
        integration_id, index="chat", value=chat_id, since_ms=0, limit=limit
    )
    out: list[dict[str, Any]] = []
    for turn in reversed(turns):
        timings = turn.get("timings") or {}
        said = (turn.get("input") or {}).get("text") or ""
        session = turn.get("sessionId")
        if said:
            at = timings.get("receivedAt")
            out.append({"sender": turn.get("senderId", ""), "text": said, "at": at})
            out[-1]["sessionId"] = session
        if turn.get("answer"):
            at = timings.get("finishedAt")
            out.append({"sender": "bot", "text": turn["answer"], "at": at, "sessionId": session})
    return out[-limit:]


async def history(
    adapter: Adapter,
    acted: ActedFor,
    args: dict[str, Any],
    *,
    records: SessionRecords,
    mcp: McpSettings,
) -> tuple[dict[str, Any], int]:
    limit = args.get("limit", 20)
    if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
        raise ToolRefused("limit: a positive integer")
    limit = min(limit, mcp.history_limit)
    kept = await transcript(records, adapter.integration_id, acted.chat.id, limit)
    platform = await adapter.chat_history(acted.chat, limit)
    answer: dict[str, Any] = {"transcript": kept}
    answer["platform"] = None if platform is None else [_message(m) for m in platform[-limit:]]
    size = sum(len(str(m.get("text", ""))) for m in kept + (answer["platform"] or []))
    return answer, size


async def members(adapter: Adapter, acted: ActedFor) -> tuple[dict[str, Any], int]:
    found = await adapter.chat_members(acted.chat)
    if found is None:
        raise ToolRefused("this platform lists no members of a chat", "unsupported")
    listed = [
        {
            "id": m.id,
            **({"name": m.name} if m.name else {}),
            **({"isBot": True} if m.is_bot else {}),
        }
        for m in found
    ]
    return {"members": listed}, len(listed)
