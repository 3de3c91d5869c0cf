"""What an adapter can do in a chat on an agent's behalf, outside a turn (the MCP server of chat
actions, gateway/actions and docs/mcp.md): the tools' names, which each adapter declares per
platform and mode (``Adapter.chat_tools``), and the shapes they answer with. The sends go
through the adapter's own outbound paths, so the app's platform budget and its counting apply
as they do to a turn's card."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.envelope import Chat, Envelope, Sender
from gateway.errors import GatewayError

__all__ = [
    "HISTORY",
    "MEMBERS",
    "SEND_FILE",
    "SEND_MESSAGE",
    "TOOLS",
    "ChatMember",
    "ChatMessage",
    "Unsupported",
    "escape_between",
    "post_envelope",
]

SEND_MESSAGE = "chat_send_message"
SEND_FILE = "chat_send_file"
HISTORY = "chat_history"
MEMBERS = "chat_members"
TOOLS = (SEND_MESSAGE, SEND_FILE, HISTORY, MEMBERS)


class Unsupported(GatewayError):
    """The platform (or this integration's mode) offers no such action."""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """A message of a chat's history, as the platform (or the gateway's transcript) has it."""

    sender: str  # an id, or "bot"
    text: str
    at_ms: int | None = None
    id: str = ""
    sender_name: str | None = None
    kind: str = "text"  # text, card, file, image, … as the platform says


@dataclass(frozen=True, slots=True)
class ChatMember:
    id: str
    name: str | None = None
    is_bot: bool = False


def post_envelope(
    integration_id: str, platform: str, chat: Chat, key: str, person: str = "mcp"
) -> Envelope:
    """An Envelope with no message to answer, so an outbound posts into ``chat`` as it does a
    scheduled turn's card (``reply_to`` None); ``person``: who the chat's session runs for (a
    direct chat's other end, where a platform posts to a person: ``unprompted_chat_id``)."""
    return Envelope(
        integration_id=integration_id,
        platform=platform,
        event_id=f"mcp:{key}",
        kind="schedule",
        chat=chat,
        sender=Sender(id=person),
        bot_mentioned=True,
    )


def escape_between(text: str, pattern: re.Pattern[str], replace: str) -> str:
    """``text`` with each match of ``pattern`` (a platform's mention syntax) made plain by
    ``replace`` (its ``\\g<0>`` the match), so an agent's words notify nobody."""
    return pattern.sub(replace, text)
