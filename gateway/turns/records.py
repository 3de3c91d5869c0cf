"""What a finished turn leaves for a later click, kept with the session: a failed turn's input
(for Retry) and a waiting turn's interrupt (for Confirm / Reject). Typed here, stored as JSON in
the session binding (and on the turn while a click's turn runs), with the field names the
records always had, so sessions made before an upgrade still resume."""

from __future__ import annotations

from typing import Any, Self

from pydantic import BaseModel, ConfigDict, Field

from gateway.envelope import Envelope


class _Record(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore", frozen=True)

    turn_id: str = Field(alias="turnId")
    card: str | None = None  # the card's handle, updated in place by the later turn
    text: str  # the turn's merged input
    reply_to: str = Field(alias="replyTo")  # the Envelope (JSON) the card answered

    def envelope(self) -> Envelope:
        return Envelope.from_json(self.reply_to)

    def dump(self) -> str:
        return self.model_dump_json(by_alias=True)

    @classmethod
    def load(cls, raw: str | None) -> Self | None:
        return cls.model_validate_json(raw) if raw else None


class FailedTurn(_Record):
    """A turn that ended in an error: Retry runs ``text`` again in ``card``."""


class PendingInterrupt(_Record):
    """A turn waiting for Confirm / Reject: the session's config snapshot it ran with, the
    question shown, and the backend's own data to resume it (for XpertAI the run's target and
    the last stream id read)."""

    snapshot: dict[str, Any]
    prompt: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    # What the card showed before the question, so the resumed run's card keeps it.
    steps: list[dict[str, str]] = Field(default_factory=list)
    tools: list[dict[str, str]] = Field(default_factory=list)
    answer: str = ""
