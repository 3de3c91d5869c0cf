"""Sending and updating the turn's card (docs/lark.md).

Handles, so any replica can continue a card: ``om_…`` (a card updated with PATCH),
``ck:<card_id>:<om_…>`` (a CardKit card streamed by sequence), ``tx:<om_…>`` (cards failed and
the turn degraded to plain text; the final answer follows as text). Lark allows 5 updates/s per
message and 10 CardKit operations/s per card; the pacer keeps each card below that, on top of
the core's ``updateIntervalMs``. The answer's images are links while the card is live and
uploaded images in the final card; its files follow the card as file messages (``media``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog

from adapters.lark.api import LarkApi, LarkApiError
from adapters.lark.cards import (
    ANSWER_ELEMENT,
    answer_parts,
    card_answer,
    clicked_card,
    inert,
    render_card,
)
from adapters.lark.outbound.media import LarkMedia
from adapters.lark.settings import LarkIntegration
from gateway.edge.media import shown
from gateway.edge.stores import RecordStore
from gateway.envelope import Envelope
from gateway.progress import ACTION_NEW, STATUS_TITLES, Progress

log = structlog.get_logger("adapters.lark")

TYPING_EMOJI = "Typing"
DAY_MS = 86_400_000
# 5 updates/s per message, 10 operations/s per card entity, each with a margin: a write reaches
# Lark a little after it leaves, and not always equally late (the budget's Redis call, the loop).
PATCH_SPACING_S = 0.22
CARDKIT_SPACING_S = 0.11
# Lark waits 3 s for a callback's answer; once this has passed since a click was answered with a
# card, that card has been shown or dropped, and a final PATCH made meanwhile is sent again.
CALLBACK_WINDOW_MS = 3_500


def lark_uuid(key: str) -> str:
    """Lark's ``uuid`` dedups a send for an hour and holds at most 50 characters."""
    if len(key) <= 50 and key.isascii():
        return key
    return hashlib.sha256(key.encode()).hexdigest()[:40]


def _json(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@dataclass
class _CardState:
    shape: tuple[object, ...] = ()  # everything but the answer, as last rendered
    last_at: float = 0.0


class Pacer:
    """Spacing between writes to one message or card, in this process (one writer per card)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.cards: dict[str, _CardState] = {}

    def state(self, handle: str) -> _CardState:
        if handle not in self.cards and len(self.cards) > 10_000:
            self.cards.clear()
        return self.cards.setdefault(handle, _CardState())

    async def wait(self, handle: str, spacing: float) -> None:
        state = self.state(handle)
        delay = state.last_at + spacing - self.clock()
        if delay > 0:
            await asyncio.sleep(delay)
        state.last_at = self.clock()


class LarkOutbound:
    def __init__(
        self,
        *,
        settings: LarkIntegration,
        api: LarkApi,
        records: RecordStore,
        spawn: Callable[[Awaitable[Any]], None],
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.api = api
        self.records = records
        self.spawn = spawn
        self.clock = clock
        self.pacer = Pacer()
        self.media = LarkMedia(api)
        self.ns = f"lark:{settings.id}"

    # --- sending ------------------------------------------------------------------------------
    async def _send(self, env: Envelope, msg_type: str, content: str, key: str) -> str:
        """Reply to (and quote) the triggering message, or post to the chat (schedules)."""
        target = env.reply_to.message_id if env.reply_to else None
        if target and env.kind != "schedule":
            return await self.api.reply(target, msg_type, content, lark_uuid(key))
        return await self.api.create("chat_id", env.chat.id, msg_type, content, lark_uuid(key))

    async def send_text(self, env: Envelope, text: str, *, idempotency_key: str) -> None:
        for i, part in enumerate(answer_parts(text) if text else [" "]):
            key = idempotency_key if i == 0 else f"{idempotency_key}#p{i}"
            await self._send(env, "text", _json({"text": part}), key)

    async def _shown(self, progress: Progress, *, images: bool = True) -> Progress:
        """``progress`` with its answer as the card shows it: the answer's images by their
        ``image_key`` once the final state carries them (uploaded here), plain links before,
        and in text (``images`` False)."""
        keys = await self.media.images(progress) if images and progress.media else {}
        answer = shown(progress.answer, keys)
        if keys:  # a final text instead of the card shows the links (``_final_text``)
            self.media.plain[progress.turn_id] = shown(progress.answer)
        return progress if answer == progress.answer else replace(progress, answer=answer)

    async def send_card(self, env: Envelope, progress: Progress, *, idempotency_key: str) -> str:
        progress = await self._shown(progress)
        if self.settings.typing_reaction and not progress.final:
            await self._typing_on(env)
        chat_type = env.chat.type
        if self.settings.card_mode == "cardkit":
            try:
                # A first state that is already final (a turn given up, an instant error) is
                # the card's last: it is made without streaming mode, which nothing would close.
                card_id = await self.api.create_card(
                    render_card(progress, chat_type=chat_type, streaming=not progress.final)
                )
                content = _json({"type": "card", "data": {"card_id": card_id}})
                message_id = await self._send(env, "interactive", content, idempotency_key)
                handle = f"ck:{card_id}:{message_id}"
                if progress.final:
                    await self._finish(env, handle, progress)
                else:
                    self.pacer.state(handle).shape = self._shape(progress)
                return handle
            except LarkApiError as exc:
                if exc.rate_limited:
                    raise
                log.warning("cardkit card failed; using message cards", code=exc.code)
        try:
            card = _json(render_card(progress, chat_type=chat_type))
            message_id = await self._send(env, "interactive", card, idempotency_key)
        except LarkApiError as exc:
            if exc.rate_limited:
                raise
            log.warning("card reply failed; degrading to text", code=exc.code)
            message_id = await self._send(
                env, "text", _json({"text": inert(progress.title)}), f"{idempotency_key}#tx"
            )
            return f"tx:{message_id}"
        await self._remember(message_id, card)
        if progress.final:
            await self._finish(env, message_id, progress)
        return message_id

    # --- updating -----------------------------------------------------------------------------
    async def update_card(self, env: Envelope, handle: str, progress: Progress) -> None:
        progress = await self._shown(progress, images=not handle.startswith("tx:"))
        await self._update(env, handle, progress)
        if progress.status == "waiting":  # the bot waits for the user: not typing any more
            await self._typing_off(env)

    async def _update(self, env: Envelope, handle: str, progress: Progress) -> None:
        if handle.startswith("tx:"):
            if progress.final:
                await self._final_text(env, handle, progress)
            return
        if handle.startswith("ck:"):
            _, card_id, message_id = handle.split(":", 2)
            if await self.records.get(f"{self.ns}:mode", card_id) != "patch":
                try:
                    await self._update_cardkit(env, handle, card_id, progress)
                    if progress.final:
                        await self._finish(env, handle, progress)
                    return
                except LarkApiError as exc:
                    if exc.rate_limited:
                        raise
                    log.warning("cardkit update failed; using PATCH", code=exc.code)
                    await self.records.put(f"{self.ns}:mode", card_id, "patch", ttl_ms=DAY_MS)
            await self._patch(env, message_id, handle, progress)
            return
        await self._patch(env, handle, handle, progress)

    async def _patch(self, env: Envelope, message_id: str, handle: str, progress: Progress) -> None:
        await self.pacer.wait(handle, PATCH_SPACING_S)
        card = _json(render_card(progress, chat_type=env.chat.type))
        try:
            await self.api.patch(message_id, card)
        except LarkApiError as exc:
            if exc.rate_limited or not progress.final:
                raise
            # The final state must land somewhere: a plain text reply rather than silence.
            log.warning("final card update failed; answering in text", code=exc.code)
            await self._final_text(env, f"tx:{message_id}", progress)
            return
        if handle == message_id:  # CardKit cards stay out: callbacks cannot update them at once
            await self._remember(message_id, card)
            if progress.final:
                await self._after_callback(message_id)
        if progress.final:
            await self._finish(env, handle, progress)

    # --- card callbacks -----------------------------------------------------------------------
    async def _remember(self, message_id: str, card: str) -> None:
        """The card as last rendered, so a click can be answered with the card it changes into."""
        await self.records.put(f"{self.ns}:card", message_id, card, ttl_ms=DAY_MS)

    async def clicked(self, message_id: str, action_id: str, turn_id: str) -> dict[str, Any] | None:
        """The updated card for a click on ``message_id``, or None (unknown card, CardKit card,
        or the click no longer changes it)."""
        # Marked before the card is read: a final PATCH either stored its card before this read
        # (so the click no longer changes the card) or finds the mark and is sent again later.
        await self.records.put(
            f"{self.ns}:answered",
            message_id,
            str(int(self.clock() * 1000)),
            ttl_ms=3 * CALLBACK_WINDOW_MS,
        )
        stored = await self.records.get(f"{self.ns}:card", message_id)
        if not stored:
            return None
        card = clicked_card(json.loads(stored), action_id, turn_id)
        if card is not None and action_id == ACTION_NEW:
            # The turn is over and nothing renders this card again: the ended card is its state.
            # (Stop / Confirm / Reject / Retry cards are PATCHed on by the renderer, which stores
            # them; a retry runs again in the failed turn's card.)
            await self._remember(message_id, _json(card))
        return card

    async def _after_callback(self, message_id: str) -> None:
        """A click answered with a card just before this final PATCH may reach the message after
        it (Lark applies the answer when it gets it): the card as last stored is sent again
        once the callback window has passed."""
        answered = await self.records.get(f"{self.ns}:answered", message_id)
        if not answered:
            return
        delay = (int(answered) + CALLBACK_WINDOW_MS) / 1000 - self.clock()
        self.spawn(self._repatch(message_id, max(0.0, delay)))

    async def _repatch(self, message_id: str, delay: float) -> None:
        await asyncio.sleep(delay)
        card = await self.records.get(f"{self.ns}:card", message_id)
        if not card:
            return
        try:
            await self.api.patch(message_id, card)
        except (TimeoutError, LarkApiError, OSError) as exc:
            log.warning("card not re-sent after a callback", message_id=message_id, error=str(exc))
            return
        log.info("final card re-sent after a callback", message_id=message_id)

    def _shape(self, progress: Progress) -> tuple[object, ...]:
        return (progress.status, progress.steps, progress.tools, progress.error, progress.prompt)

    async def _update_cardkit(
        self, env: Envelope, handle: str, card_id: str, progress: Progress
    ) -> None:
        """Answer-only changes stream into the answer element; anything else replaces the card.
        At the end streaming mode is closed. Every write takes the next shared sequence."""
        state = self.pacer.state(handle)
        seq_ns = f"{self.ns}:seq"
        shape = self._shape(progress)
        if progress.final:
            await self.pacer.wait(handle, CARDKIT_SPACING_S)
            seq = await self.records.incr(seq_ns, card_id, ttl_ms=DAY_MS)
            await self.api.card_settings(card_id, {"streaming_mode": False}, seq)
            await self.pacer.wait(handle, CARDKIT_SPACING_S)
            seq = await self.records.incr(seq_ns, card_id, ttl_ms=DAY_MS)
            await self.api.replace_card(
                card_id, render_card(progress, chat_type=env.chat.type), seq
            )
            return
        await self.pacer.wait(handle, CARDKIT_SPACING_S)
        seq = await self.records.incr(seq_ns, card_id, ttl_ms=DAY_MS)
        if shape == state.shape:
            text = card_answer(progress)
            await self.api.stream_text(card_id, ANSWER_ELEMENT, text, seq, f"{card_id}-{seq}")
        else:
            card = render_card(progress, chat_type=env.chat.type, streaming=True)
            await self.api.replace_card(card_id, card, seq)
            state.shape = shape

    # --- the end of a turn --------------------------------------------------------------------
    async def _finish(self, env: Envelope, handle: str, progress: Progress) -> None:
        """Overflowing answer parts as follow-up text, the answer's files as file messages,
        then the typing reaction comes off."""
        for i, part in enumerate(answer_parts(progress.answer)[1:], start=1):
            # per turn: an external object's card shows several turns (event_cards.py)
            key = f"{handle}#{progress.turn_id}#p{i}"
            await self._send(env, "text", _json({"text": part}), key)
        await self._files(env, handle, progress)
        self.media.plain.pop(progress.turn_id, None)
        self.pacer.cards.pop(handle, None)
        await self._typing_off(env)

    async def _files(self, env: Envelope, handle: str, progress: Progress) -> None:
        for i, file_key in enumerate(await self.media.files(progress)):
            key = f"{handle}#{progress.turn_id}#f{i}"
            await self._send(env, "file", _json({"file_key": file_key}), key)

    async def _final_text(self, env: Envelope, handle: str, progress: Progress) -> None:
        title = STATUS_TITLES.get(progress.status, progress.title)
        plain = self.media.plain.pop(progress.turn_id, None)
        if plain is not None:  # the answer was made for the card: its images by image_key
            progress = replace(progress, answer=plain)
        body = progress.answer or progress.error or title
        if progress.error and progress.answer:
            body = f"{progress.answer}\n\n{progress.error}"
        await self.send_text(env, body, idempotency_key=f"{handle}#final")
        await self._files(env, handle, progress)
        self.pacer.cards.pop(handle, None)
        await self._typing_off(env)

    async def _typing_on(self, env: Envelope) -> None:
        target = env.reply_to.message_id if env.reply_to else None
        if not target or env.kind != "message":
            return
        try:
            reaction = await self.api.add_reaction(target, TYPING_EMOJI)
        except (TimeoutError, LarkApiError, OSError) as exc:
            log.info("typing reaction not added", error=str(exc))
            return
        if reaction:
            await self.records.put(f"{self.ns}:typing", target, reaction, ttl_ms=DAY_MS)

    async def _typing_off(self, env: Envelope) -> None:
        target = env.reply_to.message_id if env.reply_to else None
        if not target or not self.settings.typing_reaction:
            return
        reaction = await self.records.get(f"{self.ns}:typing", target)
        if not reaction:
            return
        try:
            await self.api.delete_reaction(target, reaction)
        except (TimeoutError, LarkApiError, OSError) as exc:
            log.info("typing reaction not removed", error=str(exc))
            return
        await self.records.delete(f"{self.ns}:typing", target)
