"""Routing: integration + per-chat routes -> xpertId (the session scope is
``gateway.conversation``)."""

from __future__ import annotations

from gateway.envelope import Envelope
from gateway.settings import IntegrationBase


def route(integration: IntegrationBase, envelope: Envelope) -> str:
    """The first matching per-chat route wins; otherwise the integration's default xpertId. An
    external event whose source names an expert goes to that one."""
    if envelope.trigger is not None and envelope.trigger.xpert_id:
        return envelope.trigger.xpert_id  # a schedule or a watch that names its expert
    if envelope.subject is not None:
        source = next((e for e in integration.events if e.source == envelope.subject.source), None)
        if source is not None and source.xpert_id:
            return source.xpert_id
    for rule in integration.routes:
        if rule.chat_id is not None and rule.chat_id != envelope.chat.id:
            continue
        if rule.chat_type is not None and rule.chat_type != envelope.chat.type:
            continue
        if rule.sender_id is not None and rule.sender_id != envelope.sender.id:
            continue
        return rule.xpert_id
    return integration.xpert_id
