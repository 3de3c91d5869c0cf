"""Budget counters: turns per hour (a conversation's and each sender's there), tokens and
refusals per day, and which conversations used any of it (for ``GET /v1.0/usage``).

Every counter of a conversation lives in its slot, so ``budget_intake.lua`` (which runs
``intake.lua`` inside it) checks the limits, dedups and stores a message - or refuses it, storing
nothing but the verdict under the event's dedup key - in one round trip: two replicas racing at
a limit cannot both take the last turn, and a redelivered refusal is answered, not counted,
again. The caller's clock decides the windows (tests inject one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from redis.commands.core import AsyncScript

from sessions.keys import KeyBuilder
from sessions.results import BurstWrite
from sessions.scripts import lua
from sessions.store import ClaimRequest, SessionStore

HOUR_MS = 3_600_000
USAGE_KEEP_MS = 48 * HOUR_MS  # a conversation unused this long leaves the usage index


@dataclass(frozen=True, slots=True)
class BudgetLimits:
    """The limits that apply to one message (None: unlimited)."""

    chat_turns: int | None = None
    sender_turns: int | None = None
    tokens: int | None = None


@dataclass(frozen=True, slots=True)
class BudgetCheck:
    """What a message is counted against: its integration's and sender's turns, under
    ``limits``, at ``now_ms`` (the budget windows' clock), on the integration's local ``day``
    (which ends at ``day_end_ms``)."""

    integration_id: str
    sender_id: str
    limits: BudgetLimits
    now_ms: int
    day: str
    day_end_ms: int


@dataclass(frozen=True, slots=True)
class BudgetIntakeResult:
    """``refused``: over ``limit`` (chat | sender | tokens) until ``retry_ms``, nothing stored;
    ``again``: a redelivery of a message refused before (the same verdict); ``full``: over the
    conversation's buffer cap (``IntakeResult``)."""

    status: Literal["queued", "dup", "busy", "full", "refused", "again"]
    due_ms: int
    busy: bool
    limit: str = ""
    retry_ms: int = 0
    # With a claim request: claim.lua's reply when the message was due at once and its turn's
    # claim was tried in the same call (``Claim.of_reply``), else None.
    claimed: list[Any] | None = None
    told: bool = False  # full: the first refusal since the burst was under its cap


@dataclass(frozen=True, slots=True)
class ConversationUsage:
    conversation: str
    turns_last_hour: int
    tokens_today: int
    refused_today: int


class BudgetStore:
    def __init__(self, *, store: SessionStore) -> None:
        self.store = store
        self._intake: AsyncScript | None = None
        self._spend: AsyncScript | None = None
        self._intake_claim: AsyncScript | None = None

    @property
    def keys(self) -> KeyBuilder:
        return self.store.keys

    def _scripts(self) -> tuple[AsyncScript, AsyncScript, AsyncScript]:
        """budget_intake (intake.lua inside), budget_spend, and intake_claim (budget_intake
        and claim.lua inside)."""
        if self._intake is None or self._spend is None or self._intake_claim is None:
            text = lua("budget_intake.lua").replace("--INTAKE--", lua("intake.lua"), 1)
            self._intake = self.store.redis.register_script(text)
            self._spend = self.store.redis.register_script(lua("budget_spend.lua"))
            both = lua("intake_claim.lua").replace("--BUDGET--", text, 1)
            both = both.replace("--CLAIM--", lua("claim.lua"), 1)
            self._intake_claim = self.store.redis.register_script(both)
        return self._intake, self._spend, self._intake_claim

    async def intake(
        self, write: BurstWrite, check: BudgetCheck, claim: ClaimRequest | None = None
    ) -> BudgetIntakeResult:
        """Dedup, check the limits and append in ONE round trip (refused past ``write.cap``:
        status ``full``); returns once the envelope is durable in Redis (or refused, with
        nothing of it stored but the verdict). With ``claim``, a message that is due at once
        (window 0, no turn running) has its turn claimed in the same call
        (``BudgetIntakeResult.claimed``)."""
        k, store, conversation = self.keys, self.store, write.conversation
        script, _, with_claim = self._scripts()
        keys = store.intake_keys(write)
        keys += k.budget_intake(conversation, check.sender_id, check.day, check.integration_id)
        limits = check.limits
        args = [
            *store.intake_args(write),
            write.event_id,
            check.now_ms,
            _limit(limits.chat_turns),
            _limit(limits.sender_turns),
            _limit(limits.tokens),
            check.day_end_ms,
            USAGE_KEEP_MS,
        ]
        if claim is not None:
            script = with_claim
            keys += [k.lease(conversation), k.binding(conversation)]
            args += store.claim_args(conversation, claim)[2:]
        # A storage error goes up as redis-py raised it (the pipeline makes it one error).
        reply = await store.pipe.evalsha(script, keys, args)
        status, due, busy, verdict = reply[:4]
        told = status == "full" and str(verdict) == "1"
        limit, _, retry = ("", "", "") if status == "full" else str(verdict).partition(":")
        return BudgetIntakeResult(
            status=status,
            due_ms=int(due),
            busy=bool(int(busy)),
            limit=limit,
            retry_ms=int(retry or 0),
            claimed=reply[4] if len(reply) > 4 else None,
            told=told,
        )

    async def spend(
        self,
        *,
        integration_id: str,
        conversation: str,
        tokens: int,
        day: str,
        day_end_ms: int,
        now_ms: int,
    ) -> int:
        """Add a finished turn's tokens to its conversation's day; returns the day's total."""
        k = self.keys
        _, script, _ = self._scripts()
        total = await self.store.pipe.evalsha(
            script,
            [k.budget_tokens(conversation, day), k.usage_of(conversation, integration_id)],
            [tokens, day_end_ms, conversation, now_ms, USAGE_KEEP_MS],
        )
        return int(total)

    async def used(self, integration_id: str, *, since_ms: int, limit: int) -> list[str]:
        """The integration's conversations used since ``since_ms``, the most recent first, at
        most ``limit``: one command per shard, pipelined."""
        async with self.store.redis.pipeline(transaction=False) as pipe:
            for shard in range(self.keys.shards):
                pipe.zrevrangebyscore(
                    self.keys.usage(shard, integration_id),
                    "+inf",
                    since_ms,
                    start=0,
                    num=limit,
                    withscores=True,
                )
            rows = cast(list[list[tuple[str, float]]], await pipe.execute())
        found = sorted((-score, conv) for members in rows for conv, score in members)
        return [conv for _score, conv in found[:limit]]

    async def usage(
        self, conversations: list[str], *, now_ms: int, day: str
    ) -> list[ConversationUsage]:
        """Each conversation's turns in the last hour, and its tokens and refusals of ``day``."""
        if not conversations:
            return []
        k = self.keys
        async with self.store.redis.pipeline(transaction=False) as pipe:
            for conv in conversations:
                pipe.zcount(k.budget_turns(conv), f"({now_ms - HOUR_MS}", "+inf")
                pipe.get(k.budget_tokens(conv, day))
                pipe.get(k.budget_refused(conv, day))
            values = await pipe.execute()
        return [
            ConversationUsage(
                conv, int(values[3 * i]), int(values[3 * i + 1] or 0), int(values[3 * i + 2] or 0)
            )
            for i, conv in enumerate(conversations)
        ]


def _limit(value: int | None) -> int:
    return -1 if value is None else value
