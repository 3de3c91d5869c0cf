"""Into the burst: an envelope is deduplicated and appended to its conversation's burst in ONE
Redis round trip (a message or a schedule's fire under the budgets in that same step, with the
turn's claim riding along when it is due at once), so that when intake returns the adapter may
ack: it is durable. Then: wake the flusher, steer the running turn, or tell the chat it is busy
or full. ``Messages`` is the handler of a chat message (the last of the chain for it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

import structlog

from gateway.edge.ingest import IngestOutcome
from gateway.intake.refusals import Refusals
from gateway.intake.replies import Replies
from gateway.intake.router import Incoming
from gateway.policy.budgets import Budgets
from gateway.turns.claims import RidingClaims
from gateway.turns.control import Control
from sessions import BufferCap, BurstWrite, IntakeResult, SessionStore
from sessions.budgets import BudgetIntakeResult
from sessions.results import NO_CAP

log = structlog.get_logger("gateway.intake")

BUSY_TEXT = "I'm still working on your previous message. Wait for it to finish, or press Stop."
FULL_TEXT = (
    "Too many messages are waiting in this chat, so this one was not taken (nor any more until "
    "I catch up). Please send it again once I have answered."
)

Mode = Literal["collect", "reject", "urgent"]


def burst_write(incoming: Incoming, mode: Mode, *, now_ms: int, cap: bool = False) -> BurstWrite:
    """``incoming``'s write into its burst, under its integration's windows (``cap``: and its
    buffer cap, issue 25)."""
    integ, env = incoming.integ, incoming.env
    return BurstWrite(
        conversation=incoming.conversation,
        event_id=env.event_id,
        envelope_json=env.to_json(store_raw=integ.store_raw),
        now_ms=now_ms,
        window_ms=int(integ.summary_window_seconds * 1000),
        max_window_ms=int(integ.max_window_seconds * 1000),
        mode=mode,
        cap=BufferCap(integ.max_buffered_messages, integ.max_buffered_bytes) if cap else NO_CAP,
    )


class Burst:
    def __init__(
        self,
        *,
        store: SessionStore,
        budgets: Budgets,
        refusals: Refusals,
        control: Control,
        replies: Replies,
        wake: Callable[[int, str], None],
        clock: Callable[[], int],
        rides: RidingClaims | None = None,
    ) -> None:
        self.store = store
        self.budgets = budgets
        self.refusals = refusals
        self.control = control
        self.replies = replies
        self.wake = wake
        self.clock = clock
        self.rides = rides  # claims sent with a message's intake (gateway.turns.claims)

    async def put(
        self, incoming: Incoming, mode: Mode, *, cap: bool = False, budgeted: bool = False
    ) -> IngestOutcome:
        """Store ``incoming`` in its burst; ``cap``: refused past the conversation's buffer cap
        (issue 25); ``budgeted``: under the integration's and route's limits (it may start a
        turn)."""
        env, integ, conv = incoming.env, incoming.integ, incoming.conversation
        write = burst_write(incoming, mode, now_ms=self.clock(), cap=cap)
        claimed = False
        result: IntakeResult | BudgetIntakeResult
        if budgeted:
            rides = self.rides
            if rides is not None and not write.window_ms:
                # Due at once (window 0): its turn is claimed by the same call when there is room.
                with rides.ride(conv) as ride:
                    result = await self.budgets.intake(integ, env, write, ride.request)
                    ride.reply = result.claimed
                claimed = ride.tried
            else:
                result = await self.budgets.intake(integ, env, write)
            if result.status in ("refused", "again"):
                return self.refusals.refuse(incoming, result)
        else:
            result = await self.store.intake(write)
        if result.status == "dup":
            return IngestOutcome("duplicate")
        if result.status == "full":
            # Refused, explicitly (its dedup record kept: a redelivery is a duplicate); the
            # chat is told once per full burst, and the platform gets its ack (no resending).
            log.warning("conversation buffer full: message refused", told=result.told)
            if result.told:
                self.replies.text(env, FULL_TEXT)
            return IngestOutcome("refused", "too many messages waiting")
        if result.status == "busy":
            self.replies.text(env, BUSY_TEXT)
            return IngestOutcome("busy")
        if not result.busy:
            if not claimed:  # else its turn runs here already (or its shard is looked at)
                self.wake(result.due_ms, conv)
        elif integ.busy_policy == "steer":
            # Stored first (durable); the replica running the turn hands it to the agent and
            # only then drops it from the burst. Missed or failed, it becomes the next turn.
            await self.control.steer(conv)
        return IngestOutcome("queued")


class Messages:
    """A chat message: refused past its conversation's buffer cap, in the intake step itself
    (a click or an event is what lets a turn go on: never), and under the budgets."""

    def __init__(self, burst: Burst) -> None:
        self.burst = burst

    def matches(self, incoming: Incoming) -> bool:
        return incoming.env.kind == "message"

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        return await self.burst.put(incoming, incoming.busy_mode, cap=True, budgeted=True)


class Stored:
    """Any other kind handed in (a ``command`` envelope that is no command, a ``watch``): into
    its burst as it comes."""

    def __init__(self, burst: Burst) -> None:
        self.burst = burst

    def matches(self, incoming: Incoming) -> bool:
        return True

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        return await self.burst.put(incoming, incoming.busy_mode)
