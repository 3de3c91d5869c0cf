"""Driving one run: the expert's events fold into Progress, which the card renderer shows; the
final state always lands, whatever ends the run (its end, an error, Stop, a hand-back)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from gateway.config.bases import VariableDecl
from gateway.edge.long_answer import LIVE_BYTES, as_file, size_over
from gateway.edge.media import MediaSources, fetch_media, find, inline_media
from gateway.edge.platform_api import log_failure
from gateway.errors import GatewayError
from gateway.events import (
    Finished,
    Interrupt,
    RunEvent,
    Started,
    TextDelta,
    VariablesEvent,
    joined,
)
from gateway.experts.base import Expert, TurnInput
from gateway.progress import Progress
from gateway.turns.audit import TurnTrace
from gateway.turns.render import CardRenderer
from sessions import SessionRecords, SessionStore

log = structlog.get_logger("gateway.turns")

# A long answer streamed in small deltas is built in time linear in its length and never holds
# the loop (issue 38): deltas are gathered and folded into the card's state at most every
# FOLD_S (one concatenation per fold, not per delta), and the run gives the loop its turn
# after YIELD_S of events that came without a wait (an expert with its stream buffered).
FOLD_S = 0.05
YIELD_S = 0.01


class Handback(GatewayError):
    """The replica is shutting down and gives the turn back for another replica to resume."""


@dataclass
class ActiveRun:
    """A conversation this replica runs: its current turn and, while the expert streams, how to
    stop it (``consume``), steer it and add a step to its card (``inject``)."""

    conversation: str
    turn_id: str
    owner: str
    task: asyncio.Task[None] | None = None
    consume: asyncio.Task[Progress] | None = None
    stop_reason: str = ""  # "stop" (the user), "lost" (the lease), "handback" (shutdown)
    expert: Expert | None = None
    turn: TurnInput | None = None
    inject: Callable[[RunEvent], None] | None = None
    steering: bool = False
    started_at: float = field(default_factory=time.monotonic)
    trace: TurnTrace | None = None  # the current turn's steps and usage, for its audit record


@dataclass(frozen=True)
class Outcome:
    progress: Progress  # the final state shown
    asked: dict[str, Any]  # the interrupt's own data (empty when it asked nothing)


class Driver:
    def __init__(
        self, *, store: SessionStore, records: SessionRecords, handing_back: Callable[[], bool]
    ) -> None:
        self.store = store
        self.records = records
        self.handing_back = handing_back

    async def drive(
        self,
        conversation: str,
        run: ActiveRun | None,
        stream: AsyncIterator[RunEvent],
        progress: Progress,
        renderer: CardRenderer,
        expert: Expert,
        turn: TurnInput,
        declared: list[VariableDecl],
        settle: Callable[[Outcome], Awaitable[None]] | None = None,
    ) -> Outcome:
        """``settle`` keeps what a waiting or failed card's buttons need (the interrupt, the
        failed turn) before the card that shows those buttons goes out, and again once it has
        when only that delivery gave the card its handle: a click can never come before the
        record it answers."""
        state = progress
        asked: dict[str, Any] = {}
        reducers = {d.name: d.reducer for d in declared}
        sources = MediaSources.of(expert.media_sources())

        pending: list[TextDelta] = []  # text deltas not yet folded into ``state``
        timer: asyncio.TimerHandle | None = None

        def fold() -> None:
            """The gathered deltas into ``state`` at once; the card shows it."""
            nonlocal state, timer
            if timer is not None:
                timer.cancel()
                timer = None
            if pending:
                for delta in joined(pending):
                    state = state.apply(delta)
                pending.clear()
                if state.status not in ("waiting", "error"):
                    renderer.push(state)

        async def consume() -> Progress:
            nonlocal state, asked, timer
            loop = asyncio.get_running_loop()
            ran_since = time.monotonic()
            async for event in stream:
                now = time.monotonic()
                if now - ran_since > YIELD_S:
                    await asyncio.sleep(0)  # what else waits runs (webhooks, other turns)
                    ran_since = time.monotonic()
                if isinstance(event, TextDelta) and not event.replace:
                    if event.text or event.tail is not None:
                        pending.append(event)
                        if timer is None:
                            timer = loop.call_later(FOLD_S, fold)
                    continue
                fold()
                if isinstance(event, Started) and event.thread_id:
                    # The backend's conversation lives as long as the session (docs/architecture.md,
                    # "Sessions"), one per identity where its turns act as their senders.
                    kept: dict[str, str] = {}
                    if event.thread_id != turn.expert_thread_id:
                        kept["threadId"] = event.thread_id
                    key = event.thread_key
                    if key is not None and turn.expert_threads.get(key) != event.thread_id:
                        kept[f"thread:{key}"] = event.thread_id
                    if kept:
                        await self.store.set_binding_fields(conversation, turn.session_id, **kept)
                if isinstance(event, VariablesEvent) and event.values:
                    # An agent's writes go through the declared reducers; a backend's own
                    # state ("backend", "sent") is stored as it is.
                    mode = event.mode
                    await self.records.apply_variables(
                        turn.integration_id,
                        turn.chat_id,
                        turn.session_id,
                        [
                            (k, reducers.get(k, "replace") if mode == "write" else mode, v)
                            for k, v in event.values.items()
                        ],
                    )
                if isinstance(event, Interrupt):
                    asked = dict(event.data)
                if run is not None and run.trace is not None:
                    run.trace.see(event)
                state = state.apply(event)
                # A final state waits for its images, and a huge answer to become a file.
                held = state.final and (
                    (sources and find(state.answer)) or size_over(state.answer, LIVE_BYTES)
                )
                if state.status not in ("waiting", "error") and not held:
                    renderer.push(state)  # waiting and error cards go out in close()
                if state.final or (state.status == "waiting" and isinstance(event, Finished)):
                    break
            return state

        def inject(event: RunEvent) -> None:
            nonlocal state
            fold()
            if run is not None and run.trace is not None:
                run.trace.see(event)
            state = state.apply(event)
            renderer.push(state)

        task = asyncio.create_task(consume())
        if run is not None:
            run.consume, run.expert, run.turn, run.inject = task, expert, turn, inject
        try:
            if not renderer.started:
                # The first card was left to us (TurnKinds._start): it shows the state after
                # the run's first go; a run that ended in it shows its final state in close().
                await asyncio.sleep(0)
                if not task.done():
                    try:
                        await renderer.start(state)
                    except BaseException:
                        task.cancel()
                        raise
            state = await task
            fold()
            if not state.final and state.status != "waiting":
                state = state.finish("success")
        except asyncio.CancelledError:
            fold()
            reason = run.stop_reason if run is not None else ""
            if reason == "handback" or (not reason and self.handing_back()):
                renderer.abandon()
                raise Handback() from None
            if reason in ("lost", ""):  # the lease went, or our own task was cancelled
                renderer.abandon()
                raise
            state = state.finish("cancelled")
            log.info("run stopped by the user")
            try:
                await expert.cancel(turn)
            except Exception as exc:
                log.warning("expert cancel failed", error=str(exc))
        except Exception as exc:  # the expert's failure, or the first card refused
            fold()
            log_failure(log, "expert failed", exc)
            state = state.finish("error", f"The expert failed: {type(exc).__name__}")
        finally:
            if run is not None:
                run.consume = None
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        if state.status in ("done", "rejected") and sources and state.answer:
            state = await self._media(state, sources)
        if state.status in ("done", "rejected") and state.artifacts:
            inline = inline_media(state.artifacts)  # files the expert handed over as bytes
            if inline:
                state = state.with_media((*state.media, *inline))
        if state.final:
            adapter = renderer.adapter
            parts = adapter.settings.max_answer_parts
            limit = adapter.answer_part_bytes()
            state = as_file(state, limit, parts, adapter.answer_part_chars())
        outcome = Outcome(state, asked)
        shown = renderer.handle
        if settle is not None:
            await settle(outcome)
        await renderer.close(state)
        if settle is not None and renderer.handle != shown:
            await settle(outcome)
        return outcome

    async def _media(self, state: Progress, sources: MediaSources) -> Progress:
        """The final state with the answer's images and files the final card shows, fetched
        from the expert's allowed origins (gateway/edge/media.py; bounded in count, bytes and
        time); a live card showed them as links."""
        try:
            media = await fetch_media(state.answer, sources)
        except Exception as exc:  # the card goes out with links rather than not at all
            log.warning("answer media not fetched", error=type(exc).__name__)
            return state
        return state.with_media(media) if media else state
