"""XpertAI's clarification middleware: an agent that calls ``ask_clarification`` ends its run
with a question for the user (xpert-ai/xpert-plugins ``xpertai/middlewares/clarification/src/
lib/``, ``clarification.service.ts`` and ``clarification.types.ts``).

What the server leaves of it, read in xpert-ai/xpert @5135ce25 (``packages/server-ai/src``):

- The middleware answers the call in ``wrapToolCall`` without running the tool
  (``clarification.middleware.ts`` l.82-94; the tool node calls the tool only through the
  handler it is given, ``xpert-agent/commands/handlers/tool_node.ts`` l.84-115). The tool's
  own callbacks never fire, so the run stream carries no ``on_tool_start`` / ``on_tool_end``
  component for it (``xpert-agent/agent.ts`` l.278-364 makes those from the callbacks): the
  run just ends, ``idle``.
- Its ``ToolMessage`` (``buildToolMessage``, service l.133-152: ``name: 'ask_clarification'``,
  ``content`` the readable text of ``formatMessage`` l.99-131, ``metadata.clarification`` the
  resolved input: ``question``, ``options``, ``context``, ``allowFreeText``, ``required``) is
  the last message the run writes to the thread. ``GET /threads/{t}/state`` answers the
  checkpoint's ``channel_values`` (``ai/thread.controller.ts`` l.133-145, 431-439), revived by
  the checkpoint serde, so ``values.messages`` holds it as LangChain serializes a message:
  ``{lc, type: 'constructor', id: [..., 'ToolMessage'], kwargs: {name, content, metadata, …}}``.

So the question is read from the thread's state after a run that ended well. A stream that
does carry the tool's component (a server that runs the tool's callbacks) is read too: its
``input`` is the call's arguments, its ``output`` the same readable text.
"""

from __future__ import annotations

import json
import re
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


def _message(raw: Any) -> tuple[str, str, Any, Any]:
    """(type, name, content, metadata) of a message in either of its JSON forms: LangChain's
    serialized constructor, or a plain message dict."""
    if not isinstance(raw, dict):
        return "", "", None, None
    if raw.get("type") == "constructor" and isinstance(raw.get("kwargs"), dict):
        ids = raw.get("id")
        cls = str(ids[-1]) if isinstance(ids, list) and ids else ""
        kind = {"ToolMessage": "tool", "HumanMessage": "human", "AIMessage": "ai"}.get(cls, cls)
        raw = raw["kwargs"]
    else:
        kind = str(raw.get("type") or raw.get("role") or "")
    return kind, str(raw.get("name") or ""), raw.get("content"), raw.get("metadata")


def from_state(values: Any) -> Clarification | None:
    """The question of the run that just ended: an ``ask_clarification`` tool message after the
    thread's last human message (its ``metadata.clarification``, else its text)."""
    messages = values.get("messages") if isinstance(values, dict) else None
    if not isinstance(messages, list):
        return None
    for raw in reversed(messages):
        kind, name, content, metadata = _message(raw)
        if kind == "human":
            return None
        if kind != "tool" or name != TOOL:
            continue
        meta = metadata.get("clarification") if isinstance(metadata, dict) else None
        if isinstance(meta, dict) and meta.get("invalid"):
            return None  # an error answer (buildInvalidToolMessage): the model asks again
        return from_args(meta) or from_output(content)
    return None
