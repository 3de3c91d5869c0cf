"""XpertAI agents through the Agent-Protocol API (docs/xpertai.md): one thread per session and
XpertAI user (xpert_principals.thread_key), each turn a ``runs/stream`` SSE (``xpert_stream``).

What the real server needs, read in its source (xpert-ai/xpert @5135ce25, ``packages/server-ai``):
the run id is ``on_message_start.data.executionId`` (no ``Content-Location``); Stop is
``POST /threads/{t}/runs/{executionId}/cancel``; a dropped stream rejoins with
``GET /threads/{t}/runs/{executionId}/stream`` and ``Last-Event-ID`` (exclusive); a resume
carries ``target`` (without it the server refuses the run); a steer is ``follow_up``/``steer``
aimed at the running execution; conversation variables (and an ``ask_clarification``
question) live in the thread and are read from ``GET /threads/{t}/state`` after each run.
Every request carries the turn's ``x-principal-user-id`` (``xpert_principals``); files are
uploaded first (``xpert_files``), pictures inline, audio and video left out (``refuses_media``).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp
import structlog

from gateway.config.bases import ExpertBase
from gateway.events import (
    Decision,
    Finished,
    Interrupt,
    RunEvent,
    Started,
    StepEvent,
    TextDelta,
    VariablesEvent,
)
from gateway.experts import xpert_principals as who
from gateway.experts.base import Expert, ExpertContext, TurnInput
from gateway.experts.http import ExpertHttpError, error_for, user_error
from gateway.experts.probes import probe_xpert
from gateway.experts.sse import COMMENT, read_sse
from gateway.experts.xpert_clarify import from_state
from gateway.experts.xpert_files import refuses_media, upload_files
from gateway.experts.xpert_input import changed_state, files_of, json_body, read_state, with_history
from gateway.experts.xpert_principals import Principal, refused, refused_run, resolve
from gateway.experts.xpert_settings import XpertExpertSettings
from gateway.experts.xpert_steer import follow_up
from gateway.experts.xpert_stream import XpertStream

log = structlog.get_logger("gateway.experts.xpert")
END_GRACE_S = 2.0  # after the run's end event, how long its "complete" frame is waited for


@dataclass
class _Run:
    thread_id: str
    stream: XpertStream
    principal: Principal
    last_id: str | None = None  # the last stream id read: a rejoin or a resume reads after it
    resumes: str | None = None  # the execution a resume continues (its stream holds old frames)
    steers: list[tuple[str, str]] = field(default_factory=list)  # (clientMessageId, text)


class XpertExpert(Expert):
    kind = "xpert"
    settings_model = XpertExpertSettings
    supports_steer = True
    probe = classmethod(probe_xpert)  # check --probe (gateway/experts/probes.py)
    accepts_images = True  # the runner hands pictures over as data: URLs
    accepts_files = True  # uploaded before the run (xpert_files): any type but audio and video
    # No bundle_options: a run takes no model and no tool list (docs/xpertai.md, "Access
    # bundles"); and XpertAI drops state keys the agent did not declare.
    declared_variables_only = True

    def __init__(self, *, settings: XpertExpertSettings, context: ExpertContext | None = None):
        self.settings = settings
        self.principals = context.principals if context else None  # the admin API's entries
        self.current = context.current if context else None  # the config in force
        self._http: aiohttp.ClientSession | None = None
        self._runs: dict[str, _Run] = {}  # turn id -> the run it follows

    def refuses_file(self, mime: str) -> str | None:
        return refuses_media(mime)

    def refuses_kind(self, kind: str) -> str | None:
        return refuses_media(f"{kind}/")

    @classmethod
    def create(cls, *, settings: ExpertBase, context: ExpertContext) -> XpertExpert:
        assert isinstance(settings, XpertExpertSettings)
        return cls(settings=settings, context=context)

    @classmethod
    def acts_as_sender(cls, settings: ExpertBase) -> bool:
        return isinstance(settings, XpertExpertSettings) and settings.group_identity == "sender"

    def identity(self) -> XpertExpertSettings:  # who a sender acts as: the config in force
        now = self.current(self.settings.id) if self.current is not None else None
        return now if isinstance(now, XpertExpertSettings) else self.settings

    @property
    def assistant_id(self) -> str:
        return self.settings.assistant_id or self.settings.id

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            s = self.settings
            headers = {"x-api-key": s.api_key.get_secret_value()}
            if s.organization_id:
                headers["organization-id"] = s.organization_id
            self._http = aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
            )
        return self._http

    def _url(self, path: str) -> str:
        return f"{self.settings.base_url}{path}"

    async def _thread(self, turn: TurnInput, principal: Principal) -> str:
        key = who.thread_key(self.identity(), turn, principal)
        known = turn.expert_thread_id if key is None else turn.expert_threads.get(key)
        if known:
            return known
        # assistant_id binds the thread (conversation) to the xpert (thread-create.handler.ts).
        body = {"assistant_id": self.assistant_id}  # the server titles it from the first input
        url, headers = self._url("/threads"), principal.headers
        async with self._session().post(url, json=body, headers=headers) as resp:
            if not 200 <= resp.status < 300:
                raise await error_for(resp, "XpertAI")
            data = await resp.json()
        return str(data["thread_id"])

    async def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]:
        principal = await resolve(self.identity(), self.principals, turn)
        try:
            thread_id = await self._thread(turn, principal)
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError) as exc:
            error = user_error(refused(exc, principal, turn), "XpertAI", self._url("/threads"))
            log.warning("xpert thread not created", error=error)
            yield Finished("error", error)
            return
        files = files_of(turn)  # pictures inline; other files uploaded first, as AgentFiles
        http, s = self._session(), self.settings
        async for event in upload_files(http, s, turn, principal.headers, thread_id, files):
            yield event
        message: dict[str, Any] = {"input": with_history(turn)}
        if files:
            message["files"] = files
        state, holds = changed_state(turn, self.settings.memory_variable)
        body_input: dict[str, Any] = {
            "action": "send",
            "message": {"clientMessageId": turn.turn_id, "input": message},
            "state": state,
        }
        if turn.project_id:  # binds the thread to the project (run-create-stream l.58-62, 372)
            body_input["projectId"] = turn.project_id
        async for event in self._turn(turn, principal, thread_id, body_input, holds=holds):
            yield event

    async def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        """Continue the interrupted run: ``target`` names its AI message and execution
        (``{}`` would mean "the last AI message"; without it the server refuses the run)."""
        target = interrupt.get("target")
        # No state: a resume applies none to the variables (invoke.handler.ts builds a
        # Command from the decision); what changed goes with the next message.
        body_input = {
            "action": "resume",
            "target": dict(target) if isinstance(target, dict) else {},
            "decision": {"type": decision},
        }
        thread_id = str(interrupt.get("threadId") or "") or turn.expert_thread_id  # its own
        if not thread_id:
            yield Finished("error", "The conversation this confirmation belongs to is gone.")
            return
        # The resumed run writes to the interrupted execution's stream, whose earlier frames
        # (down to its "complete") the server would replay first without Last-Event-ID
        # (redis-sse.service.ts normalizeStartId).
        last_id = interrupt.get("lastEventId")
        principal = await resolve(self.identity(), self.principals, turn)
        async for event in self._turn(
            turn,
            principal,
            thread_id,
            body_input,
            str(last_id) if last_id else None,
            prefix=str(interrupt.get("answer") or ""),
        ):
            yield event

    async def _turn(
        self,
        turn: TurnInput,
        principal: Principal,
        thread_id: str,
        body_input: dict[str, Any],
        last_id: str | None = None,
        *,
        prefix: str = "",
        holds: dict[str, Any] | None = None,
    ) -> AsyncIterator[RunEvent]:
        """One turn: the run, then one more run per steered message the run ended before it
        took (XpertAI queues those and runs one when a message with its clientMessageId is
        sent, with the text it kept: persisted-follow-up.ts), all in the same card. ``holds``:
        what the thread holds of the variables once the run took its ``state``, recorded when
        the run has started (a run refused at its start took nothing)."""
        yield Started(turn.turn_id, thread_id, who.thread_key(self.identity(), turn, principal))
        context = {
            "integrationId": turn.integration_id,
            "chatId": turn.chat_id,
            "senderId": turn.sender_id,
        }
        body = {"assistant_id": self.assistant_id, "input": body_input, "context": context}
        asked: Interrupt | None = None
        resumes = (body_input.get("target") or {}).get("executionId")
        left: list[tuple[str, str]] = []
        while True:
            stream = XpertStream(
                show_reasoning=self.settings.show_reasoning,
                language=turn.variables.get("sys.language", ""),
                prefix=prefix,
            )
            run = _Run(thread_id, stream, principal, last_id, resumes)
            self._runs[turn.turn_id] = run
            try:
                async for event in self._follow(run, body):
                    if holds and stream.started:
                        yield VariablesEvent(values=holds, mode="sent")
                        holds = None
                    if isinstance(event, Interrupt):
                        asked = event  # handed on at the end, with the run's last stream id
                        continue
                    yield event
                if holds and stream.started:
                    yield VariablesEvent(values=holds, mode="sent")
                    holds = None
            except (ExpertHttpError, aiohttp.ClientError, TimeoutError) as exc:
                url = self._url(f"/threads/{thread_id}/runs/stream")
                error = user_error(refused(exc, principal, turn), "XpertAI", url)
                log.warning("xpert run failed", error=error, thread_id=thread_id)
                stream.finished = Finished("error", error)
            except asyncio.CancelledError:
                raise  # Stop: cancel() still needs the run's ids
            except BaseException:
                self._runs.pop(turn.turn_id, None)
                raise
            self._runs.pop(turn.turn_id, None)
            final = stream.finished or Finished("success")
            if final.outcome == "error" and final.error:
                final = Finished("error", refused_run(final.error, principal, turn))
            left += [(cid, text) for cid, text in run.steers if cid not in stream.consumed]
            if final.outcome not in ("success", "error") or not left:
                break
            if final.outcome == "error":  # shown, then the waiting messages are answered
                yield StepEvent(f"failed-{len(left)}", f"The run failed: {final.error}", "failed")
            client_id, text = left.pop(0)
            log.info("steered message not taken by the run; sending it", left=len(left))
            message = {"clientMessageId": client_id, "input": {"input": text}}
            body = {**body, "input": {"action": "send", "message": message}}
            last_id = resumes = None
            prefix = stream.shown  # as the card shows it: its citations already rendered
            if prefix.strip():  # the next answer goes below what the card shows
                prefix += "\n\n"
                yield TextDelta("\n\n")
        if asked is not None and final.outcome == "interrupted":
            ids = {"lastEventId": run.last_id, "threadId": thread_id}
            yield Interrupt(asked.prompt, {**asked.data, **ids})
        if stream.execution_id is not None:
            # The agent's writes (and XpertAI's reducers) live in the thread: read them back;
            # so does the question of a run that asked one (xpert_clarify.py).
            ask = final.outcome == "success" and self.settings.clarifications and stream.agent_ran
            whole = ask and stream.clarification is None  # not shown by the stream
            if turn.declared_variables or whole:
                url = self._url(f"/threads/{thread_id}/state")
                values = await read_state(self._session(), url, principal.headers)
            else:
                values = {}
            declared = {n: values[n] for n in turn.declared_variables if n in values}
            if declared:
                yield VariablesEvent(values=declared, mode="backend")
            question = stream.clarification or (from_state(values) if ask else None)
            if ask and question:
                yield question
        yield final

    async def _follow(self, run: _Run, body: dict[str, Any]) -> AsyncIterator[RunEvent]:
        """Open the run, then follow it; a dropped stream rejoins after the last event id, so
        nothing is read twice. Keep-alive comments count as activity."""
        s, stream = self.settings, run.stream
        delay, failures = 0.5, 0
        while True:
            try:
                async for event in self._read(run, body):
                    yield event
                if stream.complete and not stream.started and run.resumes:
                    # The interrupted run's own "complete" (a resume read after an older id):
                    # the resumed run's frames follow it in the same stream.
                    stream.complete = False
                    stream.execution_id, run.resumes = run.resumes, None
                    continue
                if stream.complete or stream.finished:
                    return
                if stream.execution_id is None:
                    raise ExpertHttpError("XpertAI ended the stream before the run started.")
                log.warning("xpert stream ended early; rejoining", run_id=stream.execution_id)
            except ExpertHttpError as exc:
                if not exc.retryable or failures == s.connect_retries:
                    raise
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                sent = not isinstance(exc, aiohttp.ClientConnectorError)
                if failures == s.connect_retries or (sent and stream.execution_id is None):
                    # A run that may have started but whose id we never saw cannot be
                    # rejoined, and starting it again could run it twice.
                    raise ExpertHttpError(
                        f"XpertAI connection lost ({type(exc).__name__})."
                    ) from exc
                log.warning(
                    "xpert stream dropped; rejoining",
                    run_id=stream.execution_id,
                    last_event=run.last_id,
                )
            failures += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8)

    async def _read(self, run: _Run, body: dict[str, Any]) -> AsyncIterator[RunEvent]:
        """One connection: the run's start (POST), or a rejoin (GET) once its id is known."""
        s, stream = self.settings, run.stream
        headers = {"Last-Event-ID": run.last_id} if run.last_id else {}
        headers.update(run.principal.headers)
        if stream.execution_id is not None:
            url = self._url(f"/threads/{run.thread_id}/runs/{stream.execution_id}/stream")
            request = self._session().get(url, headers=headers)
        else:
            url = self._url(f"/threads/{run.thread_id}/runs/stream")
            request = self._session().post(url, data=json_body(body), headers=headers)
        async with request as resp:
            if not 200 <= resp.status < 300:
                raise await error_for(resp, "XpertAI")
            events = read_sse(resp, comments=True)
            while not stream.complete:
                # Once the run reported its end, only its "complete" frame is awaited (a
                # resume must read after it), and not for long.
                wait = END_GRACE_S if stream.finished else s.idle_timeout_seconds
                try:
                    async with asyncio.timeout(wait):  # not wait_for: it can swallow a Stop
                        sse = await anext(events)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    # Abandon the connection: leaving the context manager normally would wait
                    # for a response the server is still holding open.
                    resp.close()
                    if stream.finished:
                        return
                    raise ExpertHttpError(
                        f"XpertAI sent nothing for {s.idle_timeout_seconds:g} s."
                    ) from None
                if sse.event == COMMENT:
                    continue  # a keep-alive: the run is alive
                run.last_id = sse.id or run.last_id
                for event in stream.feed(sse):
                    if not isinstance(event, Finished):
                        yield event

    async def steer(
        self, turn: TurnInput, text: str, attachments: tuple[dict[str, Any], ...] = ()
    ) -> tuple[RunEvent, ...]:
        """``follow_up``/``steer`` at the running execution, with its files (xpert_steer)."""
        run = self._runs.get(turn.turn_id)
        if run is None or run.stream.execution_id is None:
            raise ExpertHttpError("the run has not started yet")
        client_id, shown = await follow_up(
            self._session(),
            self.settings,
            replace(turn, attachments=attachments),
            text,
            thread_id=run.thread_id,
            target=run.stream.target,
            headers=run.principal.headers,
        )
        run.steers.append((client_id, text))
        return shown

    async def cancel(self, turn: TurnInput) -> None:
        run = self._runs.pop(turn.turn_id, None)
        if run is None or run.stream.execution_id is None:
            return
        execution = run.stream.execution_id
        url = self._url(f"/threads/{run.thread_id}/runs/{execution}/cancel")
        try:
            async with self._session().post(url, headers=run.principal.headers) as resp:
                if resp.status >= 400:
                    log.warning("xpert cancel refused", status=resp.status, run_id=execution)
        except aiohttp.ClientError as exc:
            log.warning("xpert cancel failed", error=str(exc), run_id=execution)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
