"""When a replica is quiet: nothing ingesting, nothing due or being claimed, no turn or render,
no background task. Tests await ``Gateway.idle()`` rather than sleep to see that nothing more
happens."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from typing import Any, Protocol

from gateway.edge.ingest import Ingest, IngestOutcome
from gateway.envelope import Envelope


class Busy(Protocol):
    """What may be under way in a part: a tick due or running (the flusher, the scheduler), a
    steer (the runner)."""

    def busy(self) -> bool: ...


class InFlight:
    """Counts the calls under way of the ingests it wraps."""

    def __init__(self) -> None:
        self.count = 0

    def wrap(self, ingest: Ingest) -> Ingest:
        async def counted(envelope: Envelope) -> IngestOutcome:
            self.count += 1
            try:
                return await ingest(envelope)
            finally:
                self.count -= 1

        return counted


def watcher(
    *, ingests: InFlight, tasks: Collection[Any], runs: Mapping[str, Any], parts: list[Busy]
) -> Callable[[], bool]:
    """Whether something is under way: an ingest, a background task, a turn (its card renders
    end with it), or what a part says (a claim due or being made, a steer, a schedule's look
    due now: after a test moves the clock past a fire time, the fire's turn)."""
    return lambda: bool(ingests.count or tasks or runs or any(p.busy() for p in parts))


async def idle(busy: Callable[[], bool]) -> None:
    """Return once ``busy`` says no on two looks a few milliseconds apart (a claim's task
    starts a loop turn after the claim); a caller bounds the wait with a timeout."""
    quiet = 0
    while quiet < 2:
        await asyncio.sleep(0.002)
        quiet = 0 if busy() else quiet + 1
