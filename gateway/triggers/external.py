"""External events: ``POST /api/events/{integrationId}/{source}`` takes signed webhooks from
GitHub, GitLab or any sender that signs like the generic source, and makes each accepted event
an Envelope of kind ``event`` in the source's configured chat, handed to intake like a message:
dedup, merge, the session, the card and the audit trail are a message's.

The order is the one webhook skeleton's (``gateway.edge.webhook``): the integration (404 unless it
has events), the source in the path (404 unless configured) and its signature header (401)
before the body is read; the body within ``server.maxBodyBytes`` (413); the signature over the
raw bytes (401) and only then the JSON (400); an event type not configured is 202 ignored;
intake (503 only when Redis did not store it). A redelivery answers 200 ``duplicate``: the
dedup id is the digest of the signed body, so a replay under a new delivery id is one too.

Each event is about an object (a pull request, a merge request, a CI run, a generic ``key``):
the Envelope's ``subject``. The object's events are one conversation, so they run in order, and
they show in one card until the object reaches a final state (``gateway.turns.event_cards``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from aiohttp import web

from gateway.config.event_settings import EventSource
from gateway.edge.adapter import Adapter
from gateway.edge.body import HttpRequest, body_text, json_object
from gateway.edge.ingest import IngestOutcome
from gateway.edge.webhook import Webhook
from gateway.envelope import Chat, Envelope, Sender, Subject, Trigger
from gateway.errors import Refused
from gateway.triggers.github import GitHubSource
from gateway.triggers.gitlab import GitLabSource
from gateway.triggers.sources import ExternalEvent, GenericSource, Ignored, Source, body_digest

ROUTE = "/api/events/{integrationId}/{source}"
SOURCES: dict[str, Source] = {s.name: s for s in (GitHubSource(), GitLabSource(), GenericSource())}
_ANSWER_STATUS = {"queued": 202, "duplicate": 200, "ignored": 202, "handled": 202, "busy": 202}


@dataclass(frozen=True, slots=True)
class Delivery:
    """A verified delivery: its source's settings, its dedup id (the digest of the body), the
    sender's delivery id (for the logs), its headers and its JSON."""

    config: EventSource
    source: Source
    event_id: str
    delivery_id: str | None
    headers: Mapping[str, str]
    payload: dict[str, Any]


def event_envelope(adapter: Adapter, delivery: Delivery, event: ExternalEvent) -> Envelope:
    config = delivery.config
    chat_id = config.chat_id
    if event.chat_id and event.chat_id in config.allowed_chat_ids:
        chat_id = event.chat_id
    return Envelope(
        integration_id=adapter.integration_id,
        platform=adapter.settings.platform,
        event_id=delivery.event_id,
        kind="event",
        chat=Chat(id=chat_id, type=config.chat_type),
        sender=Sender(id=f"event:{config.source}", name=delivery.source.label),
        # The event in a few lines; the configured instruction rides in the trigger, so a turn
        # that merges several events of one object reads it once (turns/context.merge_input).
        text=event.summary(delivery.source.label),
        trigger=Trigger(
            id=f"event:{config.source}",
            text=(config.text or "").strip() or None,
            xpert_id=config.xpert_id,
        ),
        subject=Subject(source=config.source, key=event.key, final=event.final),
        raw=delivery.payload,
    )


class EventsWebhook(Webhook[Adapter, Delivery]):
    """The route of every integration's external events (any platform: the card goes to the
    integration's chat through its adapter)."""

    platform = "events"

    def __init__(self, adapters: Mapping[str, Adapter]) -> None:
        super().__init__(adapters)
        self.log = structlog.get_logger("gateway.events")

    def serves(self, adapter: Adapter) -> bool:
        return bool(adapter.settings.events)

    def _source(self, adapter: Adapter, request: HttpRequest) -> tuple[EventSource, Source]:
        name = request.match_info.get("source", "")
        config = next((e for e in adapter.settings.events if e.source == name), None)
        if config is None:
            raise Refused(404, "event source not configured", public="unknown event source")
        return config, SOURCES[config.source]

    def check(self, adapter: Adapter, request: HttpRequest) -> None:
        config, source = self._source(adapter, request)
        source.check(config, request)

    def verify(self, adapter: Adapter, request: HttpRequest, body: bytes) -> Delivery:
        config, source = self._source(adapter, request)
        source.verify(config, request, body)
        # The dedup id is the digest of the verified body, never a header: a delivery id header
        # is not covered by the signature, so the same signed body under a new id would start
        # a new turn. A redelivery (GitHub, GitLab's retries) resends the same bytes.
        delivery_id = source.delivery(request.headers, body)
        event_id = f"{source.name}:{body_digest(body)}"
        payload = json_object(body_text(request, body))
        return Delivery(config, source, event_id, delivery_id, request.headers, payload)

    async def parse(self, adapter: Adapter, payload: Delivery) -> Envelope | web.StreamResponse:
        found = payload.source.event(payload.config, payload.headers, payload.payload)
        if isinstance(found, Ignored):
            self.log.info(
                "external event ignored",
                integration_id=adapter.integration_id,
                source=payload.config.source,
                event_id=payload.event_id,
                delivery_id=payload.delivery_id,
                reason=found.reason,
            )
            return web.json_response({"status": "ignored", "reason": found.reason}, status=202)
        envelope = event_envelope(adapter, payload, found)
        if not adapter.posts_unprompted(envelope.chat.type):
            # e.g. a WeCom AI bot in callback mode: it only answers what WeCom polls for
            self.log.warning(
                "external event not taken: the integration cannot post into a chat unprompted",
                integration_id=adapter.integration_id,
                source=payload.config.source,
            )
            reason = "this integration cannot post into a chat unprompted"
            return web.json_response({"status": "ignored", "reason": reason}, status=202)
        self.log.info(
            "external event",
            integration_id=adapter.integration_id,
            source=payload.config.source,
            event_id=payload.event_id,
            delivery_id=payload.delivery_id,
            type=found.type,
            action=found.action,
            key=found.key,
            final=found.final,
        )
        return envelope

    async def answer(
        self, adapter: Adapter, payload: Delivery, envelope: Envelope, outcome: IngestOutcome
    ) -> web.StreamResponse:
        body = {"status": outcome.status, "eventId": envelope.event_id}
        return web.json_response(body, status=_ANSWER_STATUS.get(outcome.status, 202))

    def ignored(self, adapter: Adapter, payload: Delivery) -> web.StreamResponse:
        return web.json_response({"status": "ignored"}, status=202)


def setup_routes(app: web.Application, adapters: Mapping[str, Adapter]) -> None:
    """``adapters``: the replica's live map of integrationId to adapter (reloads are served)."""
    app.router.add_post(ROUTE, EventsWebhook(adapters).handle)
