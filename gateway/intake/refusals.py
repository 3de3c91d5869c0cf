"""A message or a schedule's fire over a budget (``gateway.policy.budgets``): nothing of it is
stored; the chat gets a short card saying when it can ask again (a redelivery gets the same
card, sent with the same idempotency key: once), and the first time one audit record with
outcome ``refused`` and the refusal in ``/metrics``."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol
from zoneinfo import ZoneInfo

import structlog

from gateway.clock import now_ms
from gateway.edge.ingest import IngestOutcome
from gateway.intake.replies import Replies
from gateway.intake.router import Incoming
from gateway.policy.budgets import LIMIT_NAMES, Budgets
from gateway.policy.routing import route
from gateway.turns.audit import TurnFacts, audit_record
from gateway.turns.records import TurnEnd, TurnTimings
from sessions import SessionRecords
from sessions.budgets import BudgetIntakeResult

log = structlog.get_logger("gateway.policy.budgets")


class BudgetObserver(Protocol):
    """Told of each refusal (``gateway.ops.metrics.Metrics``): the limit, and the refused turn."""

    def budget_refused(self, integration_id: str, limit: str) -> None: ...

    def turn_ended(self, end: TurnEnd) -> None: ...


class Refusals:
    def __init__(
        self,
        *,
        budgets: Budgets,
        replies: Replies,
        records: SessionRecords,
        spawn: Callable[[Awaitable[Any]], None],
        observer: BudgetObserver | None = None,
        wall: Callable[[], int] = now_ms,
    ) -> None:
        self.budgets = budgets  # its refusal text
        self.replies = replies
        self.records = records
        self.spawn = spawn  # the audit record is written in the background
        self.observer = observer
        self.wall = wall  # when the refusal happened (the budget windows have their own clock)

    def refuse(self, incoming: Incoming, result: BudgetIntakeResult) -> IngestOutcome:
        """Answer a refused message with a short card (again for a redelivery: the card's
        idempotency key is the event's, so the chat sees it once); the first time also audit and
        count it."""
        integ, env = incoming.integ, incoming.env
        text = self.budgets.refusal_text(integ, env, result)
        chinese = (integ.language or env.locale or "").lower().startswith("zh")
        if env.kind == "schedule":
            headline = "定时任务已跳过" if chinese else "Scheduled run skipped"
        else:
            headline = "已达到使用上限" if chinese else "Limit reached"
        self.replies.notice(env, incoming.conversation, headline, text)
        if result.status == "again":
            return IngestOutcome("duplicate")
        log.info(
            "over a budget: refused",
            limit=result.limit,
            retry_at=result.retry_ms,
            **({"schedule_id": env.trigger.id} if env.trigger is not None else {}),
        )
        at = self.wall()
        timings = TurnTimings(
            received=int(env.received_at.timestamp() * 1000), claimed=at, finished=at
        )
        if self.observer is not None:
            self.observer.budget_refused(integ.id, LIMIT_NAMES.get(result.limit, result.limit))
            end = TurnEnd(integ.id, env.platform, route(integ, env), "refused", timings)
            self.observer.turn_ended(end)
        self.spawn(self._audit(incoming, result, text, timings))
        return IngestOutcome("refused", result.limit)

    async def _audit(
        self, incoming: Incoming, result: BudgetIntakeResult, text: str, timings: TurnTimings
    ) -> None:
        integ, env = incoming.integ, incoming.env
        zone = ZoneInfo(integ.timezone) if integ.timezone else UTC
        until = datetime.fromtimestamp(result.retry_ms / 1000, zone).isoformat(timespec="seconds")
        facts = TurnFacts(
            claim_turn_id=f"refused-{uuid.uuid4().hex}",
            attempt=1,
            resumed=False,
            conversation=incoming.conversation,
            items=[env],
            outcome="refused",
            timings=timings,
            replica="",
            xpert_id=route(integ, env),  # the expert it would have gone to
            input_text=env.text,
            error=f"over {LIMIT_NAMES.get(result.limit, result.limit)} until {until}",
            answer=text,
        )
        record = audit_record(facts, None)
        await self.records.audit.put(record.entry(), now_ms=timings.finished, session={})
