"""A LangGraph Agent Server run's SSE frames, turned into run events (``langgraph`` expert kind).

The run is streamed with ``stream_mode: ["messages-tuple", "updates"]`` (langgraph-api
``api/runs.py`` ``stream_run``; the modes as the Python SDK names them, langgraph-sdk
``schema.py`` ``StreamMode``):

- ``metadata``: ``{"run_id", "attempt"}``, the first frame.
- ``messages``: ``[message chunk, metadata]``, the model's tokens as they come
  (``AIMessageChunk``; ``usage_metadata`` on the chunk that reports it), and whole messages a
  node returned that were not streamed.
- ``updates``: ``{node: update}`` after each node; ``{"__interrupt__": [{"value", "id"}]}``
  when the run stops at an ``interrupt()``.
- ``error``: ``{"error", "message"}``; the run failed.

A human-in-the-loop review is an interrupt whose value is LangChain's ``HITLRequest``
(``action_requests`` / ``review_configs``, answered with ``{"decisions": [...]}``) or, in the
middleware's ``per_call`` mode, a ``ToolApprovalRequest`` (``type: "tool_approval"``, answered
with one decision): langchain ``agents/middleware/human_in_the_loop.py``. Any other interrupt
value is a question for the user.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from gateway.events import (
    Clarification,
    RunEvent,
    StepEvent,
    StepStatus,
    TextDelta,
    ToolEvent,
    UsageEvent,
)
from gateway.experts.sse import SseEvent

MAX_SUMMARY = 200  # characters of a tool's arguments or result shown on the card
AI_TYPES = frozenset({"AIMessageChunk", "ai", "AIMessage"})


def message_text(content: Any) -> str:
    """A message's text: its string content, or its ``text`` blocks joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(b.get("text") or "")
            for b in content
            if isinstance(b, dict) and b.get("type") in ("text", None)
        )
    return ""


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= MAX_SUMMARY else text[: MAX_SUMMARY - 1] + "…"


def review_kind(value: Any) -> str:
    """``batched`` (an ``HITLRequest``), ``per_call`` (a ``ToolApprovalRequest``) or ``""``
    (another interrupt: a question)."""
    if not isinstance(value, dict):
        return ""
    if isinstance(value.get("action_requests"), list) and value["action_requests"]:
        return "batched"
    if value.get("type") == "tool_approval" and isinstance(value.get("name"), str):
        return "per_call"
    return ""


def review_actions(value: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls a review asks about: ``{name, args, description}`` each."""
    if review_kind(value) == "per_call":
        return [value]
    return [a for a in value["action_requests"] if isinstance(a, dict)]


def review_prompt(values: list[dict[str, Any]]) -> str:
    """What the waiting card asks, one short line per tool call (it heads the card): the tool
    and its arguments. Not the request's ``description``: the middleware's default is a
    paragraph repeating both (human_in_the_loop.py ``_create_action_and_config``)."""
    lines = []
    for value in values:
        for action in review_actions(value):
            line = f"Run {action.get('name') or 'a tool'}?"
            args = action.get("args")
            if isinstance(args, dict) and args:
                shown = ", ".join(f"{k}: {_flat(v)}" for k, v in args.items())
                line += f" ({_short(shown)})"
            lines.append(line)
    return "\n".join(lines) or "Please confirm to continue."


def _flat(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def typed_answer(value: Any, text: str) -> Any:
    """The resume value when the chat's next message answers a waiting interrupt: the text
    itself for a question; for a review the user typed past instead of clicking, a rejection
    of each call carrying the text (the model reads it as the user's reason)."""
    kind = review_kind(value)
    one = {"type": "reject", "message": text}
    if kind == "per_call":
        return one
    if kind == "batched":
        return {"decisions": [dict(one) for _ in review_actions(value)]}
    return text


def decision_for(kind: str, count: int, decision: str) -> Any:
    """The resume value of one review: Confirm approves every call, Reject rejects each."""
    one = {"type": "approve"} if decision == "confirm" else {"type": "reject"}
    if kind == "per_call":
        return one
    return {"decisions": [dict(one) for _ in range(count)]}


def question_of(value: Any) -> Clarification:
    """Another interrupt's value as a question: a string as it is; a dict's ``question`` /
    ``prompt`` / ``message`` / ``text`` (with its ``options``, when a list of strings); else
    its JSON."""
    if isinstance(value, str) and value.strip():
        return Clarification(question=value.strip())
    if isinstance(value, dict):
        for key in ("question", "prompt", "message", "text"):
            text = value.get(key)
            if isinstance(text, str) and text.strip():
                raw = value.get("options")
                options = (
                    tuple(o for o in raw if isinstance(o, str)) if isinstance(raw, list) else ()
                )
                return Clarification(question=text.strip(), options=options)
    return Clarification(question=_short(value) if value is not None else "The agent is waiting.")


@dataclass
class LangGraphStream:
    """One run's frames, read in order; what the run came to is kept for its end."""

    show_nodes: bool = True
    run_id: str | None = None
    error: str | None = None
    interrupts: list[dict[str, Any]] = field(default_factory=list)
    answered: bool = False  # some answer text was shown
    _message: str | None = None  # the id of the message whose text is streaming
    _steps: set[str] = field(default_factory=set)

    def feed(self, sse: SseEvent) -> list[RunEvent]:
        try:
            data = json.loads(sse.data) if sse.data else None
        except ValueError:
            return []
        name = sse.event.split("|", 1)[0]  # "updates|subgraph:ns" with stream_subgraphs
        if name == "metadata" and isinstance(data, dict):
            self.run_id = str(data.get("run_id") or "") or self.run_id
            return []
        if name == "error":
            message = data.get("message") if isinstance(data, dict) else data
            kind = data.get("error") if isinstance(data, dict) else None
            self.error = f"{kind}: {message}" if kind and message else str(message or kind)
            return []
        if name == "messages" and isinstance(data, list) and data:
            return self._chunk(data[0])
        if name == "updates" and isinstance(data, dict):
            return self._updates(data)
        return []

    def _chunk(self, chunk: Any) -> list[RunEvent]:
        if not isinstance(chunk, dict) or chunk.get("type") not in AI_TYPES:
            return []
        out: list[RunEvent] = []
        text = message_text(chunk.get("content"))
        if text:
            msg_id = str(chunk.get("id") or "")
            if self._message is not None and msg_id != self._message and self.answered:
                out.append(TextDelta("\n\n"))  # the next message of the run, below the last
            self._message = msg_id
            self.answered = True
            out.append(TextDelta(text))
        usage = chunk.get("usage_metadata")
        if isinstance(usage, dict):
            out.append(
                UsageEvent(
                    input_tokens=int(usage.get("input_tokens") or 0),
                    output_tokens=int(usage.get("output_tokens") or 0),
                )
            )
        return out

    def _updates(self, data: dict[str, Any]) -> list[RunEvent]:
        out: list[RunEvent] = []
        for node, update in data.items():
            if node == "__interrupt__":
                if isinstance(update, list):
                    self.interrupts += [i for i in update if isinstance(i, dict)]
                continue
            if self.show_nodes and "." not in node and not node.startswith("__"):
                if node not in self._steps:  # a node is shown once, however often it runs
                    self._steps.add(node)
                    out.append(StepEvent(f"node:{node}", node, "done"))
            messages = update.get("messages") if isinstance(update, dict) else None
            for message in messages if isinstance(messages, list) else []:
                out += self._tool_events(message)
        return out

    @staticmethod
    def _tool_events(message: Any) -> list[RunEvent]:
        if not isinstance(message, dict):
            return []
        if message.get("type") in AI_TYPES:
            return [
                ToolEvent(
                    str(c.get("id") or c.get("name")),
                    str(c.get("name")),
                    "running",
                    _short(c.get("args") or ""),
                )
                for c in message.get("tool_calls") or []
                if isinstance(c, dict) and c.get("name")
            ]
        if message.get("type") == "tool" and message.get("tool_call_id"):
            status: StepStatus = "failed" if message.get("status") == "error" else "done"
            name = str(message.get("name") or "tool")
            summary = _short(message_text(message.get("content")))
            return [ToolEvent(str(message["tool_call_id"]), name, status, summary)]
        return []
