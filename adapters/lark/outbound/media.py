"""The answer's images and files on Lark (issue 28): each image the core fetched is uploaded
(``POST /open-apis/im/v1/images``, ``image_type=message``, at most 10 MB: im-v1/image/create,
docs/lark.md, "Limits") and shown in the final card by its ``image_key`` (card markdown
``![hover](image_key)``: 富文本（Markdown）.md l.256-259); each file is uploaded
(``POST /open-apis/im/v1/files``: im-v1/file/create) and sent after the card as a ``file``
message ``{"file_key": …}`` (im-v1/message/create_json). An upload Lark refuses leaves the
image a link in the card, the file a link in the answer; one log line each."""

from __future__ import annotations

from collections import OrderedDict

import structlog

from adapters.lark.api import LarkApi, LarkApiError
from gateway.progress import Media, Progress

log = structlog.get_logger("adapters.lark")

# im-v1/file/create ``file_type``: opus, mp4, pdf, doc, xls, ppt, or stream for anything else.
FILE_TYPES = {
    "application/pdf": "pdf",
    "application/msword": "doc",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "doc",
    "application/vnd.ms-excel": "xls",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "xls",
    "application/vnd.ms-powerpoint": "ppt",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "ppt",
    "video/mp4": "mp4",
    "audio/opus": "opus",
}
KEPT = 512  # uploads remembered, so a final card sent again does not upload again


class LarkMedia:
    """Uploads of one integration's answer media, each once per turn and URL."""

    def __init__(self, api: LarkApi) -> None:
        self.api = api
        self._keys: OrderedDict[tuple[str, str, str], str] = OrderedDict()
        # turn_id -> the final answer with its images as links, for a final text reply
        self.plain: dict[str, str] = {}

    async def _key(self, turn_id: str, item: Media) -> str | None:
        key = (turn_id, item.kind, item.url)
        if key in self._keys:
            return self._keys[key]
        try:
            if item.kind == "image":
                uploaded = await self.api.upload_image(item.data, item.name, item.mime)
            else:
                file_type = FILE_TYPES.get(item.mime, "stream")
                uploaded = await self.api.upload_file(item.data, item.name, item.mime, file_type)
        except (LarkApiError, TimeoutError, OSError) as exc:
            if isinstance(exc, LarkApiError) and exc.rate_limited:
                raise  # the final card is retried as a whole, uploads that went included
            log.warning("answer media not uploaded", kind=item.kind, error=str(exc))
            return None
        self._keys[key] = uploaded
        while len(self._keys) > KEPT:
            self._keys.popitem(last=False)
        if len(self.plain) > KEPT:
            self.plain.clear()
        return uploaded

    async def images(self, progress: Progress) -> dict[str, str]:
        """The final card's images: answer URL -> ``image_key``."""
        keys: dict[str, str] = {}
        for item in progress.media:
            if item.kind == "image" and (key := await self._key(progress.turn_id, item)):
                keys[item.url] = key
        return keys

    async def files(self, progress: Progress) -> list[str]:
        """The ``file_key`` of each of the answer's files, in order, for file messages."""
        keys = []
        for item in progress.media:
            if item.kind == "file" and (key := await self._key(progress.turn_id, item)):
                keys.append(key)
        return keys
