"""Sending and updating the console's bot messages: records in the chat timeline.

An answer too long for the transcript (issue 38): past ``maxAnswerParts`` parts of ``PART_BYTES``
the card shows the answer's head and says the whole answer is in answer.md
(gateway/edge/long_answer.py); the console keeps that file a day in the records store and adds
a ``file`` record below the card whose ``file.url`` the page offers as a download
(``GET /console/api/chats/{chatId}/files/{fileId}?integrationId=``, under the same host and
origin checks as the rest of the console's API, docs/security.md)."""

from __future__ import annotations

import re
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import quote

from aiohttp import web

from adapters.console.cards import render_card
from gateway.edge.adapter import Adapter
from gateway.edge.long_answer import is_answer_file
from gateway.edge.stores import RecordStore, TimelineStore
from gateway.envelope import Envelope
from gateway.errors import Refused
from gateway.progress import Media, Progress


def _ms() -> int:
    return int(time.time() * 1000)


def _card_record(reply_to: Envelope, progress: Progress, record_id: str, at: int) -> dict[str, Any]:
    return {
        "id": record_id,
        "role": "bot",
        "type": "card",
        "replyTo": reply_to.reply_to.message_id if reply_to.reply_to else reply_to.event_id,
        "conversation": progress.conversation,
        "turnId": progress.turn_id,
        "card": render_card(progress),
        "version": progress.version,
        "at": at,
        "updatedAt": _ms(),
    }


class ConsoleOutbound:
    def __init__(
        self, *, integration_id: str, timeline: TimelineStore, records: RecordStore
    ) -> None:
        self.integration_id = integration_id
        self.timeline = timeline
        self.records = records
        # handle -> (created at, replyTo) of cards sent here, so updates need no read first;
        # a card another replica sent (a resumed turn) is read once.
        self._cards: dict[str, tuple[int, str]] = {}

    @staticmethod
    def card_handle(idempotency_key: str) -> str:
        """A card's record id: sending again with its key finds it (create never overwrites)."""
        return f"card-{idempotency_key}"

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        record_id = self.card_handle(idempotency_key)
        record = _card_record(reply_to, progress, record_id, _ms())
        # create never overwrites: a retried send (same key) reuses the card already there.
        if await self.timeline.put(self.integration_id, reply_to.chat.id, record, mode="create"):
            self._remember(record_id, record)
        if progress.final:
            await self._answer_file(reply_to, record_id, progress)
        return record_id

    def _remember(self, handle: str, record: dict[str, Any]) -> None:
        if len(self._cards) > 10_000:
            self._cards.clear()
        self._cards[handle] = (int(record["at"]), str(record["replyTo"]))

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        known = self._cards.get(handle)
        if known is None:
            existing = await self.timeline.get(self.integration_id, reply_to.chat.id, handle)
            record = _card_record(reply_to, progress, handle, _ms())
            if existing:
                record["at"], record["replyTo"] = existing["at"], existing["replyTo"]
            self._remember(handle, record)
            known = self._cards[handle]
        record = _card_record(reply_to, progress, handle, known[0])
        record["replyTo"] = known[1]
        await self.timeline.put(self.integration_id, reply_to.chat.id, record, mode="upsert")
        if progress.final:
            self._cards.pop(handle, None)
            await self._answer_file(reply_to, handle, progress)

    async def _answer_file(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        """An answer too long for the transcript (filed by gateway/edge/long_answer.py): the
        whole of it as answer.md, a download in the transcript below its card (``keep``).
        Once per card and turn: a final sent again finds the record there."""
        if not (progress.media and is_answer_file(progress.media[0])):
            return
        item, chat_id = progress.media[0], reply_to.chat.id
        file_id = f"{handle}.{progress.turn_id}"
        url = await keep(self.records, self.integration_id, chat_id, file_id, item)
        record = _file_record(f"file-{file_id}", item)
        record["file"]["url"] = url
        record["replyTo"] = reply_to.event_id
        await self.timeline.put(self.integration_id, chat_id, record, mode="create")

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        record = {
            "id": f"text-{idempotency_key}",
            "role": "bot",
            "type": "text",
            "text": text,
            "replyTo": reply_to.event_id,
            "at": _ms(),
        }
        await self.timeline.put(self.integration_id, reply_to.chat.id, record, mode="create")

    async def send_file(self, chat_id: str, item: Media, *, idempotency_key: str) -> None:
        """A file or image an agent sent (MCP ``chat_send_file``): shown by its name and size;
        the page keeps no file's content."""
        record = _file_record(f"file-{idempotency_key}", item)
        await self.timeline.put(self.integration_id, chat_id, record, mode="create")


def _file_record(record_id: str, item: Media) -> dict[str, Any]:
    size = f"{len(item.data) / 1024:.1f} KB"
    return {
        "id": record_id,
        "role": "bot",
        "type": "file",
        "text": f"📎 {item.name} ({item.mime}, {size})",
        "file": {"name": item.name, "mime": item.mime, "bytes": len(item.data)},
        "at": _ms(),
    }


# A console "part" of an answer: the transcript keeps 64 KB of one (cards.ANSWER_BYTES), so at
# the default ten parts an answer past that is the file instead of cut.
PART_BYTES = 6_400
FILE_TTL_MS = 24 * 3_600_000
FILE_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,200}$")


def namespace(integration_id: str) -> str:
    return f"console:{integration_id}:files"


def file_url(integration_id: str, chat_id: str, file_id: str) -> str:
    chat, integ = quote(chat_id, safe=""), quote(integration_id, safe="")
    return f"/console/api/chats/{chat}/files/{quote(file_id, safe='')}?integrationId={integ}"


async def keep(
    records: RecordStore, integration_id: str, chat_id: str, file_id: str, item: Media
) -> str:
    """Keep ``item`` (a text file) for download; its URL."""
    text = item.data.decode("utf-8", "replace")
    await records.put(namespace(integration_id), f"{chat_id}|{file_id}", text, ttl_ms=FILE_TTL_MS)
    return file_url(integration_id, chat_id, file_id)


async def download(
    records: RecordStore, integration_id: str, chat_id: str, file_id: str
) -> web.Response:
    if not FILE_ID.match(file_id):
        raise Refused(400, "fileId: not a file id")
    text = await records.get(namespace(integration_id), f"{chat_id}|{file_id}")
    if text is None:
        raise Refused(404, "no such file (files are kept a day)")
    return web.Response(
        body=text.encode("utf-8"),
        content_type="text/markdown",
        charset="utf-8",
        headers={"Content-Disposition": 'attachment; filename="answer.md"'},
    )


def route(
    adapters: Mapping[str, Adapter],
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The download handler over the console integrations ``adapters``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        integration_id = request.query.get("integrationId", "")
        adapter = adapters.get(integration_id)
        if adapter is None:
            raise Refused(404, f"integrationId: unknown integration {integration_id!r}")
        info = request.match_info
        return await download(
            adapter.context.records, integration_id, info["chatId"], info["fileId"]
        )

    return handler
