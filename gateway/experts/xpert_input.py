"""What a turn sends XpertAI: the message (with recent group chatter before it), pictures as
inline files (other files are uploaded first: xpert_files.py), and the conversation variables
the thread does not hold yet."""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import aiohttp
import structlog

from gateway.experts.base import TurnInput
from gateway.experts.http import ExpertHttpError, error_for

log = structlog.get_logger("gateway.experts.xpert")


def changed_state(turn: TurnInput, memory: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the thread does not hold yet of the declared conversation variables (and the
    group memory, under ``memoryVariable``), under their declared names only. XpertAI
    applies the agent's reducer to what the input carries (shared/agent/state.ts): an
    ``append`` variable gets only what was added on our side, anything else its new value,
    and an unchanged value is never sent again. Returns what to send and what the thread
    holds once it took it (our whole values)."""
    missing = object()
    out: dict[str, Any] = {}
    holds: dict[str, Any] = {}
    for name, reducer in turn.declared_variables.items():
        if name not in turn.state:
            continue
        ours, theirs = turn.state[name], turn.backend_state.get(name, missing)
        if theirs == ours:
            continue
        if reducer == "append" and theirs is not missing:
            added = _added(theirs, ours)
            if added is None:
                log.warning("append variable changed other than by appending; not sent", name=name)
                continue
            out[name], holds[name] = added, ours
        else:
            out[name] = holds[name] = ours
    if memory:
        rules = turn.variables.get("memory.rules", "")
        if (rules or memory in turn.backend_state) and turn.backend_state.get(memory) != rules:
            out[memory] = holds[memory] = rules
    return out, holds


def _added(theirs: Any, ours: Any) -> Any:
    """What was appended to ``theirs`` to make ``ours`` (a list's new items, a string's tail);
    None when ``ours`` does not extend it."""
    if isinstance(theirs, list) and isinstance(ours, list) and ours[: len(theirs)] == theirs:
        return ours[len(theirs) :] or None
    if isinstance(theirs, str) and isinstance(ours, str) and ours.startswith(theirs):
        return ours[len(theirs) :] or None
    return None


def with_history(turn: TurnInput) -> str:
    """Recent group messages the bot saw but was not asked about go before the question, as the
    XpertAI Lark plugin puts its group window into the prompt (not as an undeclared variable)."""
    if not turn.group_history:
        return turn.text
    lines = "\n".join(f"- {m['name']}: {m['text']}" for m in turn.group_history)
    return f"Recent messages in this group chat:\n{lines}\n\n{turn.text}"


def files_of(turn: TurnInput) -> list[dict[str, Any]]:
    """Pictures as ``{fileUrl: data:…, mimeType, name}``: XpertAI stores inline bytes as a file
    asset for the run and does not fetch other URLs ("integrations should upload or inline the
    bytes before dispatch", server-ai/src/xpert/commands/handlers/chat-file-assets.ts
    readDataUrl, at most 25 MB)."""
    files = []
    for attachment in turn.attachments:
        url = str(attachment.get("url") or "")
        if attachment.get("kind") != "image" or not url.startswith("data:"):
            continue
        entry = {"fileUrl": url, "mimeType": attachment.get("mime") or url[5:].split(";")[0]}
        if attachment.get("name"):
            entry["name"] = attachment["name"]
        files.append(entry)
    return files


def json_body(body: dict[str, Any]) -> aiohttp.payload.Payload:
    """A run's JSON as a stream: with its pictures inline it can be tens of MB, and aiohttp
    refuses (in strict mode; else warns and blocks the loop) raw bytes over 1 MiB."""
    data = json.dumps(body, ensure_ascii=False).encode()
    return aiohttp.payload.BytesIOPayload(io.BytesIO(data), content_type="application/json")


OFFLOOP_PARSE_BYTES = 256 * 1024  # parsed on a thread from here (1-2 ms per 100 KB of JSON)


async def to_thread(raw: bytes) -> Any:
    return await asyncio.to_thread(json.loads, raw)


async def read_state(
    http: aiohttp.ClientSession, url: str, headers: dict[str, str]
) -> dict[str, Any]:
    """The thread's values now (``GET /threads/{t}/state``): the whole checkpoint, every message
    of the thread with it (megabytes on a long thread, bench/xpert_state.py), so it is read
    only when a turn needs it, and a large one is parsed off the event loop. A failed read
    costs only the write-back of the variables (and the question)."""
    try:
        async with http.get(url, headers=headers) as resp:
            if not 200 <= resp.status < 300:
                raise await error_for(resp, "XpertAI")
            raw = await resp.read()
        data = json.loads(raw) if len(raw) < OFFLOOP_PARSE_BYTES else await to_thread(raw)
    except (ExpertHttpError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
        log.warning("xpert state read failed", error=str(exc), url=url)
        return {}
    values = data.get("values") if isinstance(data, dict) else None
    return values if isinstance(values, dict) else {}
