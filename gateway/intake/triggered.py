"""The handlers of what the gateway's triggers hand in (``gateway.triggers``): a schedule's fire
(kind ``schedule``, under the budgets like a message, no buffer cap) and an external event (kind
``event``, never turned away as busy: it has no one to tell, so it waits)."""

from __future__ import annotations

from gateway.edge.ingest import IngestOutcome
from gateway.intake.burst import Burst
from gateway.intake.router import Incoming


class ScheduleFires:
    def __init__(self, burst: Burst) -> None:
        self.burst = burst

    def matches(self, incoming: Incoming) -> bool:
        return incoming.env.kind == "schedule"

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        return await self.burst.put(incoming, incoming.busy_mode, budgeted=True)


class ExternalEvents:
    def __init__(self, burst: Burst) -> None:
        self.burst = burst

    def matches(self, incoming: Incoming) -> bool:
        return incoming.env.kind == "event"

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        return await self.burst.put(incoming, "collect")
