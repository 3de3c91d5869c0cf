"""A turn's audit record: what started it, what it was given, what it ran, what it cost and how
it ended, written once when the turn ends (the record: ``audit_record.py``; sessions/audit.py
stores and indexes it).

:class:`TurnTrace` watches the run's events as the driver sees them (when each step and tool
started and ended, the usage reported); :func:`audit_record` puts the record together from the
claim, the turn's result, the trace and the timings; :func:`write_audit` stores it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog

from gateway.clock import now_ms
from gateway.edge.long_answer import whole_answer
from gateway.envelope import Envelope
from gateway.events import RunEvent, StepEvent, ToolEvent, UsageEvent
from gateway.experts.base import TurnInput
from gateway.progress import Progress
from gateway.turns.audit_record import (
    ANSWER_BYTES,
    DETAIL_CHARS,
    ERROR_CHARS,
    INPUT_BYTES,
    MAX_ARTIFACTS,
    MAX_STEPS,
    MAX_VARIABLES,
    TITLE_CHARS,
    AuditContext,
    AuditRecord,
    bounded,
    sha256,
    short,
)
from gateway.turns.context import merge_input
from gateway.turns.records import TurnOutcome, TurnTimings
from gateway.turns.result import TurnResult
from gateway.turns.snapshot import SessionSnapshot
from sessions import Claim, SessionRecords
from sessions.audit import AuditEntry

log = structlog.get_logger("gateway.turns")
DATETIME = "sys.datetime"  # "%Y-%m-%d %H:%M:%S %Z" (gateway/turns/variables.py)


@dataclass
class TurnTrace:
    """What the driver saw of one run: per step and tool id when it first showed and when it
    ended (done or failed), and the usage the expert reported (summed)."""

    clock: Callable[[], int] = now_ms
    started: dict[tuple[str, str], int] = field(default_factory=dict)
    ended: dict[tuple[str, str], int] = field(default_factory=dict)
    # (title, status, detail) of each step and tool as the events left them
    seen: dict[tuple[str, str], tuple[str, str, str]] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0
    cost: float = 0.0
    usage_seen: bool = False
    steered: list[Envelope] = field(default_factory=list)  # messages steered into the run

    def see(self, event: RunEvent) -> None:
        if isinstance(event, StepEvent | ToolEvent):
            key = ("step" if isinstance(event, StepEvent) else "tool", event.id)
            title, detail = (
                (event.title, event.detail)
                if isinstance(event, StepEvent)
                else (event.name, event.summary)
            )
            self.seen[key] = (title, event.status, detail)
            now = self.clock()
            self.started.setdefault(key, now)
            if event.status != "running":
                self.ended[key] = now
            else:
                self.ended.pop(key, None)
        elif isinstance(event, UsageEvent):
            self.usage_seen = True
            self.input_tokens += event.input_tokens
            self.output_tokens += event.output_tokens
            self.cost += event.cost

    def usage(self) -> dict[str, Any] | None:
        """The usage the expert reported, as the record's ``usage`` (None: none reported)."""
        if not self.usage_seen:
            return None
        cost = round(self.cost, 6) if self.cost else None
        return {"inputTokens": self.input_tokens, "outputTokens": self.output_tokens, "cost": cost}

    def steps(self, final: Progress | None, finished: int) -> list[dict[str, Any]]:
        """The card's steps and tools in their final state (or, for a run that never showed
        one - handed back, crashed - as the events left them), each with its times in this run;
        a step still open when the run ended closes at ``finished``: the record's ``steps``."""
        rows: list[tuple[tuple[str, str], tuple[str, str, str]]]
        if final is not None:
            rows = [(("step", s.id), (s.title, s.status, s.detail)) for s in final.steps]
            rows += [(("tool", t.id), (t.title, t.status, t.detail)) for t in final.tools]
        else:
            rows = list(self.seen.items())
        out: list[dict[str, Any]] = []
        for key, (title, status, detail) in rows[:MAX_STEPS]:
            start = self.started.get(key)
            end = self.ended.get(key, finished) if start is not None else None
            out.append(
                {
                    "id": short(key[1], TITLE_CHARS),
                    "kind": "step" if key[0] == "step" else "tool",
                    "title": short(title, TITLE_CHARS),
                    "status": status,
                    "detail": short(detail, DETAIL_CHARS),
                    "startedAt": start,
                    "endedAt": end,
                    "ms": None if start is None or end is None else max(0, end - start),
                }
            )
        return out


def trigger_of(items: list[Envelope]) -> dict[str, Any]:
    """What started the turn (the record's ``trigger``): the newest item's kind (a click is a
    turn of its own)."""
    last = items[-1]
    trigger_id = last.trigger.id if last.trigger else None
    kind, action, source = "message", None, None
    if last.kind == "action" and last.action is not None:
        kind, action, trigger_id = "button", last.action.id, None
    elif last.kind == "event":
        kind, source = "event", last.subject.source if last.subject else None
    elif last.kind in ("schedule", "watch"):
        kind = last.kind
    else:
        trigger_id = None
    return {"kind": kind, "id": trigger_id, "action": action, "source": source}


def context_of(turn: TurnInput) -> AuditContext:
    return AuditContext.model_validate(_context(turn))


def _context(turn: TurnInput) -> dict[str, Any]:
    names = sorted(turn.variables)
    return {
        "variables": names[:MAX_VARIABLES],
        "variableCount": len(names),
        "history": len(turn.group_history),
        "attachments": len(turn.attachments),
        "attachmentKinds": sorted({str(a.get("kind", "file")) for a in turn.attachments}),
        "memoryRules": turn.memory_rules,
    }


def expert_of(xpert_id: str, snapshot: SessionSnapshot | None) -> dict[str, Any] | None:
    if not xpert_id:
        return None
    data: Mapping[str, Any] = snapshot.data.get("expert", {}) if snapshot else {}
    model = data.get("model")
    return {
        "id": xpert_id,
        "kind": str(data["kind"]) if data.get("kind") else None,
        "model": str(model) if model else None,
    }


@dataclass(frozen=True)
class TurnFacts:
    """What the turn code knows once a turn ended, for :func:`audit_record`."""

    claim_turn_id: str
    attempt: int
    resumed: bool
    conversation: str
    items: list[Envelope]
    outcome: TurnOutcome
    timings: TurnTimings
    replica: str
    claim_id: str = ""  # this claim's own part of the owner token: unique per claim
    session_id: str = ""
    xpert_id: str = ""
    input_text: str | None = None  # None: the merged input of ``items``
    turn: TurnInput | None = None
    final: Progress | None = None
    snapshot: SessionSnapshot | None = None
    error: str = ""
    answer: str = ""
    sender_id: str = ""  # who the turn ran as ("": the last item's sender)
    approver: str = ""  # who answered the Confirm / Reject it resumed ("": none)

    @classmethod
    def of(
        cls,
        claim: Claim,
        items: list[Envelope],
        result: TurnResult | None,
        *,
        outcome: TurnOutcome,
        timings: TurnTimings,
        replica: str,
        error: str = "",
    ) -> TurnFacts:
        """The facts of a claimed turn; ``result`` is None when it never returned one (it was
        handed back, gave up or crashed)."""
        return cls(
            claim_turn_id=claim.turn_id,
            claim_id=claim.owner.rsplit(":", 1)[-1],
            attempt=claim.attempts,
            resumed=claim.resumed,
            conversation=claim.conversation,
            items=items,
            outcome=outcome,
            timings=timings,
            replica=replica,
            session_id=result.session_id if result else "",
            xpert_id=result.expert if result else "",
            turn=result.turn if result else None,
            final=result.final if result else None,
            snapshot=result.snapshot if result else None,
            error=error,
            answer=result.said if result else "",
            sender_id=result.sender_id if result else "",
            approver=result.approver if result else "",
        )


def audit_record(facts: TurnFacts, trace: TurnTrace | None) -> AuditRecord:
    """The turn's record, typed (:func:`audit_body` validated)."""
    return AuditRecord.model_validate(audit_body(facts, trace))


def audit_body(facts: TurnFacts, trace: TurnTrace | None) -> dict[str, Any]:
    """The turn's record as the admin API answers it (``AuditRecord``'s camelCase fields, in
    its order), built without a model: a turn writes one, and the typed form costs more."""
    last = facts.items[-1]
    t = facts.timings
    text = facts.input_text
    if text is None:
        text = facts.turn.text if facts.turn is not None else merge_input(facts.items)
    steered = trace.steered if trace else []
    if steered:  # what went into the run while it ran: its words are the turn's input too
        text += "\n\n" + merge_input(steered)
    # Every sender whose message went into the turn (issue 36), the one it ran as first.
    senders = [facts.sender_id or last.sender.id]
    senders += [e.sender.id for e in [*facts.items, *steered] if e.kind == "message"]
    cut, truncated = bounded(text, INPUT_BYTES)
    final = facts.final
    whole = facts.answer or (whole_answer(final) if final else "")
    answer, _ = bounded(whole, ANSWER_BYTES)
    error = facts.error or (final.error if final else "")
    return {
        "event": "turn",
        "id": f"{facts.claim_turn_id}-{facts.claim_id or facts.attempt}",
        "turnId": facts.claim_turn_id,
        "attempt": facts.attempt,
        "resumed": facts.resumed,
        "integrationId": last.integration_id,
        "platform": last.platform,
        "chatId": last.chat.id,
        "chatType": last.chat.type,
        "conversation": facts.conversation,
        "sessionId": facts.session_id,
        "senderId": facts.sender_id or last.sender.id,
        "approver": facts.approver or None,
        "trigger": trigger_of(facts.items),
        "input": {
            "text": cut,
            "chars": len(text),
            "truncated": truncated,
            "messages": len(facts.items) + len(steered),
            "sha256": sha256(text),
            "senders": list(dict.fromkeys(senders)),
            "steered": len(steered),
        },
        "context": _context(facts.turn) if facts.turn is not None else None,
        "expert": expert_of(facts.xpert_id, facts.snapshot),
        "steps": trace.steps(final, t.finished) if trace else [],
        "usage": trace.usage() if trace else None,
        "outcome": facts.outcome,
        "error": short(error, ERROR_CHARS),
        "answer": answer,
        "answerChars": len(whole),
        "answerSha256": sha256(whole),
        "artifacts": [
            {
                "kind": a.kind,
                "url": short(a.url, DETAIL_CHARS * 7),
                "name": short(a.name, TITLE_CHARS),
            }
            for a in (final.artifacts[:MAX_ARTIFACTS] if final else ())
        ],
        "timings": {
            "receivedAt": t.received,
            "claimedAt": t.claimed,
            "firstCardAt": t.first_card,
            "finishedAt": t.finished,
            "queuedMs": t.queued_ms,
            "firstCardMs": t.first_card_ms,
            "runMs": t.run_ms,
        },
        "replica": facts.replica,
    }


def audit_writes(
    records: SessionRecords,
    facts: TurnFacts,
    trace: TurnTrace,
    result: TurnResult | None,
    *,
    now_ms: int,
) -> list[Coroutine[Any, Any, Any]]:
    """The turn's audit record and, for a turn that ran to its end here (``result``), its row in
    the event stream and the variables it saw (admin API), as writes not yet started: the runner
    starts them together with the turn's finish, so they go out in one write."""
    body = audit_body(facts, trace)
    row = None
    if result is not None:
        row = {
            "event": "turn",
            "turn": facts.claim_turn_id,
            "conversation": facts.conversation,
            "session": facts.session_id,
            "integrationId": body["integrationId"],
            "outcome": facts.outcome,
            "replica": facts.replica,
            "start": facts.timings.claimed,
            "end": facts.timings.finished,
            "resumed": int(facts.resumed),
        }
    turn = result.turn if result else None
    variables = result.variables if result else {}
    t = facts.timings
    return records.turn_writes(
        facts.session_id,
        variables,
        row,
        entry=AuditEntry(
            record_id=body["id"],
            integration_id=body["integrationId"],
            chat_id=body["chatId"],
            session_id=body["sessionId"],
            outcome=body["outcome"],
            end_ms=t.finished,
            body=orjson.dumps(body).decode(),
        ),
        session=session_summary(body),
        now_ms=now_ms,
        stored=_as_stored(variables, turn.seen_before) if turn is not None else None,
    )


def session_summary(body: Mapping[str, Any]) -> dict[str, str]:
    """The session as the Sessions listing shows it, should the trail not know it yet (what
    ``AuditRecord.session_summary`` gives)."""
    summary = {k: body[k] for k in ("chatId", "chatType", "conversation")}
    if body["expert"] is not None:
        summary["xpertId"] = body["expert"]["id"]
    return summary


def _as_stored(seen: Mapping[str, str], before: Mapping[str, str]) -> dict[str, str]:
    """What the session's variables hold of what this turn saw, as far as storing it goes: a
    ``sys.datetime`` of the same minute as the one stored, when nothing else changed, is not
    written again (the admin API shows it to the minute; every other value as the turn saw it)."""
    stored = dict(before)
    now = seen.get(DATETIME)
    if (
        now is not None
        and stored.get(DATETIME, "")[:16] == now[:16]
        and all(stored.get(k) == v for k, v in seen.items() if k != DATETIME and k[:4] != "var.")
    ):
        stored[DATETIME] = now
    return stored


async def write_audit(
    records: SessionRecords,
    facts: TurnFacts,
    trace: TurnTrace,
    result: TurnResult | None,
    *,
    now_ms: int,
) -> None:
    """:func:`audit_writes`, written; a failure to write them costs only them (the turn still
    finishes)."""
    for outcome in await asyncio.gather(
        *audit_writes(records, facts, trace, result, now_ms=now_ms), return_exceptions=True
    ):
        if isinstance(outcome, Exception):
            log.warning("audit record not written", error=str(outcome) or type(outcome).__name__)
