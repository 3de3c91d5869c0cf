"""Intake: the entry point every adapter hands its Envelopes to (docs/architecture.md), and the ONE
order of the handlers of its chain (``gateway.intake.router``).

Order, and why: (1) drop what is not for us (bots, unmentioned group chatter) without touching
Redis, unless a group watch takes the chatter (gateway/triggers/watch_intake.py); (2) commands
and Stop/New clicks act at once, since they must not wait behind the running turn; (3) everything
else is deduplicated and appended to its conversation's burst in ONE Redis round trip, so that
when ``ingest`` returns the adapter may ack: the message is durable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import structlog

from gateway.clock import now_ms
from gateway.config.bases import IntegrationBase
from gateway.config.settings import Settings
from gateway.conversation import ConversationId
from gateway.edge.adapter import Adapter
from gateway.edge.ingest import IngestOutcome, IngestUnavailable, ShuttingDown
from gateway.envelope import Envelope
from gateway.intake.burst import Burst, Messages, Stored
from gateway.intake.buttons import Buttons
from gateway.intake.chat_commands import ChatCommands
from gateway.intake.controls import Controls
from gateway.intake.drops import FromBots, Unaddressed
from gateway.intake.replies import Replies
from gateway.intake.router import Incoming, Router
from gateway.intake.triggered import ExternalEvents, ScheduleFires
from gateway.logging import LOG_IDS
from gateway.policy.budgets import Budgets
from gateway.triggers import routines
from gateway.triggers.watch_intake import GroupWatch
from gateway.turns.claims import Claims
from gateway.turns.control import Control
from sessions import STORE_FAILED, SessionRecords, SessionStore

log = structlog.get_logger("gateway.intake")


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
        claims: Claims | None = None,
        budgets: Budgets | None = None,
        on_schedule_change: Callable[[], None] = lambda: None,
    ) -> None:
        self.store = store
        self.control = control or Control(store=store)
        self.records = records
        self._settings = settings  # read at each use: a reload replaces what it answers
        self.clock = clock
        self.accepting = True
        # What intake says in the chat itself (command answers, notices), sent in the background.
        self.replies = replies = Replies(adapters=adapters, spawn=spawn)
        # Limits per integration and route (gateway/policy/budgets.py), checked in the intake step
        # (the app hands in the one the runner spends on too).
        self.budgets = budgets or Budgets(store=store, clock=clock)
        # Group watch: unaddressed group messages that match a watch (gateway/triggers).
        self.watch = GroupWatch(store=store, settings=settings, wake=wake, spawn=spawn, clock=clock)
        # /schedule, /schedules, /unschedule and routines said in plain words (gateway/triggers).
        self.schedules = routines.ChatSchedules.of(
            store=store, settings=settings, adapters=adapters, reply=replies.text, spawn=spawn,
            clock=clock, on_change=on_schedule_change,
        )  # fmt: skip
        controls = Controls(
            store=store, records=records, control=self.control, settings=settings,
            replies=replies, clock=clock,
        )  # fmt: skip
        self.burst = burst = Burst(
            store=store, records=records, budgets=self.budgets, control=self.control,
            replies=replies, wake=wake, spawn=spawn, clock=clock, claims=claims,
        )  # fmt: skip
        commands = ChatCommands(
            store=store, records=records, controls=controls, schedules=self.schedules,
            replies=replies, clock=clock,
        )  # fmt: skip
        buttons = Buttons(
            store=store, controls=controls, schedules=self.schedules, burst=burst,
            replies=replies, clock=clock,
        )  # fmt: skip
        # The chain: each envelope is offered to these handlers in this order.
        self.router = Router(
            FromBots(),  # drop: sent by a bot
            self.watch,  # an unaddressed group message a watch takes
            Unaddressed(records=records, clock=clock),  # drop: other unaddressed chatter
            routines.RoutinePhrases(self.schedules),  # "every weekday at 9:30 ..." -> a card
            commands,  # /help /stop /new /remember /memory /forget /schedule ... /unknown
            buttons,  # card clicks: Stop, New, routine Confirm / Cancel, Confirm / Reject / Retry
            ExternalEvents(burst),  # a webhook's event, into its chat's burst
            ScheduleFires(burst),  # a schedule's fire, under the budgets
            Messages(burst),  # a chat message, into its burst under the cap and budgets
            Stored(burst),  # any other kind, as it comes
        )

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
        except STORE_FAILED as exc:  # one exception for them all
            raise IngestUnavailable(str(exc)) from exc
        finally:
            LOG_IDS.reset(token)
        return outcome

    async def _ingest(self, env: Envelope) -> IngestOutcome:
        integ = self.settings.integration(env.integration_id)
        if integ is None or not integ.enabled:
            return IngestOutcome("ignored", "unknown or disabled integration")
        return await self.router.route(Incoming(env, integ, self._conversation_of(integ, env)))

    def _conversation_of(self, integ: IntegrationBase, env: Envelope) -> str:
        # A click belongs to the conversation of the card it was on (which may differ from the
        # clicker's own under chat_sender scope); the card put it in the button value.
        if env.kind == "action" and env.action is not None:
            card = ConversationId.parse(str(env.action.value.get("conversation") or ""))
            if card is not None and card.integration_id == integ.id and card.chat_id == env.chat.id:
                return str(card)
        return self.conversation(integ, env)
