"""Reading a turn's context together with its claim: a conversation whose last turn ran here
has its chat and session remembered, so the next claim sends the context reads in the same
write (one round trip less before the expert runs). A read for another session than the one
the turn binds (a new session, a crashed replica's turn) is not used; the turn reads again."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from gateway.errors import unwatched
from sessions import SessionRecords

MAX_KNOWN = 100_000  # conversations remembered (all forgotten past it; the next turn reads)


@dataclass(frozen=True, slots=True)
class _Where:
    integration_id: str
    chat_id: str
    session_id: str


Prefetched = tuple[_Where, "asyncio.Future[list[Any]]"]  # reads on their way, and for where


class ContextPrefetch:
    def __init__(self, records: SessionRecords) -> None:
        self.records = records
        self._known: dict[str, _Where] = {}
        self._pending: dict[str, Prefetched] = {}

    def remember(self, conversation: str, integration_id: str, chat_id: str, session: str) -> None:
        """Where the conversation's turn just read its context."""
        if len(self._known) >= MAX_KNOWN:
            self._known.clear()
        self._known[conversation] = _Where(integration_id, chat_id, session)

    def start(self, conversation: str) -> Prefetched | None:
        """The reads of the conversation's next context, on their way (None: not known here).
        Call it just before the claim's own call, in the same tick."""
        where = self._known.get(conversation)
        if where is None:
            return None
        reads = self.records.context_reads(
            where.integration_id, where.chat_id, where.session_id, group_since_ms=None
        )
        reads.add_done_callback(unwatched)  # a read nobody uses must not log "never retrieved"
        return where, reads

    def hold(self, turn_id: str, started: Prefetched) -> None:
        self._pending[turn_id] = started

    def drop(self, turn_id: str) -> None:
        self._pending.pop(turn_id, None)

    def take(
        self, turn_id: str, integration_id: str, chat_id: str, session_id: str
    ) -> asyncio.Future[list[Any]] | None:
        """The reads started with the claim of ``turn_id``, if they are this context's."""
        started = self._pending.pop(turn_id, None)
        if started is None or started[0] != _Where(integration_id, chat_id, session_id):
            return None
        return started[1]
