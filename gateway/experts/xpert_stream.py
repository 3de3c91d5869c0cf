"""XpertAI run-stream frames -> run events.

Every shape here was read in the server source (xpert-ai/xpert @5135ce25, paths under
``packages/``), not guessed from the Agent Protocol:

- A frame's ``data`` is ``{"type":"message","data":…}`` or ``{"type":"event","event":…,"data":…}``
  (``contracts/src/ai/ai.model.ts`` ``TChatStreamPayload``); the last frame is ``event: complete``
  with ``{"type":"complete"}`` (``server-ai/src/shared/stream/redis-sse.service.ts``).
- Text is a string delta or ``{type:'text', text, id}``; reasoning is ``{type:'reasoning', text}``
  (``server-ai/src/shared/agent/stream-text.ts`` ``createTextChunk``, ``xpert-agent/agent.ts``).
- Tool calls are message components keyed by the tool call id: the first carries
  ``data.category == 'Tool'``, ``tool``, ``title``, ``status:'running'``; later frames with the
  same id carry only ``status`` (``success``/``fail``) and ``output``/``error``
  (``xpert-agent/agent.ts``: ``on_tool_start``, ``on_tool_end``, the ``on_tool_error`` custom
  event). ``on_tool_*`` events are never streamed to clients.
- ``on_message_start.data`` is the AI message: ``id`` and ``executionId``, the run id that
  ``/runs/{id}/cancel`` and ``/runs/{id}/stream`` take
  (``xpert/commands/handlers/chat.handler.ts``).
- ``on_chat_event.data`` is a step ``{id, title, message?, status?: running|success|fail}``, or one
  of the typed events that are not steps (``contracts/src/ai/chat-event.model.ts``,
  ``middleware_event`` in ``xpert-agent/agent.ts``).
- ``on_interrupt.data`` is ``{tasks:[{name, type, info, interrupts:[{value}], call:{id, name,
  args}}]}``, with no ``messageId`` (``xpert-agent/queries/handlers/complete-tool-calls.handler.ts``
  l.154-156, streamed as is by ``invoke.handler.ts`` l.447-456); a tool's ``info`` is ``{name,
  description}``, the description written for the model (l.128-137), a sub-agent's ``{name,
  title, description}`` (l.115-126).
- ``on_conversation_end.data.status`` is the conversation status ``idle | interrupted | error``
  (``xpert/commands/handlers/chat.handler.ts``): ``idle`` is a successful run.
- ``on_error.data`` is ``{error}`` (``redis-sse.service.ts`` wrapChatStream; the type
  ``TChatStreamErrorPayload`` also allows a plain string); an error thrown while the run starts
  is Nest's own ``event: error`` frame with the plain message (``@nestjs/core``
  router-response-controller ``sse()``).
- ``on_agent_end.data`` is an execution: ``totalTokens`` (the run's total, sub-agents included),
  ``inputTokens`` / ``outputTokens`` (the last call's), ``totalPrice``, ``parentId`` for
  sub-agents (``AgentEndStreamDTO`` in ``shared/stream/run-stream-payload.ts``;
  ``xpert-agent-execution/model-usage.execution.ts``).
- A cancelled run ends ``interrupted`` without an ``operation``
  (``chat-conversation/commands/handlers/cancel-conversation.handler.ts``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from gateway.citations import CitedText, Sources
from gateway.events import (
    Clarification,
    Finished,
    Interrupt,
    RunEvent,
    StepEvent,
    StepStatus,
    TextDelta,
    ToolEvent,
    UsageEvent,
)
from gateway.experts.sse import SseEvent
from gateway.experts.xpert_clarify import TOOL as CLARIFY
from gateway.experts.xpert_clarify import from_args, from_output

# on_chat_event types that are not steps of the run (contracts/src/ai/chat-event.model.ts).
NOT_STEPS = frozenset(
    {
        "middleware_event",
        "follow_up_consumed",
        "thread_context_usage",
        "conversation_title_summary",
        "thread_goal_updated",
        "thread_goal_cleared",
        "sandbox",
    }
)
STEP_STATUS: dict[str, StepStatus] = {"running": "running", "success": "done", "fail": "failed"}
SUMMARY_CHARS = 200
ARGS_CHARS = 160  # a confirmation's line shows this much of the call's arguments


@dataclass
class XpertStream:
    """Folds one run's frames (the first stream and any rejoin) into run events."""

    show_reasoning: bool = False
    language: str = ""  # the integration's (sys.language): which text of an i18n title shows
    execution_id: str | None = None
    ai_message_id: str | None = None
    finished: Finished | None = None
    complete: bool = False
    consumed: set[str] = field(default_factory=set)  # clientMessageIds of steers taken in
    prefix: str = ""  # the card's answer before this run (a resume, a steer sent after a run)
    started: bool = False  # this run's on_message_start was read
    agent_ran: bool = False  # on_agent_start was read (a memory reply runs no agent)
    clarification: Clarification | None = None  # an ask_clarification the stream showed
    # (stream id, its text in chunks) per stream: a chunk is appended, never the text copied
    _segments: list[tuple[str, list[str]]] = field(default_factory=list)
    _tools: dict[str, tuple[str, StepStatus]] = field(default_factory=dict)  # id -> title, status
    _asked: bool = False
    _asks: set[str] = field(default_factory=set)  # ask_clarification components' ids
    _reasoning: str = ""
    _sources: Sources = field(default_factory=Sources)
    # The run's own answer as the card shows it, rendered as it streams (gateway/citations.py:
    # each chunk costs its own length, issue 38), and the trailer the card was last sent.
    _cited: CitedText = field(init=False)
    _tail: str | None = None

    def __post_init__(self) -> None:
        self._cited = CitedText(self._sources)

    def _own(self) -> str:
        return "".join("".join(chunks) for _, chunks in self._segments)

    @property
    def shown(self) -> str:
        """The answer as a chat shows it: citations as ``[n]`` with their sources
        (gateway/citations.py); while the run goes on, a link still arriving is held back."""
        return self.prefix + self._cited.shown

    def _delta(self, shown: tuple[str, str | None]) -> list[RunEvent]:
        """What the card's answer gains (before its trailer, which follows the sources)."""
        text, tail = shown
        if tail is None:
            return [TextDelta(text)] if text else []
        if not text and tail == self._tail:
            return []
        self._tail = tail
        return [TextDelta(text, tail=tail)]

    def _show(self) -> list[RunEvent]:
        """The answer whole (the run ended): what was held back, rendered."""
        return self._delta(self._cited.end())

    def _rendered_again(self) -> list[RunEvent]:
        """The answer changed in its middle (an earlier stream's chunk): rendered whole."""
        self._cited = CitedText(self._sources)
        self._cited.add(self._own())
        if self.complete or self.finished is not None:
            self._cited.end()
        self._tail = self._cited.trailer()
        body = self.prefix + "".join(self._cited.body)
        return [TextDelta(body, replace=True, tail=self._tail)]

    def feed(self, sse: SseEvent) -> list[RunEvent]:
        if sse.event == "complete":
            self.complete = True
            return self._show()
        if sse.event == "error":
            # Nest's own frame for an error thrown while the run starts (a 201 stream with
            # ``event: error`` and the plain message, then the end; no "complete").
            self.finished = Finished("error", _short(sse.data or "XpertAI refused the run."))
            return [*self._show(), self.finished]
        if not sse.data.strip():
            return []
        try:
            frame = json.loads(sse.data)
        except json.JSONDecodeError:
            return []
        if not isinstance(frame, dict):
            return []
        if frame.get("type") == "complete":
            self.complete = True
            return self._show()
        if frame.get("type") == "message":
            return self._message(frame.get("data"))
        if frame.get("type") == "event":
            events = self._event(str(frame.get("event") or ""), frame.get("data"))
            for i, event in enumerate(events):
                if isinstance(event, Finished):
                    self.finished = event
                    return [*events[:i], *self._show(), *events[i:]]  # a held tail, whole
            return events
        return []

    @property
    def target(self) -> dict[str, str]:
        """The run as a resume / steer ``target`` (``{}`` means "the last AI message")."""
        target: dict[str, str] = {}
        if self.ai_message_id:
            target["aiMessageId"] = self.ai_message_id
        if self.execution_id:
            target["executionId"] = self.execution_id
        return target

    # --- messages ------------------------------------------------------------------------
    def _message(self, data: Any) -> list[RunEvent]:
        if isinstance(data, str):
            return self._text(data, "")
        if not isinstance(data, dict):
            return []
        kind = data.get("type")
        if kind == "text":
            text = data.get("text")
            return self._text(text, str(data.get("id") or "")) if isinstance(text, str) else []
        if kind == "reasoning":
            if not self.show_reasoning:
                return []
            self._reasoning = (self._reasoning + str(data.get("text") or ""))[-SUMMARY_CHARS:]
            return [StepEvent("reasoning", "Reasoning", "running", self._reasoning)]
        if kind == "component":
            return self._component(data)
        return []

    def _text(self, text: str, stream: str) -> list[RunEvent]:
        """Text goes to its stream's segment, as XpertAI builds the message: a new stream starts
        on a new line (unless either side has white space there), and a chunk of an earlier
        stream (parallel agents) goes into that stream's segment (contracts/src/ai/
        message-content.utils.ts appendMessageContent, getContentChunkSeparator)."""
        if not text:
            return []
        if self.clarification is not None and text.strip():  # the model's step after it
            self.clarification = replace(self.clarification, restated=True)
        segments = self._segments
        at = next((i for i in range(len(segments) - 1, -1, -1) if segments[i][0] == stream), -1)
        if at >= 0 and at < len(segments) - 1 and stream:
            # an earlier stream's own segment: the answer changes in its middle
            segments[at][1].append(text)
            return self._rendered_again()
        if at < 0 or at < len(segments) - 1:
            last = segments[-1][1][-1] if segments else self.prefix
            space = not last or last[-1].isspace() or text[0].isspace()
            text = text if space else "\n" + text
            segments.append((stream, []))
        segments[-1][1].append(text)  # the answer grows at its end
        return self._delta(self._cited.add(text))

    def _component(self, data: dict[str, Any]) -> list[RunEvent]:
        ident = str(data.get("id") or "")
        body = data.get("data")
        if not ident or not isinstance(body, dict):
            return []
        if body.get("tool") == CLARIFY or ident in self._asks:
            # Not a step: a question for the user (xpert_clarify.py).
            self._asks.add(ident)
            found = from_output(body.get("output")) or from_args(body.get("input"))
            self.clarification = found or self.clarification
            return []
        known = self._tools.get(ident)
        if known is not None:
            # A retrieval's end: its output (the tool's, agent.ts l.340-343) or its documents
            # (a retriever's, l.392-409) name the sources its citations point to.
            self._sources.learn(body.get("output"))
            self._sources.learn(body.get("data"))
        if known is None and body.get("category") != "Tool":
            return []  # other components (dashboards, files) are not run steps
        # A field left out keeps its value (message-content.utils.ts mergeComponentData). The
        # title is the tool's ``metadata.toolName``, which may be i18n (agent.ts l.305, 380).
        title = (
            _text(body.get("title"), self.language)
            or (known[0] if known else str(body.get("tool") or ""))
            or "Tool"
        )
        raw = body.get("status")
        status = STEP_STATUS.get(str(raw), "running") if raw else (known[1] if known else "running")
        self._tools[ident] = (title, status)
        summary = ""
        if status == "failed":
            summary = _short(body.get("error") or body.get("message") or "")
        # names learned: the sources list shows them
        return [ToolEvent(ident, title, status, summary), *self._delta(("", self._cited.trailer()))]

    # --- events --------------------------------------------------------------------------
    def _event(self, name: str, data: Any) -> list[RunEvent]:
        if name == "on_message_start" and isinstance(data, dict):
            self.started = True
            self.ai_message_id = str(data.get("id") or "") or self.ai_message_id
            self.execution_id = str(data.get("executionId") or "") or self.execution_id
            return []
        if name == "on_agent_start":
            self.agent_ran = True
            return []
        if name == "on_chat_event" and isinstance(data, dict):
            return self._chat_event(data)
        if name == "on_interrupt" and isinstance(data, dict):
            return self._interrupt(data)
        if name == "on_conversation_end" and isinstance(data, dict):
            status = str(data.get("status") or "")
            if status == "interrupted":
                operation = data.get("operation")
                if not (isinstance(operation, dict) and operation.get("tasks")):
                    # Interrupted with nothing to confirm: the run was cancelled
                    # (cancel-conversation.handler.ts leaves no operation).
                    return [Finished("cancelled")]
                return [*self._interrupt(operation), Finished("interrupted")]
            if status == "error":
                return [Finished("error", _short(data.get("error") or "The agent failed."))]
            return [Finished("success")]
        if name == "on_error":
            message = data.get("error") if isinstance(data, dict) else data
            return [Finished("error", _short(message or "The agent failed."))]
        if name == "on_agent_end" and isinstance(data, dict):
            return _usage(data)
        return []

    def _chat_event(self, data: dict[str, Any]) -> list[RunEvent]:
        if data.get("type") == "follow_up_consumed":
            self.consumed.update(str(i) for i in data.get("clientMessageIds") or [])
        title = _text(data.get("title"), self.language)  # plain, or i18n as tool titles may be
        if data.get("type") in NOT_STEPS or not title or not data.get("id"):
            return []
        status = STEP_STATUS.get(str(data.get("status") or "running"), "running")
        detail = _short(data.get("message") or "")
        return [StepEvent(str(data["id"]), title, status, detail)]

    def _interrupt(self, operation: Any) -> list[RunEvent]:
        if self._asked:
            return []
        self._asked = True
        operation = operation if isinstance(operation, dict) else {}
        data: dict[str, Any] = {"target": self.target, "tasks": _task_names(operation)}
        return [Interrupt(prompt=interrupt_prompt(operation, self.language), data=data)]


def interrupt_prompt(operation: dict[str, Any], language: str = "") -> str:
    """What to ask the user: one short line per task (it heads the card) naming the tool
    (``info.title``, else its name) and the call's arguments. Not ``info.description``: for a
    tool that is the text written for the model (complete-tool-calls.handler.ts l.128-137),
    often paragraphs long. An interrupt of the agent's own (``interrupts[].value``) says its
    ``title`` / ``message``."""
    lines: list[str] = []
    for task in operation.get("tasks") or []:
        if not isinstance(task, dict):
            continue
        info: dict[str, Any] = task["info"] if isinstance(task.get("info"), dict) else {}
        call: dict[str, Any] = task["call"] if isinstance(task.get("call"), dict) else {}
        title = _text(info.get("title"), language)
        message = ""
        for interrupt in task.get("interrupts") or []:
            value = interrupt.get("value") if isinstance(interrupt, dict) else None
            if isinstance(value, dict):
                title = title or _text(value.get("title"), language)
                message = message or _text(value.get("message"), language)
        name = title or _text(info.get("name"), language) or str(task.get("name") or "")
        if not (name or message):
            continue
        line = f"{name}: {message}" if name and message else (message or f"Run {name}?")
        args = call.get("args")
        if isinstance(args, dict) and args:
            shown = ", ".join(f"{key}: {_flat(value)}" for key, value in args.items())
            line += f" ({_cut(shown, ARGS_CHARS)})"
        lines.append(line)
    return "\n".join(lines) or "Please confirm to continue."


def _flat(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return " ".join(text.split())


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _task_names(operation: dict[str, Any]) -> list[str]:
    tasks = operation.get("tasks") or []
    return [str(t["name"]) for t in tasks if isinstance(t, dict) and t.get("name")]


def _text(value: Any, language: str = "") -> str:
    """A plain or i18n text (``{en_US, zh_Hans}``: ``I18nObject``, contracts/src/i18n.model.ts)
    in ``language`` (a ``zh…`` language reads ``zh_Hans`` first, any other ``en_US``)."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, dict):
        order = ("zh_Hans", "en_US") if language.lower().startswith("zh") else ("en_US", "zh_Hans")
        for key in order:
            if isinstance(value.get(key), str):
                return str(value[key]).strip()
        for item in value.values():
            if isinstance(item, str):
                return item.strip()
    return ""


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= SUMMARY_CHARS else text[: SUMMARY_CHARS - 1] + "…"


def _usage(data: dict[str, Any]) -> list[RunEvent]:
    """The run's usage from its root execution: ``totalTokens`` includes its sub-agents
    (model-usage.execution.ts), so their own ends (with ``parentId``) are not added again.
    ``inputTokens`` / ``outputTokens`` hold only the last model call, so the output is that
    call's and the rest of the total counts as input."""
    if data.get("parentId"):
        return []
    total = _int(data.get("totalTokens")) or _int(data.get("tokens"))
    output = _int(data.get("outputTokens"))
    if not total:
        total = _int(data.get("inputTokens")) + output
    if not total:
        return []
    # No cost: totalPrice is the last call's (agent-execution.service.ts overwrites it).
    return [UsageEvent(input_tokens=max(total - output, 0), output_tokens=min(output, total))]


def _int(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0
