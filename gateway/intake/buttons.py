"""The buttons handler: a click on a card (kind ``action``). Stop and New act at once (they must
not wait behind the running turn); a routine's Confirm / Cancel goes to the chat's schedules;
Confirm, Reject and Retry of a turn's card go into its burst ahead of what waits there (only the
asker or an approver answers a Confirm / Reject, issue 25); an option of the agent's question
(``answer_<n>``) becomes the clicker's next message, with the option as its text; any other
action is ignored."""

from __future__ import annotations

import json
from collections.abc import Callable

import structlog

from gateway.edge.ingest import IngestOutcome
from gateway.intake.burst import Burst
from gateway.intake.controls import Controls
from gateway.intake.replies import Replies
from gateway.intake.router import ChatSchedules, Incoming
from gateway.progress import (
    ACTION_ANSWER,
    ACTION_CONFIRM,
    ACTION_NEW,
    ACTION_REJECT,
    ACTION_RETRY,
    ACTION_ROUTINE_CANCEL,
    ACTION_ROUTINE_CONFIRM,
    ACTION_STOP,
    option_of,
)
from gateway.turns import approval
from sessions import SessionStore

log = structlog.get_logger("gateway.intake")


class Buttons:
    def __init__(
        self,
        *,
        store: SessionStore,
        controls: Controls,
        schedules: ChatSchedules,
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
        if action_id in (ACTION_ROUTINE_CONFIRM, ACTION_ROUTINE_CANCEL):
            return await self.schedules.click(integ, env, conv)
        if action_id.startswith(ACTION_ANSWER):
            return await self.answer(incoming)
        if action_id not in (ACTION_CONFIRM, ACTION_REJECT, ACTION_RETRY):
            return IngestOutcome("ignored", f"unknown action {action_id!r}")
        # Only the asker or an approver answers (issue 25), or retries (issue 36).
        refused = await approval.refusal(self.store, integ, env, conv)
        if refused is not None:
            return refused
        return await self.burst.put(incoming, "urgent")

    async def answer(self, incoming: Incoming) -> IngestOutcome:
        """An option of the question the current card asks (kept with the session when its
        turn ended): the clicker's message with that text, as if typed. A card that is no
        longer the current one, or an option it does not have, changes nothing."""
        env, conv = incoming.env, incoming.conversation
        assert env.action is not None
        clicked = str(env.action.value.get("turnId") or "")
        try:
            asked = json.loads((await self.store.binding(conv)).get("clarification") or "{}")
        except ValueError:
            asked = {}
        option = None
        if isinstance(asked, dict) and clicked and asked.get("turnId") == clicked:
            option = option_of(env.action.id, list(asked.get("options") or []))
        if option is None or not await self.controls.current_card(conv, clicked):
            log.info("stale click: an option of a question no longer open")
            self.replies.text(env, "That question is no longer open; type your answer instead.")
            return IngestOutcome("ignored", "an option of a question no longer open")
        said = env.model_copy(update={"kind": "message", "text": option, "action": None})
        log.info("option clicked: the next message", turn_id=clicked)
        return await self.burst.put(
            Incoming(said, incoming.integ, conv), incoming.busy_mode, cap=True, budgeted=True
        )
