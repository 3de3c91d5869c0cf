"""The runner: executes claimed turns, one per conversation at a time (the lease), renders progress.

Order of one turn: route -> bind the session (new after the idle timeout, with a config snapshot)
-> first card -> stream the expert's events through Progress into the throttled renderer ->
final card -> release the lease (finish.lua), which reschedules whatever collected meanwhile.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from gateway.adapter import Adapter
from gateway.envelope import Envelope
from gateway.events import Finished, Interrupt, RunEvent, Started, StepEvent, VariablesEvent
from gateway.experts import Decision, Expert, TurnInput, build_expert
from gateway.progress import Progress
from gateway.render import CardRenderer
from gateway.routing import route
from gateway.settings import (
    IntegrationBase,
    Settings,
    expert_from_snapshot,
    snapshot_digest,
    snapshot_of,
)
from gateway.variables import system_variables
from sessions import Claim, HistoryStore, SessionRecords, SessionStore

log = structlog.get_logger("gateway.runner")


def now_ms() -> int:
    return int(time.time() * 1000)


class Handback(Exception):
    """The replica is shutting down and gives the turn back for another replica to resume."""


@dataclass
class ActiveRun:
    conversation: str
    turn_id: str
    owner: str
    task: asyncio.Task[None] | None = None
    consume: asyncio.Task[Progress] | None = None
    stop_reason: str = ""
    expert: Expert | None = None
    turn: TurnInput | None = None
    inject: Callable[[RunEvent], None] | None = None
    steering: bool = False
    started_at: float = field(default_factory=time.monotonic)


def merge_input(items: list[Envelope]) -> str:
    """One line per message (a scheduled turn's text counts as one); in a group with several
    speakers each line names its speaker."""
    messages = [e for e in items if e.kind in ("message", "schedule")]
    speakers = {e.sender.id for e in messages}
    if messages and messages[-1].chat.type == "group" and len(speakers) > 1:
        return "\n".join(f"{e.sender.name or e.sender.id}: {e.text}" for e in messages)
    return "\n".join(e.text for e in messages)


class Runner:
    def __init__(
        self,
        *,
        store: SessionStore,
        settings: Settings,
        adapters: Mapping[str, Adapter],
        replica_id: str,
        records: SessionRecords,
        history: HistoryStore | None = None,
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.records = records
        self.history = history
        self.settings = settings
        self.adapters = adapters
        self.replica_id = replica_id
        self.clock = clock
        self.active: dict[str, ActiveRun] = {}
        self.handing_back = False
        self._experts: dict[str, Expert] = {}
        self._known_snapshots: set[str] = set()
        self._background: set[asyncio.Task[None]] = set()

    @property
    def lease_ms(self) -> int:
        return int(self.settings.runtime.lease_seconds * 1000)

    # --- lifecycle of a claimed conversation -----------------------------------------------
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
                    owner = f"{self.replica_id}:{uuid.uuid4().hex[:12]}"
                    current = await self.store.claim(
                        conversation=claim.conversation,
                        owner=owner,
                        turn_id=uuid.uuid4().hex,
                        now_ms=self.clock(),
                        lease_ms=self.lease_ms,
                    )
        except Exception:
            log.exception("turn crashed", conversation=claim.conversation)
        finally:
            if self.active.get(claim.conversation) is run:
                del self.active[claim.conversation]

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
                items = await self.store.burst_items(run.conversation)
                take: list[Envelope] = []
                for item in items:
                    envelope = Envelope.from_json(item)
                    if envelope.kind != "message":
                        break
                    take.append(envelope)
                if not take:
                    return
                text = merge_input(take)
                await run.expert.steer(run.turn, text)
                await self.store.burst_take(
                    conversation=run.conversation, owner=run.owner, count=len(take)
                )
                log.info("follow-up steered into the running turn", messages=len(take))
                if run.inject is not None:
                    title = "Follow-up: " + (text if len(text) <= 80 else text[:79] + "…")
                    run.inject(StepEvent(f"steer-{uuid.uuid4().hex[:8]}", title, "done"))
        except Exception as exc:
            # The messages stay in the burst and become the next turn (collect).
            log.warning("steer failed; the message will be the next turn", error=str(exc))
        finally:
            run.steering = False

    async def close(self) -> None:
        """Release the experts' connections (at shutdown, after the runs ended)."""
        for expert in self._experts.values():
            with contextlib.suppress(Exception):
                await expert.close()
        self._experts.clear()

    async def hand_back_all(self) -> None:
        """Shutdown: interrupt every local run and give its turn back for another replica."""
        self.handing_back = True
        for run in list(self.active.values()):
            if run.consume is not None:
                run.stop_reason = "handback"
                run.consume.cancel()
        tasks = [r.task for r in self.active.values() if r.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=10)

    # --- one turn --------------------------------------------------------------------------
    async def _run_claim(self, claim: Claim) -> tuple[str, int]:
        conv, owner = claim.conversation, claim.owner
        items = [Envelope.from_json(i) for i in claim.items]
        last = items[-1]
        bound = structlog.contextvars.bound_contextvars(
            turn_id=claim.turn_id,
            conversation=conv,
            integration_id=last.integration_id,
            event_id=last.event_id,
        )
        mode = "finish"
        session_id = ""
        with bound:
            integ = self.settings.integration(last.integration_id)
            adapter = self.adapters.get(last.integration_id)
            keeper = asyncio.create_task(self._keep_lease(conv, owner, claim.turn_id))
            try:
                if integ is None or adapter is None:
                    log.error("turn for an integration that is no longer configured")
                elif claim.attempts > self.settings.runtime.max_turn_attempts:
                    await self._give_up(claim, integ, adapter, last)
                else:
                    if claim.resumed:
                        log.info("resuming a turn left by another replica", attempts=claim.attempts)
                    started = self.clock()
                    seen: dict[str, str] = {}
                    if last.kind == "action" and last.action and last.action.id == "retry":
                        session_id, seen = await self._retry_turn(claim, integ, adapter, last)
                    elif last.kind == "action":
                        session_id = await self._resume_turn(claim, integ, adapter, last)
                    else:
                        session_id, seen = await self._message_turn(claim, integ, adapter, items)
                    # One audit record per completed turn, written while the lease is still
                    # held, with the variables the turn saw (admin API): one round trip.
                    await self.records.turn_done(
                        session_id,
                        seen,
                        {
                            "event": "turn",
                            "turn": claim.turn_id,
                            "conversation": conv,
                            "session": session_id,
                            "replica": self.replica_id,
                            "start": started,
                            "end": self.clock(),
                            "resumed": int(claim.resumed),
                        },
                    )
            except Handback:
                mode = "handback"
                log.info("turn handed back")
            except Exception:
                log.exception("turn failed")
            finally:
                keeper.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keeper
            timeout_ms = (integ.session_timeout_seconds if integ else 3600) * 1000
            status, due = await self.store.finish(
                conversation=conv,
                owner=owner,
                now_ms=self.clock(),
                mode=mode,  # type: ignore[arg-type]
                session_id=session_id,
                binding_ttl_ms=timeout_ms + 60_000,
            )
            if status == "lost":
                log.warning("lease was lost before the turn finished")
            return status, due

    async def _keep_lease(self, conv: str, owner: str, turn_id: str) -> None:
        interval = self.settings.runtime.lease_seconds / 3
        while True:
            await asyncio.sleep(interval)
            try:
                held, cancel = await self.store.renew(
                    conversation=conv, owner=owner, now_ms=self.clock(), lease_ms=self.lease_ms
                )
            except Exception as exc:
                log.warning("lease renewal failed", error=str(exc))
                continue
            if not held:
                log.warning("lease lost; stopping the local run")
                self.stop_local(conv, turn_id, reason="lost")
                return
            if cancel == turn_id:
                self.stop_local(conv, turn_id, reason="stop")

    def _expert_for(self, digest: str, snapshot: dict[str, Any]) -> Expert:
        """The expert of a session's snapshot (one instance per distinct snapshot)."""
        expert = self._experts.get(digest)
        if expert is None:
            current = self.settings.expert(str(snapshot["expert"].get("id", "")))
            settings = expert_from_snapshot(snapshot["expert"], current)
            expert = build_expert(settings, history=self.history)
            self._experts[digest] = expert
        return expert

    async def _bind(
        self, claim: Claim, integ: IntegrationBase, last: Envelope
    ) -> tuple[str, Expert, dict[str, Any], dict[str, str]]:
        """Continue or open the session; returns (session id, expert, snapshot, binding)."""
        xpert_id = route(integ, last)
        expert_cfg = self.settings.expert(xpert_id)
        if expert_cfg is None:
            raise LookupError(f"expert {xpert_id!r} is not configured")
        snap_json, digest = snapshot_of(integ, expert_cfg, xpert_id)
        known_session = claim.turn.get("session")
        binding = await self.store.open_or_continue(
            conversation=claim.conversation,
            now_ms=self.clock(),
            timeout_ms=integ.session_timeout_seconds * 1000,
            new_session_id=uuid.uuid4().hex,
            xpert_id=xpert_id,
            snapshot_hash=digest,
            count_turn=not known_session,
        )
        session_id = known_session or binding.session_id
        bound_digest = binding.fields.get("snapshot", digest)
        if binding.state == "new":
            log.info("session opened", session_id=session_id, xpert_id=xpert_id)
            await self.records.opened(
                session_id,
                {
                    "conversation": claim.conversation,
                    "integrationId": integ.id,
                    "chatId": last.chat.id,
                    "chatType": last.chat.type,
                    "xpertId": xpert_id,
                    "senderId": last.sender.id,
                    "snapshot": digest,
                },
                at_ms=self.clock(),
            )
            snap = json.loads(snap_json) if bound_digest == digest else None
            if snap is not None:
                await self.records.apply_variables(
                    session_id,
                    [
                        (d["name"], "default", d["default"])
                        for d in _declared(snap)
                        if d.get("default") is not None
                    ],
                )
        if bound_digest == digest:
            if digest not in self._known_snapshots:
                await self.store.put_snapshot(digest, snap_json)
                self._known_snapshots.add(digest)
            snapshot = json.loads(snap_json)
        else:
            # The config changed since the session opened: the session keeps its snapshot.
            stored = await self.store.get_snapshot(bound_digest)
            snapshot = json.loads(stored) if stored else json.loads(snap_json)
            digest = bound_digest if stored else digest
        # binding.lua has recorded the session on the turn, for a replica that resumes it.
        return session_id, self._expert_for(digest, snapshot), snapshot, binding.fields

    def _renderer(
        self,
        claim: Claim,
        adapter: Adapter,
        reply_to: Envelope,
        interval_ms: int,
        handle: str | None,
        key: str,
    ) -> CardRenderer:
        async def remember(h: str) -> None:
            await self.store.set_turn_fields(
                conversation=claim.conversation, owner=claim.owner, card=h
            )

        return CardRenderer(
            adapter=adapter,
            reply_to=reply_to,
            interval_ms=interval_ms,
            idempotency_key=key,
            handle=handle,
            on_handle=remember,
        )

    async def _retry_turn(
        self, claim: Claim, integ: IntegrationBase, adapter: Adapter, action: Envelope
    ) -> tuple[str, dict[str, str]]:
        """Retry: run the failed turn's input again, in its own card."""
        raw = claim.turn.get("failed")
        if raw is None:
            binding = await self.store.binding(claim.conversation)
            raw = binding.get("failed")
            if raw:
                await self.store.set_turn_fields(
                    conversation=claim.conversation, owner=claim.owner, failed=raw
                )
                await self.store.set_binding_fields(
                    claim.conversation, binding.get("sessionId", ""), failed=""
                )
        if not raw:
            log.info("retry click on a turn that is no longer failed")
            await adapter.send_text(
                action, "There is nothing to retry.", idempotency_key=claim.turn_id
            )
            return "", {}
        failed = json.loads(raw)
        original = Envelope.from_json(failed["replyTo"])
        items = [original.model_copy(update={"text": failed["text"]})]
        return await self._message_turn(
            claim, integ, adapter, items, card=failed.get("card"), key=failed["turnId"]
        )

    async def _message_turn(
        self,
        claim: Claim,
        integ: IntegrationBase,
        adapter: Adapter,
        items: list[Envelope],
        *,
        card: str | None = None,
        key: str | None = None,
    ) -> tuple[str, dict[str, str]]:
        last = items[-1]
        session_id, expert, snapshot, binding = await self._bind(claim, integ, last)
        structlog.contextvars.bind_contextvars(session_id=session_id)
        thread = binding.get("threadId") or None
        interval = int(snapshot["integration"].get("updateIntervalMs", integ.update_interval_ms))
        progress = Progress(turn_id=claim.turn_id, conversation=claim.conversation)
        renderer = self._renderer(
            claim, adapter, last, interval, claim.turn.get("card") or card, key or claim.turn_id
        )
        # The first card goes out while the turn's context is read (one round trip).
        since = None
        if integ.history_context_limit and last.chat.type == "group":
            since = self.clock() - integ.history_context_window_seconds * 1000
        first_card = asyncio.create_task(renderer.start(progress))
        try:
            context, email = await asyncio.gather(
                self.records.turn_context(integ.id, last.chat.id, session_id, group_since_ms=since),
                self._sender_email(adapter, last),
            )
        finally:
            await first_card
        variables = self._variables(snapshot, last, thread or session_id, email)
        variables.update(_context_variables(context.variables, context.memory))
        turn_input = TurnInput(
            turn_id=claim.turn_id,
            session_id=session_id,
            integration_id=integ.id,
            xpert_id=snapshot["xpertId"],
            text=merge_input(items),
            chat_id=last.chat.id,
            chat_type=last.chat.type,
            sender_id=last.sender.id,
            sender_name=last.sender.name,
            thread_id=last.chat.thread_id,
            attachments=await self._attachments(adapter, items, expert),
            variables=variables,
            state=dict(context.variables),
            backend_state=context.backend,
            declared_variables=tuple(d["name"] for d in _declared(snapshot)),
            expert_thread_id=thread,
            group_history=tuple(context.group[-integ.history_context_limit :]),
        )
        final, asked = await self._drive(
            claim, expert.run(turn_input), progress, renderer, expert, turn_input, snapshot
        )
        await self._remember_outcome(
            claim, session_id, final, asked, renderer, turn_input, last, snapshot, key
        )
        log.info("turn finished", status=final.status, renders=renderer.renders)
        return session_id, variables

    async def _remember_outcome(
        self,
        claim: Claim,
        session_id: str,
        final: Progress,
        asked: dict[str, Any],
        renderer: CardRenderer,
        turn: TurnInput,
        reply_to: Envelope,
        snapshot: dict[str, Any],
        key: str | None = None,
    ) -> None:
        """A failed turn can be retried (Retry) and a waiting one resumed (Confirm / Reject):
        what either needs is kept with the session. ``asked`` is the interrupt's own data (for
        XpertAI the run to resume and where its stream stopped)."""
        if final.status == "error":
            failed = {
                "turnId": key or claim.turn_id,
                "card": renderer.handle,
                "text": turn.text,
                "replyTo": reply_to.to_json(),
            }
            await self.store.set_binding_fields(
                claim.conversation, session_id, failed=json.dumps(failed)
            )
        if final.status == "waiting":
            interrupt = {
                "turnId": turn.turn_id,
                "card": renderer.handle,
                "text": turn.text,
                "replyTo": reply_to.to_json(),
                "snapshot": snapshot,
                "prompt": final.prompt,
                "data": asked,
            }
            await self.store.set_binding_fields(
                claim.conversation, session_id, interrupt=json.dumps(interrupt)
            )

    async def _resume_turn(
        self, claim: Claim, integ: IntegrationBase, adapter: Adapter, action: Envelope
    ) -> str:
        """Confirm / Reject: resume the interrupted run in its own card."""
        assert action.action is not None
        raw = claim.turn.get("interrupt")
        binding = await self.store.binding(claim.conversation)
        session_id = claim.turn.get("session") or binding.get("sessionId", "")
        if raw is None:
            raw = binding.get("interrupt")
            if raw:
                await self.store.set_turn_fields(
                    conversation=claim.conversation,
                    owner=claim.owner,
                    interrupt=raw,
                    session=session_id,
                )
                await self.store.set_binding_fields(claim.conversation, session_id, interrupt="")
        if not raw:
            log.info("click on a confirmation that is no longer pending")
            await adapter.send_text(
                action, "Nothing is waiting for a confirmation.", idempotency_key=claim.turn_id
            )
            return session_id
        interrupt = json.loads(raw)
        snapshot = interrupt["snapshot"]
        digest = snapshot_digest(snapshot)
        expert = self._expert_for(digest, snapshot)
        reply_to = Envelope.from_json(interrupt["replyTo"])
        decision: Decision = "confirm" if action.action.id == "confirm" else "reject"
        context, email = await asyncio.gather(
            self.records.turn_context(integ.id, reply_to.chat.id, session_id, group_since_ms=None),
            self._sender_email(adapter, reply_to),
        )
        variables = self._variables(
            snapshot, reply_to, binding.get("threadId") or session_id, email
        )
        variables.update(_context_variables(context.variables, context.memory))
        turn_input = TurnInput(
            turn_id=interrupt["turnId"],
            session_id=session_id,
            integration_id=integ.id,
            xpert_id=snapshot["xpertId"],
            text=interrupt["text"],
            chat_id=reply_to.chat.id,
            chat_type=reply_to.chat.type,
            sender_id=action.sender.id,
            sender_name=action.sender.name,
            variables=variables,
            state=dict(context.variables),
            backend_state=context.backend,
            declared_variables=tuple(d["name"] for d in _declared(snapshot)),
            expert_thread_id=binding.get("threadId") or None,
        )
        interval = int(snapshot["integration"].get("updateIntervalMs", integ.update_interval_ms))
        progress = Progress(turn_id=interrupt["turnId"], conversation=claim.conversation)
        renderer = self._renderer(
            claim, adapter, reply_to, interval, interrupt.get("card"), interrupt["turnId"]
        )
        await renderer.start(progress)
        asked_before = {"text": interrupt["text"], **(interrupt.get("data") or {})}
        stream = expert.resume(turn_input, decision, asked_before)
        final, asked = await self._drive(
            claim, stream, progress, renderer, expert, turn_input, snapshot
        )
        await self._remember_outcome(
            claim, session_id, final, asked, renderer, turn_input, reply_to, snapshot
        )
        log.info("resumed turn finished", decision=decision, status=final.status)
        return session_id

    async def _attachments(
        self, adapter: Adapter, items: list[Envelope], expert: Expert
    ) -> tuple[dict[str, Any], ...]:
        """The turn's attachments; images are fetched through the adapter (as data URLs) for
        experts that accept them, up to 10 MB each."""
        out: list[dict[str, Any]] = []
        for envelope in items:
            for attachment in envelope.attachments:
                entry = attachment.model_dump(by_alias=True, exclude_none=True)
                if expert.accepts_images and attachment.kind == "image" and not attachment.url:
                    try:
                        fetched = await adapter.fetch_attachment(
                            envelope, attachment, max_bytes=10 * 1024 * 1024
                        )
                    except Exception as exc:
                        log.warning("attachment download failed", error=str(exc))
                        fetched = None
                    if fetched is not None:
                        encoded = base64.b64encode(fetched.data).decode()
                        entry["url"] = f"data:{fetched.mime};base64,{encoded}"
                        entry["size"] = len(fetched.data)
                out.append(entry)
        return tuple(out)

    async def _sender_email(self, adapter: Adapter, envelope: Envelope) -> str | None:
        """The sender's email where the adapter can tell; a lookup that fails costs only it."""
        try:
            return await adapter.sender_email(envelope)
        except Exception as exc:
            log.warning("sender email lookup failed", error=str(exc))
            return envelope.sender.email

    def _variables(
        self, snapshot: dict[str, Any], last: Envelope, thread: str, email: str | None
    ) -> dict[str, str]:
        options = snapshot["integration"]
        return system_variables(
            language=options.get("language"),
            locale=last.locale,
            timezone=options.get("timezone"),
            thread_id=thread,
            user_id=last.sender.id,
            user_email=email,
            project_id=options.get("projectId"),
            workspace_base_url=options.get("workspaceBaseUrl"),
        )

    async def _drive(
        self,
        claim: Claim,
        stream: AsyncIterator[RunEvent],
        progress: Progress,
        renderer: CardRenderer,
        expert: Expert,
        turn: TurnInput,
        snapshot: dict[str, Any],
    ) -> tuple[Progress, dict[str, Any]]:
        """Fold the expert's events into Progress and the renderer; the final state always lands.
        Returns it with the data of the run's interrupt (empty when it asked nothing)."""
        state = progress
        declared = _declared(snapshot)
        asked: dict[str, Any] = {}

        async def consume() -> Progress:
            nonlocal state, asked
            async for event in stream:
                if (
                    isinstance(event, Started)
                    and event.thread_id
                    and event.thread_id != turn.expert_thread_id
                ):
                    # The backend's conversation lives as long as the session (DESIGN.md §6).
                    await self.store.set_binding_fields(
                        claim.conversation, turn.session_id, threadId=event.thread_id
                    )
                if isinstance(event, VariablesEvent) and event.values:
                    # An agent's writes go through the declared reducers; a backend's own
                    # state ("backend", "sent") is stored as it is.
                    reducers = {d["name"]: d.get("reducer", "replace") for d in declared}
                    mode = event.mode
                    await self.records.apply_variables(
                        turn.session_id,
                        [
                            (k, reducers.get(k, "replace") if mode == "write" else mode, v)
                            for k, v in event.values.items()
                        ],
                    )
                if isinstance(event, Interrupt):
                    asked = dict(event.data)
                state = state.apply(event)
                renderer.push(state)
                if state.final or (state.status == "waiting" and _is_finished(event)):
                    break
            return state

        run = self.active.get(claim.conversation)

        def inject(event: RunEvent) -> None:
            nonlocal state
            state = state.apply(event)
            renderer.push(state)

        task = asyncio.create_task(consume())
        if run is not None:
            run.consume, run.expert, run.turn, run.inject = task, expert, turn, inject
        try:
            state = await task
            if not state.final and state.status != "waiting":
                state = state.finish("success")
        except asyncio.CancelledError:
            reason = run.stop_reason if run is not None else ""
            if reason == "handback" or (not reason and self.handing_back):
                raise Handback() from None
            if reason == "lost":
                raise
            if not reason:  # our own task was cancelled: not a user stop
                raise
            state = state.finish("cancelled")
            log.info("run stopped by the user")
            try:
                await expert.cancel(turn)
            except Exception as exc:
                log.warning("expert cancel failed", error=str(exc))
        except Exception as exc:
            log.exception("expert failed")
            state = state.finish("error", f"The expert failed: {type(exc).__name__}")
        finally:
            if run is not None:
                run.consume = None
            with contextlib.suppress(Exception):
                await stream.aclose()  # type: ignore[attr-defined]
        await renderer.close(state)
        return state, asked

    async def _give_up(
        self, claim: Claim, integ: IntegrationBase, adapter: Adapter, last: Envelope
    ) -> None:
        log.error("turn failed too often; giving up", attempts=claim.attempts)
        final = Progress(turn_id=claim.turn_id, conversation=claim.conversation).finish(
            "error", "This message could not be processed after several attempts."
        )
        renderer = self._renderer(
            claim, adapter, last, integ.update_interval_ms, claim.turn.get("card"), claim.turn_id
        )
        await renderer.close(final)


def _declared(snapshot: dict[str, Any]) -> list[dict[str, Any]]:
    """Conversation variables declared by the session's integration and expert."""
    return [*snapshot["integration"].get("variables", []), *snapshot["expert"].get("variables", [])]


def _context_variables(values: dict[str, Any], memory: list[dict[str, Any]]) -> dict[str, str]:
    """Conversation variables as ``var.*`` text and the chat's memory as ``memory.rules``, for
    prompt templates."""
    out = {f"var.{k}": v if isinstance(v, str) else json.dumps(v) for k, v in values.items()}
    if memory:
        out["memory.rules"] = "\n".join(f"{i}. {item['text']}" for i, item in enumerate(memory, 1))
    return out


def _is_finished(event: RunEvent) -> bool:
    return isinstance(event, Finished)
