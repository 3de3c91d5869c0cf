"""Mini's cards and replies: a turn's card is one message, sent once per idempotency key and
replaced in place by each update; each button carries its conversation and turn back. An answer
longer than a card holds is cut by the kit (``gateway.edge.parts``): the card shows part (1/n),
text messages after it (2/n)..(n/n)."""

from __future__ import annotations

from typing import Any

from gateway.edge.media import shown
from gateway.edge.parts import Room, numbered, split_answer
from gateway.envelope import Envelope
from gateway.progress import Progress
from tests.platforms.mini.adapter.api import MiniApi

TEXT_BYTES = 16_000  # what a Mini message's text (or a card's) holds
ROOM = Room(TEXT_BYTES - 1_000)  # the rest of a card's JSON fits beside it


def answer_parts(answer: str) -> list[str]:
    """The whole answer in parts marked (1/n)..(n/n) when there are several; Mini shows no
    pictures: each of the answer's is a plain link."""
    return numbered(split_answer(shown(answer), ROOM))


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
        "text": answer_parts(progress.answer)[0] if progress.answer else "",
        "error": progress.error,
        "buttons": [
            {"label": b.label, "value": {**value, "action": b.action_id}} for b in progress.buttons
        ],
    }


def replied(envelope: Envelope) -> str | None:
    return envelope.reply_to.message_id if envelope.reply_to else None


def plain_text(progress: Progress) -> str:
    """A final or waiting state as plain text: the answer, and the error, or the question it
    waits on (answered by typing: a text has no buttons)."""
    lines = [progress.answer.strip()] if progress.answer.strip() else []
    if progress.status == "waiting":
        lines.append(progress.title)
    elif progress.error:
        lines.append(f"{progress.status_title}: {progress.error}")
    return "\n\n".join(lines) or progress.status_title


class MiniOutbound:
    """Cards updated in place (``texts`` False), or (``texts``) no card at all: the answer as
    text messages once it is final (or waits for an answer), the handle then only a key
    (``tx:`` and the turn's key)."""

    def __init__(self, api: MiniApi, *, texts: bool) -> None:
        self.api = api
        self.texts = texts

    async def send_card(
        self, reply_to: Envelope, progress: Progress, *, idempotency_key: str
    ) -> str:
        if self.texts:
            handle = f"tx:{idempotency_key}"
            await self.update_card(reply_to, handle, progress)
            return handle
        card = render_card(progress, reply_to.chat.type)
        handle = await self.api.send(
            reply_to.chat.id, key=idempotency_key, card=card, reply_to=replied(reply_to)
        )
        await self._rest(reply_to, handle, progress, answer_parts(progress.answer)[1:])
        return handle

    async def update_card(self, reply_to: Envelope, handle: str, progress: Progress) -> None:
        if not handle.startswith("tx:"):
            await self.api.update(handle, render_card(progress, reply_to.chat.type))
            await self._rest(reply_to, handle, progress, answer_parts(progress.answer)[1:])
        elif progress.final or progress.status == "waiting":
            parts = answer_parts(plain_text(progress))
            await self._rest(reply_to, handle, progress, parts, settled=True)

    async def _rest(
        self,
        reply_to: Envelope,
        handle: str,
        progress: Progress,
        parts: list[str],
        *,
        settled: bool = False,
    ) -> None:
        """The ``parts`` not in a card of a final (or ``settled``) state, each sent once (keyed
        per turn, state and part)."""
        if not (progress.final or settled):
            return
        for i, part in enumerate(parts, start=1):
            key = f"{handle}#{progress.turn_id}#{progress.status}#p{i}"
            await self.api.send(reply_to.chat.id, key=key, text=part, reply_to=replied(reply_to))

    async def send_text(self, reply_to: Envelope, text: str, *, idempotency_key: str) -> None:
        await self.api.send(
            reply_to.chat.id, key=idempotency_key, text=text, reply_to=replied(reply_to)
        )
