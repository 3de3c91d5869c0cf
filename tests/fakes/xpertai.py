"""A fake XpertAI server (the Agent-Protocol API under ``/api/ai``) that behaves as the real one
does, including its refusals. Each behaviour names where it was read: ``X:`` paths are in
``xpert-ai/xpert`` @5135ce25 under ``packages/``; Nest behaviour is ``@nestjs/core`` 11.1.13, the
version the server pins. This module is longer than 300 lines because it is one server.

Routes (X: server-ai/src/ai/thread.controller.ts; ApiKeyOrClientSecretAuthGuard, so a missing or
wrong ``x-api-key`` is a real HTTP 401 ``{statusCode, message}``):
- ``POST /threads`` → 201 ``{thread_id, status, metadata:{id, title, assistant_id}}``; of
  ``metadata`` only ``title`` is kept; an unknown ``assistant_id`` → 404
  (X: ai/commands/handlers/thread-create.handler.ts, ai/dto/thread.dto.ts).
- ``POST /threads/{id}/runs/stream`` → **201** ``text/event-stream`` (Nest keeps the POST status
  for ``@Sse``): a blank line, then ``id: <redis stream id>`` + ``data: <json>`` per event, the
  last ``event: complete`` ``data: {"type":"complete"}``; ``: keep-alive`` every 30 s
  (X: ai/thread.controller.ts startSseHeartbeat, shared/stream/redis-sse.service.ts). An error
  thrown while the run starts (zod validation such as ``target: Required``, an unknown thread or
  assistant, a bad data URL) is NOT an HTTP error: the 201 stream carries one ``event: error``
  frame with the plain message and ends without ``complete`` (Nest router-response-controller
  ``sse()``; X: ai/commands/handlers/run-create-stream.handler.ts validateRunCreateInput).
  The events go to a per-run log that outlives the connection (the Redis stream), so the run goes
  on when a client drops, and ``Last-Event-ID`` is honoured here too.
- ``GET /threads/{id}/runs/{run}/stream`` → 200; with ``Last-Event-ID`` strictly after it (XRANGE
  ``(id``), without it from ``0-0``; an unknown run is not refused, only kept alive
  (X: redis-sse.service.ts normalizeStartId, readRange). A resume appends to the interrupted
  execution's log, so without ``Last-Event-ID`` the old frames and their ``complete`` come first.
- ``POST /threads/{id}/runs`` (follow-ups) → 201 ``transformRun``; errors are real HTTP 400s:
  ``{code:'steer_target_not_running', message}`` once the target no longer runs, 'Follow-up is not
  available while the conversation is interrupted' (X: xpert/commands/handlers/chat.handler.ts
  assertSteerTargetIsActive). A steer is taken at the run's next step
  (``on_chat_event {type:'follow_up_consumed', clientMessageIds}``, ``on_message_end``, a new
  ``on_message_start`` with the same execution; X: xpert-agent/commands/handlers/
  create-node-consume-pending-steer-follow-ups.handler.ts); one the run ends before taking is
  queued, and runs when a ``send`` carries its clientMessageId (X: invoke.handler.ts
  downgradePendingSteerFollowUpsToQueue, shared/agent/persisted-follow-up.ts).
- ``POST /threads/{id}/runs/{run}/cancel`` → 201 ``{canceledExecutionIds:[run]}``, 404 for an
  unknown thread or run; a finished run is not refused: it and the conversation become
  ``interrupted``; a running one ends with ``on_agent_end {status:'interrupted'}``,
  ``on_message_end``, ``on_conversation_end {status:'interrupted'}`` without ``operation``
  (X: chat-conversation/commands/handlers/cancel-conversation.handler.ts, chat.handler.ts).
- ``GET /threads/{id}/state`` → ``{values, checkpoint, parent_checkpoint, metadata, created_at}``;
  ``values`` are the channels by name: declared variables, ``sys``, ``human``; 500 before the
  first run (X: ai/thread.controller.ts transformThreadState, shared/agent/state.ts).

State (X: shared/agent/utils.ts normalizeChatState, xpert-agent/commands/handlers/invoke.handler.ts,
shared/agent/state.ts stateVariable): a ``send``'s ``state`` keys that are declared variables go
through their reducer (``append``: lists concatenate, strings join, numbers add; ``overwrite``:
replaced); undeclared keys are dropped (LangGraph keeps only channels); a resume or follow-up
applies no state. ``sys`` holds the principal's language, email and time zone: the
``x-principal-user-id`` user's, else the assistant's technical user ('en', none, none)
(X: ai/assistant-request-context.ts, invoke.handler.ts buildRuntimeSystemState).

Files (X: xpert/commands/handlers/chat-file-assets.ts): ``data:`` URLs in ``fileUrl``/``url``
must be base64 ('Invalid chat request file data URL') and at most 25 MiB ('Chat request file is
too large') and become file assets; other URLs are not fetched and reach nothing.

One run's frames, in the server's order (X: xpert/commands/handlers/chat.handler.ts,
xpert-agent/agent.ts): ``on_conversation_start``, ``on_message_start {id, executionId}``,
``on_chat_event`` steps and middleware events, tool components (``category:'Tool'`` first, then
status updates under the same id), reasoning and text chunks, ``on_agent_end`` (usage),
``on_message_end``, ``on_conversation_end {status: idle|interrupted|error, operation?, error?}``,
``complete``. An interrupt is ``on_interrupt`` with a ``TSensitiveOperation``
(X: contracts/src/ai/chat.model.ts) then ``on_conversation_end {status:'interrupted', operation}``;
a resume continues the same AI message and execution (chat.handler.ts
resolveResumeTargetMessage: 'Missing resume target AI message').

Markers in the input choose the agent's script: ``[interrupt]``, ``[drop]`` (the server drops the
first connection after four frames), ``[silent=S]`` (a tool works S seconds with only
keep-alives), ``[slow]``, ``[late]`` (a second between the answer and the end), ``[fail]``,
``[set name=value]`` (the agent writes a variable).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

API_KEY = "sk-x-test"
SET = re.compile(r"\[set ([A-Za-z_]\w*)=([^\]]*)\]")
SILENT = re.compile(r"\[silent=([\d.]+)\]")
DATA_URL = re.compile(r"^data:([^;,]+)?((?:;[^,]*)*),([\s\S]*)$")
MAX_DATA_URL_BYTES = 25 * 1024 * 1024
STEER_NOT_RUNNING = "Steer follow-up target execution is no longer running"
NO_CACHE = "private, no-cache, no-store, must-revalidate, max-age=0, no-transform"  # SseStream
NOT_FOUND = {
    "statusCode": 404,
    "message": "The requested record was not found",
    "error": "Not Found",
}


class StartError(Exception):
    """Thrown while a run starts: Nest writes it into the 201 stream as ``event: error``."""


@dataclass
class Run:
    id: str
    thread: str
    status: str = "running"  # XpertAgentExecutionStatusEnum: running|success|error|interrupted
    ai_message: str = ""
    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    steers: list[tuple[str, str]] = field(default_factory=list)  # pending: (clientMessageId, text)
    task: asyncio.Task[None] | None = None

    def append(self, stream_id: str, payload: dict[str, Any]) -> None:
        self.log.append((stream_id, payload))
        self.changed.set()
        self.changed = asyncio.Event()


@dataclass
class Thread:
    id: str
    assistant: str | None
    status: str = "idle"  # TChatConversationStatus: idle|busy|interrupted|error
    values: dict[str, Any] = field(default_factory=dict)
    messages: list[dict[str, str]] = field(default_factory=list)  # AI messages: id, executionId
    files: list[tuple[str, int]] = field(default_factory=list)  # file assets: (mime, size)
    queued: list[tuple[str, str]] = field(
        default_factory=list
    )  # follow-ups: (clientMessageId, text)


@dataclass
class FakeXpertAI:
    """``variables``: the assistant's declared state variables, ``name -> (type, reducer)``.
    ``principals``: users ``x-principal-user-id`` may name, with their profile."""

    assistants: set[str] = field(default_factory=lambda: {"sales"})
    variables: dict[str, tuple[str, str]] = field(
        default_factory=lambda: {
            "topic": ("string", "overwrite"),
            "notes": ("array", "append"),
            "chat_rules": ("text", "overwrite"),
        }
    )
    principals: dict[str, dict[str, str]] = field(
        default_factory=lambda: {
            "u-42": {
                "language": "zh-Hans",
                "email": "alice@example.com",
                "timeZone": "Asia/Shanghai",
            }
        }
    )
    keepalive_s: float = 30.0
    threads: dict[str, Thread] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)
    requests: list[dict[str, Any]] = field(default_factory=list)  # every run body, with thread
    cancels: list[str] = field(default_factory=list)
    steers: list[dict[str, Any]] = field(default_factory=list)
    state_reads: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    connections: list[tuple[str, str | None]] = field(default_factory=list)  # (run, Last-Event-ID)
    _seq: itertools.count[int] = field(default_factory=lambda: itertools.count())

    def app(self) -> web.Application:
        app = web.Application()
        r = app.router
        r.add_post("/api/ai/threads", self.create_thread)
        r.add_post("/api/ai/threads/{tid}/runs/stream", self.run_stream)
        r.add_post("/api/ai/threads/{tid}/runs", self.create_run)
        r.add_get("/api/ai/threads/{tid}/runs/{rid}/stream", self.join_stream)
        r.add_post("/api/ai/threads/{tid}/runs/{rid}/cancel", self.cancel)
        r.add_get("/api/ai/threads/{tid}/state", self.state)
        app.on_shutdown.append(self._stop_runs)
        return app

    async def _stop_runs(self, _app: web.Application) -> None:
        for run in self.runs.values():
            if run.task is not None:
                run.task.cancel()

    # --- auth and ids ----------------------------------------------------------------------
    def _authorised(self, request: web.Request) -> web.Response | None:
        self.headers.append(dict(request.headers))
        if request.headers.get("x-api-key") == API_KEY:
            return None
        return web.json_response({"statusCode": 401, "message": "Unauthorized"}, status=401)

    def _stream_id(self) -> str:
        return f"{int(time.time() * 1000)}-{next(self._seq)}"

    # --- threads and state -----------------------------------------------------------------
    async def create_thread(self, request: web.Request) -> web.Response:
        if (refused := self._authorised(request)) is not None:
            return refused
        body = await request.json()
        assistant = body.get("assistant_id")
        if assistant is not None and assistant not in self.assistants:
            return web.json_response(NOT_FOUND, status=404)
        thread = Thread(id=str(uuid.uuid4()), assistant=assistant)
        self.threads[thread.id] = thread
        title = (body.get("metadata") or {}).get("title")
        metadata = {"id": thread.id, "title": title, "assistant_id": assistant}
        return web.json_response(
            {"thread_id": thread.id, "status": None, "metadata": metadata}, status=201
        )

    async def state(self, request: web.Request) -> web.Response:
        if (refused := self._authorised(request)) is not None:
            return refused
        thread = self.threads.get(request.match_info["tid"])
        if thread is None or not thread.messages:  # no checkpoint yet: a TypeError, so 500
            return web.json_response(
                {"statusCode": 500, "message": "Internal server error"}, status=500
            )
        self.state_reads.append(thread.id)
        checkpoint = {"thread_id": thread.id, "checkpoint_ns": ""}
        return web.json_response(
            {"values": thread.values, "checkpoint": checkpoint, "metadata": {"source": "loop"}}
        )

    def _reduce(self, thread: Thread, name: str, value: Any) -> None:
        """X: shared/agent/state.ts stateVariable: only append and overwrite exist."""
        kind, reducer = self.variables[name]
        current = thread.values.get(name)
        if reducer == "append" and current is not None:
            if kind.startswith("array"):
                value = [*current, *(value if isinstance(value, list) else [value])]
            elif kind == "number":
                value = current + float(value)
            elif kind in ("string", "text", "paragraph"):
                value = f"{current}{value}"
        thread.values[name] = value

    def _sys(self, thread: Thread, principal: str | None) -> dict[str, Any]:
        user = self.principals.get(principal or "", {})
        return {
            "language": user.get("language") or "en",  # the technical user's 'en'
            "user_email": user.get("email"),
            "timezone": user.get("timeZone"),
            "date": time.strftime("%Y-%m-%d"),
            "thread_id": thread.id,
        }

    # --- starting runs ---------------------------------------------------------------------
    def _validate(self, data: Any) -> None:
        """X: run-create-stream.handler.ts chatRequestSchema (a zod discriminated union)."""
        if not isinstance(data, dict):
            raise StartError("input: Expected object, received " + type(data).__name__)
        action = data.get("action", "send")
        if action not in ("send", "resume", "retry", "follow_up"):
            raise StartError(
                "action: Invalid discriminator value. Expected 'send' | 'resume' | 'retry' | "
                "'follow_up'"
            )
        if action == "resume":
            if not isinstance(data.get("target"), dict):
                raise StartError("target: Required")
            if (data.get("decision") or {}).get("type") not in ("confirm", "reject"):
                raise StartError('decision.type: Invalid literal value, expected "confirm"')
        if action in ("send", "follow_up"):
            message = data.get("message")
            if not isinstance(message, dict) or not isinstance(message.get("input"), dict):
                raise StartError("message: Required")
        if action == "follow_up" and data.get("mode") not in ("queue", "steer"):
            raise StartError('mode: Invalid literal value, expected "queue"')
        if "state" in data and not isinstance(data["state"], dict):
            raise StartError("state: Expected object, received " + type(data["state"]).__name__)

    def _files(self, files: list[Any]) -> list[tuple[str, int]]:
        stored: list[tuple[str, int]] = []
        for file in files:
            url = (
                str(file.get("fileUrl") or file.get("url") or "") if isinstance(file, dict) else ""
            )
            if not url.startswith("data:"):
                continue  # not fetched: nothing reaches the agent
            match = DATA_URL.match(url)
            if not match or "base64" not in match.group(2).split(";"):
                raise StartError("Invalid chat request file data URL")
            payload = re.sub(r"\s", "", match.group(3))
            if len(payload) * 3 // 4 > MAX_DATA_URL_BYTES:
                raise StartError("Chat request file is too large")
            mime = (match.group(1) or file.get("mimeType") or "application/octet-stream").lower()
            stored.append((mime, len(base64.b64decode(payload))))
        return stored

    def _start(self, thread: Thread | None, body: dict[str, Any], principal: str | None) -> Run:
        if thread is None:
            raise StartError("Cannot read properties of null (reading 'id')")
        if body.get("assistant_id") not in self.assistants:
            raise StartError("The requested record was not found")
        data = body.get("input")
        self._validate(data)
        self.requests.append({"thread": thread.id, **body})
        if data.get("action") == "resume":
            return self._resume_run(thread, data)
        message = data["message"]
        thread.files += self._files(message["input"].get("files") or [])
        text = str(message["input"].get("input") or "")
        queued = [t for cid, t in thread.queued if cid == message.get("clientMessageId")]
        if queued:  # the send runs the queued follow-ups instead (persisted-follow-up.ts)
            thread.queued = [q for q in thread.queued if q[0] != message.get("clientMessageId")]
            text = "\n".join(queued)
        for name, value in (data.get("state") or {}).items():
            if name in self.variables:  # undeclared keys are not channels: dropped
                self._reduce(thread, name, value)
        thread.values["sys"] = self._sys(thread, principal)
        thread.values["human"] = {"input": text}
        run = Run(id=str(uuid.uuid4()), thread=thread.id, ai_message=str(uuid.uuid4()))
        self.runs[run.id] = run
        thread.messages.append({"id": run.ai_message, "executionId": run.id})
        thread.status = "busy"
        run.task = asyncio.create_task(self._agent(thread, run, text))
        return run

    def _resume_run(self, thread: Thread, data: dict[str, Any]) -> Run:
        target = data["target"]
        if target.get("aiMessageId"):
            message = next((m for m in thread.messages if m["id"] == target["aiMessageId"]), None)
        else:
            message = thread.messages[-1] if thread.messages else None
        if message is None:
            raise StartError("Missing resume target AI message")
        run = self.runs.get(target.get("executionId") or message["executionId"])
        if run is None:
            raise StartError("The requested record was not found")
        # The server does not check that the run waits for a confirmation (chat.handler.ts).
        run.status, thread.status = "running", "busy"
        run.task = asyncio.create_task(self._resume(thread, run, data["decision"]["type"]))
        return run

    async def run_stream(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._authorised(request)) is not None:
            return refused  # guards answer before the stream starts
        body = await request.json()
        response = await self._open(request, status=201)
        try:
            run = self._start(
                self.threads.get(request.match_info["tid"]),
                body,
                request.headers.get("x-principal-user-id"),
            )
        except StartError as exc:
            await response.write(f"event: error\nid: 1\ndata: {exc}\n\n".encode())
            return response
        drop_after = 4 if "[drop]" in json.dumps(body.get("input")) else None
        last_id = request.headers.get("Last-Event-ID")
        return await self._follow(request, response, run, last_id, drop_after=drop_after)

    async def join_stream(self, request: web.Request) -> web.StreamResponse:
        if (refused := self._authorised(request)) is not None:
            return refused
        response = await self._open(request, status=200)
        run = self.runs.get(request.match_info["rid"])
        if run is None:  # no existence check: kept alive until the client gives up
            while True:
                await asyncio.sleep(self.keepalive_s)
                await response.write(b": keep-alive\n\n")
        return await self._follow(request, response, run, request.headers.get("Last-Event-ID"))

    async def _open(self, request: web.Request, *, status: int) -> web.StreamResponse:
        response = web.StreamResponse(
            status=status,
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": NO_CACHE,
                "Connection": "keep-alive",
                "X-Accel-Buffering": "no",
            },
        )
        await response.prepare(request)
        await response.write(b"\n")
        return response

    async def _follow(
        self,
        request: web.Request,
        response: web.StreamResponse,
        run: Run,
        last_id: str | None,
        *,
        drop_after: int | None = None,
    ) -> web.StreamResponse:
        self.connections.append((run.id, last_id))
        position = 0
        if last_id:
            position = next((i + 1 for i, (sid, _) in enumerate(run.log) if sid == last_id), 0)
        sent = 0
        while True:
            while position < len(run.log):
                sid, payload = run.log[position]
                position += 1
                complete = payload.get("type") == "complete"
                head = f"event: complete\nid: {sid}\n" if complete else f"id: {sid}\n"
                await response.write(f"{head}data: {json.dumps(payload)}\n\n".encode())
                sent += 1
                if complete:
                    return response
                if drop_after is not None and sent >= drop_after:
                    assert request.transport is not None
                    request.transport.close()  # the network drops; the run goes on
                    return response
            try:
                await asyncio.wait_for(run.changed.wait(), self.keepalive_s)
            except TimeoutError:
                await response.write(b": keep-alive\n\n")

    # --- follow-ups and cancel -------------------------------------------------------------
    async def create_run(self, request: web.Request) -> web.Response:
        if (refused := self._authorised(request)) is not None:
            return refused
        thread = self.threads.get(request.match_info["tid"])
        body = await request.json()
        if thread is None:
            return web.json_response(NOT_FOUND, status=404)
        data = body.get("input")
        try:
            self._validate(data)
        except StartError as exc:
            return web.json_response(
                {"message": str(exc), "error": "Bad Request", "statusCode": 400}, status=400
            )
        if data.get("action") != "follow_up":
            return web.json_response({"message": "not served by this fake"}, status=501)
        self.steers.append({"thread": thread.id, **data})
        if thread.status == "interrupted":
            return web.json_response(
                {
                    "message": "Follow-up is not available while the conversation is interrupted",
                    "error": "Bad Request",
                    "statusCode": 400,
                },
                status=400,
            )
        target = data.get("target") or {}
        if target.get("executionId") and target["executionId"] not in self.runs:
            return web.json_response(NOT_FOUND, status=404)
        execution = target.get("executionId") or (
            thread.messages[-1]["executionId"] if thread.messages else ""
        )
        run = self.runs.get(execution)
        if data["mode"] == "steer" and (run is None or run.status != "running"):
            return web.json_response(
                {"code": "steer_target_not_running", "message": STEER_NOT_RUNNING}, status=400
            )
        assert run is not None
        message = data["message"]
        client_id = str(message.get("clientMessageId") or uuid.uuid4())
        run.steers.append((client_id, str(message["input"].get("input") or "")))
        return web.json_response(
            {"run_id": run.id, "thread_id": thread.id, "status": run.status}, status=201
        )

    async def cancel(self, request: web.Request) -> web.Response:
        if (refused := self._authorised(request)) is not None:
            return refused
        thread = self.threads.get(request.match_info["tid"])
        run = self.runs.get(request.match_info["rid"])
        self.cancels.append(request.match_info["rid"])
        if thread is None or run is None:
            return web.json_response(NOT_FOUND, status=404)
        if run.task is not None and run.status == "running":
            run.task.cancel()
            self._end(thread, run, "interrupted")  # no operation: nothing to confirm
        run.status = thread.status = "interrupted"
        return web.json_response({"canceledExecutionIds": [run.id]}, status=201)

    # --- the agent -------------------------------------------------------------------------
    def _emit(self, run: Run, event: str, data: dict[str, Any]) -> None:
        run.append(self._stream_id(), {"type": "event", "event": event, "data": data})

    def _message(self, run: Run, data: Any) -> None:
        run.append(self._stream_id(), {"type": "message", "data": data})

    def _text(self, run: Run, text: str) -> None:
        chunk = {"type": "text", "text": text, "id": run.ai_message, "executionId": run.id}
        self._message(run, chunk)

    def _message_start(self, run: Run) -> None:
        start = {"id": run.ai_message, "role": "ai", "executionId": run.id, "status": "thinking"}
        self._emit(run, "on_message_start", start)

    def _tool(self, run: Run, call: str, status: str, **data: Any) -> None:
        if status == "running":
            data = {"category": "Tool", **data}
        component = {"id": call, "type": "component", "executionId": run.id}
        self._message(run, {**component, "data": {**data, "status": status}})

    def _end(self, thread: Thread, run: Run, status: str, **extra: Any) -> None:
        run.status = {"idle": "success", "interrupted": "interrupted"}.get(status, "error")
        thread.status = status
        usage = {"totalTokens": 120, "tokens": 120, "inputTokens": 80, "outputTokens": 40}
        self._emit(run, "on_agent_end", {"id": run.id, "status": run.status, **usage})
        end = {"id": run.ai_message, "executionId": run.id, "role": "ai", "status": "success"}
        self._emit(run, "on_message_end", end)
        self._emit(run, "on_conversation_end", {"id": thread.id, "status": status, **extra})
        run.append(self._stream_id(), {"type": "complete"})
        if run.steers:  # not taken before the end: queued (downgradePendingSteerFollowUpsToQueue)
            thread.queued += run.steers
            run.steers = []

    async def _pause(self, text: str) -> None:
        await asyncio.sleep(0.3 if "[slow]" in text else 0.01)

    def _take_steers(self, thread: Thread, run: Run) -> None:
        if not run.steers:
            return
        taken, run.steers = run.steers, []
        consumed = {
            "type": "follow_up_consumed",
            "mode": "steer",
            "messageIds": [str(uuid.uuid4()) for _ in taken],
            "clientMessageIds": [cid for cid, _ in taken],
            "executionId": run.id,
        }
        self._emit(run, "on_chat_event", consumed)
        self._emit(run, "on_message_end", {"id": run.ai_message, "executionId": run.id})
        run.ai_message = str(uuid.uuid4())
        thread.messages.append({"id": run.ai_message, "executionId": run.id})
        self._message_start(run)
        for _, steered in taken:
            self._text(run, f" (steer: {steered})")

    async def _agent(self, thread: Thread, run: Run, text: str) -> None:
        self._emit(run, "on_conversation_start", {"id": thread.id, "status": "busy"})
        self._message_start(run)
        await self._pause(text)
        self._emit(run, "on_chat_event", {"type": "middleware_event", "name": "summarize"})
        self._emit(run, "on_chat_event", {"id": "plan", "title": "Planning", "status": "running"})
        await self._pause(text)
        self._emit(run, "on_chat_event", {"id": "plan", "title": "Planning", "status": "success"})
        if "[fail]" in text:
            self._end(thread, run, "error", error="Model quota exceeded")
            return
        if "[interrupt]" in text:
            info = {
                "name": "send_email",
                "title": "Send email",
                "description": "Send the report to the whole team?",
            }
            call = {"id": "call_mail", "name": "send_email", "args": {"to": "team"}}
            task = {"name": "send_email", "interrupts": [], "info": info, "call": call}
            operation = {"messageId": run.ai_message, "tasks": [task]}
            self._emit(run, "on_interrupt", operation)
            self._end(thread, run, "interrupted", operation=operation)
            return
        self._tool(run, "call_1", "running", tool="wiki_search", title="Search the wiki")
        if match := SILENT.search(text):
            await asyncio.sleep(float(match.group(1)))
        await self._pause(text)
        self._tool(run, "call_1", "success", output="3 pages found")
        self._message(run, {"type": "reasoning", "text": "hidden thoughts", "id": run.ai_message})
        for part in ("Hello ", "from ", "xpert"):
            await self._pause(text)
            self._take_steers(thread, run)
            self._text(run, part)
        self._message(run, f" [{text}]")  # a bare string chunk (X: chat.handler.ts memory reply)
        if "[late]" in text:
            await asyncio.sleep(1.0)  # a last step: a steer that comes now is not taken
        for name, value in SET.findall(text):
            if name in self.variables:
                self._reduce(thread, name, value)
        self._end(thread, run, "idle")

    async def _resume(self, thread: Thread, run: Run, decision: str) -> None:
        self._emit(run, "on_conversation_start", {"id": thread.id, "status": "busy"})
        self._message_start(run)
        await asyncio.sleep(0.01)
        if decision == "confirm":
            self._tool(run, "call_mail", "running", tool="send_email", title="Send email")
            self._tool(run, "call_mail", "success", output="sent")
            self._text(run, "Email sent to the team.")
        else:
            self._text(run, "Not sent: you rejected it.")
        self._end(thread, run, "idle")
