"""The answer's images and files on DingTalk (issue 28). Robot markdown renders only images
DingTalk's client can fetch itself (public https URLs; limits.md, DingTalk "images"), and an
answer's images come from the expert's own hosts, so the answer keeps each as a link and each
fetched image follows as an image message: uploaded with oapi ``/media/upload`` (``type``
image: jpg, gif, png, bmp; DOC:upload-media-files) and sent as ``sampleImageMsg`` whose
``photoURL`` is the ``media_id`` ("photoURL可填写图片的完整URL路径，也可填写图片的mediaId":
DOC:robot-message-type). A file follows as ``sampleFile`` ``{mediaId, fileName, fileType}``
when DingTalk takes its type (xlsx, pdf, zip, rar, doc, docx: DOC:robot-message-type), else it
stays a link. These are robot OpenAPI messages (a sessionWebhook takes no image or file
messages); each is claimed in Redis before it goes, so none is sent twice."""

from __future__ import annotations

import json
from dataclasses import dataclass

import structlog

from adapters.dingtalk.api import DingTalkApi, DingTalkApiError
from adapters.dingtalk.outbound.robot import SENT_NS, SENT_TTL_MS, Sender
from gateway.edge.chat_actions import Unsupported
from gateway.envelope import Envelope
from gateway.progress import Media, Progress

log = structlog.get_logger("adapters.dingtalk")

IMAGE_TYPES = {"image/jpeg": "jpg", "image/png": "png", "image/gif": "gif", "image/bmp": "bmp"}
FILE_TYPES = frozenset({"xlsx", "pdf", "zip", "rar", "doc", "docx"})  # sampleFile's fileType
MAX_BYTES = 20 * 1024 * 1024  # DOC:upload-media-files: image and file at most 20 MB each


@dataclass(frozen=True, slots=True)
class MediaMessage:
    """A robot message by OpenAPI only: its ``msgKey`` and ``msgParam``."""

    msg_key: str
    param: dict[str, str]

    def openapi_param(self) -> tuple[str, str]:
        return self.msg_key, json.dumps(self.param, ensure_ascii=False, separators=(",", ":"))


def _file_type(item: Media) -> str | None:
    suffix = item.name.rsplit(".", 1)[-1].lower() if "." in item.name else ""
    return suffix if suffix in FILE_TYPES else None


def sendable(progress: Progress) -> list[Media]:
    """The answer's media DingTalk takes as messages, in order."""
    return [
        m
        for m in progress.media
        if len(m.data) <= MAX_BYTES
        and ((m.kind == "image" and m.mime in IMAGE_TYPES) or (m.kind == "file" and _file_type(m)))
    ]


class DingTalkMedia:
    """Uploads an answer's media and sends them as robot messages after its answer."""

    def __init__(self, *, sender: Sender, api: DingTalkApi) -> None:
        self.sender = sender
        self.api = api

    async def send(self, reply_to: Envelope, key: str, progress: Progress) -> None:
        for i, item in enumerate(sendable(progress)):
            claim = f"{self.sender.integration_id}:{key}:media{i}"
            records = self.sender.records
            if not await records.put_new(SENT_NS, claim, "1", ttl_ms=SENT_TTL_MS):
                continue
            try:
                await self._one(reply_to, item)
            except DingTalkApiError as exc:
                if exc.retryable:
                    await records.delete(SENT_NS, claim)
                    raise  # the final state is retried; what went is not sent again
                log.warning("answer media not sent", kind=item.kind, **exc.log_fields())
            except BaseException:
                await records.delete(SENT_NS, claim)
                raise

    async def post(self, reply_to: Envelope, item: Media) -> None:
        """An agent's file or image (MCP ``chat_send_file``), as an answer's are sent;
        Unsupported when DingTalk takes no message of its type."""
        if item.kind == "image" and item.mime not in IMAGE_TYPES:
            raise Unsupported("DingTalk sends images of JPG, PNG, GIF and BMP only")
        if item.kind == "file" and not _file_type(item):
            raise Unsupported(f"DingTalk sends files of {', '.join(sorted(FILE_TYPES))} only")
        await self._one(reply_to, item)

    async def _one(self, reply_to: Envelope, item: Media) -> None:
        if item.kind == "image":
            media_id = await self.api.upload_media("image", item.data, item.name, item.mime)
            message = MediaMessage("sampleImageMsg", {"photoURL": media_id})
        else:
            file_type = _file_type(item) or ""
            media_id = await self.api.upload_media("file", item.data, item.name, item.mime)
            message = MediaMessage(
                "sampleFile", {"mediaId": media_id, "fileName": item.name, "fileType": file_type}
            )
        await self.sender.deliver(reply_to, message)
