"""The audit record of one turn (camelCase JSON, as the admin API answers it) and the bounds that
keep it a few KB: the merged input cut to 4 KB and the answer to 2 KB on a character boundary
with a marker (each one's whole length and SHA-256 beside it), lists capped. Put together by
``gateway.turns.audit``."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from gateway.turns.records import TurnOutcome
from sessions.audit import AuditEntry

INPUT_BYTES = 4096
ANSWER_BYTES = 2048
ERROR_CHARS = 300
TITLE_CHARS = 200
DETAIL_CHARS = 300
MAX_STEPS = 100
MAX_VARIABLES = 100
MAX_ARTIFACTS = 50

TriggerKind = Literal["message", "schedule", "watch", "event", "button"]


def bounded(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` within ``max_bytes`` of UTF-8, cut on a character boundary, the cut said in a
    marker that counts towards the bound; and whether it was cut."""
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, False
    marker = f" …[cut: {len(text)} characters in all]"
    keep = raw[: max(0, max_bytes - len(marker.encode()))].decode("utf-8", "ignore")
    return keep + marker, True


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()


def short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class AuditTrigger(_Model):
    kind: TriggerKind
    id: str | None = None  # the schedule's, watch's or event source's id
    action: str | None = None  # a button's: confirm, reject, retry
    source: str | None = None  # an external event's source (github, gitlab, generic)


class AuditInput(_Model):
    text: str
    chars: int  # the merged input's length before any cut
    truncated: bool
    messages: int  # how many messages (or clicks, fires) the turn merged, steered ones too
    sha256: str | None = None  # of the whole input (UTF-8): what a cut record still identifies
    senders: list[str] = []  # who sent them: the sender it ran as first (issue 36)
    steered: int = 0  # of ``messages``, how many were steered into the running run


class AuditContext(_Model):
    variables: list[str]  # the names handed to the expert (sys.*, var.*, memory.rules)
    variable_count: int
    history: int  # recent group messages handed along
    attachments: int
    attachment_kinds: list[str]
    memory_rules: int


class AuditExpert(_Model):
    id: str
    kind: str | None = None
    model: str | None = None  # where the expert's settings (or the route's bundle) name one


class AuditStep(_Model):
    id: str
    kind: Literal["step", "tool"]
    title: str
    status: str
    detail: str = ""
    started_at: int | None = None  # None: shown before this turn (a resumed run's)
    ended_at: int | None = None
    ms: int | None = None


class AuditArtifact(_Model):
    kind: Literal["image", "file", "link"]
    url: str
    name: str = ""


class AuditUsage(_Model):
    input_tokens: int
    output_tokens: int
    cost: float | None = None


class AuditTimings(_Model):
    received_at: int
    claimed_at: int
    first_card_at: int | None
    finished_at: int
    queued_ms: int
    first_card_ms: int | None
    run_ms: int


class AuditRecord(_Model):
    """One turn, as the admin API answers it (camelCase JSON)."""

    event: Literal["turn"] = "turn"
    id: str  # <turnId>-<claim>: a turn handed back or crashed and resumed has one record each
    turn_id: str
    attempt: int
    resumed: bool  # claimed from a replica that crashed or handed it back
    integration_id: str
    platform: str
    chat_id: str
    chat_type: str
    conversation: str
    session_id: str
    sender_id: str  # who the turn ran as (a Confirm / Reject: the interrupted turn's sender)
    approver: str | None = None  # a Confirm / Reject / Retry clicker (sender_id: the asker)
    trigger: AuditTrigger
    input: AuditInput
    context: AuditContext | None
    expert: AuditExpert | None
    steps: list[AuditStep]
    usage: AuditUsage | None
    outcome: TurnOutcome
    error: str
    answer: str
    # The whole answer's length and SHA-256 (UTF-8), however much of it ``answer`` keeps (an
    # answer filed as answer.md included: gateway/edge/long_answer.py).
    answer_chars: int | None = None
    answer_sha256: str | None = None
    artifacts: list[AuditArtifact] = []  # what the run produced (images, files, links)
    timings: AuditTimings
    replica: str

    def session_summary(self) -> dict[str, str]:
        """The session as the Sessions listing shows it, should the trail not know it yet."""
        summary = {
            "chatId": self.chat_id,
            "chatType": self.chat_type,
            "conversation": self.conversation,
        }
        if self.expert is not None:
            summary["xpertId"] = self.expert.id
        return summary

    def entry(self) -> AuditEntry:
        """The record as sessions/audit.py stores and indexes it."""
        return AuditEntry(
            record_id=self.id,
            integration_id=self.integration_id,
            chat_id=self.chat_id,
            session_id=self.session_id,
            outcome=self.outcome,
            end_ms=self.timings.finished_at,
            body=self.model_dump_json(by_alias=True),
        )
