"""A file sent over the AI bot's long connection (issue 38: an answer too long for the chat).

Temporary media go up in three commands on the connection, each acked (developer.work.weixin.
qq.com/document/path/101463, "上传临时素材"; the official SDK ``WecomTeam/aibot-node-sdk``
@80615b9 ``src/client.ts`` ``uploadMedia``): ``aibot_upload_media_init`` ``{type, filename,
total_size, total_chunks, md5}`` answers ``body.upload_id``; ``aibot_upload_media_chunk``
``{upload_id, chunk_index, base64_data}`` carries at most 512 KB (before Base64) of at most 100
chunks; ``aibot_upload_media_finish`` ``{upload_id}`` answers ``body.media_id``. The file then
goes as an ``aibot_send_msg`` of msgtype ``file`` (101463, "主动推送消息" / "文件消息";
``sendMediaMessage`` in the same SDK file).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from gateway.errors import GatewayError
from gateway.progress import Media

CHUNK_BYTES = 512 * 1024
MAX_CHUNKS = 100

Send = Callable[[dict[str, Any]], Awaitable[dict[str, Any] | None]]


class NotUploaded(GatewayError):
    """The upload could not be made here (no ack to read: another replica holds the
    connection), or WeCom's answer lacked what the next step needs."""


def _frame(cmd: str, body: dict[str, Any]) -> dict[str, Any]:
    return {"cmd": cmd, "headers": {"req_id": uuid.uuid4().hex}, "body": body}


async def upload(send: Send, item: Media) -> str:
    """``item`` as temporary media of type ``file``: its ``media_id``."""
    data = item.data
    chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)] or [b""]
    if len(chunks) > MAX_CHUNKS:
        raise NotUploaded(f"{len(data)} bytes is over {MAX_CHUNKS} chunks of {CHUNK_BYTES}")
    md5 = await asyncio.to_thread(lambda: hashlib.md5(data).hexdigest())
    init = {
        "type": "file",
        "filename": item.name,
        "total_size": len(data),
        "total_chunks": len(chunks),
        "md5": md5,
    }
    upload_id = _answer(await send(_frame("aibot_upload_media_init", init)), "upload_id")
    for index, chunk in enumerate(chunks):
        encoded = base64.b64encode(chunk).decode()
        body = {"upload_id": upload_id, "chunk_index": index, "base64_data": encoded}
        await send(_frame("aibot_upload_media_chunk", body))
    return _answer(
        await send(_frame("aibot_upload_media_finish", {"upload_id": upload_id})), "media_id"
    )


def _answer(ack: dict[str, Any] | None, name: str) -> str:
    if ack is None:
        raise NotUploaded("the connection is another replica's: no ack to read")
    value = (ack.get("body") or {}).get(name)
    if not value:
        raise NotUploaded(f"WeCom's ack has no {name}")
    return str(value)
