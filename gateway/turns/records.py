"""What a finished turn leaves for a later click, kept with the session: a failed turn's input
(for Retry) and a waiting turn's interrupt (for Confirm / Reject). Typed here, stored as JSON in
the session binding (and on the turn while a click's turn runs), with the field names the
records always had, so sessions made before an upgrade still resume."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, Self, get_args

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


# --- how a turn ended, and when --------------------------------------------------------------
# One vocabulary for the audit record, the metrics (``xgw_turns_total{outcome}``) and budgets:
# done (the run ended well, a Reject included), error, cancelled (Stop), interrupted (waiting for
# Confirm / Reject), handback (shutdown gave it to another replica), gave_up (failed too often),
# refused (over a budget: the polite card, no run).
TurnOutcome = Literal["done", "error", "cancelled", "interrupted", "handback", "gave_up", "refused"]
TURN_OUTCOMES: tuple[TurnOutcome, ...] = get_args(TurnOutcome)


def outcome_of(status: str) -> TurnOutcome:
    """The outcome of a turn whose card ended in Progress ``status``."""
    if status in ("done", "rejected", "ended"):
        return "done"
    if status == "waiting":
        return "interrupted"
    if status == "cancelled":
        return "cancelled"
    return "error"


@dataclass(frozen=True, slots=True)
class TurnTimings:
    """A turn's times (epoch ms), computed once in the turn code for the audit record and the
    metrics: ``received`` the first burst item's arrival, ``claimed`` when this replica took the
    turn, ``first_card`` when its card first showed (None: it never did), ``finished``."""

    received: int
    claimed: int
    finished: int
    first_card: int | None = None

    @property
    def queued_ms(self) -> int:
        return max(0, self.claimed - self.received)

    @property
    def run_ms(self) -> int:
        return max(0, self.finished - self.claimed)

    @property
    def first_card_ms(self) -> int | None:
        """From the first message to the first card: what the user waits for."""
        return None if self.first_card is None else max(0, self.first_card - self.received)


@dataclass(frozen=True, slots=True)
class TurnEnd:
    """A finished turn as the metrics see it: low-cardinality labels and its timings."""

    integration_id: str
    platform: str
    expert: str  # the xpertId that ran it
    outcome: TurnOutcome
    timings: TurnTimings


class TurnObserver(Protocol):
    """Told of every turn's end (``gateway.ops.metrics.Metrics`` is one)."""

    def turn_ended(self, end: TurnEnd) -> None: ...
