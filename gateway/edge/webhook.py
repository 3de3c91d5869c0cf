"""The one webhook skeleton every platform's HTTP intake runs through, with per-platform hooks.

Order, and why (docs/architecture.md: "The path of one message", invariant 6; aiogram's
``BaseRequestHandler`` resolves the bot before it feeds the update, Slack Bolt verifies the request
before any listener sees it):
(1) the integration named in the path, else 404; (2) the platform's checks of what comes before
the body (headers, query), so a request signed in its headers is refused before its body is
read; (3) the body, read within ``server.maxBodyBytes`` (413) and decoded by aiohttp (a
``Content-Encoding`` that does not decode is a 400); (4) the platform verifies it (signature,
timestamp, decryption) and only then parses it, with JSON and XML bounded in depth before any
parser runs; (5) the payload becomes an Envelope, or an answer given without intake (URL checks,
stream refreshes), or nothing; (6) intake makes it durable: ``IngestUnavailable`` is a 503, so
the platform delivers it again; (7) the platform's answer.

A refusal is a short 4xx and one log line, never a traceback. Whatever a hook raises on input it
did not foresee (a signed payload of the wrong shape) is a 400 too, logged with its type: a
platform that resends on 5xx must never get the same poison message back forever. Only storage
trouble is a 5xx (503), at any step.

An event route is an :class:`EventWebhook`: its hooks are the integration's
:class:`~gateway.edge.inbound.Inbound`, the same its long connection (if any) runs for a frame.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from typing import ClassVar, Generic, TypeVar

import structlog
from aiohttp import web

from gateway.edge.adapter import Adapter
from gateway.edge.body import HttpRequest, read_body, utf8_charset
from gateway.edge.inbound import Inbound
from gateway.edge.ingest import IngestOutcome
from gateway.edge.stores import StoreUnavailable
from gateway.envelope import Envelope
from gateway.errors import Refused

__all__ = ["EventWebhook", "Webhook"]

A = TypeVar("A", bound=Adapter)
P = TypeVar("P")
R = TypeVar("R")


class Webhook(abc.ABC, Generic[A, P]):
    """One platform's webhook route; a subclass supplies the hooks, this class the order."""

    platform: ClassVar[str]

    def __init__(self, adapters: Mapping[str, A]) -> None:
        self.adapters = adapters  # a live view (LiveAdapters): reloads are served at once
        self.log = structlog.get_logger(f"adapters.{self.platform}")

    # --- hooks ---------------------------------------------------------------------------------
    def serves(self, adapter: A) -> bool:
        """Whether this route is one the integration uses (e.g. its connection mode)."""
        return True

    def check(self, adapter: A, request: HttpRequest) -> None:
        """Checks before the body is read (headers, query); raises :class:`Refused`."""

    @abc.abstractmethod
    def verify(self, adapter: A, request: HttpRequest, body: bytes) -> P:
        """The verified, parsed payload (signature and decryption first); raises Refused."""

    @abc.abstractmethod
    async def parse(self, adapter: A, payload: P) -> Envelope | web.StreamResponse | None:
        """The payload's Envelope; an answer given without intake; or None (nothing to do)."""

    async def answer(
        self, adapter: A, payload: P, envelope: Envelope, outcome: IngestOutcome
    ) -> web.StreamResponse:
        """The platform's answer once intake stored (or skipped) the event."""
        return web.json_response({"status": outcome.status})

    def ignored(self, adapter: A, payload: P) -> web.StreamResponse:
        return web.Response(status=200, text="")

    def refusal(self, refused: Refused) -> web.StreamResponse:
        return web.json_response({"error": refused.public}, status=refused.status)

    # --- the order -----------------------------------------------------------------------------
    async def handle(self, request: HttpRequest) -> web.StreamResponse:
        integration_id = request.match_info.get("integrationId", "")
        adapter = self.adapters.get(integration_id)
        if adapter is None or not self.serves(adapter):
            return self._refuse(integration_id, Refused(404, "unknown integration"))
        try:
            self.check(adapter, request)
            payload = self.verify(adapter, request, await read_body(request))
            parsed = await self.parse(adapter, payload)
            if parsed is None:
                return self.ignored(adapter, payload)
            if not isinstance(parsed, Envelope):
                return parsed
        except Refused as exc:
            return self._refuse(integration_id, exc)
        except StoreUnavailable as exc:
            return self._refuse(integration_id, _unavailable(exc))
        except web.HTTPException:
            raise
        except Exception as exc:  # hostile input no hook foresaw: a 400, never a 500
            reason = f"unreadable request ({type(exc).__name__})"
            return self._refuse(integration_id, Refused(400, reason, public="bad request"))
        try:
            outcome = await adapter.context.ingest(parsed)
            return await self.answer(adapter, payload, parsed, outcome)
        except StoreUnavailable as exc:  # IngestUnavailable and ShuttingDown included
            return self._refuse(integration_id, _unavailable(exc), event_id=parsed.event_id)

    def _refuse(self, integration_id: str, exc: Refused, **ids: str) -> web.StreamResponse:
        level = self.log.warning if exc.status >= 500 else self.log.info
        level(
            f"{self.platform} request refused",
            integration_id=integration_id,
            status=exc.status,
            reason=exc.reason,
            **ids,
        )
        return self.refusal(exc)


def _unavailable(exc: StoreUnavailable) -> Refused:
    return Refused(503, f"not stored: {exc}", public="storage unavailable; retry")


class EventWebhook(Webhook[A, P], Generic[A, P, R]):
    """A route of events: verified, read and answered by the integration's :class:`Inbound`
    (the same its long connection runs), the body in UTF-8 as every platform sends it."""

    @abc.abstractmethod
    def inbound(self, adapter: A) -> Inbound[P, R]:
        """The integration's Inbound."""

    def meta(self, request: HttpRequest) -> Mapping[str, str]:
        """What the platform signs, or carries the signature in: the headers unless it says."""
        return request.headers

    @abc.abstractmethod
    def respond(
        self, adapter: A, payload: P, outcome: IngestOutcome, answer: R
    ) -> web.StreamResponse:
        """The Inbound's answer as an HTTP response."""

    def verify(self, adapter: A, request: HttpRequest, body: bytes) -> P:
        utf8_charset(request)
        return self.inbound(adapter).verify(self.meta(request), body)

    async def parse(self, adapter: A, payload: P) -> Envelope | web.StreamResponse | None:
        inbound = self.inbound(adapter)
        envelope = inbound.envelope(payload)
        if envelope is not None:
            await inbound.received(envelope)
        return envelope

    async def answer(
        self, adapter: A, payload: P, envelope: Envelope, outcome: IngestOutcome
    ) -> web.StreamResponse:
        answer = await self.inbound(adapter).answer(envelope, outcome)
        return self.respond(adapter, payload, outcome, answer)
