"""A fake XpertAI server (the Agent-Protocol API under ``/api/ai``) that behaves as the real one
does, including its refusals. Each behaviour names where it was read: ``X:`` paths are in
``xpert-ai/xpert`` @5135ce25 under ``packages/`` (``SA`` = ``X:server-ai/src``); Nest is
``@nestjs/core``/``@nestjs/common`` 11.1.13 and zod 3.25.67, the versions the server pins, read
in their published packages. What a run's input goes through is ``xpertai_input.py``; what a run
writes is ``xpertai_agent.py``. This module is longer than 300 lines because it is one server.

Auth (SV = X:server/src): ``ApiKeyOrClientSecretAuthGuard`` on every route
(SA/ai/thread.controller.ts l.86-92; SV/shared/guards/api-key-or-client-secret.guard.ts). A
missing or wrong ``x-api-key``, or an ``x-principal-user-id`` that names no user
(SV/api-key/api-key.strategy.ts l.37-56, SV/api-key/api-key.service.ts l.105-113), is a real 401
``{message:'Unauthorized', statusCode:401}`` (the body of Nest's ``UnauthorizedException()``):
``findOneByIdWithinTenant`` throws NotFound for an id not in the key's tenant (SV/user/
user.service.ts l.439-452), the strategy turns it into an error, and the guard, ignoring it,
falls back to ``CoreAuthGuard``, which refuses (api-key-or-client-secret.guard.ts l.56-68).
Each request's ``x-principal-user-id`` (None without one) is kept in ``principal_ids``.

Routes (SA/ai/thread.controller.ts; the file routes ``/contexts/file`` and
``/files/{id}/status`` are ``xpertai_files.py``'s):
- ``POST /threads`` → 201 ThreadDTO ``{thread_id, status, created_at, updated_at, metadata:{id:
  <conversation id>, title?, assistant_id}}``: of ``metadata`` only ``title`` is kept; an
  unknown ``assistant_id`` → 404; a given ``thread_id`` that exists with ``if_exists:'raise'`` →
  400 'The thread already exists.' (SA/ai/commands/handlers/thread-create.handler.ts l.50-111,
  SA/ai/dto/thread.dto.ts, SA/core/errors.ts l.16-20). The conversation id is not the thread id.
- ``POST /threads/{id}/runs/stream`` → **201** ``text/event-stream`` (Nest keeps the POST's 201
  for ``@Sse``: router-response-controller ``sse()``, sse-stream ``pipe()``): a blank line, then
  ``id: <stream id>`` + ``data: <JSON.stringify, no spaces>`` per entry, the last ``event:
  complete``; ``: keep-alive`` every 30 s (thread.controller.ts l.66-84). An error thrown while
  the run starts is NOT an HTTP error: the 201 stream carries one ``event: error`` / ``id: 1`` /
  ``data: <err.message>`` frame and ends without ``complete`` (Nest ``sse()`` catchError). A
  ``follow_up`` is the 'direct' transport: ``EMPTY``, so the body is the blank line and the end
  (SA/ai/commands/handlers/run-create-stream.handler.ts l.445-451).
- ``POST /threads/{id}/runs`` → 201 ``transformRun`` ``{run_id, thread_id, assistant_id?,
  created_at, updated_at, status}`` (thread.controller.ts l.202-211, 419-429), the run going on
  in the background; here the same errors are real HTTP errors (400 zod / follow-up, 403, 404,
  and 500 ``{statusCode:500, message:'Internal server error'}`` for a JS TypeError:
  SV/shared/http/http-like-exception.ts).
- ``GET /threads/{id}/runs/{run}/stream`` → 200; ``Last-Event-ID`` is the start of an exclusive
  ``XRANGE key (<id> +`` then ``XREAD``: ids compare as ``<ms>-<seq>`` numbers, ``<ms>`` alone is
  ``<ms>-0``, ``$`` is "from now", none is ``0-0`` (a full replay); a malformed one is Redis'
  error as an ``event: error`` frame (SA/shared/stream/redis-sse.service.ts l.156-251,
  283-346). ``POST …/runs/stream`` honours the header the same way, after the run started. An
  unknown run (or one of another thread: the key holds both ids, l.76-78) is not refused, only
  kept alive. The stream stops at the first ``complete``.
- ``POST /threads/{id}/runs/{run}/cancel`` → 201 ``{canceledExecutionIds:[run]}``, 404 for an
  unknown thread or run; a finished run is not refused: it and the conversation become
  ``interrupted`` with 'Canceled by user'; a running one is aborted and ends ``interrupted``
  without ``operation`` (SA/chat-conversation/commands/handlers/cancel-conversation.handler.ts
  l.31-116). The run need not belong to the thread.
- ``GET /threads/{id}/state`` → ``{values, checkpoint, parent_checkpoint?, metadata, created_at}``;
  500 before the thread's first run (no checkpoint: thread.controller.ts l.133-145, 431-439).
  Its messages are class instances put through ``instanceToPlain`` (``TransformInterceptor``,
  l.91): their fields, no ``type`` (``xpertai_agent.lc_message``).
- Access: an ``x-principal-user-id`` in ``no_access`` fails the assistant's access check
  (``resolveAssistantForRequest``): ``POST /threads`` with its ``assistant_id`` → 403 'You do
  not have access to this assistant.' (SA/ai/commands/handlers/thread-create.handler.ts
  l.53-60; SA/xpert/published-xpert-access.service.ts l.540-616), a run → the same as an
  ``event: error`` frame (run-create-stream.handler.ts l.357-362) or a 403 on ``POST /runs``.
- Limits: a JSON body over 50 MiB → 413 (body-parser ``json({limit:'50mb'})``,
  X:server/src/bootstrap/index.ts l.45; ``too_large``). A run whose files hold audio, or video
  without a local path, fails (``xpertai_agent.media_error``).

Starting a run (run-create-stream.handler.ts ``execute`` l.350-458, in this order): the thread's
conversation is looked up (null when unknown); the assistant is resolved (unknown → 404,
SA/xpert/published-xpert-access.service.ts l.502-519); zod validates the input (400, see
``xpertai_input.py``); an unknown thread then fails on ``conversation.id`` (l.318): a TypeError,
so 500 / an ``event: error`` 'Cannot read properties of null (reading 'id')'; a thread bound to
another assistant → 403 (SA/ai/assistant-request-context.ts l.87-109); then the execution:
``follow_up`` looks ``target.executionId`` up (404) or creates a stray one that stays
``running``; ``resume`` upserts ``target.executionId`` (an unknown id is created, not refused;
``target:{}`` creates a new id: the stream is keyed by it while the frames carry the resumed
execution's ids, l.398-421, 436-440).

The chat (SA/xpert/commands/handlers/chat.handler.ts = XC):
- ``send``: files first (data URLs stored, XC l.556-606; uploaded AgentFiles attached, an
  unknown one failing the run: ``xpertai_files.py``, XC l.729-791), then the newest pending
  follow-up of ANY mode with the send's ``clientMessageId`` (only that one:
  SA/shared/agent/persisted-follow-up.ts l.33-35, 155-198) runs with ITS stored input, the send's
  own input ignored (XC l.663-694), and the stream carries ``on_chat_event {type:
  'follow_up_consumed', mode:'queue'}`` right after ``on_conversation_start`` (XC l.855-863). The
  graph input is ``{...state, ...human extras, input, sys, human}`` (SA/xpert-agent/commands/
  handlers/invoke.handler.ts l.341-367): declared variables go through their reducer, other keys
  are dropped (LangGraph keeps only channels).
- ``resume``: ``target.aiMessageId`` else the last AI message ('Missing resume target AI
  message'), ``target.executionId`` else that message's (XC l.415-431); no check that anything
  waits; no variable state applied, only custom ``state.sys`` keys (invoke.handler.ts l.313-340).
- ``retry``: the source AI message and execution ('Missing retry source AI message', 404),
  its input run again as a new execution (XC l.621-661).
- ``follow_up`` (XC l.225-363): 400 'Follow-up is not available while the conversation is
  interrupted' unless it is a steer and ``conversation.operation.tasks`` is set (l.233-244); the
  target execution is the target AI message's (``aiMessageId`` else the last AI message), else
  ``target.executionId``, else the stray; a steer whose target no longer runs (or waits, for
  that interrupted steer) → 400 ``{code:'steer_target_not_running', message}`` (l.1252-1277),
  checked before and after the insert; 'Follow-up input is required' (l.288-294); a pending
  follow-up with the same ``clientMessageId`` is updated, not added (l.296-306).
- steers are consumed one per model step, ``queue`` ones never (see ``xpertai_agent.Turn``);
  the rest become ``queue`` at the run's end, an error or a cancel, not at an interrupt.

``sys`` (invoke.handler.ts l.292-310, 696-733): the ``x-principal-user-id`` user's
``preferredLanguage`` (else 'en-US'), ``email``, ``timeZone``; without the header the assistant's
technical user (``'en'``, none, none), not the API key's user (assistant-request-context.ts
l.151-184); the request's own ``state.sys`` keys are kept, the standard ones overwritten.

Markers in the input choose the agent's script: ``[interrupt]``, ``[drop]`` (the server drops
the first connection after four frames), ``[silent=S]`` (the tool works S s with only
keep-alives), ``[slow]``, ``[hold]`` (the tool runs until ``release()``), ``[late]`` (the last
model call holds until ``release()``: a steer then is not taken), ``[hold-complete]`` (the
``complete`` entry waits for ``release()``), ``[fail]`` (the model call fails), ``[web]`` (a
Tavily-like tool adds a status-less ``Computer`` update), ``[big]`` (a 1.5 MB tool output),
``[memory]`` (a memory reply: one bare string, no agent), ``[set name=value]`` (the agent writes
a variable), ``[clarify]`` (the clarification middleware's ``ask_clarification``:
``xpertai_agent.clarify``), ``[icon]`` (the tool component as the next release sends it: a
string title and an SVG ``icon``).

Not traced to a source (the fake's own choices or simplifications): the agent's script, its
texts, step titles and token counts; the exact ``datetime`` (the host's ``toLocaleString``) and
workspace strings in ``sys``; ``values`` holding only the declared variables, ``sys``, ``human``,
``input`` and ``messages`` (each run's human message, the answer of a run that answers through
the last model step, a clarification's AI and tool messages: ``xpertai_agent.lc_message``) and
``metadata: {source:'loop'}``; declared variables without
defaults; follow-up ``references`` counted only as present; the TypeError text for a non-string
follow-up input; a missing ``assistant_id`` answered as unknown (TypeORM would query without the
id); an input ``conversationId`` ignored; a resume with nothing waiting running the resume
script; a project's runtime access not checked, environment and sandbox options ignored;
``POST /threads`` without a JSON body taken as ``{}``; ThreadDTO without ``created_by``/
``updated_by``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.fakes.xpertai_agent import (
    InvalidStreamId,
    Run,
    Thread,
    Turn,
    dumps,
    iso_now,
    lc_message,
    parse_stream_id,
    run_agent,
    run_resume,
)
from tests.fakes.xpertai_files import FakeFiles
from tests.fakes.xpertai_input import (
    MISSING,
    TECHNICAL_USER,
    HttpError,
    Principal,
    bad_request,
    data_url_file,
    human_input,
    not_found,
    reduce_variable,
    runtime_sys,
    type_error,
    validate_run_input,
)

API_KEY = "sk-x-test"
STEER_NOT_RUNNING = "Steer follow-up target execution is no longer running"
NO_CACHE = "private, no-cache, no-store, must-revalidate, max-age=0, no-transform"  # SseStream
UNAUTHORIZED = {"message": "Unauthorized", "statusCode": 401}
FORBIDDEN = HttpError(403, "Forbidden", {"message": "Forbidden", "statusCode": 403})
NULL_CONVERSATION = "Cannot read properties of null (reading 'id')"
# ForbiddenException of SA/xpert/published-xpert-access.service.ts getAccessiblePublishedXpert
# (l.540-616): the acting user neither created the assistant nor may use it.
NO_ACCESS = HttpError(403, "You do not have access to this assistant.")
# body-parser json({limit: '50mb'}) (X: server/src/bootstrap/index.ts l.45; bytes.parse: 50 MiB).
JSON_LIMIT = 50 * 1024 * 1024


@dataclass
class FakeXpertAI:
    """``variables``: the assistant's declared state variables, ``name -> (type, operation)``.
    ``principals``: users ``x-principal-user-id`` may name."""

    assistants: set[str] = field(default_factory=lambda: {"sales"})
    variables: dict[str, tuple[str, str]] = field(
        default_factory=lambda: {
            "topic": ("string", "overwrite"),
            "notes": ("array", "append"),
            "chat_rules": ("text", "overwrite"),
        }
    )
    principals: dict[str, Principal] = field(
        default_factory=lambda: {
            "u-42": Principal("zh-Hans", "alice@example.com", "Asia/Shanghai"),
            "u-7": Principal(None, "bob@example.com", None),
        }
    )
    keepalive_s: float = 30.0
    end_nodes: set[str] = field(default_factory=set)  # the agent's (xpertai_agent.clarify)
    no_access: set[str] = field(default_factory=set)  # principal ids the assistants refuse
    body_bytes: list[int] = field(default_factory=list)  # each runs/stream request's length
    files: FakeFiles = field(default_factory=FakeFiles)  # uploads; what runs attach
    threads: dict[str, Thread] = field(default_factory=dict)
    runs: dict[str, Run] = field(default_factory=dict)  # executions by id
    requests: list[dict[str, Any]] = field(default_factory=list)  # run bodies, with thread
    cancels: list[str] = field(default_factory=list)
    steers: list[dict[str, Any]] = field(default_factory=list)  # follow-up inputs, with thread
    state_reads: list[str] = field(default_factory=list)
    headers: list[dict[str, str]] = field(default_factory=list)
    principal_ids: list[tuple[str, str | None]] = field(default_factory=list)  # path, header
    connections: list[tuple[str, str | None]] = field(default_factory=list)  # run, Last-Event-ID
    _release: asyncio.Event | None = None
    # The stream handlers under way: ended at shutdown, as Nest's server closes its streams
    # (else one waiting out a keep-alive period holds the server's cleanup that long).
    _streams: set[asyncio.Task[Any]] = field(default_factory=set)

    def app(self) -> web.Application:
        # Multer takes uploads without a size limit (xpertai_files.py); aiohttp's default
        # refuses bodies over 1 MiB.
        app = web.Application(client_max_size=256 * 1024 * 1024)
        r = app.router
        r.add_get("/api/ai/assistants/{aid}", self.assistant)
        r.add_post("/api/ai/threads", self.create_thread)
        r.add_post("/api/ai/threads/{tid}/runs/stream", self.run_stream)
        r.add_post("/api/ai/threads/{tid}/runs", self.create_run)
        r.add_get("/api/ai/threads/{tid}/runs/{rid}/stream", self.join_stream)
        r.add_post("/api/ai/threads/{tid}/runs/{rid}/cancel", self.cancel)
        r.add_get("/api/ai/threads/{tid}/state", self.state)
        self.files.mount(app, self._user)
        app.on_shutdown.append(self._stop_runs)
        return app

    def release(self) -> None:
        """Let every held step (``[hold]``, ``[late]``, ``[hold-complete]``) go on."""
        self.released.set()

    @property
    def released(self) -> asyncio.Event:
        if self._release is None:
            self._release = asyncio.Event()
        return self._release

    async def _stop_runs(self, _app: web.Application) -> None:
        for run in self.runs.values():
            if run.task is not None:
                run.task.cancel()
        for task in list(self._streams):
            task.cancel()

    # --- auth ------------------------------------------------------------------------------
    def _user(self, request: web.Request) -> Principal | None:
        """The acting user, or None when the request is refused (401)."""
        self.headers.append(dict(request.headers))
        self.principal_ids.append((request.path, request.headers.get("x-principal-user-id")))
        if request.headers.get("x-api-key") != API_KEY:
            return None
        named = request.headers.get("x-principal-user-id")
        if named is None:
            return TECHNICAL_USER  # the assistant's technical principal replaces the key's user
        return self.principals.get(named)

    def _refused(self, request: web.Request) -> bool:
        """Whether the acting user fails the assistant's access check
        (``resolveAssistantForRequest``: thread-create.handler.ts l.53-60,
        run-create-stream.handler.ts l.357-362)."""
        return request.headers.get("x-principal-user-id") in self.no_access

    # --- threads and state -----------------------------------------------------------------
    async def assistant(self, request: web.Request) -> web.Response:
        """``GET /assistants/:id``: the xpert as an Agent Protocol assistant (X: server-ai's
        AssistantsController ``getOne``, behind ``ApiKeyAuthGuard``, returns
        ``transformAssistant(xpert)``: assistant_id, name, version, created_at, updated_at,
        graph_id null, config null, metadata); an unknown id is the crud service's 404."""
        if self._user(request) is None:
            return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)
        aid = request.match_info["aid"]
        if aid not in self.assistants:
            return _error(not_found())
        return web.json_response(
            {
                "assistant_id": aid,
                "name": aid.title(),
                "version": 1,
                "created_at": "2026-01-01T00:00:00.000Z",
                "updated_at": "2026-01-01T00:00:00.000Z",
                "graph_id": None,
                "config": None,
                "metadata": {"avatar": None},
            },
            dumps=dumps,
        )

    async def create_thread(self, request: web.Request) -> web.Response:
        if self._user(request) is None:
            return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)
        if (request.content_length or 0) > JSON_LIMIT:
            return too_large()
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = {}
        body = body if isinstance(body, dict) else {}
        assistant = body.get("assistant_id")
        if assistant is not None and assistant not in self.assistants:
            return _error(not_found())
        if assistant is not None and self._refused(request):
            return _error(NO_ACCESS)
        tid = str(body.get("thread_id") or uuid.uuid4())
        thread = self.threads.get(tid)
        if thread is not None and body.get("if_exists") == "raise":
            return _error(bad_request("The thread already exists."))
        if thread is None:
            title = (body.get("metadata") or {}).get("title")
            thread = self.threads[tid] = Thread(id=tid, assistant=assistant, title=title)
        elif assistant is not None:
            if thread.assistant not in (None, assistant):
                return _error(FORBIDDEN)
            thread.assistant = assistant
        metadata = {
            "id": thread.conversation,
            "title": thread.title,
            "assistant_id": thread.assistant,
        }
        dto: dict[str, Any] = {"thread_id": thread.id, "status": thread.status}
        dto["created_at"] = iso_now()
        dto |= {
            "updated_at": iso_now(),
            "metadata": {k: v for k, v in metadata.items() if v is not None or k == "assistant_id"},
        }
        return web.json_response(dto, status=201, dumps=dumps)

    async def state(self, request: web.Request) -> web.Response:
        if self._user(request) is None:
            return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)
        thread = self.threads.get(request.match_info["tid"])
        if thread is None or not thread.checkpointed:  # transformThreadState(undefined)
            return _error(type_error("Cannot read properties of undefined (reading 'checkpoint')"))
        self.state_reads.append(thread.id)
        checkpoint = {"thread_id": thread.id, "checkpoint_ns": ""}
        body = {"values": thread.values, "checkpoint": checkpoint, "metadata": {"source": "loop"}}
        return web.json_response({**body, "created_at": iso_now()}, dumps=dumps)

    # --- starting runs ---------------------------------------------------------------------
    def _create(
        self, tid: str, body: Any, user: Principal, refused: bool = False
    ) -> tuple[Run, str]:
        """RunCreateStreamHandler.execute: the run and its transport ('redis' | 'direct')."""
        body = body if isinstance(body, dict) else {}
        thread = self.threads.get(tid)
        assistant = body.get("assistant_id")
        if assistant not in self.assistants:
            raise not_found()
        if refused:
            raise NO_ACCESS
        busy = thread is not None and thread.status == "busy"
        data = validate_run_input(body.get("input", MISSING), busy=busy)
        if thread is None:
            raise type_error(NULL_CONVERSATION)
        if thread.assistant not in (None, assistant):
            raise FORBIDDEN
        thread.assistant = assistant
        action = data["action"]
        project = data.get("projectId") if action == "send" else None
        if project:  # bindConversationProjectIfUnbound (SA/ai/assistant-request-context.ts
            # l.111-132, run-create-stream.handler.ts l.370-383): bound once, never moved
            if thread.project not in (None, project):
                raise HttpError(403, "The route Project does not match the conversation Project")
            thread.project = project
        if action == "follow_up":
            return self._follow_up(thread, data), "direct"
        self.requests.append({"thread": thread.id, **body})
        if action == "resume":
            return self._resume(thread, data, user), "redis"
        return self._send(thread, data, user), "redis"

    def _execution(self, thread: Thread, ident: str | None = None) -> Run:
        """``XpertAgentExecutionUpsertCommand({id, threadId, status:'running'})``: an existing
        row goes back to running, an unknown id is created (upsert.handler.ts l.17-35); only the
        chat that runs it gives it its xpert."""
        run = self.runs.get(ident or "")
        if run is None:
            run = Run(id=ident or str(uuid.uuid4()), thread=thread.id)
            self.runs[run.id] = run
        run.status = "running"
        return run

    def _send(self, thread: Thread, data: dict[str, Any], user: Principal) -> Run:
        state = data.get("state") or {}
        retry = data["action"] == "retry"
        key = self._execution(thread)
        parent: dict[str, Any] | None = None
        consumed: dict[str, Any] | None = None
        if retry:
            source = data["source"]
            message = self._message(thread, source.get("aiMessageId"), "retry source AI message")
            source_id = source.get("executionId") or message.get("executionId")
            if not source_id:
                raise bad_request("Retry source execution not found")
            source_run = self.runs.get(source_id)
            if source_run is None:
                raise not_found()
            human, state = dict(source_run.human), {}
            parent = next((m for m in thread.messages if m["id"] == message.get("parentId")), None)
            if parent is None:
                raise bad_request("Retry source human message not found")
        else:
            human = human_input(data.get("state", MISSING), data["message"]["input"])
            self.files.attach(thread.id, human.get("files"))
            thread.files += _files(human.get("files"))
            client_id = data["message"].get("clientMessageId")
            matched = next(
                (
                    m
                    for m in reversed(thread.pending())
                    if client_id and m.get("clientMessageId") == client_id.strip()
                ),
                None,
            )
            if matched is not None:
                human = human_input(data.get("state", MISSING), matched["input"])
                visible = iso_now()
                matched |= {"followUpStatus": "consumed", "visibleAt": visible}
                consumed = {
                    "type": "follow_up_consumed",
                    "mode": "queue",
                    "messageIds": [matched["id"]],
                }
                consumed |= {
                    "clientMessageIds": [client_id.strip()],
                    "executionId": matched["targetExecutionId"],
                    "visibleAt": visible,
                }
                parent = matched
            else:
                parent = _human(thread, human.get("input"))
        key.human = human
        extras = {k: v for k, v in human.items() if k not in ("input", "files")}
        for name, value in {**state, **extras}.items():
            if name in self.variables:  # undeclared keys are not channels: dropped
                kind, operation = self.variables[name]
                thread.values[name] = reduce_variable(
                    kind, operation, thread.values.get(name), value
                )
        self._start(
            thread, key, key, human, user, state.get("sys"), parent=parent, consumed=consumed
        )
        return key

    def _resume(self, thread: Thread, data: dict[str, Any], user: Principal) -> Run:
        target = data["target"]
        key = self._execution(thread, target.get("executionId"))
        human = human_input(data.get("state", MISSING), None)
        message = self._message(thread, target.get("aiMessageId"), "resume target AI message")
        execution = self.runs.get(target.get("executionId") or message.get("executionId") or "")
        if execution is None:
            raise bad_request("Missing resume target execution")
        execution.status = "running"
        state = data.get("state") or {}
        decision = data["decision"]["type"]
        self._start(
            thread,
            execution,
            key,
            human,
            user,
            state.get("sys"),
            message=message,
            decision=decision,
        )
        return key

    def _message(self, thread: Thread, ident: str | None, what: str) -> dict[str, Any]:
        if ident:
            found = next((m for m in thread.messages if m["id"] == ident), None)
        else:
            found = next(iter(reversed(thread.ai_messages())), None)
        if found is None:
            raise bad_request(f"Missing {what}")
        return found

    def _start(
        self,
        thread: Thread,
        execution: Run,
        key: Run,
        human: dict[str, Any],
        user: Principal,
        request_sys: Any,
        *,
        parent: dict[str, Any] | None = None,
        consumed: dict[str, Any] | None = None,
        message: dict[str, Any] | None = None,
        decision: str = "",
    ) -> None:
        execution.assistant = thread.assistant
        volume = f"/sandbox/xperts/{execution.assistant}"
        thread.values["sys"] = runtime_sys(
            thread.values.get("sys"), request_sys, user, thread_id=thread.id, volume=volume
        )
        if message is None:
            thread.values |= {"human": human, "input": human.get("input")}
            human_message = lc_message("HumanMessage", content=str(human.get("input") or ""))
            thread.values.setdefault("messages", []).append(human_message)
        thread.checkpointed, thread.status = True, "busy"
        text = (
            str(human.get("input") or "")
            if message is None
            else str(execution.human.get("input") or "")
        )
        turn = Turn(
            thread, execution, key.stream, message or {}, text, self.variables, self.released
        )
        turn.end_nodes = frozenset(self.end_nodes)
        if message is None:
            turn.ai = turn._ai_message(parent=parent["id"] if parent else None)
        execution.turn = turn
        script = run_agent(turn, consumed) if message is None else run_resume(turn, decision)
        execution.task = asyncio.create_task(script)

    def _follow_up(self, thread: Thread, data: dict[str, Any]) -> Run:
        target = data.get("target") or {}
        if target.get("executionId"):
            execution = self.runs.get(target["executionId"])
            if execution is None:
                raise not_found()
        else:
            execution = self._execution(thread)  # a stray run that stays running
        message = data["message"]
        human = human_input(data.get("state", MISSING), message["input"])
        tasks = (thread.operation or {}).get("tasks")
        waits = thread.status == "interrupted" and data["mode"] == "steer" and bool(tasks)
        if thread.status == "interrupted" and not waits:
            raise bad_request("Follow-up is not available while the conversation is interrupted")
        if target.get("aiMessageId"):
            aimed = next((m for m in thread.messages if m["id"] == target["aiMessageId"]), None)
        else:
            aimed = next(iter(reversed(thread.ai_messages())), None)
        target_id = (aimed or {}).get("executionId") or target.get("executionId") or execution.id
        self._assert_active(data, target_id, waits)
        files = message["input"].get("files")
        thread.files += _files(files)
        text = human.get("input")
        if text is not None and not isinstance(text, str):
            raise type_error("hydratedFollowUpInput?.input?.trim is not a function")
        refs = message["input"].get("references")
        if not (text or "").strip() and not (isinstance(files, list) and files) and not refs:
            raise bad_request("Follow-up input is required")
        client_id = message.get("clientMessageId")
        pending = {
            "followUpMode": data["mode"],
            "followUpStatus": "pending",
            "targetExecutionId": target_id,
        }
        pending |= {
            "input": dict(message["input"]),
            "clientMessageId": (client_id or "").strip() or None,
        }
        if files:  # kept as the human message's attachments, as they came: XC @0021e606,
            pending["attachments"] = files  # follow_up branch, ``attachments: followUpInput.files``
        same = next(
            (
                m
                for m in reversed(thread.pending())
                if client_id and m.get("clientMessageId") == client_id.strip()
            ),
            None,
        )
        if same is not None:
            same |= pending | {"content": text}
        else:
            _human(thread, text, parent=aimed).update(pending)
        self._assert_active(data, target_id, waits)
        self.steers.append({"thread": thread.id, **data})
        return execution

    def _assert_active(self, data: dict[str, Any], target_id: str, waits: bool) -> None:
        if data["mode"] != "steer":
            return
        run = self.runs.get(target_id)
        status = run.status if run is not None else None
        if not (status == "running" or (waits and status == "interrupted")):
            body = {"code": "steer_target_not_running", "message": STEER_NOT_RUNNING}
            raise HttpError(400, STEER_NOT_RUNNING, body)

    # --- the routes that start runs ----------------------------------------------------------
    async def run_stream(self, request: web.Request) -> web.StreamResponse:
        user = self._user(request)
        if user is None:
            return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)  # guards answer first
        if (request.content_length or 0) > JSON_LIMIT:
            return too_large()
        self.body_bytes.append(request.content_length or 0)
        body = await request.json()
        response = await self._open(request, status=201)
        try:
            run, transport = self._create(
                request.match_info["tid"], body, user, self._refused(request)
            )
        except HttpError as exc:
            await _error_frame(response, exc.message)
            return response
        if transport == "direct":
            return response
        drop_after = 4 if "[drop]" in json.dumps(body.get("input")) else None
        return await self._follow(
            request, response, run, request.headers.get("Last-Event-ID"), drop_after
        )

    async def create_run(self, request: web.Request) -> web.Response:
        user = self._user(request)
        if user is None:
            return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)
        if (request.content_length or 0) > JSON_LIMIT:
            return too_large()
        try:
            body = await request.json()
            run, _ = self._create(request.match_info["tid"], body, user, self._refused(request))
        except HttpError as exc:
            return _error(exc)
        dto = {"run_id": run.id, "thread_id": run.thread, "assistant_id": run.assistant}
        dto |= {"created_at": iso_now(), "updated_at": iso_now(), "status": run.status}
        return web.json_response(
            {k: v for k, v in dto.items() if v is not None}, status=201, dumps=dumps
        )

    async def join_stream(self, request: web.Request) -> web.StreamResponse:
        if self._user(request) is None:
            return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)
        response = await self._open(request, status=200)
        run = self.runs.get(request.match_info["rid"])
        if run is not None and run.thread != request.match_info["tid"]:
            run = None  # the stream key holds the thread id too
        return await self._follow(request, response, run, request.headers.get("Last-Event-ID"))

    async def _open(self, request: web.Request, *, status: int) -> web.StreamResponse:
        headers = {"Content-Type": "text/event-stream", "Connection": "keep-alive"}
        headers |= {
            "Cache-Control": NO_CACHE,
            "Pragma": "no-cache",
            "Expire": "0",
            "X-Accel-Buffering": "no",
        }
        response = web.StreamResponse(status=status, headers=headers)
        await response.prepare(request)
        await response.write(b"\n")
        return response

    async def _follow(
        self,
        request: web.Request,
        response: web.StreamResponse,
        run: Run | None,
        last_id: str | None,
        drop_after: int | None = None,
    ) -> web.StreamResponse:
        self.connections.append((run.id if run else request.match_info.get("rid", ""), last_id))
        task = asyncio.current_task()
        assert task is not None
        self._streams.add(task)
        try:
            return await self._stream(response, request, run, last_id, drop_after)
        finally:
            self._streams.discard(task)

    async def _stream(
        self,
        response: web.StreamResponse,
        request: web.Request,
        run: Run | None,
        last_id: str | None,
        drop_after: int | None,
    ) -> web.StreamResponse:
        try:
            start = parse_stream_id(last_id or "")
        except InvalidStreamId as exc:
            await _error_frame(response, str(exc))
            return response
        if run is None:  # no existence check: XREAD blocks, the heartbeat goes on
            while True:
                await asyncio.sleep(self.keepalive_s)
                await response.write(b": keep-alive\n\n")
        stream = run.stream
        position, sent = stream.start(start), 0
        while True:
            while position < len(stream.log):
                sid, payload = stream.log[position]
                position += 1
                complete = payload.get("type") == "complete"
                head = f"event: complete\nid: {sid}\n" if complete else f"id: {sid}\n"
                await response.write(f"{head}data: {dumps(payload)}\n\n".encode())
                sent += 1
                if complete:
                    return response
                if drop_after is not None and sent >= drop_after:
                    assert request.transport is not None
                    request.transport.close()  # the network drops; the run goes on
                    return response
            try:
                await asyncio.wait_for(stream.changed.wait(), self.keepalive_s)
            except TimeoutError:
                await response.write(b": keep-alive\n\n")

    # --- cancel ----------------------------------------------------------------------------
    async def cancel(self, request: web.Request) -> web.Response:
        if self._user(request) is None:
            return web.json_response(UNAUTHORIZED, status=401, dumps=dumps)
        thread = self.threads.get(request.match_info["tid"])
        run = self.runs.get(request.match_info["rid"])
        self.cancels.append(request.match_info["rid"])
        if thread is None or run is None:
            return _error(not_found())
        run.status, run.error = "interrupted", "Canceled by user"
        thread.status, thread.error = "interrupted", "Canceled by user"
        turn = run.turn
        if turn is not None and run.task is not None and not run.task.done():
            run.task.cancel()  # the AbortController registered under the run id
            await turn.finish("interrupted")
        return web.json_response({"canceledExecutionIds": [run.id]}, status=201, dumps=dumps)


def _files(files: Any) -> list[tuple[str, int]]:
    stored = [data_url_file(f) for f in files] if isinstance(files, list) else []
    return [s for s in stored if s is not None]


def _human(thread: Thread, text: Any, parent: dict[str, Any] | None = None) -> dict[str, Any]:
    message = {"id": str(uuid.uuid4()), "role": "human", "content": text}
    message |= {"conversationId": thread.conversation, "parentId": (parent or {}).get("id")}
    thread.messages.append(message)
    return message


def too_large() -> web.Response:
    """A JSON body over ``JSON_LIMIT``: body-parser's 413 ``PayloadTooLargeError: request entity
    too large`` (body-parser 1.x ``lib/read.js``), which Nest's Express app answers with
    Express' ``finalhandler`` page: 413 and an HTML body. ⚠ untraced: the page's exact markup
    (it carries the stack outside production)."""
    html = '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>Error</title>'
    html += "\n</head>\n<body>\n<pre>PayloadTooLargeError: request entity too large</pre>\n"
    return web.Response(status=413, text=html + "</body>\n</html>\n", content_type="text/html")


def _error(exc: HttpError) -> web.Response:
    return web.json_response(exc.body, status=exc.status, dumps=dumps)


async def _error_frame(response: web.StreamResponse, message: str) -> None:
    """Nest's ``sse()`` catchError: ``{type:'error', data: err.message}``, id 1, then the end."""
    lines = "".join(f"data: {line}\n" for line in message.split("\n"))
    await response.write(f"event: error\nid: 1\n{lines}\n".encode())
