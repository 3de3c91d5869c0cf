"""The conversation id: which session a message belongs to (DESIGN.md §6), built in one place.

Its text form ``<integrationId>|<p2p|group>:<chatId>[:u:<senderId> | :t:<thread>]`` names Redis
keys and is carried by card buttons, so it never changes for the same scope; braces, which would
end a Redis hash tag early, are replaced.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from gateway.envelope import Envelope
from gateway.settings import IntegrationBase

_TEXT = re.compile(
    r"^(?P<integ>[^|]+)\|(?P<type>p2p|group):(?P<chat>.+?)"
    r"(?::(?:u:(?P<sender>.*)|t:(?P<thread>.*)))?$",
    re.DOTALL,
)


def _tag_safe(value: str) -> str:
    return value.replace("{", "(").replace("}", ")")


@dataclass(frozen=True, slots=True)
class ConversationId:
    integration_id: str
    chat_type: Literal["p2p", "group"]
    chat_id: str
    sender_id: str | None = None  # sessionScope chat_sender
    thread: str | None = None  # sessionScope thread

    @classmethod
    def of(cls, integration: IntegrationBase, envelope: Envelope) -> ConversationId:
        """The scope of DESIGN.md §6: the chat, the chat and its sender, or the chat's thread.
        An external event's is its object's, whatever the scope: a pull request's events are one
        conversation, in order, with one card (gateway/triggers/external.py)."""
        return cls(*_parts(integration, envelope))

    @staticmethod
    def text_of(integration: IntegrationBase, envelope: Envelope) -> str:
        """``str(ConversationId.of(integration, envelope))``, without the object in between:
        every message asks (issue 15)."""
        return _text(*_parts(integration, envelope))

    @classmethod
    def parse(cls, text: str) -> ConversationId | None:
        """The id a text form stands for (a card button carries it); None if it is none."""
        match = _TEXT.match(text)
        if match is None:
            return None
        chat_type: Literal["p2p", "group"] = "group" if match["type"] == "group" else "p2p"
        return cls(match["integ"], chat_type, match["chat"], match["sender"], match["thread"])

    def __str__(self) -> str:
        return _text(self.integration_id, self.chat_type, self.chat_id, self.sender_id, self.thread)


_Parts = tuple[str, Literal["p2p", "group"], str, str | None, str | None]


def _parts(integration: IntegrationBase, envelope: Envelope) -> _Parts:
    """A conversation's fields (``ConversationId``'s, in order) for a message's scope."""
    chat = envelope.chat
    if envelope.subject is not None:
        return integration.id, chat.type, chat.id, None, envelope.subject.thread
    sender = thread = None
    if integration.session_scope == "chat_sender":
        sender = envelope.sender.id
    elif integration.session_scope == "thread":
        thread = chat.thread_id or (envelope.reply_to.message_id if envelope.reply_to else None)
        thread = thread or "-"
    return integration.id, chat.type, chat.id, sender, thread


def _text(
    integration_id: str, chat_type: str, chat_id: str, sender_id: str | None, thread: str | None
) -> str:
    text = f"{integration_id}|{chat_type}:{chat_id}"
    if sender_id is not None:
        text += f":u:{sender_id}"
    elif thread is not None:
        text += f":t:{thread}"
    return _tag_safe(text)
