"""Intake as an adapter sees it: the call that makes an inbound event durable, what became of
the event, and the errors that say it was not stored (so the platform must not be told it was).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.envelope import Envelope
from gateway.errors import GatewayError
from sessions import StoreUnavailable

__all__ = ["Ingest", "IngestOutcome", "IngestUnavailable", "ShuttingDown"]


class IngestUnavailable(StoreUnavailable, GatewayError):
    """Intake did not make the event durable (storage unreachable, read-only or full, the local
    spool full): nothing was stored, so the platform must not be told it was. Raised by intake
    for every storage failure, whatever the client library raised; webhooks answer 503 and the
    platform delivers the event again."""


class ShuttingDown(IngestUnavailable):
    """The replica stopped taking new work; the platform retries, against another replica."""


@dataclass(frozen=True, slots=True)
class IngestOutcome:
    """What became of an inbound event; adapters ack the platform only after this returns.

    ``spooled``: Redis was unreachable, so the event went into the replica's local spool (on
    disk); it goes into intake as soon as Redis answers again (``ingest_or_spool`` only).
    ``refused``: over a budget (``reason``: which limit); nothing stored, the chat was told when
    it can ask again (gateway/policy/budgets.py), or a click on a Confirm / Reject that is not the
    clicker's to answer (gateway/turns/approval.py). ``notice``: a short answer for the clicker
    alone, which adapters show where the platform can (a callback's toast, the action page)."""

    status: Literal["queued", "duplicate", "ignored", "busy", "handled", "spooled", "refused"]
    reason: str = ""
    notice: str = ""


class Ingest(Protocol):
    """Makes an event durable; raises :class:`IngestUnavailable` when it could not."""

    async def __call__(self, envelope: Envelope) -> IngestOutcome: ...
