"""Group watch: the ``watches[]`` of an integration and what a watch matches.

A watch starts a turn from a group message nobody addressed to the bot, when the message meets
every part of its ``match`` (keywords, regex, senders, message types). The turn's input is the
watch's instruction and then the message with its sender (``gateway.turns.context``); the
cooldown and the intake are ``gateway.triggers.watch_intake``, the admin API
``gateway.triggers.watch_admin``. Validation messages name the watch id.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    ModelWrapValidatorHandler,
    PrivateAttr,
    ValidationError,
    model_validator,
)

from gateway.config.model import GatewayModel
from gateway.envelope import Envelope
from gateway.errors import each_problem

WATCH_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
MAX_REGEX_CHARS = 500
MAX_MATCHED_CHARS = 20_000  # a regex reads at most this much of a message

ALL_MESSAGES = (
    "watches apply only with groupReplyStrategy mention_only (with all_messages every group "
    "message starts a turn already)"
)

MessageType = Literal["text", "image", "file", "audio", "video"]


class WatchMatch(GatewayModel):
    """Every part given must hold (AND); within ``keywords`` and ``senders`` any one will do."""

    keywords: list[Annotated[str, Field(min_length=1, max_length=200)]] | None = Field(
        None, description="Case-insensitive substrings of the text; any one matches"
    )
    regex: str | None = Field(
        None, description="A Python regular expression searched in the text (at most 500 chars)"
    )
    senders: list[Annotated[str, Field(min_length=1)]] | None = Field(
        None, description="Sender ids; the message's sender must be one of them"
    )
    message_types: list[MessageType] | None = Field(
        None, description="text, image, file, audio, video: the message must carry one of them"
    )


class Watch(GatewayModel):
    """A watch on a group's messages that starts a turn without a mention."""

    id: str = Field(pattern=WATCH_ID)
    chat_id: str | None = Field(
        None, min_length=1, description="The group chat watched; absent: every group chat"
    )
    match: WatchMatch
    text: str | None = Field(
        None, max_length=4000, description="The watch's instruction, put before the message"
    )
    xpert_id: str | None = Field(
        None, description="Run these turns with this expert, in a conversation of the watch's own"
    )
    cooldown_seconds: int = Field(
        300, ge=0, le=30 * 86_400, description="After a turn started, no new one for this long"
    )
    enabled: bool = True

    _pattern: re.Pattern[str] | None = PrivateAttr(None)

    @model_validator(mode="wrap")
    @classmethod
    def _named(cls, data: Any, handler: ModelWrapValidatorHandler[Watch]) -> Watch:
        """Every problem of a watch as one line that names the watch's id."""
        watch_id = data.get("id") if isinstance(data, dict) else None
        try:
            watch = handler(data)
        except ValidationError as exc:
            if not isinstance(watch_id, str):
                raise
            said = "; ".join(each_problem(exc))
            raise ValueError(f"watch {watch_id!r}: {said}") from None
        problem = watch._compile()
        if problem:
            raise ValueError(f"watch {watch.id!r}: {problem}")
        return watch

    def _compile(self) -> str | None:
        """What is wrong with the match as a whole (None: nothing); compiles the regex once."""
        m = self.match
        if not (m.keywords or m.regex or m.senders or m.message_types):
            return "match: needs at least one of keywords, regex, senders, messageTypes"
        if m.regex is not None:
            if len(m.regex) > MAX_REGEX_CHARS:
                return f"match.regex: {len(m.regex)} characters long (at most {MAX_REGEX_CHARS})"
            try:
                self._pattern = re.compile(m.regex)
            except re.error as exc:
                return f"match.regex: not a valid regular expression: {exc}"
        return None

    def matches(self, envelope: Envelope) -> bool:
        """Whether ``envelope`` meets every part of the match (its chat is checked too)."""
        if self.chat_id is not None and self.chat_id != envelope.chat.id:
            return False
        m, text = self.match, envelope.text
        if m.senders and envelope.sender.id not in m.senders:
            return False
        if m.message_types and not set(m.message_types) & message_types(envelope):
            return False
        if m.keywords:
            folded = text.casefold()
            if not any(k.casefold() in folded for k in m.keywords):
                return False
        return self._pattern is None or self._pattern.search(text[:MAX_MATCHED_CHARS]) is not None


def message_types(envelope: Envelope) -> set[str]:
    """What a message carries: ``text`` when it has any, and the kinds of its attachments."""
    kinds: set[str] = {a.kind for a in envelope.attachments}
    if envelope.text.strip():
        kinds.add("text")
    return kinds


def _unique(watches: list[Watch]) -> list[Watch]:
    seen: set[str] = set()
    for watch in watches:
        if watch.id in seen:
            raise ValueError(f"watch {watch.id!r}: duplicate id")
        seen.add(watch.id)
    return watches


# The field of IntegrationBase (gateway.config.bases): ids unique within the integration.
Watches = Annotated[list[Watch], AfterValidator(_unique)]


def watch_problems(
    path: str, watches: Iterable[Watch], experts: set[str], strategy: str
) -> list[str]:
    """What only the whole config can tell: an ``xpertId`` that names no expert, and watches on
    an integration that answers every group message anyway (``all_messages``)."""
    problems: list[str] = []
    listed = list(watches)
    if listed and strategy != "mention_only":
        problems.append(f"{path}.watches: {ALL_MESSAGES}")
    for j, watch in enumerate(listed):
        if watch.xpert_id is not None and watch.xpert_id not in experts:
            problems.append(
                f"{path}.watches.{j}.xpertId: watch {watch.id!r}: {watch.xpert_id!r} names no "
                "expert"
            )
    return problems
