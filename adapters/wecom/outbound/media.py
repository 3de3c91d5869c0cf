"""The answer's images and files as WeCom takes them (docs/wecom.md, "Limits").

An app sends ``image`` messages of JPG or PNG temporary media (at most 10 MB) and ``file``
messages (at most 20 MB): wecom 011-素材管理/002-上传临时素材.md (doc 90253) and 发送应用消息
(doc 90236). An AI bot shows JPG or PNG images only in the stream's final frame, as
``msg_item`` entries of base64 and MD5, at most 10 of 10 MB each (智能机器人/004-被动回复消息.md
l.136-144). Anything else keeps its link in the answer."""

from __future__ import annotations

import base64
import hashlib
from typing import Any

from gateway.progress import Media, Progress

IMAGE_TYPES = frozenset({"image/jpeg", "image/png"})
IMAGE_BYTES = 10 * 1024 * 1024
FILE_BYTES = 20 * 1024 * 1024
MAX_ITEMS = 10  # msg_item entries of one stream
# Ours, not WeCom's: the final frame (and, in callback mode, the stream's state kept in Redis
# until WeCom polls for it) holds at most this many image bytes; images past it stay links.
STREAM_IMAGE_BYTES = 20 * 1024 * 1024


def app_media(progress: Progress) -> list[tuple[str, Media]]:
    """The app messages the answer's media make, in order: ("image" | "file", item)."""
    out: list[tuple[str, Media]] = []
    for item in progress.media:
        if item.kind == "image" and item.mime in IMAGE_TYPES and len(item.data) <= IMAGE_BYTES:
            out.append(("image", item))
        elif item.kind == "file" and len(item.data) <= FILE_BYTES:
            out.append(("file", item))
    return out


def msg_items(progress: Progress) -> list[dict[str, Any]]:
    """The final stream frame's ``msg_item``: the answer's JPG and PNG images, at most
    MAX_ITEMS and STREAM_IMAGE_BYTES of them."""
    items: list[dict[str, Any]] = []
    total = 0
    for m in progress.media:
        if m.kind != "image" or m.mime not in IMAGE_TYPES or len(m.data) > IMAGE_BYTES:
            continue
        if len(items) == MAX_ITEMS or total + len(m.data) > STREAM_IMAGE_BYTES:
            break
        total += len(m.data)
        image = {
            "base64": base64.b64encode(m.data).decode(),
            "md5": hashlib.md5(m.data).hexdigest(),
        }
        items.append({"msgtype": "image", "image": image})
    return items
