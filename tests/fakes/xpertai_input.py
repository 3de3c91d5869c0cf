"""What the fake XpertAI server (``tests/fakes/xpertai.py``) does with a run's input, as the real
server does it. ``X:`` paths are in ``xpert-ai/xpert`` @5135ce25 under ``packages/``; the server
pins zod 3.25.67 (``import z from 'zod'``, the v3 API) and runs on Node 20.

- ``validate_run_input``: ``validateRunCreateInput`` (X: server-ai/src/ai/commands/handlers/
  run-create-stream.handler.ts l.266-320): legacy bodies are mapped first
  (``normalizeLegacyChatRequest`` l.174-264), a body without ``action`` becomes a ``send``, then
  the zod discriminated union of l.32-117 runs, and its issues become one message
  ``"<path>: <message>"`` joined by ``"; "`` (l.311-313). The texts are zod 3.25.67's; every case
  the tests use was checked by running that zod on the same schema (``mode: Invalid input``,
  ``message.input: Expected object, received string``, ``: Expected object, received null``…).
- ``human_input``: ``normalizeChatState`` (X: server-ai/src/shared/agent/utils.ts l.115-148):
  ``state.human`` wins over ``message.input``; a string becomes ``{input}``; anything else that
  is not a record is 400 ``Invalid state.human``.
- ``reduce_variable``: ``stateVariable`` (X: server-ai/src/shared/agent/state.ts l.229-295): the
  variable's ``operation`` picks the reducer; only ``append`` and ``overwrite`` exist.
- ``data_url_file``: ``readDataUrl`` (X: server-ai/src/xpert/commands/handlers/
  chat-file-assets.ts l.511-549), with Node's lenient ``Buffer.from(payload, 'base64')``.
- ``runtime_sys``: ``buildRuntimeSystemState`` (X: server-ai/src/xpert-agent/commands/handlers/
  invoke.handler.ts l.292-310, 696-733) and the ``sys`` channel (X: server-ai/src/shared/agent/
  state.ts l.87-100, shared/agent/time.ts ``commonTimes``).
"""

from __future__ import annotations

import base64
import re
import time
from dataclasses import dataclass
from typing import Any

MISSING: Any = object()  # a key the JSON body does not have (JS ``undefined``)
DATA_URL = re.compile(r"^data:([^;,]+)?((?:;[^,]*)*),([\s\S]*)$")
MAX_DATA_URL_BYTES = 25 * 1024 * 1024  # chat-file-assets.ts l.29
ACTIONS = ("send", "resume", "retry", "follow_up")
_B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
_B64_VALUE = {c: i for i, c in enumerate(_B64)} | {"-": 62, "_": 63}


class HttpError(Exception):
    """A NestJS exception: its HTTP status and body on ``POST /runs``, its ``message`` in the
    ``event: error`` frame of ``runs/stream`` (Nest ``router-response-controller`` ``sse()``
    writes ``err.message``). Bodies are ``HttpException.createBody`` of @nestjs/common 11.1.13:
    ``{message, error, statusCode}``; an object response is sent as it is."""

    def __init__(self, status: int, message: str, body: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        error = {400: "Bad Request", 403: "Forbidden", 404: "Not Found"}.get(status, "")
        self.body = body or {"message": message, "error": error, "statusCode": status}


def bad_request(message: str) -> HttpError:
    return HttpError(400, message)


def not_found() -> HttpError:
    """``NotFoundException('The requested record was not found')`` of the crud service
    (X: server/src/core/crud/crud.service.ts l.257-260, 279-281)."""
    return HttpError(404, "The requested record was not found")


def type_error(message: str) -> HttpError:
    """A JS TypeError: no HTTP status, so Nest's BaseExceptionFilter answers 500 with its
    generic body (X: server/src/shared/http/http-like-exception.ts l.3-19 finds no status;
    @nestjs/core 11.1.13 ``MESSAGES.UNKNOWN_EXCEPTION_MESSAGE``)."""
    return HttpError(500, message, {"statusCode": 500, "message": "Internal server error"})


# --- JS and zod helpers -----------------------------------------------------------------------
def truthy(value: Any) -> bool:
    return value is not MISSING and value not in (None, False, 0, "")


def _zod_type(value: Any) -> str:
    """zod's ``getParsedType`` name for a JSON value."""
    if value is MISSING:
        return "undefined"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


class _Issues(list[tuple[str, str]]):
    def add(self, path: str, message: str) -> None:
        self.append((path, message))

    def obj(self, value: Any, path: str, *, optional: bool = False) -> bool:
        """``z.object`` / ``z.record``: a record, else ``Required`` / ``Expected object``."""
        if value is MISSING:
            if not optional:
                self.add(path, "Required")
            return False
        if not isinstance(value, dict):
            self.add(path, f"Expected object, received {_zod_type(value)}")
            return False
        return True

    def string(self, value: Any, path: str) -> None:
        """``z.string().optional()``."""
        if value is not MISSING and not isinstance(value, str):
            self.add(path, f"Expected string, received {_zod_type(value)}")

    def one_of(self, value: Any, path: str, allowed: tuple[str, ...]) -> None:
        """``z.union([z.literal(…), …])``: any failure is ``Invalid input``."""
        if value not in allowed or not isinstance(value, str):
            self.add(path, "Invalid input")

    def target(self, value: Any, path: str, *, optional: bool = False) -> None:
        if self.obj(value, path, optional=optional):
            self.string(value.get("aiMessageId", MISSING), f"{path}.aiMessageId")
            self.string(value.get("executionId", MISSING), f"{path}.executionId")

    def message(self, value: Any) -> None:
        if self.obj(value, "message"):
            self.string(value.get("clientMessageId", MISSING), "message.clientMessageId")
            self.obj(value.get("input", MISSING), "message.input")


def _omit_nil(values: dict[str, Any]) -> dict[str, Any]:
    """lodash ``omitBy(…, isNil)``."""
    return {k: v for k, v in values.items() if v is not None and v is not MISSING}


def _legacy(body: dict[str, Any], busy: bool) -> dict[str, Any]:
    """``normalizeLegacyChatRequest`` (run-create-stream.handler.ts l.174-264)."""
    get = body.get
    target = _omit_nil({"aiMessageId": get("id"), "executionId": get("executionId")})
    message = _omit_nil({"clientMessageId": get("id"), "input": get("input")})
    if truthy(get("followUpMode", MISSING)) and busy:
        return _omit_nil(
            {
                "action": "follow_up",
                "conversationId": get("conversationId"),
                "mode": get("followUpMode"),
                "target": target,
                "message": message,
                "state": get("state"),
            }
        )
    if truthy(get("retry", MISSING)):
        return _omit_nil(
            {
                "action": "retry",
                "conversationId": get("conversationId"),
                "environmentId": get("environmentId"),
                "sandboxEnvironmentId": get("sandboxEnvironmentId"),
                "source": target,
            }
        )
    if "confirm" in body or "command" in body or "executionId" in body:
        raw_command = get("command")
        command: dict[str, Any] = raw_command if isinstance(raw_command, dict) else {}
        decision = _omit_nil(
            {
                "type": "reject" if get("confirm") is False else "confirm",
                "payload": command.get("resume"),
            }
        )
        patch = _omit_nil(
            {
                "agentKey": get("agentKey")
                if command.get("agentKey") is None
                else command["agentKey"],
                "toolCalls": command.get("toolCalls"),
                "update": command.get("update"),
            }
        )
        return _omit_nil(
            {
                "action": "resume",
                "conversationId": get("conversationId"),
                "target": target,
                "decision": decision,
                "patch": patch or None,
                "state": get("state"),
            }
        )
    return _omit_nil(
        {
            "action": "send",
            "conversationId": get("conversationId"),
            "projectId": get("projectId"),
            "environmentId": get("environmentId"),
            "sandboxEnvironmentId": get("sandboxEnvironmentId"),
            "agentKey": get("agentKey"),
            "message": message,
            "state": get("state"),
        }
    )


LEGACY_KEYS = ("input", "confirm", "command", "retry", "executionId", "agentKey")


def validate_run_input(raw: Any, *, busy: bool = False) -> dict[str, Any]:
    """The run input as the handler sees it after zod, or 400 with zod's issues."""
    data = raw
    if isinstance(raw, dict):
        if "action" not in raw and any(k in raw for k in (*LEGACY_KEYS, "sandboxEnvironmentId")):
            data = _legacy(raw, busy)
        elif not truthy(raw.get("action", MISSING)):
            data = {**raw, "action": "send"}
    issues = _Issues()
    if not issues.obj(data, ""):
        raise _zod_error(issues)
    action = data.get("action", MISSING)
    if action not in ACTIONS or not isinstance(action, str):
        expected = " | ".join(f"'{a}'" for a in ACTIONS)
        issues.add("action", f"Invalid discriminator value. Expected {expected}")
        raise _zod_error(issues)
    get = data.get
    issues.string(get("conversationId", MISSING), "conversationId")
    if action == "send":
        for key in ("projectId", "environmentId", "sandboxEnvironmentId"):
            issues.string(get(key, MISSING), key)
        issues.message(get("message", MISSING))
    elif action == "resume":
        issues.target(get("target", MISSING), "target")
        decision = get("decision", MISSING)
        if issues.obj(decision, "decision"):
            issues.one_of(decision.get("type", MISSING), "decision.type", ("confirm", "reject"))
        patch = get("patch", MISSING)
        if issues.obj(patch, "patch", optional=True):
            issues.string(patch.get("agentKey", MISSING), "patch.agentKey")
            tool_calls = patch.get("toolCalls", MISSING)
            if tool_calls is not MISSING and not isinstance(tool_calls, list):
                issues.add("patch.toolCalls", f"Expected array, received {_zod_type(tool_calls)}")
    elif action == "retry":
        issues.target(get("source", MISSING), "source")
        for key in ("environmentId", "sandboxEnvironmentId"):
            issues.string(get(key, MISSING), key)
    else:
        issues.one_of(get("mode", MISSING), "mode", ("queue", "steer"))
        issues.message(get("message", MISSING))
        issues.target(get("target", MISSING), "target", optional=True)
    if action != "retry":
        issues.obj(get("state", MISSING), "state", optional=True)
    if issues:
        raise _zod_error(issues)
    return dict(data)


def _zod_error(issues: _Issues) -> HttpError:
    return bad_request("; ".join(f"{path}: {message}" for path, message in issues))


def human_input(state: Any, message_input: Any, path: str = "state") -> dict[str, Any]:
    """``normalizeChatState(state, humanInput)[human]``: ``state.human`` replaces the input."""
    if state is not MISSING and state is not None and not isinstance(state, dict):
        raise bad_request(f"Invalid {path}")
    value = state.get("human") if isinstance(state, dict) else None
    if value is None:
        value = message_input if message_input not in (None, MISSING) else {}
    if isinstance(value, str):
        return {"input": value}
    if isinstance(value, dict):
        return value
    raise bad_request(f"Invalid {path}.human")


# --- variables --------------------------------------------------------------------------------
def js_number(value: Any) -> Any:
    """JS ``Number(value)`` for JSON values (NaN is stored as null, as JSON.stringify does)."""
    if value is None or value is False:
        return 0
    if value is True:
        return 1
    if isinstance(value, int | float):
        return value
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return 0
        try:
            number = float(text)
        except ValueError:
            return None
        return int(number) if number.is_integer() and "e" not in text.lower() else number
    return None


def reduce_variable(kind: str, operation: str, left: Any, right: Any) -> Any:
    """``stateVariable(variable).reducer(left, right)`` (state.ts l.248-290)."""
    if not kind:
        return right
    if kind.startswith("array"):
        left = [] if left is None else left
        if operation == "append":
            if isinstance(right, list):
                return [*left, *right]
            return left if right is None else [*left, right]
        return right
    if kind == "number":
        if operation == "append":
            number = js_number(right)
            return number if left is None else (None if number is None else left + number)
        return js_number(right) if operation == "overwrite" else right
    if kind in ("string", "text", "paragraph"):
        if operation == "append":
            return right if left is None else f"{left}{'null' if right is None else right}"
        return (left if right is None else right) if operation == "overwrite" else right
    return right


# --- files ------------------------------------------------------------------------------------
_CANONICAL = re.compile(r"[A-Za-z0-9+/]*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?")


def node_b64decode(text: str) -> bytes:
    """Node 20's ``Buffer.from(text, 'base64')``: url-safe letters count, any other character is
    skipped, ``=`` ends the data, a lone last letter is dropped (checked against Node 20 on
    3 000 random strings). Canonical base64 decodes the same with the standard library, at C
    speed (a turn's pictures are tens of MB)."""
    if len(text) % 4 == 0 and _CANONICAL.fullmatch(text):
        return base64.b64decode(text)
    values: list[int] = []
    for char in text:
        if char == "=":
            break
        if (value := _B64_VALUE.get(char)) is not None:
            values.append(value)
    out = bytearray()
    whole = len(values) - len(values) % 4
    for i in range(0, whole, 4):
        a, b, c, d = values[i : i + 4]
        n = a << 18 | b << 12 | c << 6 | d
        out += bytes((n >> 16, n >> 8 & 255, n & 255))
    rest = values[whole:]
    if len(rest) >= 2:
        n = rest[0] << 18 | rest[1] << 12 | (rest[2] << 6 if len(rest) == 3 else 0)
        out.append(n >> 16)
        if len(rest) == 3:
            out.append(n >> 8 & 255)
    return bytes(out)


def data_url_file(file: Any) -> tuple[str, int] | None:
    """A ``data:`` URL in ``fileUrl`` (else ``url``) becomes a stored file asset ``(mime,
    size)``; anything else is left as it is (None): the server never fetches URLs."""
    if not isinstance(file, dict):
        return None
    url = next((v for v in (file.get("fileUrl"), file.get("url")) if isinstance(v, str)), None)
    if url is None or not url.startswith("data:"):
        return None
    match = DATA_URL.match(url)
    if not match or "base64" not in match.group(2).split(";"):
        raise bad_request("Invalid chat request file data URL")
    given = next((v for v in (file.get("mimeType"), file.get("mimetype")) if v), None)
    mime = str(match.group(1) or given or "application/octet-stream").strip().lower()
    payload = re.sub(r"\s", "", match.group(3))
    if len(payload) * 3 // 4 > MAX_DATA_URL_BYTES:
        raise bad_request("Chat request file is too large")
    data = node_b64decode(payload)
    if len(data) > MAX_DATA_URL_BYTES:
        raise bad_request("Chat request file is too large")
    if payload and not data:
        raise bad_request("Invalid chat request file data URL")
    return mime, len(data)


# --- sys --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Principal:
    """A user ``x-principal-user-id`` may name (``preferredLanguage``, ``email``, ``timeZone``)."""

    language: str | None = None
    email: str | None = None
    time_zone: str | None = None


# The assistant's technical principal user: preferredLanguage 'en', no email, no time zone
# (X: server/src/user/user.service.ts l.475-511, server-ai/src/xpert/xpert-principal.service.ts).
TECHNICAL_USER = Principal(language="en")


def common_times(now: time.struct_time) -> str:
    """``commonTimes()`` (X: server-ai/src/shared/agent/time.ts): the sys channel's default."""
    year, month = now.tm_year, now.tm_mon
    last_year, last_month = (year - 1, 12) if month == 1 else (year, month - 1)
    times = {
        "This Year": year,
        "Last Year": year - 1,
        "The Year Before Last": year - 2,
        "Last Month": f"{last_year}-{last_month:02d}",
        "Today": f"{year}-{month:02d}-{now.tm_mday:02d}",
    }
    return "; ".join(f"{name}: {value}" for name, value in times.items())


def runtime_sys(
    current: Any, request_sys: Any, user: Principal, *, thread_id: str, volume: str
) -> dict[str, Any]:
    """The ``sys`` channel after a run starts: the channel's value (default ``{common_times}``)
    merged with ``buildRuntimeSystemState(state.sys, …)``, which keeps the request's own
    ``state.sys`` keys and overwrites the standard ones, undefined values included (JSON drops
    those). ``soul``/``profile`` are the caller's assistant-binding preference, else null
    (X: server-ai/src/xpert/commands/handlers/chat.handler.ts l.1370-1385)."""
    now = time.localtime()
    channel = dict(current) if isinstance(current, dict) else {"common_times": common_times(now)}
    built = dict(request_sys) if isinstance(request_sys, dict) else {}
    built |= {"soul": None, "profile": None}
    built |= {
        "language": user.language or "en-US",
        "user_email": user.email,
        "timezone": user.time_zone,
        "date": time.strftime("%Y-%m-%d", now),
        # Date.toLocaleString() of the server process (locale and zone are the host's)
        "datetime": time.strftime("%-m/%-d/%Y, %-I:%M:%S %p", now),
        "thread_id": thread_id,
        # The work area of an API run without project or sandbox: the xpert's volume
        # (X: server-ai/src/shared/volume/work-area.ts l.135-199); the exact strings depend on
        # the sandbox provider's path mapper and are not traced.
        "volume": volume,
        "workspace_path": volume,
        "workspace_url": None,
        "workspace_root": volume,
        "shared_workspace_path": f"{volume}/shared",
        "agent_workspace_path": None,
        "session_workspace_path": f"{volume}/sessions/{thread_id}",
        "memory_workspace_path": f"{volume}/memory",
    }
    channel |= {k: v for k, v in built.items() if v is not None or k in ("soul", "profile")}
    for key, value in built.items():  # an undefined standard key overwrites an older value
        if value is None and key not in ("soul", "profile"):
            channel.pop(key, None)
    return channel
