"""XpertAI's clarification middleware: an agent that calls ``ask_clarification`` asks the user
a question before it goes on (xpert-ai/xpert-plugins ``xpertai/middlewares/clarification/src/
lib/``, ``clarification.service.ts`` and ``clarification.types.ts``).

What the server leaves of it, read in xpert-ai/xpert @5135ce25 (``packages/server-ai/src``):

- The middleware answers the call in ``wrapToolCall`` without running the tool
  (``clarification.middleware.ts`` l.82-94; the tool node calls the tool only through the
  handler it is given, ``xpert-agent/commands/handlers/tool_node.ts`` l.84-115). The tool's
  own callbacks never fire, so the run stream carries no ``on_tool_start`` / ``on_tool_end``
  component for it (``xpert-agent/agent.ts`` l.278-364 makes those from the callbacks).
- Its ``ToolMessage`` (``buildToolMessage``, service l.133-152: ``name: 'ask_clarification'``,
  ``content`` the readable text of ``formatMessage`` l.99-131, ``metadata.clarification`` the
  resolved input: ``question``, ``options``, ``context``, ``allowFreeText``, ``required``) goes
  into the thread with ``goto: 'end'`` (service l.171-183). The agent graph has no node
  ``end`` (a write to its branch channel is dropped: @langchain/langgraph 0.4.7
  ``dist/pregel/algo.js`` l.146-156) and the tool node keeps its edge back to the agent loop
  (``xpert-agent/commands/handlers/subgraph.handler.ts`` l.1491-1514; the middleware's tools
  are added as tools at l.863-889): the model runs once more, and usually restates the question
  in its own words. Only an xpert whose agent lists ``ask_clarification`` in its ``endNodes``
  (l.303) ends the run at the tool message, with no text after it.
- ``GET /threads/{t}/state`` answers the checkpoint's ``channel_values`` (``ai/
  thread.controller.ts`` l.133-145, 431-439) through the controller's ``TransformInterceptor``
  (l.91; ``packages/server/src/core/interceptors/transform.interceptor.ts`` l.17-25:
  class-transformer 0.5.1 ``instanceToPlain``, which copies an object's own enumerable keys,
  ``TransformOperationExecutor.getKeys``). A revived message is a class instance, so it comes
  out as its fields (@langchain/core 0.3.72 ``messages/base.js``, ``tool.js``, ``ai.js``):
  ``lc_serializable``, ``lc_kwargs`` (its constructor fields), ``lc_namespace``, ``content``,
  ``name``, ``id``, and ``tool_call_id`` / ``status`` / ``metadata`` on a tool message,
  ``tool_calls`` / ``invalid_tool_calls`` on an AI message. There is no ``type``, ``role`` or
  constructor form: a message's kind is read from its fields (:func:`message_fields`).

So the question is read from the thread's state after a run that ended well (one ``GET`` of
the whole state: every message of the thread, megabytes on a long one; read only after a run
whose agent ran, and only with ``clarifications`` on or variables declared). A stream that
does carry the tool's component (a server that runs the tool's callbacks) is read too: its
``input`` is the call's arguments, its ``output`` the same readable text.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from typing import Any

from gateway.events import Clarification

TOOL = "ask_clarification"
# formatMessage's lines (service l.99-131), English and Chinese.
HEADERS = frozenset(
    {
        "I need to confirm the following before continuing:",
        "It would help to confirm the following first:",
        "需要先确认以下信息：",
        "最好先确认以下信息：",
    }
)
OPTIONS_LINES = frozenset({"Options:", "可选项："})
FREE_TEXT_LINES = frozenset(
    {"You can also reply in your own words.", "也可以直接回复你的具体想法。"}
)
NUMBERED = re.compile(r"^(\d+)\. (.+)$")
CLASSES = {
    "ToolMessage": "tool",
    "HumanMessage": "human",
    "AIMessage": "ai",
    "AIMessageChunk": "ai",
    "SystemMessage": "system",
}


def _text(value: Any) -> str:
    return value.strip() if isinstance(value, str) else ""


def from_args(args: Any) -> Clarification | None:
    """The call's arguments as ``resolveInput`` reads them (service l.89-97, 194-215):
    ``question`` required, options trimmed with the empty ones left out, ``allowFreeText``
    true unless false. A string is the JSON of them (agent.ts l.285-291)."""
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except ValueError:
            return None
    if isinstance(args, dict) and set(args) == {"input"} and isinstance(args["input"], str):
        return from_args(args["input"])
    if not isinstance(args, dict):
        return None
    question = _text(args.get("question"))
    if not question:
        return None  # the middleware answers such a call with an error: the model asks again
    raw = args.get("options")
    options = tuple(o.strip() for o in raw if isinstance(o, str) and o.strip()) if raw else ()
    return Clarification(
        question=question,
        options=options if isinstance(raw, list) else (),
        context=_text(args.get("context")),
        free_text=args.get("allowFreeText") is not False,
    )


def from_output(text: Any) -> Clarification | None:
    """``formatMessage``'s text back into its parts: a header line, the context (if any) and
    the question in blocks parted by blank lines, then ``Options:`` with ``1. …`` lines, then
    the free-text line when allowed."""
    if not isinstance(text, str):
        return None
    lines = text.strip().split("\n")
    if not lines or lines[0].strip() not in HEADERS:
        return None
    body, options, free_text = lines[1:], [], False
    if body and body[-1].strip() in FREE_TEXT_LINES:
        free_text, body = True, body[:-1]
    marks = [i for i, line in enumerate(body) if line.strip() in OPTIONS_LINES]
    if marks:
        at = marks[-1]
        numbered = [NUMBERED.match(line.strip()) for line in body[at + 1 :] if line.strip()]
        if numbered and all(numbered):
            options = [m.group(2).strip() for m in numbered if m]
            body = body[:at]
    blocks = [b.strip() for b in "\n".join(body).strip().split("\n\n") if b.strip()]
    if not blocks:
        return None
    # The question is the last block; a context before it (itself a block of its own).
    return Clarification(
        question=blocks[-1],
        options=tuple(options),
        context="\n\n".join(blocks[:-1]),
        free_text=free_text,
    )


def message_fields(raw: Any) -> tuple[str, str, Any, Any]:
    """(kind, name, content, metadata) of one of ``values.messages``, kind ``tool`` / ``ai`` /
    ``human`` (or ``system``). Read by its fields, as the server sends it (module doc): a
    ``tool_call_id`` (or ``lc_direct_tool_output``) makes a tool message, ``tool_calls`` an AI
    message, anything else a human one; ``name`` / ``content`` / ``metadata`` at the top level,
    else in ``lc_kwargs``. LangChain's constructor form (``{lc, type: 'constructor', id,
    kwargs}``) and a plain ``type`` / ``role`` dict are read too."""
    if not isinstance(raw, dict):
        return "", "", None, None
    if raw.get("type") == "constructor" and isinstance(raw.get("kwargs"), dict):
        ids = raw.get("id")
        cls = str(ids[-1]) if isinstance(ids, list) and ids else ""
        raw = raw["kwargs"]
        kind = CLASSES.get(cls, cls)
    elif isinstance(raw.get("type") or raw.get("role"), str):
        kind = str(raw.get("type") or raw.get("role"))
        kind = {"assistant": "ai", "user": "human"}.get(kind, kind)
    else:
        kwargs = raw.get("lc_kwargs")
        given = {k: v for k, v in raw.items() if v is not None}
        raw = {**kwargs, **given} if isinstance(kwargs, dict) else given
        if "tool_call_id" in raw or raw.get("lc_direct_tool_output"):
            kind = "tool"
        elif "tool_calls" in raw or "invalid_tool_calls" in raw:
            kind = "ai"
        else:
            kind = "human"
    return kind, str(raw.get("name") or ""), raw.get("content"), raw.get("metadata")


def from_state(values: Any) -> Clarification | None:
    """The question of the run that just ended: an ``ask_clarification`` tool message after the
    thread's last human message (its ``metadata.clarification``, else its text), ``restated``
    when an AI message with text follows it (the model's second step)."""
    messages = values.get("messages") if isinstance(values, dict) else None
    if not isinstance(messages, list):
        return None
    restated = False
    for raw in reversed(messages):
        kind, name, content, metadata = message_fields(raw)
        if kind == "human":
            return None
        if kind == "ai" and _has_text(content):
            restated = True
        if kind != "tool" or name != TOOL:
            continue
        meta = metadata.get("clarification") if isinstance(metadata, dict) else None
        if isinstance(meta, dict) and meta.get("invalid"):
            return None  # an error answer (buildInvalidToolMessage): the model asks again
        found = from_args(meta) or from_output(content)
        return replace(found, restated=True) if found and restated else found
    return None


def _has_text(content: Any) -> bool:
    """A message's content holds text: a string, or a list with a text part."""
    if isinstance(content, str):
        return bool(content.strip())
    if isinstance(content, list):
        return any(_has_text(p.get("text") if isinstance(p, dict) else p) for p in content)
    return False
