"""Routing (integration + per-chat routes -> xpertId) and session scoping (envelope -> scope)."""

from __future__ import annotations

import re
from typing import Literal

from gateway.envelope import Envelope
from gateway.settings import IntegrationBase


def route(integration: IntegrationBase, envelope: Envelope) -> str:
    """The first matching per-chat route wins; otherwise the integration's default xpertId."""
    for rule in integration.routes:
        if rule.chat_id is not None and rule.chat_id != envelope.chat.id:
            continue
        if rule.chat_type is not None and rule.chat_type != envelope.chat.type:
            continue
        if rule.sender_id is not None and rule.sender_id != envelope.sender.id:
            continue
        return rule.xpert_id
    return integration.xpert_id


def scope_key(integration: IntegrationBase, envelope: Envelope) -> str:
    """The session scope of DESIGN.md §6: chat, chat + sender, or chat + thread."""
    base = f"{envelope.chat.type}:{envelope.chat.id}"
    if integration.session_scope == "chat_sender":
        return f"{base}:u:{envelope.sender.id}"
    if integration.session_scope == "thread":
        thread = envelope.chat.thread_id or (
            envelope.reply_to.message_id if envelope.reply_to else None
        )
        return f"{base}:t:{thread or '-'}"
    return base


_SCOPE = re.compile(r"^[^|]+\|(?P<type>p2p|group):(?P<chat>.+?)(?::[ut]:.*)?$", re.DOTALL)


def chat_of(conversation: str) -> tuple[Literal["p2p", "group"], str] | None:
    """The chat type and id a conversation id (integration + :func:`scope_key`) was made of;
    for a click whose card record cannot be read (the card's buttons carry the conversation)."""
    match = _SCOPE.match(conversation)
    if match is None:
        return None
    return ("group" if match["type"] == "group" else "p2p"), match["chat"]
