"""The Envelope: the one frozen shape every platform event is normalised into
(docs/architecture.md)."""

from __future__ import annotations

import secrets
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class _Frozen(BaseModel):
    model_config = ConfigDict(
        frozen=True, alias_generator=to_camel, populate_by_name=True, extra="forbid"
    )


class Chat(_Frozen):
    id: str
    type: Literal["p2p", "group"]
    name: str | None = None
    thread_id: str | None = None


class Sender(_Frozen):
    id: str
    name: str | None = None
    email: str | None = None
    is_bot: bool = False


class Mention(_Frozen):
    id: str
    name: str | None = None
    is_bot: bool = False


class Attachment(_Frozen):
    kind: Literal["image", "file", "audio", "video"]
    key: str
    name: str | None = None
    mime: str | None = None
    size: int | None = None
    url: str | None = None


class ReplyTo(_Frozen):
    """Where and how to answer: the platform message id plus platform reply handles."""

    model_config = ConfigDict(
        frozen=True, alias_generator=to_camel, populate_by_name=True, extra="allow"
    )
    message_id: str | None = None


class Action(_Frozen):
    id: str
    value: dict[str, Any] = Field(default_factory=dict)
    message_id: str | None = None


class Subject(_Frozen):
    """What an external event (kind ``event``) is about: its source and the object's key. Events
    about one subject share a conversation and update one card until one of them is ``final``
    (gateway/triggers/external.py)."""

    source: str
    key: str
    final: bool = False

    @property
    def thread(self) -> str:
        return f"{self.source}:{self.key}"


class Trigger(_Frozen):
    """What started a turn nobody addressed to the bot (kind ``watch``): the watch's id, its
    instruction and the expert it names, if any (``gateway.config.watch``)."""

    id: str
    text: str | None = None
    xpert_id: str | None = None
    # A schedule made in a chat: the sender who made it, who may answer its turn's Confirm /
    # Reject as the sender of a message may (gateway/turns/approval.py).
    asker: str | None = None


EnvelopeKind = Literal["message", "action", "command", "schedule", "watch", "event"]


class Envelope(_Frozen):
    envelope_id: str = Field(default_factory=lambda: secrets.token_hex(16))
    integration_id: str
    platform: str
    event_id: str
    kind: EnvelopeKind = "message"
    received_at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    chat: Chat
    sender: Sender
    text: str = ""
    mentions: tuple[Mention, ...] = ()
    bot_mentioned: bool = False
    attachments: tuple[Attachment, ...] = ()
    reply_to: ReplyTo | None = None
    action: Action | None = None
    trigger: Trigger | None = None
    subject: Subject | None = None  # kind event
    locale: str | None = None
    raw: dict[str, Any] | None = None

    def to_json(self, *, store_raw: bool = False) -> str:
        """Serialise for storage; ``raw`` is dropped unless the integration keeps it."""
        if store_raw or self.raw is None:  # no exclude set to build and apply (the usual case)
            return self.model_dump_json(by_alias=True, exclude_none=True)
        return self.model_dump_json(by_alias=True, exclude={"raw"}, exclude_none=True)

    @classmethod
    def from_json(cls, data: str | bytes | dict[str, Any]) -> Envelope:
        if isinstance(data, dict):
            return cls.model_validate(data)
        return cls.model_validate_json(data)


def asker_of(asked: Envelope) -> str | None:
    """The person whose question a turn's Confirm / Reject is: a message's sender; for a
    schedule made in a chat, the member who made it; None for a turn no person asked for (a
    config or admin schedule, an external event). See gateway/turns/approval.py."""
    if asked.kind in ("schedule", "event"):
        return asked.trigger.asker if asked.trigger is not None else None
    return asked.sender.id
