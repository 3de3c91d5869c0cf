"""Routing: integration + per-chat routes -> xpertId (the session scope is
``gateway.conversation``; what else a route gives a chat is ``gateway.policy.bundles``)."""

from __future__ import annotations

from gateway.config.bases import IntegrationBase
from gateway.config.route import route_of
from gateway.envelope import Envelope


def named_expert(integration: IntegrationBase, envelope: Envelope) -> str | None:
    """The expert a trigger (a schedule, a watch) or an external event's source names, if any."""
    if envelope.trigger is not None and envelope.trigger.xpert_id:
        return envelope.trigger.xpert_id
    if envelope.subject is not None:
        source = next((e for e in integration.events if e.source == envelope.subject.source), None)
        if source is not None and source.xpert_id:
            return source.xpert_id
    return None


def route(integration: IntegrationBase, envelope: Envelope) -> str:
    """The first matching per-chat route wins; otherwise the integration's default xpertId. A
    trigger or an external event source that names an expert goes to that one."""
    named = named_expert(integration, envelope)
    if named is not None:
        return named
    matched = route_of(integration.routes, envelope)
    if matched is not None and matched[1].xpert_id is not None:
        return matched[1].xpert_id
    return integration.xpert_id
