"""The kinds of turn: a message (the burst's messages; an option of the agent's question
clicked is one), a Retry (a failed turn's input again, in its card), a Confirm / Reject (the
interrupted run resumed, in its card) and giving up (a turn whose replicas crashed too often).
They share one start: a Progress, a renderer that owns the card, the first card on screen."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import asdict, replace
from typing import TypeVar

import structlog

from gateway.config.bases import IntegrationBase
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.edge.long_answer import LIVE_BYTES, head
from gateway.envelope import Envelope
from gateway.events import Decision, StepEvent
from gateway.experts.base import Expert
from gateway.progress import Progress, Step
from gateway.turns.approval import clicked_on, not_theirs, supersede
from gateway.turns.binding import Binder, Session, threads_of
from gateway.turns.context import ContextBuilder, TurnRequest, merge_input
from gateway.turns.drive import ActiveRun, Driver, Outcome
from gateway.turns.event_cards import EventCards
from gateway.turns.records import FailedTurn, PendingInterrupt, outcome_of
from gateway.turns.render import CardRenderer, RenderObserver
from gateway.turns.result import TurnResult
from gateway.turns.snapshot import SessionSnapshot
from sessions import Claim, SessionStore

log = structlog.get_logger("gateway.turns")
R = TypeVar("R", FailedTurn, PendingInterrupt)


class TurnKinds:
    def __init__(
        self,
        *,
        store: SessionStore,
        binder: Binder,
        contexts: ContextBuilder,
        driver: Driver,
        expert_for: Callable[[SessionSnapshot], Expert],
        settings: Callable[[], Settings],
        active: Callable[[str], ActiveRun | None],
        clock: Callable[[], int],
        event_cards: EventCards | None = None,
        observer: RenderObserver | None = None,
    ) -> None:
        self.store = store
        self.observer = observer
        self.event_cards = event_cards
        self.binder = binder
        self.contexts = contexts
        self.driver = driver
        self.expert_for = expert_for
        self.settings = settings
        self.active = active
        self.clock = clock

    async def run(
        self, claim: Claim, integ: IntegrationBase, adapter: Adapter, items: list[Envelope]
    ) -> TurnResult:
        last = items[-1]
        if last.kind == "action" and last.action is not None:
            if last.action.id == "retry":
                return await self.retry(claim, integ, adapter, last)
            return await self.resume(claim, integ, adapter, last)
        return await self.message(claim, integ, adapter, items)

    # --- the shared start ----------------------------------------------------------------
    def _renderer(
        self,
        claim: Claim,
        adapter: Adapter,
        reply_to: Envelope,
        interval_ms: int,
        card: str | None,
        key: str,
    ) -> CardRenderer:
        async def remember(handle: str) -> None:
            # A replica that resumes this turn updates the same card (where sending it again
            # would not find it anyway).
            if adapter.card_handle(key) != handle:
                await self.store.set_turn_fields(
                    conversation=claim.conversation, owner=claim.owner, card=handle
                )

        return CardRenderer(
            adapter=adapter,
            reply_to=reply_to,
            interval_ms=interval_ms,
            idempotency_key=key,
            handle=claim.turn.get("card") or card,
            on_handle=remember,
            observer=self.observer,
            clock=self.clock,
        )

    async def _start(
        self,
        claim: Claim,
        adapter: Adapter,
        reply_to: Envelope,
        session: Session,
        progress: Progress,
        *,
        card: str | None = None,
        borrowed: bool = False,
        defer: bool = False,
    ) -> tuple[CardRenderer, Awaitable[None] | None]:
        """The renderer of the turn's card and its first showing, already on its way (None with
        ``defer``: the driver shows it once the run has had its first go, so a run that ends at
        once sends its final state as its one card). A card whose buttons carry another turn id
        than the claim's (a Retry or a Confirm shown in an earlier turn's card) says so on the
        turn, so its Stop button reaches this run."""
        if progress.turn_id != claim.turn_id:
            await self.store.set_turn_fields(
                conversation=claim.conversation, owner=claim.owner, shows=progress.turn_id
            )
        renderer = self._renderer(
            claim,
            adapter,
            reply_to,
            session.snapshot.options.update_interval_ms,
            card,
            progress.turn_id,
        )
        if defer and not borrowed:
            return renderer, None
        first = self._reuse(renderer, progress) if borrowed else renderer.start(progress)
        return renderer, asyncio.create_task(first)

    @staticmethod
    async def _reuse(renderer: CardRenderer, progress: Progress) -> None:
        """An external object's card from an earlier turn, updated in place; one that can no
        longer be (deleted, too old to edit) gives way to a new card."""
        try:
            await renderer.start(progress)
        except Exception as exc:
            log.warning("event card not updated; sending a new one", error=str(exc))
            renderer.handle = None
            await renderer.start(progress)

    async def _finish(
        self,
        claim: Claim,
        session: Session,
        outcome: Outcome,
        renderer: CardRenderer,
        text: str,
        reply_to: Envelope,
    ) -> None:
        """A failed turn can be retried and a waiting one resumed: what either needs is kept
        with the session."""
        final = outcome.progress
        if final.status == "done" and final.options:  # what its option buttons answer
            asked = {"turnId": final.turn_id, "options": list(final.options)}
            await self.store.set_binding_fields(
                claim.conversation, session.id, clarification=json.dumps(asked)
            )
        if final.status not in ("error", "waiting"):
            return
        record: dict[str, str | None] = {
            "turn_id": final.turn_id,
            "card": renderer.handle,
            "text": text,
            "reply_to": reply_to.to_json(),
        }
        if final.status == "error":
            failed = FailedTurn.model_validate(record)
            await self.store.set_binding_fields(
                claim.conversation, session.id, failed=failed.dump()
            )
        elif final.status == "waiting":
            interrupt = PendingInterrupt.model_validate(
                {
                    **record,
                    "snapshot": session.snapshot.data,
                    "prompt": final.prompt,
                    "data": outcome.asked,
                    "steps": [asdict(s) for s in final.steps],
                    "tools": [asdict(t) for t in final.tools],
                    # the answer so far, as the resumed card shows it (a huge one's head)
                    "answer": head(final.answer, LIVE_BYTES),
                }
            )
            await self.store.set_binding_fields(
                claim.conversation, session.id, interrupt=interrupt.dump()
            )

    # --- the kinds -----------------------------------------------------------------------
    async def message(
        self,
        claim: Claim,
        integ: IntegrationBase,
        adapter: Adapter,
        items: list[Envelope],
        *,
        failed: FailedTurn | None = None,
    ) -> TurnResult:
        last = items[-1]
        card_turn = failed.turn_id if failed else claim.turn_id  # the id its buttons carry
        session = await self.binder.bind(claim, integ, last, card=card_turn)
        structlog.contextvars.bind_contextvars(session_id=session.id)
        if failed is None:  # a question still waiting: this message took over (approval.py)
            await supersede(
                self.store,
                claim.conversation,
                session.id,
                lambda p: self._renderer(
                    claim, adapter, p.envelope(), integ.update_interval_ms, p.card, p.turn_id
                ),
            )
        expert = self.expert_for(session.snapshot)
        progress = Progress(turn_id=card_turn, conversation=claim.conversation)
        card, borrowed = failed.card if failed else None, False
        if card is None and not claim.turn.get("card") and self.event_cards is not None:
            card = await self.event_cards.live(claim.conversation, last)  # its object's card
            borrowed = card is not None
        renderer, first_card = await self._start(
            claim, adapter, last, session, progress, card=card, borrowed=borrowed, defer=True
        )
        since = None
        if integ.history_context_limit and last.chat.type == "group":
            since = self.clock() - integ.history_context_window_seconds * 1000
        request = TurnRequest(
            turn_id=claim.turn_id,
            text=merge_input(items),
            reply_to=last,
            sender=last,
            items=tuple(items),
            group_since_ms=since,
            history_limit=integ.history_context_limit,
            max_attachments=integ.max_attachments_per_turn,
            max_attachment_bytes=integ.max_attachment_bytes_per_turn,
        )
        turn = await self.contexts.build(request, session, adapter, expert, first_card=first_card)
        for i, notice in enumerate(turn.notices):  # on the card, as a step that did not succeed
            progress = progress.apply(StepEvent(f"gateway:notice:{i}", notice, "failed"))
        outcome = await self.driver.drive(
            claim.conversation,
            self.active(claim.conversation),
            expert.run(turn),
            progress,
            renderer,
            expert,
            turn,
            session.snapshot.declared,
            settle=lambda done: self._finish(claim, session, done, renderer, turn.text, last),
        )
        if self.event_cards is not None:
            handle = renderer.handle
            kept = handle if handle and adapter.reuses_card(handle) else None
            await self.event_cards.settle(claim.conversation, last, kept)
        log.info("turn finished", status=outcome.progress.status, renders=renderer.renders)
        return TurnResult(
            session.id,
            turn.variables,
            outcome_of(outcome.progress.status),
            session.snapshot.xpert_id,
            renderer.first_shown_ms,
            turn=turn,
            final=outcome.progress,
            snapshot=session.snapshot,
        )

    async def retry(
        self, claim: Claim, integ: IntegrationBase, adapter: Adapter, action: Envelope
    ) -> TurnResult:
        """Retry: the failed turn's input again, in its card, as its sender (issue 36)."""
        refused = await not_theirs(self.store, claim, integ, action, "failed")
        if refused:
            await adapter.send_text(action, refused, idempotency_key=claim.turn_id)
            return TurnResult("", {}, said=refused)
        failed = await self._take(claim, "failed", FailedTurn.load)
        if failed is None or not clicked_on(action, failed.turn_id):
            log.info("retry click on a turn that is no longer failed")
            said = "There is nothing to retry."
            await adapter.send_text(action, said, idempotency_key=claim.turn_id)
            return TurnResult("", {}, said=said)
        original = failed.envelope().model_copy(update={"text": failed.text})
        result = await self.message(claim, integ, adapter, [original], failed=failed)
        return replace(result, sender_id=original.sender.id, approver=action.sender.id)

    async def resume(
        self, claim: Claim, integ: IntegrationBase, adapter: Adapter, action: Envelope
    ) -> TurnResult:
        """Confirm / Reject: resume the interrupted run in its own card, which keeps what it
        showed before the question."""
        assert action.action is not None
        refused = await not_theirs(self.store, claim, integ, action, "interrupt")
        if refused:
            await adapter.send_text(action, refused, idempotency_key=claim.turn_id)
            return TurnResult("", {}, said=refused)
        interrupt = await self._take(claim, "interrupt", PendingInterrupt.load)
        binding = await self.store.binding(claim.conversation)
        session_id = claim.turn.get("session") or binding.get("sessionId", "")
        if interrupt is None or not clicked_on(action, interrupt.turn_id):
            log.info("click on a confirmation that is no longer pending")
            said = "Nothing is waiting for a confirmation."
            await adapter.send_text(action, said, idempotency_key=claim.turn_id)
            return TurnResult(session_id, {}, said=said)
        snapshot = SessionSnapshot.of(interrupt.snapshot)
        session = Session(
            id=session_id,
            snapshot=snapshot,
            thread_id=binding.get("threadId") or None,
            new=False,
            threads=threads_of(binding),
        )
        expert = self.expert_for(snapshot)
        reply_to = interrupt.envelope()
        decision: Decision = "confirm" if action.action.id == "confirm" else "reject"
        progress = Progress(
            turn_id=interrupt.turn_id,
            conversation=claim.conversation,
            steps=tuple(Step(**s) for s in interrupt.steps),
            tools=tuple(Step(**t) for t in interrupt.tools),
            answer=interrupt.answer,
        ).resumed(decision)
        renderer, first_card = await self._start(
            claim, adapter, reply_to, session, progress, card=interrupt.card
        )
        # The resumed run is the asker's turn still (its context, sys.user_*), not the clicker's.
        request = TurnRequest(
            turn_id=interrupt.turn_id, text=interrupt.text, reply_to=reply_to, sender=reply_to
        )
        turn = await self.contexts.build(request, session, adapter, expert, first_card=first_card)
        asked_before = {"text": interrupt.text, "answer": interrupt.answer, **interrupt.data}
        outcome = await self.driver.drive(
            claim.conversation,
            self.active(claim.conversation),
            expert.resume(turn, decision, asked_before),
            progress,
            renderer,
            expert,
            turn,
            snapshot.declared,
            settle=lambda done: self._finish(
                claim, session, done, renderer, interrupt.text, reply_to
            ),
        )
        log.info("resumed turn finished", decision=decision, status=outcome.progress.status)
        return TurnResult(
            session_id,
            turn.variables,
            outcome_of(outcome.progress.status),
            snapshot.xpert_id,
            renderer.first_shown_ms,
            turn=turn,
            final=outcome.progress,
            snapshot=snapshot,
            sender_id=reply_to.sender.id,
            approver=action.sender.id,
        )

    async def give_up(
        self, claim: Claim, integ: IntegrationBase, adapter: Adapter, last: Envelope
    ) -> None:
        log.error("turn failed too often; giving up", attempts=claim.attempts)
        final = Progress(turn_id=claim.turn_id, conversation=claim.conversation).finish(
            "error", "This message could not be processed after several attempts."
        )
        renderer = self._renderer(
            claim, adapter, last, integ.update_interval_ms, None, claim.turn_id
        )
        await renderer.close(final)

    async def _take(
        self, claim: Claim, name: str, load: Callable[[str | None], R | None]
    ) -> R | None:
        """The session's pending record, moved onto the turn (so a replica resuming this turn
        finds it, and a second click finds nothing)."""
        raw = claim.turn.get(name)
        if raw is None:
            binding = await self.store.binding(claim.conversation)
            raw = binding.get(name)
            if raw:
                session = claim.turn.get("session") or binding.get("sessionId", "")
                await self.store.set_turn_fields(
                    conversation=claim.conversation,
                    owner=claim.owner,
                    session=session,
                    **{name: raw},
                )
                await self.store.set_binding_fields(claim.conversation, session, **{name: ""})
        return load(raw or None)
