"""Intake: the entry point every adapter hands its Envelopes to (DESIGN.md §1).

Order, and why: (1) drop what is not for us (bots, unmentioned group chatter) without touching
Redis, unless a group watch takes the chatter (gateway/triggers/watch_intake.py); (2) commands
and Stop/New clicks act at once, since they must not wait behind the running turn; (3) everything
else is deduplicated and appended to its conversation's burst in ONE Redis round trip, so that
when ``ingest`` returns the adapter may ack: the message is durable.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import structlog
from redis.exceptions import RedisError

from gateway.clock import now_ms
from gateway.config.bases import IntegrationBase
from gateway.config.settings import Settings
from gateway.conversation import ConversationId
from gateway.edge.adapter import Adapter, IngestOutcome, IngestUnavailable, ShuttingDown
from gateway.envelope import Envelope
from gateway.intake.commands import HELP_TEXT, parse_command
from gateway.logging import LOG_IDS
from gateway.policy.budgets import Budgets
from gateway.progress import (
    ACTION_CONFIRM,
    ACTION_NEW,
    ACTION_REJECT,
    ACTION_RETRY,
    ACTION_STOP,
    Progress,
)
from gateway.triggers import routines
from gateway.triggers.watch_intake import GroupWatch
from gateway.turns import approval
from gateway.turns.control import Control
from sessions import (
    BufferCap,
    ClaimRequest,
    IntakeResult,
    SessionRecords,
    SessionStore,
    StoreUnavailable,
)
from sessions.budgets import BudgetIntakeResult

log = structlog.get_logger("gateway.intake")

BUSY_TEXT = "I'm still working on your previous message. Wait for it to finish, or press Stop."
FULL_TEXT = (
    "Too many messages are waiting in this chat, so this one was not taken (nor any more until "
    "I catch up). Please send it again once I have answered."
)


__all__ = [
    "BUSY_TEXT",
    "FULL_TEXT",
    "Pipeline",
    "ShuttingDown",
]  # ShuttingDown: moved to gateway.edge.adapter


class _Ticket(Protocol):
    @property
    def request(self) -> ClaimRequest: ...


class RidingClaims(Protocol):
    """Claims that ride with a message's intake (``gateway.turns.flusher.Flusher``)."""

    def ticket(self, conversation: str) -> _Ticket | None: ...

    def settle(self, ticket: Any, reply: list[Any] | None) -> bool: ...


class Pipeline:
    def __init__(
        self,
        *,
        store: SessionStore,
        records: SessionRecords,
        settings: Callable[[], Settings],
        adapters: Mapping[str, Adapter],
        wake: Callable[[int, str], None],
        spawn: Callable[[Awaitable[Any]], None],
        control: Control | None = None,
        clock: Callable[[], int] = now_ms,
        claims: RidingClaims | None = None,
    ) -> None:
        self.store = store
        self.claims = claims  # claims sent with a message's intake (gateway.turns.flusher)
        self.control = control or Control(store=store)
        self.records = records
        self._settings = settings  # read at each use: a reload replaces what it answers
        self.adapters = adapters
        self.wake = wake
        self.spawn = spawn
        self.clock = clock
        self.accepting = True
        # Limits per integration and route (gateway/policy/budgets.py), checked in the intake step.
        self.budgets = Budgets(store=store, clock=clock)
        # Group watch: unaddressed group messages that match a watch (gateway/triggers).
        self.watch = GroupWatch(store=store, settings=settings, wake=wake, spawn=spawn, clock=clock)
        # /schedule, /schedules, /unschedule and routines said in plain words (gateway/triggers).
        self.schedules = routines.ChatSchedules.of(
            store=store, settings=settings, adapters=adapters, reply=self._reply, spawn=spawn,
            clock=clock,
        )  # fmt: skip

    @property
    def settings(self) -> Settings:
        return self._settings()

    def conversation(self, integ: IntegrationBase, envelope: Envelope) -> str:
        return ConversationId.text_of(integ, envelope)

    async def ingest(self, envelope: Envelope) -> IngestOutcome:
        if not self.accepting:
            raise ShuttingDown("shutting down")
        # The event's ids on every line logged below (gateway.logging.LOG_IDS).
        ids = (("integration_id", envelope.integration_id), ("event_id", envelope.event_id))
        token = LOG_IDS.set(ids)
        try:
            outcome = await self._ingest(envelope)
            log.debug("ingested", status=outcome.status, reason=outcome.reason)
        except IngestUnavailable:
            raise
        except (StoreUnavailable, RedisError, OSError) as exc:  # one exception for them all
            raise IngestUnavailable(str(exc)) from exc
        finally:
            LOG_IDS.reset(token)
        return outcome

    async def _ingest(self, env: Envelope) -> IngestOutcome:
        integ = self.settings.integration(env.integration_id)
        if integ is None or not integ.enabled:
            return IngestOutcome("ignored", "unknown or disabled integration")
        if env.sender.is_bot:
            return IngestOutcome("ignored", "sent by a bot")
        conv = self._conversation_of(integ, env)
        if env.kind in ("message", "command"):
            if (
                env.chat.type == "group"
                and integ.group_reply_strategy == "mention_only"
                and not env.bot_mentioned
            ):
                if env.kind == "message":
                    watched = await self.watch.offer(integ, env)
                    if watched is not None:
                        return watched
                if integ.history_context_limit and env.text.strip():
                    # Context for the next turn in this chat (historyContextLimit).
                    await self.records.add_group_message(
                        integ.id,
                        env.chat.id,
                        {
                            "senderId": env.sender.id,
                            "name": env.sender.name or env.sender.id,
                            "text": env.text,
                            "at": self.clock(),
                        },
                        limit=integ.history_context_limit,
                        window_ms=integ.history_context_window_seconds * 1000,
                    )
                return IngestOutcome("ignored", "group message without a mention")
            command = parse_command(env.text)
            if command is None and env.kind == "message":
                routine = await self.schedules.offer(integ, env, conv)  # None: not a routine
                if routine is not None:
                    return routine
            if command is not None:
                if not await self.store.mark_seen(conv, env.event_id, self.clock()):
                    return IngestOutcome("duplicate")
                log.info("command", command=command.name)
                if command.name == "help":
                    self._reply(env, HELP_TEXT)
                    return IngestOutcome("handled", "help")
                if command.name == "stop":
                    await self._stop(conv, env, None)
                    return IngestOutcome("handled", "stop")
                if command.name in ("remember", "memory", "forget"):
                    await self._memory_command(integ, env, command.name, command.rest)
                    return IngestOutcome("handled", command.name)
                if command.name in routines.COMMANDS:
                    await self.schedules.command(integ, env, command.name, command.rest)
                    return IngestOutcome("handled", command.name)
                await self._new(conv, env, announce=not command.rest)
                if not command.rest:
                    return IngestOutcome("handled", "new")
                env = env.model_copy(
                    update={
                        "text": command.rest,
                        "kind": "message",
                        "event_id": env.event_id + "#new",
                    }
                )
        # An external event is never turned away as busy (it has no one to tell): it waits.
        busy_reject = integ.busy_policy == "reject" and env.kind != "event"
        mode = "reject" if busy_reject else "collect"
        if env.kind == "action":
            assert env.action is not None
            action_id = env.action.id
            if action_id in (ACTION_STOP, ACTION_NEW):
                if not await self.store.mark_seen(conv, env.event_id, self.clock()):
                    return IngestOutcome("duplicate")
                log.info("button", action=action_id)
                clicked = str(env.action.value.get("turnId") or "") or None
                if action_id == ACTION_STOP:
                    await self._stop(conv, env, clicked)
                elif not await self._current_card(conv, clicked):
                    log.info("stale click: not the current card's", action=action_id)
                    self._reply(env, "That card is no longer the current one; nothing changed.")
                    return IngestOutcome("ignored", "a card that is no longer the current one")
                else:
                    await self._new(conv, env, announce=True)
                return IngestOutcome("handled", action_id)
            if action_id in routines.ACTIONS:
                return await self.schedules.click(integ, env, conv)
            if action_id not in (ACTION_CONFIRM, ACTION_REJECT, ACTION_RETRY):
                return IngestOutcome("ignored", f"unknown action {action_id!r}")
            if action_id != ACTION_RETRY:  # only the asker or an approver answers (issue 25)
                refused = await approval.refusal(self.store, integ, env, conv)
                if refused is not None:
                    return refused
            mode = "urgent"
        stored: dict[str, Any] = {
            "envelope_json": env.to_json(store_raw=integ.store_raw),
            "now_ms": self.clock(),
            "window_ms": int(integ.summary_window_seconds * 1000),
            "max_window_ms": int(integ.max_window_seconds * 1000),
            "mode": mode,
        }
        if env.kind == "message":
            # A message is refused past its conversation's buffer cap (issue 25), in the
            # intake step itself; a click or an event is what lets a turn go on: never.
            stored["cap"] = BufferCap(integ.max_buffered_messages, integ.max_buffered_bytes)
        claimed = False
        # A message or a schedule's fire may start a turn: under the budgets, same step.
        if env.kind in ("message", "schedule"):
            result: IntakeResult | BudgetIntakeResult
            # Due at once (window 0): its turn is claimed by the same call when there is room.
            claims = self.claims
            ticket = claims.ticket(conv) if claims and not stored["window_ms"] else None
            if claims is None or ticket is None:
                result = await self.budgets.intake(integ, env, conv, **stored)
            else:
                reply = None
                try:
                    result = await self.budgets.intake(
                        integ, env, conv, claim=ticket.request, **stored
                    )
                    reply = result.claimed
                finally:
                    claimed = claims.settle(ticket, reply)
            if result.status in ("refused", "again"):
                return self.budgets.refused(
                    integ, env, conv, result, notice=self._notice, spawn=self.spawn,
                    records=self.records,
                )  # fmt: skip
        else:
            result = await self.store.intake(conversation=conv, event_id=env.event_id, **stored)
        if result.status == "dup":
            return IngestOutcome("duplicate")
        if result.status == "full":
            # Refused, explicitly (its dedup record kept: a redelivery is a duplicate); the
            # chat is told once per full burst, and the platform gets its ack (no resending).
            log.warning("conversation buffer full: message refused", told=result.told)
            if result.told:
                self._reply(env, FULL_TEXT)
            return IngestOutcome("refused", "too many messages waiting")
        if result.status == "busy":
            self._reply(env, BUSY_TEXT)
            return IngestOutcome("busy")
        if not result.busy:
            if not claimed:  # else its turn runs here already (or its shard is looked at)
                self.wake(result.due_ms, conv)
        elif integ.busy_policy == "steer":
            # Stored first (durable); the replica running the turn hands it to the agent and
            # only then drops it from the burst. Missed or failed, it becomes the next turn.
            await self.control.steer(conv)
        return IngestOutcome("queued")

    def _conversation_of(self, integ: IntegrationBase, env: Envelope) -> str:
        # A click belongs to the conversation of the card it was on (which may differ from the
        # clicker's own under chat_sender scope); the card put it in the button value.
        if env.kind == "action" and env.action is not None:
            card = ConversationId.parse(str(env.action.value.get("conversation") or ""))
            if card is not None and card.integration_id == integ.id and card.chat_id == env.chat.id:
                return str(card)
        return self.conversation(integ, env)

    async def _current_card(self, conv: str, clicked: str | None) -> bool:
        """Whether a click came from the session's current card (a card of an earlier session,
        or an earlier card of this one, must not end the session going on now)."""
        current = (await self.store.binding(conv)).get("cardTurn")
        return not (clicked and current and clicked != current)

    def _notice(self, env: Envelope, conversation: str, headline: str, text: str) -> None:
        """A short card that is no turn's (a budget refusal): final at once, no buttons."""
        adapter = self.adapters.get(env.integration_id)
        if adapter is not None:
            key = f"{env.event_id}#notice"
            card = Progress(
                turn_id=hashlib.sha256(key.encode()).hexdigest()[:32],
                conversation=conversation,
                status="ended",
                headline=headline,
                answer=text,
                actions=(),
                version=1,
            )
            self.spawn(adapter.send_card(env, card, idempotency_key=key))

    def _reply(self, env: Envelope, text: str) -> None:
        adapter = self.adapters.get(env.integration_id)
        if adapter is not None:
            self.spawn(adapter.send_text(env, text, idempotency_key=f"{env.event_id}#reply"))

    async def _stop(self, conv: str, env: Envelope, turn_id: str | None) -> None:
        turn = await self.store.turn(conv)
        running = turn.get("id")
        # A Retry or a Confirm runs in an earlier turn's card, whose buttons carry that turn's
        # id ("shows"): their Stop stops the run going on in it.
        if not running or (turn_id and turn_id not in (running, turn.get("shows"))):
            if env.kind != "action":
                self._reply(env, "Nothing is running right now.")
            return
        lease_ms = int(self.settings.runtime.lease_seconds * 1000)
        await self.store.request_cancel(conv, running, ttl_ms=3 * lease_ms)
        await self.control.cancel(conv, running)
        await asyncio.sleep(0)

    async def _memory_command(
        self, integ: IntegrationBase, env: Envelope, name: str, rest: str
    ) -> None:
        """Group memory: rules and facts a chat keeps across sessions (offered as memory.*)."""
        chat = env.chat.id
        if name == "memory":
            items = await self.records.memory(integ.id, chat)
            listing = "\n".join(f"{i}. {item['text']}" for i, item in enumerate(items, 1))
            self._reply(env, f"This chat's memory:\n{listing}" if items else "Memory is empty.")
            return
        if integ.memory_admins and env.sender.id not in integ.memory_admins:
            self._reply(env, "Only this chat's memory admins can change its memory.")
            return
        if name == "remember":
            if not rest:
                self._reply(env, "Usage: /remember <text>")
                return
            count = await self.records.remember(
                integ.id, chat, {"text": rest, "by": env.sender.id, "at": self.clock()}
            )
            self._reply(env, f"Remembered (item {count}).")
            return
        if not rest.isdigit() or int(rest) < 1:
            self._reply(env, "Usage: /forget <n> (see /memory for the numbers)")
            return
        removed = await self.records.forget(integ.id, chat, int(rest))
        self._reply(env, f"Forgot: {removed['text']}" if removed else f"There is no item {rest}.")

    async def _new(self, conv: str, env: Envelope, *, announce: bool) -> None:
        old = await self.store.end_session(conv)
        if old:
            await self.store.audit(
                {
                    "event": "session.end",
                    "session": old.get("sessionId", ""),
                    "conversation": conv,
                    "at": self.clock(),
                    "by": "user",
                }
            )
        if announce:
            self._reply(env, "Started a new conversation. What can I do for you?")
