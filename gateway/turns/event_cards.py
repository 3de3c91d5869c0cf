"""One card per external object: a turn of an ``event`` envelope shows itself in the card its
object's earlier events made, while the object is open; the turn of a final event (a pull
request closed, a pipeline done) finishes that card and lets go of it, so the object's next
event (reopened) posts a new one.

The object's events are one conversation (``ConversationId.of``), so its turns run one at a
time, in order: the handle is read when a turn starts and written when it ends, with no race.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from gateway.config.settings import Settings
from gateway.envelope import Envelope
from sessions import EventCardStore, StoreUnavailable

log = structlog.get_logger("gateway.events")


class EventCards:
    def __init__(self, *, store: EventCardStore, settings: Callable[[], Settings]) -> None:
        self.store = store
        self.settings = settings

    async def live(self, conversation: str, last: Envelope) -> str | None:
        """The open card of the turn's object, if any (None for every other turn)."""
        if last.kind != "event" or last.subject is None:
            return None
        return await self.store.get(conversation)

    async def settle(self, conversation: str, last: Envelope, handle: str | None) -> None:
        """After the turn: keep its card for the object's next event, or let go of it (a final
        event, or ``handle`` None: a card the platform cannot show a later turn in). The turn
        is done either way: Redis failing here costs only the next event a new card."""
        try:
            await self._settle(conversation, last, handle)
        except StoreUnavailable as exc:
            log.warning("event card not recorded", error=str(exc))

    async def _settle(self, conversation: str, last: Envelope, handle: str | None) -> None:
        subject = last.subject
        if last.kind != "event" or subject is None:
            return
        if subject.final or handle is None:
            await self.store.drop(conversation)
            log.info("event card closed", key=subject.key, final=subject.final)
            return
        integ = self.settings().integration(last.integration_id)
        sources = integ.events if integ is not None else []
        source = next((e for e in sources if e.source == subject.source), None)
        hours = source.card_ttl_hours if source is not None else 168
        await self.store.put(conversation, handle, ttl_ms=int(hours * 3_600_000))
