"""Who may answer a Confirm / Reject, or press Retry on a failed card (issue 36: a Retry runs
as the original sender, so it follows the same rule): the sender of the interrupted (failed)
turn, and the sender ids a route's or the integration's ``approvers`` list (issue 25). Anyone
else in the chat, or anyone holding an action link, is refused with a short notice (a toast
where the platform has one) saying who may answer; the interrupt stays pending for them.

Checked twice: at intake (so the refused clicker gets the toast at once, and nothing queues),
and again when the click's turn takes the interrupt (a click that came in before the interrupt
was stored passed intake's check unseen)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import structlog

from gateway.config.bases import IntegrationBase
from gateway.edge.approvers import approvers_for
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Envelope, asker_of
from gateway.progress import ACTION_RETRY, Progress, Step
from gateway.turns.records import FailedTurn, PendingInterrupt
from sessions import Claim, SessionStore

log = structlog.get_logger("gateway.turns")

APPROVER_REFUSED = "not an approver"
TOOK_OVER = "Not confirmed: a newer message took over. Ask again to do it."


class Closing(Protocol):
    async def close(self, final: Progress) -> None: ...


async def supersede(
    store: SessionStore,
    conversation: str,
    session_id: str,
    renderer_for: Callable[[PendingInterrupt], Closing],
) -> None:
    """A Confirm / Reject still pending when a newer message starts a turn in the conversation:
    that message took over, so the question is dropped (a later click is told nothing waits)
    and its card says so, without its buttons, rather than asking forever."""
    pending = PendingInterrupt.load((await store.binding(conversation)).get("interrupt") or None)
    if pending is None:
        return
    await store.set_binding_fields(conversation, session_id, interrupt="")
    asked = Progress(
        turn_id=pending.turn_id,
        conversation=conversation,
        steps=tuple(Step(**s) for s in pending.steps),
        tools=tuple(Step(**t) for t in pending.tools),
        answer=pending.answer,
    )
    await renderer_for(pending).close(asked.finish("cancelled", TOOK_OVER))
    log.info("pending confirmation superseded by a newer message", turn_id=pending.turn_id)


def may_answer(integ: IntegrationBase, asked: Envelope, clicker_id: str) -> bool:
    asker = asker_of(asked)
    return (asker is not None and clicker_id == asker) or clicker_id in approvers_for(integ, asked)


def who_may_answer(integ: IntegrationBase, asked: Envelope) -> str:
    """The refusal's text: who may answer instead."""
    others = " or an approver of this chat" if approvers_for(integ, asked) else ""
    if asked.kind in ("schedule", "event"):
        asker = asker_of(asked)
        if asker is not None:
            return f"Only {asker}, who made this schedule,{others} can answer this."
        return "Only an approver of this chat (approvers in the config) can answer this."
    name = asked.sender.name or asked.sender.id
    return f"Only {name}, who asked,{others} can answer this."


async def refusal(
    store: SessionStore, integ: IntegrationBase, env: Envelope, conversation: str
) -> IngestOutcome | None:
    """Intake's check of a Confirm / Reject / Retry click: None lets it through (it is the
    clicker's to answer, or nothing is pending and the click's turn says so)."""
    retry = env.action is not None and env.action.id == ACTION_RETRY
    raw = (await store.binding(conversation)).get("failed" if retry else "interrupt")
    pending = (FailedTurn if retry else PendingInterrupt).load(raw or None)
    if pending is None or not clicked_on(env, pending.turn_id):
        return None
    asked = pending.envelope()
    if may_answer(integ, asked, env.sender.id):
        return None
    log.info("click by someone else refused", turn_id=pending.turn_id, retry=retry)
    return IngestOutcome("refused", APPROVER_REFUSED, notice=who_may_answer(integ, asked))


def clicked_on(action: Envelope, turn_id: str) -> bool:
    """Whether the click came from the card of ``turn_id`` (a button without a turn id, as
    older cards had, is taken as that card's)."""
    clicked = str(action.action.value.get("turnId") or "") if action.action else ""
    return not clicked or clicked == turn_id


async def not_theirs(
    store: SessionStore, claim: Claim, integ: IntegrationBase, action: Envelope, name: str
) -> str:
    """Who may answer, when the pending ``interrupt`` or ``failed`` turn this click is on is
    not the clicker's (intake refuses such clicks; one that came before the record was
    stored reaches this turn); "" when it is theirs, or nothing is pending."""
    raw = claim.turn.get(name)
    if raw is None:
        raw = (await store.binding(claim.conversation)).get(name)
    pending = (FailedTurn if name == "failed" else PendingInterrupt).load(raw or None)
    if pending is None or not clicked_on(action, pending.turn_id):
        return ""
    asked = pending.envelope()
    if may_answer(integ, asked, action.sender.id):
        return ""
    log.info("confirmation click by someone else refused", turn_id=pending.turn_id)
    return who_may_answer(integ, asked)
