"""The fake XpertAI server's state and its scripted agent: what one run writes to its stream, in
the real server's order and shapes. ``X:`` paths are in ``xpert-ai/xpert`` @5135ce25 under
``packages/``; the frame shapes are listed in ``tests/fakes/xpertai.py``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.fakes.xpertai_input import reduce_variable

SET = re.compile(r"\[set ([A-Za-z_]\w*)=([^\]]*)\]")
SILENT = re.compile(r"\[silent=([\d.]+)\]")
STREAM_ID = re.compile(r"^[ \t\n\v\f\r]*\+?(\d+)(?:-[ \t\n\v\f\r]*\+?(\d+))?$")
MAX_ID = 2**64 - 1
HOLD_LIMIT_S = 10.0  # a held step goes on by itself after this long
BIG_OUTPUT_BYTES = 1_500_000  # ``[big]``: a tool output longer than a MiB, on one data: line
SVG_ICON = '<svg viewBox="0 0 24 24"><path d="M12 2L2 22h20z"/></svg>'
USAGE = {"tokens": 120, "totalTokens": 120, "inputTokens": 80, "outputTokens": 40}


class InvalidStreamId(Exception):
    """The error Redis answers to XRANGE with a malformed start id."""


def iso_now() -> str:
    """A JS ``Date`` as JSON: ``2026-11-30T10:00:00.000Z``."""
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now * 1000) % 1000:03d}Z"


def compact(data: dict[str, Any]) -> dict[str, Any]:
    """``serializeRunStreamPayload``: only the top-level nil fields of a frame's ``data`` go
    (X: server-ai/src/shared/stream/run-stream-payload.ts l.128-160); nested ones stay."""
    return {k: v for k, v in data.items() if v is not None}


def dumps(value: Any) -> str:
    """``JSON.stringify``: no spaces, non-ASCII as it is."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def parse_stream_id(raw: str) -> tuple[int, int] | None:
    """A ``Last-Event-ID`` as the start of ``XRANGE key (<id> +``: trimmed first
    (redis-sse.service.ts normalizeStartId), empty means ``0-0``, ``$`` means "from now" (None);
    ``<ms>`` alone is ``<ms>-0``. Anything else is the error Redis answers."""
    text = raw.strip()
    if not text:
        return (0, 0)
    if text == "$":
        return None
    match = STREAM_ID.match(text)
    if not match or int(match.group(1)) > MAX_ID or int(match.group(2) or 0) > MAX_ID:
        raise InvalidStreamId("ERR Invalid stream ID specified as stream command argument")
    ms, seq = int(match.group(1)), int(match.group(2) or 0)
    if (ms, seq) == (MAX_ID, MAX_ID):
        raise InvalidStreamId("ERR invalid start ID for the interval")
    return ms, seq


@dataclass
class Stream:
    """One run's Redis stream ``ai:sse:thread:<thread>:run:<key>``: ids are ``<ms>-<seq>``
    (XADD ``*``), the stream outlives every connection (X: redis-sse.service.ts l.11-17, 88-105)."""

    log: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    last: tuple[int, int] = (0, 0)

    def append(self, payload: dict[str, Any]) -> str:
        ms = max(int(time.time() * 1000), self.last[0])
        self.last = (ms, self.last[1] + 1 if ms == self.last[0] else 0)
        sid = f"{self.last[0]}-{self.last[1]}"
        self.log.append((sid, payload))
        self.changed.set()
        self.changed = asyncio.Event()
        return sid

    def start(self, last: tuple[int, int] | None) -> int:
        """The index of the first entry strictly after ``last`` (None: after the current end)."""
        if last is None:
            return len(self.log)
        for i, (sid, _) in enumerate(self.log):
            ms, _, seq = sid.partition("-")
            if (int(ms), int(seq)) > last:
                return i
        return len(self.log)


@dataclass
class Run:
    """An execution (``XpertAgentExecution``): its id is the run id, and the key of the stream
    its run writes to (except a ``target:{}`` resume, see ``Server.resume``)."""

    id: str
    thread: str
    status: str = "running"  # XpertAgentExecutionStatusEnum: running|success|error|interrupted
    ai_message: str = ""  # the AI message it last ran under
    human: dict[str, Any] = field(default_factory=dict)  # its input (retry runs it again)
    assistant: str | None = None
    stream: Stream = field(default_factory=Stream)
    task: asyncio.Task[None] | None = None
    turn: Turn | None = None  # the agent running as this execution, while it runs
    error: str | None = None

    @property
    def log(self) -> list[tuple[str, dict[str, Any]]]:
        return self.stream.log


@dataclass
class Thread:
    """A thread and its conversation (``ChatConversation``, whose id is not the thread id)."""

    id: str
    assistant: str | None
    conversation: str = field(default_factory=lambda: str(uuid.uuid4()))
    title: str | None = None
    status: str | None = None  # TChatConversationStatus: idle|busy|interrupted|error
    operation: dict[str, Any] | None = None  # the interrupt waiting for a decision
    error: str | None = None
    values: dict[str, Any] = field(default_factory=dict)  # the checkpoint's channel values
    checkpointed: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)  # ChatMessages, human and ai
    files: list[tuple[str, int]] = field(default_factory=list)  # stored file assets: mime, size
    project: str | None = None  # the project the conversation is bound to (projectId)

    def ai_messages(self) -> list[dict[str, Any]]:
        return [m for m in self.messages if m["role"] == "ai"]

    def pending(self, mode: str | None = None) -> list[dict[str, Any]]:
        """Follow-ups not consumed yet (``followUpStatus: 'pending'``), oldest first."""
        return [
            m
            for m in self.messages
            if m["role"] == "human"
            and m.get("followUpStatus") == "pending"
            and (mode is None or m["followUpMode"] == mode)
        ]


@dataclass
class Turn:
    """One run of the agent: where its frames go and under which ids.

    Frame order and shapes (X: server-ai/src/xpert/commands/handlers/chat.handler.ts = XC,
    server-ai/src/xpert-agent/commands/handlers/chat.handler.ts = AC, xpert-agent/agent.ts = AG):
    ``on_conversation_start`` (XC l.835-853), a queued follow-up's ``follow_up_consumed``
    (XC l.855-863), ``on_message_start`` (XC l.865-871), ``on_agent_start`` (AC l.78-84), then
    per model step the staged steer (one per step), chat events, tool components (AG l.268-364),
    text chunks (AG l.203-232), and at the end ``on_agent_end`` (AC l.128-168),
    ``on_message_end`` (XC l.1059-1075), ``on_conversation_end`` (XC l.1077-1127) and
    ``complete`` (redis-sse.service.ts wrapChatStream finalize)."""

    thread: Thread
    execution: Run  # the execution the agent runs as: the ids its frames carry
    stream: Stream  # the stream its frames go to
    ai: dict[str, Any]  # the AI message being written
    text: str
    variables: dict[str, tuple[str, str]]
    release: asyncio.Event
    started: float = field(default_factory=time.monotonic)
    new_message_after: str | None = None  # a consumed steer's id: the next message opens one
    model_calls: int = 0
    end_nodes: frozenset[str] = frozenset()  # the agent's ``endNodes`` (tools that end it)

    # --- frames --------------------------------------------------------------------------
    def event(self, name: str, data: dict[str, Any]) -> None:
        if name == "on_interrupt":
            self._open_message()
        self.stream.append({"type": "event", "event": name, "data": compact(data)})

    def message(self, data: Any) -> None:
        """A message frame; after a consumed steer the new AI message starts first, lazily
        (XC l.941-961 shouldStartAssistantMessageAfterSteer)."""
        self._open_message()
        self.stream.append(
            {"type": "message", "data": compact(data) if isinstance(data, dict) else data}
        )

    def _open_message(self) -> None:
        if self.new_message_after is None:
            return
        self.ai = self._ai_message(parent=self.new_message_after)
        self.new_message_after = None
        self.event("on_message_start", {**self.ai, "status": "thinking"})

    def _ai_message(self, *, parent: str | None) -> dict[str, Any]:
        message = {
            "id": str(uuid.uuid4()),
            "role": "ai",
            "content": "",
            "executionId": self.execution.id,
            "conversationId": self.thread.conversation,
            "parentId": parent,
            "status": "thinking",
            "createdAt": iso_now(),
            "updatedAt": iso_now(),
        }
        self.thread.messages.append(message)
        self.execution.ai_message = str(message["id"])
        return message

    def meta(self) -> dict[str, Any]:
        """``getExecutionStreamMetadata`` (AG l.68-86)."""
        return {"executionId": self.execution.id, "runId": f"run-{self.execution.id[:8]}"}

    def text_chunks(self, parts: list[str]) -> None:
        """One model call's text: one stream id per call (``msg.id || run_id``, AG l.203-220)."""
        self.model_calls += 1
        stream = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        for part in parts:
            chunk = {"type": "text", "text": part, "created_date": iso_now(), "id": stream}
            self.message({**chunk, **self.meta()})

    async def text_streamed(self, parts: list[str], batch: int = 200) -> None:
        """``text_chunks`` as a model streams them: a batch at a time, the loop between (a long
        answer's frames made at once would hold the test's own loop, fake and gateway)."""
        self.model_calls += 1
        stream = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        for at in range(0, len(parts), batch):
            for part in parts[at : at + batch]:
                chunk = {"type": "text", "text": part, "created_date": iso_now(), "id": stream}
                self.message({**chunk, **self.meta()})
            await asyncio.sleep(0)

    def tool(self, call: str, status: str, **data: Any) -> None:
        body: dict[str, Any] = {"status": status, "end_date": iso_now(), **data}
        if status == "running":  # on_tool_start (AG l.268-310)
            body = {"category": "Tool", **data, "created_date": iso_now(), "status": "running"}
        self.message({"id": call, "type": "component", **self.meta(), "data": body})

    def step(self, ident: str, title: str, status: str) -> None:
        """A step: an ``on_chat_event`` custom event as ``agent.ts`` forwards it (AG l.490-500)."""
        rest = {"run_id": str(uuid.uuid4()), "name": "on_chat_event"}
        data = {"id": ident, "title": title, "status": status}
        self.event(
            "on_chat_event", {"tags": [], **rest, **data, **self.meta(), "created_date": iso_now()}
        )

    async def hold(self) -> None:
        """Wait until the test releases held runs (``FakeXpertAI.release``), at most 10 s."""
        try:
            await asyncio.wait_for(self.release.wait(), HOLD_LIMIT_S)
        except TimeoutError:
            pass

    # --- follow-ups ----------------------------------------------------------------------
    def take_steer(self) -> str | None:
        """A model step's stage + consume nodes: the pending steers aimed at this execution are
        staged (mode steer only: X: xpert-agent/commands/handlers/
        create-node-stage-pending-steer-follow-ups.handler.ts l.37-48) and ONE is consumed
        (``const [nextFollowUp, ...remainingFollowUps]``, create-node-consume-pending-steer-
        follow-ups.handler.ts l.55-103); the AI message ends before the event (XC l.1000-1016)."""
        staged = [
            m for m in self.thread.pending("steer") if m["targetExecutionId"] == self.execution.id
        ]
        if not staged:
            return None
        taken = staged[0]
        visible = iso_now()
        taken |= {"followUpStatus": "consumed", "visibleAt": visible}
        self.event("on_message_end", self._message_end("success"))
        consumed = {
            "type": "follow_up_consumed",
            "mode": "steer",
            "messageIds": [taken["id"]],
            "clientMessageIds": [taken.get("clientMessageId") or taken["id"]],
            "executionId": self.execution.id,
            "visibleAt": visible,
        }
        self.event("on_chat_event", consumed)
        self.new_message_after = taken["id"]
        return str(taken["input"].get("input") or "")

    def downgrade_steers(self) -> None:
        """``downgradePendingSteerFollowUpsToQueue`` (X: xpert-agent/commands/handlers/
        invoke.handler.ts l.80-109): on a normal end (l.465) and on an error or a cancel
        (l.416), not on an interrupt (NodeInterrupt is thrown first, l.457)."""
        for message in self.thread.pending("steer"):
            if message["targetExecutionId"] == self.execution.id:
                message["followUpMode"] = "queue"

    # --- the end -------------------------------------------------------------------------
    def _message_end(self, status: str, error: str | None = None) -> dict[str, Any]:
        """``ChatMessageEndStreamDTO`` (run-stream-payload.ts l.9-32)."""
        ai = self.ai
        return {
            "id": ai.get("id"),
            "conversationId": ai.get("conversationId"),
            "executionId": ai.get("executionId"),
            "role": "ai",
            "status": status,
            "error": error,
        }

    async def finish(
        self,
        status: str,
        *,
        error: str | None = None,
        operation: dict[str, Any] | None = None,
        agent: bool = True,
    ) -> None:
        """``status``: the agent's (success | error | interrupted). A run the user cancelled
        stays ``interrupted`` with its 'Canceled by user' (X: xpert-agent-execution/commands/
        handlers/upsert.handler.ts l.20-31)."""
        execution, thread = self.execution, self.thread
        if agent and (status != "interrupted" or operation is None):
            self.downgrade_steers()
        if execution.status == "interrupted":  # cancelled meanwhile
            status, error = "interrupted", execution.error
        execution.status, execution.error = status, error
        agent_end: dict[str, Any] = {"id": execution.id, "agentKey": "Agent_1", "status": status}
        agent_end["error"] = error
        elapsed = int((time.monotonic() - self.started) * 1000)
        agent_end |= {"elapsedTime": elapsed, **USAGE, "totalPrice": 0.0002, "currency": "USD"}
        if agent:  # a memory reply runs no agent (XC l.880-897)
            self.event("on_agent_end", {**agent_end, "xpertId": execution.assistant})
        # the AI message: 'error' with the error, else 'success', interrupted too (XC l.1059-1066)
        failed = status == "error"
        self.event(
            "on_message_end",
            self._message_end("error" if failed else "success", error if failed else None),
        )
        thread.status = {"error": "error", "interrupted": "interrupted"}.get(status, "idle")
        thread.operation, thread.error = operation, error
        thread.title = thread.title or self.text[:50]
        end = {"id": thread.conversation, "title": thread.title, "status": thread.status}
        self.event("on_conversation_end", {**end, "operation": operation, "error": error})
        if "[hold-complete]" in self.text:
            await self.hold()
        self.stream.append({"type": "complete"})
        execution.turn = None


# --- scripts ----------------------------------------------------------------------------------
async def pause(turn: Turn) -> None:
    await asyncio.sleep(0.3 if "[slow]" in turn.text else 0.01)


def start_frames(turn: Turn, consumed: dict[str, Any] | None) -> None:
    thread = turn.thread
    start = {"id": thread.conversation, "title": thread.title or turn.text[:50], "status": "busy"}
    turn.event("on_conversation_start", {**start, "createdAt": iso_now(), "updatedAt": iso_now()})
    if consumed is not None:
        turn.event("on_chat_event", consumed)
    turn.event("on_message_start", {**turn.ai, "status": "thinking"})


def agent_start(turn: Turn) -> None:
    execution = turn.execution
    start: dict[str, Any] = {"id": execution.id, "agentKey": "Agent_1", "status": "running"}
    start |= {"threadId": turn.thread.id, "xpertId": execution.assistant, "inputs": execution.human}
    turn.event("on_agent_start", {**start, "createdAt": iso_now(), "updatedAt": iso_now()})


async def run_agent(turn: Turn, consumed: dict[str, Any] | None) -> None:
    """A send: step 1 plans and calls a tool (or asks to confirm one), step 2 answers."""
    text = turn.text
    start_frames(turn, consumed)
    if "[memory]" in text:  # a memory reply: one bare string and no agent (XC l.880-897)
        turn.message(f"Remembered answer to: {text}")
        await turn.finish("success", agent=False)
        return
    agent_start(turn)
    refused = media_error(turn.execution.human.get("files"))
    if refused:
        await turn.finish("error", error=refused)
        return
    turn.take_steer()
    await pause(turn)
    middleware = {
        "middlewareName": "SummarizationMiddleware",
        "title": "Summarizing",
        "status": "running",
    }
    turn.event(
        "on_chat_event", {**middleware, "type": "middleware_event", "created_date": iso_now()}
    )
    turn.step("plan", "Planning", "running")
    await pause(turn)
    turn.step("plan", "Planning", "success")
    if "[interrupt]" in text:
        await interrupt(turn)
        return
    if "[clarify]" in text:
        await clarify(turn)
        return
    if "[kb]" in text:
        await retrieve(turn)
        return
    web = "[web]" in text
    tool: tuple[str, Any] = (
        ("tavily_search", "Web search") if web else ("wiki_search", "Search the wiki")
    )
    if "[i18n]" in text:
        # The component's title is the call's ``metadata.toolName`` as it is (AG l.305). The
        # subgraph translates a toolset tool's title first (subgraph.handler.ts l.342,
        # shared/translate.ts), so an I18nObject (contracts/src/i18n.model.ts) reaches a client
        # only from a title left untranslated; issue 28 names such titles.
        tool = ("wiki_search", {"en_US": "Search the wiki", "zh_Hans": "搜索维基"})
    icon: dict[str, Any] = {}
    if "[icon]" in text:
        # XpertAI's next release (develop @5d2ec3e5, SA/xpert-agent/agent.ts l.107-160,
        # 364-379): the title always resolved to a string, and an ``icon`` that may be raw SVG.
        icon = {"icon": {"type": "svg", "value": SVG_ICON, "color": "#1677ff"}}
    turn.tool(
        "call_1",
        "running",
        input={"query": text},
        toolset="tavily" if web else "wiki",
        tool=tool[0],
        title=tool[1],
        **icon,
    )
    if "[hold]" in text:
        await turn.hold()
    if match := SILENT.search(text):
        await asyncio.sleep(float(match.group(1)))
    await pause(turn)
    output = "x" * BIG_OUTPUT_BYTES if "[big]" in text else "3 pages found"
    turn.tool("call_1", "success", output=output)
    if web:  # Tavily's ON_TOOL_MESSAGE: a Computer component, no status (AG l.450-470)
        results = {
            "id": "call_1",
            "category": "Computer",
            "type": "web_search",
            "toolset": "tavily",
        }
        results |= {"tool": "tavily_search", "title": "Web Search", "message": text}
        turn.message(
            {
                "id": "call_1",
                "type": "component",
                **turn.meta(),
                "data": {**results, "data": [{"url": "https://example.com"}]},
            }
        )
    await answer(turn, f"Hello from xpert [{text}]")


def media_error(files: Any) -> str | None:
    """What building the run's human message throws for its files (X: SA/shared/agent/
    message.ts l.272-301): ``audio/*`` always; ``video/*`` without a local ``filePath`` (a file
    kept in object storage, or inline bytes stored as an asset: the fake has no local path).
    The throw fails the agent: the run ends ``error`` with the message."""
    for file in files if isinstance(files, list) else []:
        if not isinstance(file, dict):
            continue
        mime = str(file.get("mimeType") or "")
        url = str(file.get("fileUrl") or file.get("url") or "")
        if not mime and url.startswith("data:"):
            mime = url[5:].split(";")[0]
        if mime.startswith("video") and not file.get("filePath"):
            return "Video file path is required"
        if mime.startswith("audio"):
            return "Audio files are not supported yet"
    return None


async def answer(turn: Turn, reply: str) -> None:
    """The last model step: a staged steer is taken first; the answer, then the end."""
    steer = turn.take_steer()
    await pause(turn)
    if "[fail]" in turn.text:
        if "[late]" in turn.text:
            await turn.hold()
        await turn.finish("error", error="Model quota exceeded")
        return
    reasoning = {
        "type": "reasoning",
        "text": "hidden thoughts",
        "id": "chatcmpl-r",
        "created_date": iso_now(),
    }
    turn.message({**reasoning, **turn.meta()})
    words = reply.split(" ")
    parts = [w + " " for w in words[:-1]] + words[-1:]
    turn.text_chunks(parts + ([f" (steer: {steer})"] if steer else []))
    if "[late]" in turn.text:
        await turn.hold()  # the model is still finishing: a steer that comes now is not taken
    messages = turn.thread.values.setdefault("messages", [])
    messages.append(lc_message("AIMessage", content=reply))
    for name, value in SET.findall(turn.text):
        if name in turn.variables:
            kind, operation = turn.variables[name]
            values = turn.thread.values
            values[name] = reduce_variable(kind, operation, values.get(name), value)
    await turn.finish("success")


async def interrupt(turn: Turn) -> None:
    """The tool needs a confirmation: ``on_interrupt`` with the operation ``CompleteToolCalls``
    returns, ``{tasks}`` and no ``messageId`` (X: SA/xpert-agent/queries/handlers/
    complete-tool-calls.handler.ts l.154-156, streamed as is: invoke.handler.ts l.443-457); a
    tool's ``info`` is its name and its description written for the model (l.128-137)."""
    info = {
        "name": "send_email",
        "description": "Send an email to a recipient. Use it only when the user asks to send one; "
        "`to` is a team name or an address.",
    }
    call = {"id": "call_mail", "name": "send_email", "args": {"to": "team"}}
    task = {"name": "send_email", "interrupts": [], "type": "tool", "info": info, "call": call}
    operation = {"tasks": [task]}
    turn.event("on_interrupt", operation)
    await turn.finish("interrupted", operation=operation)


KB = "kb-1"
CITE_REPEAT = re.compile(r"\[cite (\d{1,6})\]")  # "[kb] [cite N]": the answer N times, 4 at a time
DOCS = [("doc-a", "Refund policy.pdf"), ("doc-b", "")]  # doc-b: a document the run names not


def citation(index: int, doc: str, chunk: str, name: str) -> dict[str, Any]:
    """One retrieved chunk's citation (X: SA/knowledgebase/citation.ts l.36-77, 93-112)."""
    url = f"xpert://knowledgebase/chunk?knowledgebaseId={KB}&documentId={doc}&chunkId={chunk}"
    cited: dict[str, Any] = {"index": index, "chunkId": chunk, "documentId": doc}
    cited |= {"knowledgebaseId": KB, "documentName": name or None, "citationLabel": f"⟦{index}⟧"}
    return compact({**cited, "citationUrl": url, "citationMarkdown": f"[⟦{index}⟧]({url})"})


async def retrieve(turn: Turn) -> None:
    """A knowledge retrieval, then an answer citing it: the tool returns
    ``formatKnowledgebaseRetrievalToolOutput``'s JSON (SA/knowledgebase/retriever.ts l.212-229,
    citation.ts l.115-137), streamed as the component's ``output`` (AG l.316-343); the model
    copies each ``citationMarkdown`` into its answer (citation.ts l.33-34). A document without
    a name has no ``documentName`` (undefined is left out by JSON.stringify)."""
    cites = [citation(i, doc, f"chunk-{i}", name) for i, (doc, name) in enumerate(DOCS, start=1)]
    chunks = [{**c, "content": f"chunk {c['index']} text"} for c in cites]
    # JSON.stringify(…, null, 2): pretty-printed (citation.ts l.128-137)
    output = json.dumps(
        {"chunks": chunks, "citations": cites, "instructions": "…"}, indent=2, ensure_ascii=False
    )
    call = {"toolset": "knowledgebase", "tool": f"retriever-{KB}", "input": {"input": turn.text}}
    turn.tool("call_kb", "running", **call, title="Knowledge Retrieval")
    await pause(turn)
    turn.tool("call_kb", "success", output=output)
    first, second = cites[0]["citationMarkdown"], cites[1]["citationMarkdown"]
    reply = f"Refunds take 14 days {first}. Digital goods are final {second}{first}."
    await pause(turn)
    if match := CITE_REPEAT.search(turn.text):  # a long answer citing all along (issue 38)
        reply = "\n\n".join([reply + " " + "Plain words follow. " * 20] * int(match[1]))
        await turn.text_streamed([reply[i : i + 4] for i in range(0, len(reply), 4)])
    else:
        # cut into small chunks, so a link arrives in pieces as a model streams it
        turn.text_chunks([reply[i : i + 7] for i in range(0, len(reply), 7)])
    await turn.finish("success")


async def run_resume(turn: Turn, decision: str) -> None:
    """A resume continues the target AI message and execution (XC l.415-451): the confirmed
    tool runs, then a model step (which takes a steer left pending at the interrupt)."""
    start_frames(turn, None)
    agent_start(turn)
    await asyncio.sleep(0.01)
    if decision == "confirm":
        turn.tool(
            "call_mail", "running", input={"to": "team"}, tool="send_email", title="Send email"
        )
        turn.tool("call_mail", "success", output="sent")
        await answer(turn, "Email sent to the team.")
    else:
        await answer(turn, "Not sent: you rejected it.")


def lc_message(cls: str, **fields: Any) -> dict[str, Any]:
    """A message of the thread's ``values.messages`` as ``GET /threads/{t}/state`` answers it.
    The checkpoint's channel values are revived by its serde into class instances (X: SA/
    copilot-checkpoint/checkpoint-saver.ts l.101-112), then go through the controller's
    ``TransformInterceptor`` (SA/ai/thread.controller.ts l.91; X: server/src/core/interceptors/
    transform.interceptor.ts l.17-25: class-transformer 0.5.1 ``instanceToPlain``, which copies
    an instance's own enumerable keys, ``TransformOperationExecutor.getKeys`` l.372-385): no
    ``type``, no ``role``, no constructor form. The keys are those @langchain/core 0.3.72 sets
    (``dist/load/serializable.js`` l.97-117: ``lc_serializable``, ``lc_kwargs``;
    ``messages/base.js`` l.199-203; ``messages/tool.js`` l.25, 67-70; ``messages/ai.js``
    l.40-56, 86), checked by running ``instanceToPlain`` on such messages with those packages;
    undefined fields are left out, as ``JSON.stringify`` does."""
    kwargs: dict[str, Any] = dict(fields)
    if cls == "AIMessage":
        kwargs.setdefault("tool_calls", [])
        kwargs.setdefault("invalid_tool_calls", [])
    kwargs |= {"additional_kwargs": {}, "response_metadata": {}}
    plain: dict[str, Any] = {"lc_serializable": True, "lc_kwargs": kwargs}
    plain["lc_namespace"] = ["langchain_core", "messages"]
    plain |= {"content": kwargs.get("content", ""), "additional_kwargs": {}}
    plain["response_metadata"] = {}
    for key in ("name", "id"):
        if key in kwargs:
            plain[key] = kwargs[key]
    if cls == "ToolMessage":
        plain["lc_direct_tool_output"] = True
        plain |= {k: kwargs[k] for k in ("status", "tool_call_id", "metadata") if k in kwargs}
    if cls == "AIMessage":
        plain |= {"tool_calls": kwargs["tool_calls"]}
        plain["invalid_tool_calls"] = kwargs["invalid_tool_calls"]
    return plain


# The clarification middleware (xpert-ai/xpert-plugins xpertai/middlewares/clarification/src/
# lib/, P: clarification.service.ts, T: clarification.types.ts).
CLARIFY_ARGS: dict[str, Any] = {
    "question": "Which region should the report cover?",
    "context": "Sales are kept per region.",
    "options": ["China", " Europe ", "", "Americas"],
}


def format_clarification(question: str, context: str, options: list[str], free: bool) -> str:
    """``formatMessage`` (P l.99-131), English (no CJK in the input: P l.253-256), required."""
    lines = ["I need to confirm the following before continuing:"]
    if context:
        lines += ["", context]
    lines += ["", question]
    if options:
        lines += ["", "Options:", *(f"{i}. {o}" for i, o in enumerate(options, 1))]
    if free:
        lines += ["", "You can also reply in your own words."]
    return "\n".join(lines)


RESTATED = "Before I start the report: which region should it cover?"


async def clarify(turn: Turn) -> None:
    """``[clarify]``: the model calls ``ask_clarification``. The middleware answers the call
    in ``wrapToolCall`` without running the tool (clarification.middleware.ts l.82-94; the
    tool node runs a tool only through that handler: X: SA/xpert-agent/commands/handlers/
    tool_node.ts l.84-115), so no tool callback fires and the stream carries no tool component
    (the components come from ``on_tool_start`` / ``on_tool_end``, AG l.278-364); the model's
    tool-call chunks are not streamed either (AG l.212-216). Into the thread go the AI message
    with the call and the ``ToolMessage`` of ``buildToolMessage`` (P l.133-152: the readable
    text, and ``metadata.clarification`` with the resolved input, P l.89-97: options trimmed,
    empty ones dropped, ``allowFreeText``/``required`` true by default, T l.18-25).

    Its ``goto: 'end'`` (P l.171-183) names no node of the agent graph, so the write is
    dropped (@langchain/langgraph 0.4.7 dist/pregel/algo.js l.146-156) and the tool node's
    edge back to the agent loop is followed (X: SA/xpert-agent/commands/handlers/
    subgraph.handler.ts l.1510-1514): the model runs again and restates the question in its
    own words (its text: the fake's). Only when the agent lists the tool in its ``endNodes``
    (``FakeXpertAI.end_nodes``; subgraph.handler.ts l.303, 1498-1509) does the tool node's edge
    go to the end, with no second model step."""
    args = dict(CLARIFY_ARGS)
    options = [o.strip() for o in args["options"] if o.strip()]
    resolved = {"question": args["question"], "context": args["context"], "options": options}
    resolved |= {"clarificationType": "missing_info", "allowFreeText": True, "required": True}
    call = {"name": "ask_clarification", "args": args, "id": "call_ask", "type": "tool_call"}
    content = format_clarification(args["question"], args["context"], options, True)
    messages = turn.thread.values.setdefault("messages", [])
    messages.append(lc_message("AIMessage", content="", tool_calls=[call]))
    meta = {"clarification": {"version": "v1", "kind": "clarification", **resolved}}
    tool = {"name": "ask_clarification", "tool_call_id": "call_ask", "content": content}
    messages.append(lc_message("ToolMessage", **tool, status="success", metadata=meta))
    await pause(turn)
    if "ask_clarification" not in turn.end_nodes:
        turn.text_chunks([RESTATED[i : i + 12] for i in range(0, len(RESTATED), 12)])
        messages.append(lc_message("AIMessage", content=RESTATED))
    await turn.finish("success")
