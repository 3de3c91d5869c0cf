"""The one shape of a platform's way in, for its webhook and its long connection alike.

An :class:`Inbound` verifies what a webhook request carries (``verify``: headers or query, and
the body, into a payload), reads a payload into an Envelope (``envelope``: None when there is
nothing to act on), and, once intake took the event, gives the platform's answer (``answer``:
a callback's JSON, a frame's ack data). The webhook skeleton (``gateway.edge.webhook``'s
``EventWebhook``) runs these three for a request; a long connection, whose frames come over a
socket opened with the app's credentials (nothing to verify), runs :meth:`Inbound.take` for a
frame: the same ``envelope`` and ``answer``, so the two paths cannot drift apart.

What is no event (a URL check, a stream poll, a welcome) is answered by the route or the
connection before an Inbound sees it.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Generic, TypeVar

from gateway.edge.ingest import Ingest, IngestOutcome
from gateway.envelope import Envelope
from gateway.errors import Refused

__all__ = ["Inbound", "Taken"]

P = TypeVar("P")
R = TypeVar("R")


@dataclass(frozen=True, slots=True)
class Taken(Generic[R]):
    """An event an Inbound took: its Envelope, what intake made of it, the platform's answer."""

    envelope: Envelope
    outcome: IngestOutcome
    answer: R


class Inbound(abc.ABC, Generic[P, R]):
    """One integration's events: payloads of type ``P`` in, answers of type ``R`` out."""

    def verify(self, meta: Mapping[str, str], body: bytes) -> P:
        """The verified, decrypted, parsed payload of a webhook request; ``meta`` is what the
        platform signs or carries the signature in (its headers, or its query). Raises
        :class:`Refused`. An Inbound without a webhook (a long connection only) has none."""
        raise Refused(404, "this integration takes no webhook")

    @abc.abstractmethod
    def envelope(self, payload: P) -> Envelope | None:
        """The payload's Envelope; None for an event the gateway does not act on. Raises
        :class:`Refused` (400) for a payload it cannot read."""

    async def received(self, envelope: Envelope) -> None:
        """What the platform must note of an event before intake sees it (nothing, unless the
        platform says so)."""

    @abc.abstractmethod
    async def answer(self, envelope: Envelope, outcome: IngestOutcome) -> R:
        """The platform's answer once intake stored (or skipped) the event."""

    async def take(self, payload: P, ingest: Ingest) -> Taken[R] | None:
        """One event, the whole way: its Envelope (None: nothing to act on), noted, made durable
        by ``ingest`` and answered. Raises :class:`Refused` for a payload it cannot read and
        ``IngestUnavailable`` when the event was not stored (the platform must not be told
        it was)."""
        envelope = self.envelope(payload)
        if envelope is None:
            return None
        await self.received(envelope)
        outcome = await ingest(envelope)
        return Taken(envelope, outcome, await self.answer(envelope, outcome))
