"""Budgets: ``limits`` per integration, overridden per route (gateway/config/limits.py),
enforced at intake and reported by ``GET /v1.0/usage`` (gateway/ops/usage_api.py).

What counts, and when: a message that opens a new burst is a turn, counted when it is accepted
(the same step that stores it: sessions/lua/budget_intake.lua); messages merged into a waiting
burst are part of that turn and not counted again; a schedule's fire is a turn too (issue 25:
a fire over a limit is skipped, with the notice in the chat, one log line and an audit record,
and not run later; its sender is the schedule, ``schedule:<id>``); clicks, commands, watches and
external events are not limited. A conversation is "a chat" here: under ``sessionScope: chat``
(the default) that is the chat; under ``chat_sender`` or ``thread`` each sender's or thread's
conversation has its own counters (``check`` warns). ``turnsPerHourPerSender`` counts one
sender's turns in that conversation. Tokens are what the expert reported, added when the turn
ends to the day's count in the integration's time zone; the check at intake sees the turns that
ended, so the turn that crosses the budget runs to its end.

Over a limit nothing is stored and nothing queues; the chat gets a short answer saying when it
can ask again (a redelivery gets the same answer, sent with the same idempotency key: once),
one audit record with outcome ``refused``, and the ingest outcome ``refused`` (counted in
``/metrics``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import structlog

from gateway.clock import now_ms
from gateway.config.bases import IntegrationBase
from gateway.config.limits import Limits
from gateway.config.route import route_of
from gateway.envelope import Envelope
from sessions import BurstWrite, ClaimRequest, SessionStore
from sessions.budgets import BudgetCheck, BudgetIntakeResult, BudgetLimits, BudgetStore

log = structlog.get_logger("gateway.policy.budgets")

LIMIT_NAMES = {
    "chat": "turnsPerHourPerChat",
    "sender": "turnsPerHourPerSender",
    "tokens": "tokensPerDayPerChat",
}


def limits_for(integ: IntegrationBase, envelope: Envelope) -> Limits:
    """The integration's limits with those of the first route that holds put over them."""
    matched = route_of(integ.routes, envelope)
    return integ.limits.over(matched[1].limits if matched else None)


_DAYS: dict[str | None, tuple[int, int, str]] = {}  # zone -> (day start, day end, date)


def day_of(timezone: str | None, at_ms: int) -> tuple[str, int]:
    """The local date of ``at_ms`` (YYYY-MM-DD) in ``timezone`` (UTC when unset) and when that
    day ends (epoch ms; a DST day is 23 or 25 hours long). The day last asked of each zone is
    kept: every message asks, and it changes once a day (issue 15)."""
    known = _DAYS.get(timezone)
    if known is not None and known[0] <= at_ms < known[1]:
        return known[2], known[1]
    zone = ZoneInfo(timezone) if timezone else UTC
    local = datetime.fromtimestamp(at_ms / 1000, zone)
    # Wall-clock arithmetic (same tzinfo): the next local midnight, whatever its UTC offset.
    start = datetime(local.year, local.month, local.day, tzinfo=zone)
    end = int((start + timedelta(days=1)).timestamp() * 1000)
    day = local.date().isoformat()
    _DAYS[timezone] = (min(int(start.timestamp() * 1000), at_ms), end, day)
    return day, end


class Budgets:
    def __init__(self, *, store: SessionStore, clock: Callable[[], int] = now_ms) -> None:
        self.counters = BudgetStore(store=store)
        self.clock = clock  # the budget windows' clock (tests move it)

    # --- intake ----------------------------------------------------------------------------
    async def intake(
        self,
        integ: IntegrationBase,
        env: Envelope,
        write: BurstWrite,
        claim: ClaimRequest | None = None,
    ) -> BudgetIntakeResult:
        """Store ``env`` (``write``) unless it would start a turn over a limit or fill its
        conversation's buffer past the write's cap: one round trip (which also claims the turn
        with ``claim`` when the message is due at once)."""
        limits = limits_for(integ, env)
        at = self.clock()
        day, day_end = day_of(integ.timezone, at)
        chat, sender, tokens = (
            limits.turns_per_hour_per_chat,
            limits.turns_per_hour_per_sender,
            limits.tokens_per_day_per_chat,
        )
        check = BudgetCheck(
            integ.id, env.sender.id, BudgetLimits(chat, sender, tokens), at, day, day_end
        )
        return await self.counters.intake(write, check, claim)

    def refusal_text(
        self, integ: IntegrationBase, env: Envelope, result: BudgetIntakeResult
    ) -> str:
        """A short, polite answer: which limit, and when the chat may ask again (local time,
        rounded up to the minute), in Chinese where the integration or the sender speaks it."""
        zone = ZoneInfo(integ.timezone) if integ.timezone else UTC
        retry = datetime.fromtimestamp(result.retry_ms / 1000, zone)
        if retry.second or retry.microsecond:
            retry = retry.replace(second=0, microsecond=0) + timedelta(minutes=1)
        today = datetime.fromtimestamp(self.clock() / 1000, zone).date()
        days = (retry.date() - today).days
        clock = retry.strftime("%H:%M")
        limits = limits_for(integ, env)
        per_hour = {
            "chat": limits.turns_per_hour_per_chat,
            "sender": limits.turns_per_hour_per_sender,
        }.get(result.limit)
        if (integ.language or env.locale or "").lower().startswith("zh"):
            when = {0: clock, 1: f"明天 {clock}"}.get(days, f"{retry:%Y-%m-%d} {clock}")
            times = f"最多提问 {per_hour} 次，次数" if per_hour else "的提问次数"
            head = {
                "chat": f"这个聊天每小时{times}已经用完了。",
                "sender": f"你在这里每小时{times}已经用完了。",
            }.get(result.limit, "这个聊天今天的用量已经用完了。")
            if env.kind == "schedule":
                head = head.replace("你在这里", "这个定时任务")
                return f"本次定时任务已跳过：{head}{when} 之后的定时任务会照常运行。"
            return f"抱歉，{head}请在 {when} 之后再问，谢谢理解。"
        when = {0: f"at {clock}", 1: f"tomorrow at {clock}"}.get(
            days, f"on {retry:%Y-%m-%d} at {clock}"
        )
        of = f" of {per_hour} questions an hour" if per_hour else " of questions an hour"
        head = {
            "chat": f"this chat has reached its limit{of}.",
            "sender": f"you have reached your limit{of} in this chat.",
        }.get(result.limit, "this chat has used up its budget for today.")
        if env.kind == "schedule":  # a fire over the budget is skipped, not run later
            head = head.replace("you have", "this schedule has")  # its sender is the schedule
            return f"This scheduled run was skipped: {head} Runs due {when} or later go ahead."
        return f"Sorry, {head} You can ask again {when}."

    # --- turn end --------------------------------------------------------------------------
    async def spend(self, integ: IntegrationBase, conversation: str, tokens: int) -> None:
        """A finished turn's reported tokens, added to its conversation's day."""
        if tokens <= 0:
            return
        at = self.clock()
        day, day_end = day_of(integ.timezone, at)
        total = await self.counters.spend(
            integration_id=integ.id,
            conversation=conversation,
            tokens=tokens,
            day=day,
            day_end_ms=day_end,
            now_ms=at,
        )
        log.debug("tokens counted", tokens=tokens, today=total)
