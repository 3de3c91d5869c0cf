"""The drop rules that come first in the chain: what is not for us is ignored without touching
Redis - a bot's message, and group chatter that does not mention the bot where it answers only
mentions (kept as the chat's recent messages, ``historyContextLimit``, once no watch took it)."""

from __future__ import annotations

from collections.abc import Callable

from gateway.edge.ingest import IngestOutcome
from gateway.intake.router import Incoming
from sessions import SessionRecords


class FromBots:
    """A message a bot sent (ours or another's) never starts anything."""

    def matches(self, incoming: Incoming) -> bool:
        return incoming.env.sender.is_bot

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        return IngestOutcome("ignored", "sent by a bot")


class Unaddressed:
    """Group chatter without a mention: context for the chat's next turn, nothing else."""

    def __init__(self, *, records: SessionRecords, clock: Callable[[], int]) -> None:
        self.records = records
        self.clock = clock

    def matches(self, incoming: Incoming) -> bool:
        return incoming.unaddressed

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        integ, env = incoming.integ, incoming.env
        if integ.history_context_limit and env.text.strip():
            await self.records.add_group_message(
                integ.id,
                env.chat.id,
                {
                    "senderId": env.sender.id,
                    "name": env.sender.name or env.sender.id,
                    "text": env.text,
                    "at": self.clock(),
                },
                limit=integ.history_context_limit,
                window_ms=integ.history_context_window_seconds * 1000,
            )
        return IngestOutcome("ignored", "group message without a mention")
