"""Chat actions on Lark (the MCP server's tools, gateway/edge/chat_actions.py): a message is a
card of one Markdown element (card markdown: DOC feishu-cards rich-text), in numbered parts
when long, its mention tags made inert unless the agent asked for mentions (``@all`` always
inert); a file or image is uploaded and sent as a ``file`` / ``image`` message as the answer's
media are (im-v1/file/create, im-v1/image/create, im-v1/message/create_json); the history is
``GET /open-apis/im/v1/messages`` (container_id_type chat, sort_type ByCreateTimeDesc,
page_size at most 50: lark_oapi api/im/v1/model/list_message_request.py, im-v1/message/list)
and the members ``GET /open-apis/im/v1/chats/:chat_id/members`` (member_id_type open_id,
page_size at most 100, ``items`` of member_id and name, bots not listed: lark_oapi
api/im/v1/model/get_chat_members_request.py and list_member.py, im-v1/chat-members/get)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import quote

from adapters.lark.api import LarkApi
from adapters.lark.cards import CARD_ROOM, inert
from adapters.lark.outbound import lark_uuid
from adapters.lark.outbound.media import FILE_TYPES
from gateway.edge.chat_actions import ChatMember, ChatMessage
from gateway.edge.parts import numbered, split_answer
from gateway.envelope import Chat
from gateway.progress import Media

# A mention of everyone, in text (``<at user_id="all">``) or card markdown (``<at id=all>``).
_ALL = re.compile(r"<(\s*at\s+(?:user_)?ids?\s*=\s*[\"']?all\b)", re.IGNORECASE)
MEMBER_PAGES = 5  # at most 500 members listed


def _json(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def markdown_card(text: str) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "config": {"update_multi": True},
        "body": {"elements": [{"tag": "markdown", "content": text}]},
    }


def _text_of(msg_type: str, content: str) -> str:
    """What a listed message says: a text's or a post's words, else its kind in brackets."""
    try:
        body = json.loads(content) if content else {}
    except json.JSONDecodeError:
        return ""
    if msg_type == "text" and isinstance(body, dict):
        return str(body.get("text", ""))
    if msg_type == "post" and isinstance(body, dict):  # {"title", "content": [[elements]]}
        lines = body.get("content")
        words = [
            str(e.get("text", ""))
            for line in (lines if isinstance(lines, list) else [])
            if isinstance(line, list)
            for e in line
            if isinstance(e, dict)
        ]
        return " ".join(w for w in words if w)
    return f"[{msg_type}]"


class LarkChatActions:
    def __init__(self, api: LarkApi) -> None:
        self.api = api

    async def message(self, chat: Chat, text: str, *, mentions: bool, key: str) -> None:
        text = _ALL.sub("\uff1c\\1", text) if mentions else inert(text)
        for i, part in enumerate(numbered(split_answer(text, CARD_ROOM))):
            uuid = lark_uuid(key if i == 0 else f"{key}#p{i}")
            content = _json(markdown_card(part))
            await self.api.create("chat_id", chat.id, "interactive", content, uuid)

    async def file(self, chat: Chat, item: Media, *, key: str) -> None:
        if item.kind == "image":
            image_key = await self.api.upload_image(item.data, item.name, item.mime)
            content = _json({"image_key": image_key})
            await self.api.create("chat_id", chat.id, "image", content, lark_uuid(key))
            return
        file_type = FILE_TYPES.get(item.mime, "stream")
        file_key = await self.api.upload_file(item.data, item.name, item.mime, file_type)
        content = _json({"file_key": file_key})
        await self.api.create("chat_id", chat.id, "file", content, lark_uuid(key))

    async def history(self, chat: Chat, limit: int) -> list[ChatMessage]:
        params = {
            "container_id_type": "chat",
            "container_id": chat.id,
            "sort_type": "ByCreateTimeDesc",
            "page_size": str(min(limit, 50)),
        }
        data = await self.api.call("GET", "/open-apis/im/v1/messages", endpoint="messages",
                                   params=params)  # fmt: skip
        out = []
        for item in data.get("items") or []:
            sender = item.get("sender") or {}
            is_app = sender.get("sender_type") == "app"
            msg_type = str(item.get("msg_type", ""))
            out.append(
                ChatMessage(
                    sender="bot" if is_app else str(sender.get("id", "")),
                    text=_text_of(msg_type, str((item.get("body") or {}).get("content", ""))),
                    at_ms=int(item["create_time"]) if str(item.get("create_time", "")).isdigit()
                    else None,
                    id=str(item.get("message_id", "")),
                    kind=msg_type,
                )
            )  # fmt: skip
        return list(reversed(out))  # newest last

    async def members(self, chat: Chat) -> list[ChatMember]:
        path = f"/open-apis/im/v1/chats/{quote(chat.id, safe='')}/members"
        params = {"member_id_type": "open_id", "page_size": "100"}
        out: list[ChatMember] = []
        for _ in range(MEMBER_PAGES):
            data = await self.api.call("GET", path, endpoint="members", params=params)
            for m in data.get("items") or []:
                out.append(ChatMember(id=str(m.get("member_id", "")), name=m.get("name")))
            if not data.get("has_more") or not data.get("page_token"):
                break
            params = {**params, "page_token": str(data["page_token"])}
        return out
