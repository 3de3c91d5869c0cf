"""The buttons handler: a click on a card (kind ``action``). Stop and New act at once (they must
not wait behind the running turn); a routine's Confirm / Cancel goes to the chat's schedules;
Confirm, Reject and Retry of a turn's card go into its burst ahead of what waits there (only the
asker or an approver answers a Confirm / Reject, issue 25); any other action is ignored."""

from __future__ import annotations

from collections.abc import Callable

import structlog

from gateway.edge.ingest import IngestOutcome
from gateway.intake.burst import Burst
from gateway.intake.controls import Controls
from gateway.intake.replies import Replies
from gateway.intake.router import Incoming
from gateway.progress import ACTION_CONFIRM, ACTION_NEW, ACTION_REJECT, ACTION_RETRY, ACTION_STOP
from gateway.triggers import routines
from gateway.turns import approval
from sessions import SessionStore

log = structlog.get_logger("gateway.intake")


class Buttons:
    def __init__(
        self,
        *,
        store: SessionStore,
        controls: Controls,
        schedules: routines.ChatSchedules,
        burst: Burst,
        replies: Replies,
        clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.controls = controls
        self.schedules = schedules
        self.burst = burst
        self.replies = replies
        self.clock = clock

    def matches(self, incoming: Incoming) -> bool:
        return incoming.env.kind == "action"

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        env, integ, conv = incoming.env, incoming.integ, incoming.conversation
        assert env.action is not None
        action_id = env.action.id
        if action_id in (ACTION_STOP, ACTION_NEW):
            if not await self.store.mark_seen(conv, env.event_id, self.clock()):
                return IngestOutcome("duplicate")
            log.info("button", action=action_id)
            clicked = str(env.action.value.get("turnId") or "") or None
            if action_id == ACTION_STOP:
                await self.controls.stop(conv, env, clicked)
            elif not await self.controls.current_card(conv, clicked):
                log.info("stale click: not the current card's", action=action_id)
                self.replies.text(env, "That card is no longer the current one; nothing changed.")
                return IngestOutcome("ignored", "a card that is no longer the current one")
            else:
                await self.controls.new(conv, env, announce=True)
            return IngestOutcome("handled", action_id)
        if action_id in routines.ACTIONS:
            return await self.schedules.click(integ, env, conv)
        if action_id not in (ACTION_CONFIRM, ACTION_REJECT, ACTION_RETRY):
            return IngestOutcome("ignored", f"unknown action {action_id!r}")
        if action_id != ACTION_RETRY:  # only the asker or an approver answers (issue 25)
            refused = await approval.refusal(self.store, integ, env, conv)
            if refused is not None:
                return refused
        return await self.burst.put(incoming, "urgent")
