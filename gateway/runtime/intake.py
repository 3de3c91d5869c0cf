"""Intake as this replica wires it: the parts of its chain, each built with what it needs, and
the ONE order in which an envelope is offered to them (``gateway.intake.pipeline`` says why).
The chain's handlers come from intake and from the triggers (a group watch, routines said in
plain words); the claim that rides with a message's intake is the runner's and the flusher's
(``gateway.turns.claims.RidingClaims``), handed in built."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gateway.clock import now_ms
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.intake.burst import Burst, Messages, Stored
from gateway.intake.buttons import Buttons
from gateway.intake.chat_commands import ChatCommands
from gateway.intake.controls import Controls
from gateway.intake.drops import FromBots, Unaddressed
from gateway.intake.pipeline import Pipeline
from gateway.intake.refusals import BudgetObserver, Refusals
from gateway.intake.replies import Replies
from gateway.intake.router import Router
from gateway.intake.triggered import ExternalEvents, ScheduleFires
from gateway.policy.budgets import Budgets
from gateway.triggers.routines import ChatSchedules, RoutinePhrases
from gateway.triggers.watch_intake import GroupWatch
from gateway.turns.claims import RidingClaims
from gateway.turns.control import Control
from sessions import SessionRecords, SessionStore


@dataclass(frozen=True, slots=True)
class Intake:
    """The pipeline adapters hand their envelopes to, and the parts others reach: the budgets
    (the runner spends tokens on them), the chat's schedules (their book), the group watch."""

    pipeline: Pipeline
    budgets: Budgets
    replies: Replies
    refusals: Refusals
    burst: Burst
    schedules: ChatSchedules
    watch: GroupWatch


def build_intake(
    *,
    store: SessionStore,
    records: SessionRecords,
    settings: Callable[[], Settings],
    adapters: Mapping[str, Adapter],
    wake: Callable[[int, str], None],
    spawn: Callable[[Awaitable[Any]], None],
    clock: Callable[[], int] = now_ms,
    control: Control | None = None,
    budgets: Budgets | None = None,
    rides: RidingClaims | None = None,
    observer: BudgetObserver | None = None,
    on_schedule_change: Callable[[], None] = lambda: None,
) -> Intake:
    """``wake``: the flusher, told of a stored burst's due time; ``rides``: the claims that ride
    with a message due at once (None: every burst waits for the flusher); ``observer``: told
    of budget refusals (/metrics)."""
    control = control or Control(store=store)
    # What intake says in the chat itself (command answers, notices), sent in the background.
    replies = Replies(adapters=adapters, spawn=spawn)
    # Limits per integration and route (gateway/policy/budgets.py), checked in the intake step.
    budgets = budgets or Budgets(store=store, clock=clock)
    refusals = Refusals(
        budgets=budgets, replies=replies, records=records, spawn=spawn, observer=observer,
        wall=clock,
    )  # fmt: skip
    # Group watch: unaddressed group messages that match a watch (gateway/triggers).
    watch = GroupWatch(store=store, settings=settings, wake=wake, spawn=spawn, clock=clock)
    # /schedule, /schedules, /unschedule and routines said in plain words (gateway/triggers).
    schedules = ChatSchedules.of(
        store=store, settings=settings, adapters=adapters, reply=replies.text, spawn=spawn,
        clock=clock, on_change=on_schedule_change,
    )  # fmt: skip
    controls = Controls(
        store=store, records=records, control=control, settings=settings, replies=replies,
        clock=clock,
    )  # fmt: skip
    burst = Burst(
        store=store, budgets=budgets, refusals=refusals, control=control, replies=replies,
        wake=wake, clock=clock, rides=rides,
    )  # fmt: skip
    commands = ChatCommands(
        store=store, records=records, controls=controls, schedules=schedules, replies=replies,
        clock=clock,
    )  # fmt: skip
    buttons = Buttons(
        store=store, controls=controls, schedules=schedules, burst=burst, replies=replies,
        clock=clock,
    )  # fmt: skip
    # The chain: each envelope is offered to these handlers in this order.
    router = Router(
        FromBots(),  # drop: sent by a bot
        watch,  # an unaddressed group message a watch takes
        Unaddressed(records=records, clock=clock),  # drop: other unaddressed chatter
        RoutinePhrases(schedules),  # "every weekday at 9:30 ..." -> a card
        commands,  # /help /stop /new /remember /memory /forget /schedule ... /unknown
        buttons,  # card clicks: Stop, New, routine Confirm / Cancel, Confirm / Reject / Retry
        ExternalEvents(burst),  # a webhook's event, into its chat's burst
        ScheduleFires(burst),  # a schedule's fire, under the budgets
        Messages(burst),  # a chat message, into its burst under the cap and budgets
        Stored(burst),  # any other kind, as it comes
    )
    pipeline = Pipeline(settings=settings, router=router)
    return Intake(pipeline, budgets, replies, refusals, burst, schedules, watch)
