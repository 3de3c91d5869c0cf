"""The conversation id: which session a message belongs to (docs/architecture.md, "Sessions"), built
in one place.

Its text form ``<integrationId>|<p2p|group>:<chatId>[:u:<senderId> | :t:<thread>]`` names Redis
keys and is carried by card buttons, so it never changes for the same scope. Each id in it is
one part (``sessions.key_ids.id_part``: ``%``, ``:``, ``|`` and braces percent-encoded), so two
conversations never share a text or a key (issue 25: a chat ``team2:dedup:y34`` was another
chat's dedup key); an external event's thread is ``<source>:<key>``, the key last and keeping
its ``:`` (``id_tail``). Ids without those characters - every id the platforms issue - read as
before.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal, Protocol
from urllib.parse import unquote

from gateway.envelope import Envelope
from sessions.key_ids import id_part, id_tail

_TEXT = re.compile(
    r"^(?P<integ>[^|:]+)\|(?P<type>p2p|group):(?P<chat>[^:|]+)"
    r"(?::(?:u:(?P<sender>[^:|]*)|t:(?P<thread>[^|]*)))?$",
    re.DOTALL,
)


class Scoped(Protocol):
    """What the id reads of an integration (``gateway.config.bases.IntegrationBase``)."""

    @property
    def id(self) -> str: ...

    @property
    def session_scope(self) -> Literal["chat", "chat_sender", "thread"]: ...


@dataclass(frozen=True, slots=True)
class ConversationId:
    integration_id: str
    chat_type: Literal["p2p", "group"]
    chat_id: str
    sender_id: str | None = None  # sessionScope chat_sender
    thread: str | None = None  # sessionScope thread: its text (an external event's is
    # ``<source>:<key>``, the source an id part, the key an id tail)

    @classmethod
    def of(cls, integration: Scoped, envelope: Envelope) -> ConversationId:
        """The scope (docs/architecture.md, "Sessions"): the chat, the chat and its sender, or the
        chat's thread. An external event's is its object's, whatever the scope: a pull request's
        events are one
        conversation, in order, with one card (gateway/triggers/external.py)."""
        return cls(*_parts(integration, envelope))

    @staticmethod
    def text_of(integration: Scoped, envelope: Envelope) -> str:
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
        sender = match["sender"]
        return cls(
            unquote(match["integ"]),
            chat_type,
            unquote(match["chat"]),
            None if sender is None else unquote(sender),
            match["thread"],
        )

    def __str__(self) -> str:
        return _text(self.integration_id, self.chat_type, self.chat_id, self.sender_id, self.thread)


_Parts = tuple[str, Literal["p2p", "group"], str, str | None, str | None]


def _parts(integration: Scoped, envelope: Envelope) -> _Parts:
    """A conversation's fields (``ConversationId``'s, in order) for a message's scope."""
    chat = envelope.chat
    subject = envelope.subject
    if subject is not None:
        thread = f"{id_part(subject.source)}:{id_tail(subject.key)}"
        return integration.id, chat.type, chat.id, None, thread
    sender: str | None = None
    thread_text: str | None = None
    if integration.session_scope == "chat_sender":
        sender = envelope.sender.id
    elif integration.session_scope == "thread":
        reply = envelope.reply_to.message_id if envelope.reply_to else None
        thread_text = id_part(chat.thread_id or reply or "-")
    return integration.id, chat.type, chat.id, sender, thread_text


def _text(
    integration_id: str, chat_type: str, chat_id: str, sender_id: str | None, thread: str | None
) -> str:
    text = f"{id_part(integration_id)}|{chat_type}:{id_part(chat_id)}"
    if sender_id is not None:
        text += f":u:{id_part(sender_id)}"
    elif thread is not None:
        text += f":t:{thread}"  # already its text (``_parts``)
    return text
