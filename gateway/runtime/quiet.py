"""When a replica is quiet: nothing ingesting, nothing due or being claimed, no turn or render,
no background task. Tests await ``Gateway.idle()`` rather than sleep to see that nothing more
happens."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from gateway.edge.adapter import Ingest, IngestOutcome
from gateway.envelope import Envelope

if TYPE_CHECKING:
    from gateway.runtime.app import Gateway


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


def busy(gateway: Gateway) -> bool:
    """Something is under way in ``gateway``: an ingest, a claim due or being made, a turn (its
    card renders end with it), a steer, a background task."""
    return bool(
        gateway.ingests.count
        or gateway.tasks
        or gateway.runner.active
        or gateway.runner.busy()
        or gateway.flusher.busy()
    )


async def idle(gateway: Gateway) -> None:
    """Return once ``gateway`` is not busy on two looks a few milliseconds apart (a claim's
    task starts a loop turn after the claim); a caller bounds the wait with a timeout."""
    quiet = 0
    while quiet < 2:
        await asyncio.sleep(0.002)
        quiet = 0 if busy(gateway) else quiet + 1
