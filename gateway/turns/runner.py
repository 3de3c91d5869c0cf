"""The runner: runs the turns this replica claims (``gateway.turns.claims``) one at a time per
conversation (the lease, renewed while the turn runs), and stops, steers or hands back its runs.

Order of one turn: claim (claim.lua) -> bind the session -> first card -> the expert's events
through Progress into the renderer -> final card -> release the lease (finish.lua), which
reschedules whatever collected meanwhile; a turn already due then runs at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Protocol

import structlog

from gateway.clock import now_ms
from gateway.config.bases import IntegrationBase
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.edge.platform_api import log_failure
from gateway.envelope import Envelope
from gateway.events import StepEvent
from gateway.experts.base import Expert
from gateway.experts.registry import build_expert
from gateway.logging import LOG_IDS
from gateway.policy.budgets import Budgets
from gateway.turns.audit import TurnFacts, TurnTrace, audit_writes
from gateway.turns.binding import Binder
from gateway.turns.claims import Claims
from gateway.turns.context import ContextBuilder, merge_input
from gateway.turns.drive import ActiveRun, Driver, Handback
from gateway.turns.event_cards import EventCards
from gateway.turns.kinds import TurnKinds
from gateway.turns.lease import LeaseKeeper
from gateway.turns.records import TurnEnd, TurnObserver, TurnOutcome, TurnTimings
from gateway.turns.render import RenderObserver
from gateway.turns.result import TurnResult
from gateway.turns.snapshot import SessionSnapshot
from gateway.turns.steer import steer_files, steerable
from sessions import (
    Claim,
    EventCardStore,
    HistoryStore,
    PrincipalStore,
    SessionRecords,
    SessionStore,
)

log = structlog.get_logger("gateway.runner")


class _Observer(TurnObserver, RenderObserver, Protocol):
    """What the runner tells of its turns and their cards (``gateway.ops.metrics.Metrics``)."""


class Runner:
    def __init__(
        self,
        *,
        store: SessionStore,
        settings: Callable[[], Settings],
        adapters: Mapping[str, Adapter],
        replica_id: str,
        records: SessionRecords,
        claims: Claims,
        history: HistoryStore | None = None,
        clock: Callable[[], int] = now_ms,
        observer: _Observer | None = None,
        budgets: Budgets | None = None,
    ) -> None:
        self.store = store
        self.observer = observer
        self.records = records
        self.history = history
        self.principals = PrincipalStore(client=store.redis, keys=store.keys)  # runtime entries
        self._settings = settings  # read at each use: a reload replaces what it answers
        self.adapters = adapters
        self.replica_id = replica_id
        self.clock = clock
        self.claims = claims  # its claims, and the turns it runs (claims.active)
        self.active: dict[str, ActiveRun] = claims.active
        self.handing_back = False
        self._experts: dict[str, Expert] = {}
        self._background: set[asyncio.Task[None]] = set()
        # Tokens per day (gateway/policy/budgets.py): the app hands in the one intake checks.
        self.budgets = budgets or Budgets(store=store, clock=clock)
        if records.pipe is None:  # the turn's context reads and audit writes join its batches
            records.use_pipe(store.pipe)
        self.prefetch = claims.prefetch  # context reads sent with the claim
        self.kinds = TurnKinds(
            store=store,
            binder=Binder(store=store, records=records, settings=settings, clock=clock),
            contexts=ContextBuilder(records=records, prefetch=self.prefetch),
            driver=Driver(store=store, records=records, handing_back=lambda: self.handing_back),
            expert_for=self.expert_for,
            settings=settings,
            active=self.active.get,
            clock=clock,
            event_cards=EventCards(
                store=EventCardStore(client=store.redis, keys=store.keys), settings=settings
            ),
            observer=observer,
        )

    @property
    def settings(self) -> Settings:
        """The current settings (new sessions use them; running ones keep their snapshot)."""
        return self._settings()

    @property
    def lease_ms(self) -> int:
        return int(self.settings.runtime.lease_seconds * 1000)

    # --- claiming ----------------------------------------------------------------------------
    async def claim(self, conversation: str) -> ActiveRun | None:
        """Take the conversation's due turn (or a crashed replica's) and start it here; the one
        place a turn is claimed."""
        claim = await self.claims.claim(conversation)
        return self.start(claim) if claim is not None else None

    def start(self, claim: Claim) -> ActiveRun:
        run = ActiveRun(claim.conversation, claim.turn_id, claim.owner)
        self.active[claim.conversation] = run
        run.task = asyncio.create_task(self._serve(claim, run), name=f"turn:{claim.turn_id}")
        return run

    async def _serve(self, claim: Claim, run: ActiveRun) -> None:
        """Run the claimed turn, then every follow-up turn that is already due, then let go."""
        current: Claim | None = claim
        try:
            while current is not None:
                run.turn_id, run.owner, run.stop_reason = current.turn_id, current.owner, ""
                status, due = await self._run_claim(current)
                current = None
                if status == "more" and due <= self.clock() and not self.handing_back:
                    current = await self.claims.claim(claim.conversation)
        except Exception as exc:
            log_failure(log, "turn crashed", exc, conversation=claim.conversation)
        finally:
            if self.active.get(claim.conversation) is run:
                del self.active[claim.conversation]

    def busy(self) -> bool:
        """A steer is under way (the runs themselves: ``active``)."""
        return bool(self._background)

    # --- stop, steer, hand back ------------------------------------------------------------
    def stop_local(self, conversation: str, turn_id: str | None, reason: str = "stop") -> bool:
        """Cancel the running expert stream of ``conversation`` if it runs here."""
        run = self.active.get(conversation)
        if run is None or (turn_id and run.turn_id != turn_id) or run.consume is None:
            return False
        run.stop_reason = reason
        run.consume.cancel()
        return True

    def steer_local(self, conversation: str) -> bool:
        """busyPolicy steer: hand what collected in the burst to the run going on here."""
        run = self.active.get(conversation)
        if (
            run is None
            or run.steering
            or run.consume is None
            or run.expert is None
            or not run.expert.supports_steer
        ):
            return False
        run.steering = True
        task = asyncio.create_task(self._steer(run))
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return True

    async def _steer(self, run: ActiveRun) -> None:
        try:
            while run.consume is not None and run.expert and run.turn:
                take = steerable(run, await self.store.burst_items(run.conversation))
                if not take:
                    return
                text = merge_input(take)
                adapter = self.adapters.get(take[-1].integration_id)
                integ = self.settings.integration(take[-1].integration_id)
                attachments, notices = await steer_files(run, take, adapter, integ)
                shown = await run.expert.steer(run.turn, text, attachments)
                await self.store.burst_take(
                    conversation=run.conversation, owner=run.owner, count=len(take)
                )
                log.info("follow-up steered into the running turn", messages=len(take))
                if run.trace is not None:
                    run.trace.steered.extend(take)  # its senders and words in the audit record
                if run.inject is not None:
                    mark = uuid.uuid4().hex[:8]
                    title = "Follow-up: " + (text if len(text) <= 80 else text[:79] + "…")
                    run.inject(StepEvent(f"steer-{mark}", title, "done"))
                    for i, notice in enumerate(notices):
                        run.inject(StepEvent(f"steer-{mark}:notice:{i}", notice, "failed"))
                    for event in shown:
                        run.inject(event)
        except Exception as exc:
            # The messages stay in the burst and become the next turn (collect).
            log.warning("steer failed; the message will be the next turn", error=str(exc))
        finally:
            run.steering = False

    async def hand_back_all(self) -> None:
        """Shutdown: interrupt every local run and give its turn back for another replica."""
        self.handing_back = True
        self.claims.close()
        for run in list(self.active.values()):
            if run.consume is not None:
                run.stop_reason = "handback"
                run.consume.cancel()
        tasks = [r.task for r in self.active.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=10)

    async def close(self) -> None:
        """Release the experts' connections (at shutdown, after the runs ended)."""
        for expert in self._experts.values():
            with contextlib.suppress(Exception):
                await expert.close()
        self._experts.clear()

    def expert_for(self, snapshot: SessionSnapshot) -> Expert:
        """The expert of a session's snapshot (one instance per distinct snapshot)."""
        expert = self._experts.get(snapshot.digest)
        if expert is None:
            settings = self.settings
            expert = build_expert(
                snapshot.expert(settings),
                history=self.history,
                kinds=settings.expert_kinds,
                principals=self.principals,
                current=lambda expert_id: self.settings.expert(expert_id),
            )
            self._experts[snapshot.digest] = expert
        return expert

    # --- one turn --------------------------------------------------------------------------
    async def _run_claim(self, claim: Claim) -> tuple[str, int]:
        conv, owner = claim.conversation, claim.owner
        items = [Envelope.from_json(i) for i in claim.items]
        last = items[-1]
        mode = "finish"
        session_id = ""
        claimed = self.clock()
        outcome: TurnOutcome = "error"
        result: TurnResult | None = None
        error = ""
        trace = TurnTrace(clock=self.clock)  # the driver notes the run's steps and usage
        if (run := self.active.get(conv)) is not None:
            run.trace = trace
        # The turn's ids on every line logged below (gateway.logging.LOG_IDS).
        token = LOG_IDS.set(
            (
                ("turn_id", claim.turn_id),
                ("conversation", conv),
                ("integration_id", last.integration_id),
                ("event_id", last.event_id),
            )
        )
        try:
            integ = self.settings.integration(last.integration_id)
            adapter = self.adapters.get(last.integration_id)
            keeper = LeaseKeeper(
                store=self.store,
                clock=self.clock,
                lease_ms=self.lease_ms,
                conversation=conv,
                owner=owner,
                turn_id=claim.turn_id,
                stop=self.stop_local,
            )
            try:
                if integ is None or adapter is None:
                    log.error("turn for an integration that is no longer configured")
                elif claim.attempts > self.settings.runtime.max_turn_attempts:
                    outcome = "gave_up"
                    error = f"Gave up after {claim.attempts - 1} attempts"
                    await self.kinds.give_up(claim, integ, adapter, last)
                else:
                    if claim.resumed:
                        log.info("resuming a turn left by another replica", attempts=claim.attempts)
                    result = await self.kinds.run(claim, integ, adapter, items)
                    session_id, outcome = result.session_id, result.outcome
            except Handback:
                mode, outcome = "handback", "handback"
                log.info("turn handed back")
            except Exception as exc:  # a platform's refusal is one line with its code
                log_failure(log, "turn failed", exc)
                error = f"The turn failed: {type(exc).__name__}"
            finally:
                await keeper.stop()
            self.prefetch.drop(claim.turn_id)  # reads started with the claim, if unused
            timings = TurnTimings(
                received=min(int(i.received_at.timestamp() * 1000) for i in items),
                claimed=claimed,
                finished=self.clock(),
                first_card=result.first_card if result else None,
            )
            # Its audit record (queued ahead of the lease's release) and the tokens it used go
            # out together with the finish, in one write.
            writes: list[Coroutine[Any, Any, Any]] = []
            if integ is not None:
                facts = TurnFacts.of(
                    claim,
                    items,
                    result,
                    outcome=outcome,
                    timings=timings,
                    replica=self.replica_id,
                    error=error,
                )
                try:
                    writes = audit_writes(self.records, facts, trace, result, now_ms=self.clock())
                except Exception:
                    log.exception("audit record not written")
                if trace.input_tokens + trace.output_tokens > 0:
                    writes.append(self._spend(integ, conv, trace))
            timeout_ms = (integ.session_timeout_seconds if integ else 3600) * 1000
            finish = self.store.finish(
                conversation=conv,
                owner=owner,
                now_ms=self.clock(),
                mode=mode,  # type: ignore[arg-type]
                session_id=session_id,
                binding_ttl_ms=timeout_ms + 60_000,
            )
            # All started in this tick (one write): the first here, the others as tasks.
            later = [asyncio.ensure_future(w) for w in writes[1:]]
            finishing = asyncio.ensure_future(finish)
            for write in [*writes[:1], *later]:
                try:
                    await write
                except Exception as exc:
                    why = str(exc) or type(exc).__name__
                    log.warning("audit record not written", error=why)
            status, due = await finishing
            if result is not None and result.session_id and integ is not None:
                self.prefetch.remember(conv, integ.id, last.chat.id, result.session_id)
            if status == "lost":
                log.warning("lease was lost before the turn finished")
            self._observe(items, integ, outcome, result, timings)
            return status, due
        finally:
            LOG_IDS.reset(token)

    async def _spend(self, integ: IntegrationBase, conv: str, trace: TurnTrace) -> None:
        """The tokens the expert reported, counted against the chat's day
        (gateway/policy/budgets.py); a failure to count costs only the count (nothing to count: no
        call)."""
        try:
            await self.budgets.spend(integ, conv, trace.input_tokens + trace.output_tokens)
        except Exception as exc:
            log.warning("tokens not counted", error=str(exc) or type(exc).__name__)

    def _observe(
        self,
        items: list[Envelope],
        integ: IntegrationBase | None,
        outcome: TurnOutcome,
        result: TurnResult | None,
        timings: TurnTimings,
    ) -> None:
        """Tell the observer (metrics, audit) how the turn ended and its timings."""
        if self.observer is None:
            return
        last = items[-1]
        expert = (result.expert if result else "") or (integ.xpert_id if integ else "")
        self.observer.turn_ended(
            TurnEnd(last.integration_id, last.platform, expert, outcome, timings)
        )
