"""Mini's cards and replies: a turn's card is one message, sent once per idempotency key and
replaced in place by each update; each button carries its conversation and turn back."""

from __future__ import annotations

from typing import Any

from gateway.edge.long_answer import head
from gateway.envelope import Envelope
from gateway.progress import Progress
from tests.platforms.mini.adapter.api import MiniApi

CARD_TEXT_BYTES = 16_000  # what one Mini card's text holds


def render_card(progress: Progress, chat_type: str) -> dict[str, Any]:
    """``progress`` as Mini's card JSON."""
    value = {
        "conversation": progress.conversation,
        "turnId": progress.turn_id,
        "chatType": chat_type,
    }
    return {
        "title": progress.title,
        "status": progress.status,
        "steps": [f"{s.status}: {s.title}" for s in (*progress.steps, *progress.tools)],
        "text": head(progress.answer, CARD_TEXT_BYTES),
        "error": progress.error,
        "buttons": [
            {"label": b.label, "value": {**value, "action": b.action_id}} for b in progress.buttons
        ],
    }


def replied(envelope: Envelope) -> str | None:
    return envelope.reply_to.message_id if envelope.reply_to else None


class MiniOutbound:
    def __init__(self, api: MiniApi) -> None:
        self.api = api

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        card = render_card(progress, reply_to.chat.type)
        return await self.api.send(
            reply_to.chat.id, key=idempotency_key, card=card, reply_to=replied(reply_to)
        )

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        await self.api.update(handle, render_card(progress, reply_to.chat.type))

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        await self.api.send(
            reply_to.chat.id, key=idempotency_key, text=text, reply_to=replied(reply_to)
        )
