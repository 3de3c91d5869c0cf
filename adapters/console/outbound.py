"""Sending and updating the console's bot messages: records in the chat timeline."""

from __future__ import annotations

import time
from typing import Any

from adapters.console.cards import render_card
from gateway.edge.stores import TimelineStore
from gateway.envelope import Envelope
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
    def __init__(self, *, integration_id: str, timeline: TimelineStore) -> None:
        self.integration_id = integration_id
        self.timeline = timeline
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
        size = f"{len(item.data) / 1024:.1f} KB"
        record = {
            "id": f"file-{idempotency_key}",
            "role": "bot",
            "type": "file",
            "text": f"📎 {item.name} ({item.mime}, {size})",
            "file": {"name": item.name, "mime": item.mime, "bytes": len(item.data)},
            "at": _ms(),
        }
        await self.timeline.put(self.integration_id, chat_id, record, mode="create")
