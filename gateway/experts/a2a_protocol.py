"""The A2A protocol (1.0) as the ``a2a`` expert kind speaks it: the agent card, the message it
sends, and what the agent's responses mean for the card. Read in a2a-sdk 1.x (a2aproject/
a2a-python): ``types/a2a_pb2.pyi`` (the messages; JSON is their proto3 mapping, camelCase),
``server/routes/jsonrpc_dispatcher.py`` (JSON-RPC methods ``SendMessage``,
``SendStreamingMessage``, ``CancelTask``; the ``A2A-Version`` header, 0.3 when missing:
``utils/version_validator.py``), ``server/routes/rest_routes.py`` (HTTP+JSON:
``/message:send``, ``/message:stream``, ``/tasks/{id}:cancel``) and ``utils/constants.py``
(the card at ``/.well-known/agent-card.json``).
"""

from __future__ import annotations

import base64
import json
import mimetypes
import uuid
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.errors import GatewayError
from gateway.events import ArtifactEvent, RunEvent, StepEvent, TextDelta

CARD_PATH = "/.well-known/agent-card.json"
VERSION = "1.0"
BINDINGS = ("JSONRPC", "HTTP+JSON")  # in the order they are preferred when a card offers both
# TaskState names (a2a_pb2 TaskState); 0.3 spelled them "input-required" and so on.
WAITING = "TASK_STATE_INPUT_REQUIRED"
AUTH = "TASK_STATE_AUTH_REQUIRED"
DONE = "TASK_STATE_COMPLETED"
FAILED = ("TASK_STATE_FAILED", "TASK_STATE_REJECTED")
CANCELED = "TASK_STATE_CANCELED"
TERMINAL = frozenset({WAITING, AUTH, DONE, CANCELED, *FAILED})


class CardError(GatewayError, ValueError):
    """An agent card this gateway cannot use, with why."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to talk to the agent, from its card."""

    url: str
    binding: str  # JSONRPC | HTTP+JSON
    streaming: bool
    name: str = ""
    input_modes: tuple[str, ...] = ()


def endpoint_of(card: Any) -> Endpoint:
    """The card's interface of protocol 1.0 over a binding we speak (JSON-RPC preferred)."""
    if not isinstance(card, dict):
        raise CardError("the agent card is not a JSON object")
    interfaces = [i for i in card.get("supportedInterfaces") or [] if isinstance(i, dict)]
    usable = [
        i
        for i in interfaces
        if i.get("protocolBinding") in BINDINGS
        and str(i.get("protocolVersion") or VERSION).split(".")[0] == "1"
        and isinstance(i.get("url"), str)
    ]
    if not usable:
        found = card.get("protocolVersion") or ", ".join(
            f"{i.get('protocolBinding')} {i.get('protocolVersion')}" for i in interfaces
        )
        raise CardError(
            f"the agent offers no A2A {VERSION} interface over JSON-RPC or HTTP+JSON "
            f"(it offers: {found or 'nothing'})"
        )
    usable.sort(key=lambda i: BINDINGS.index(i["protocolBinding"]))
    chosen = usable[0]
    capabilities = card.get("capabilities") if isinstance(card.get("capabilities"), dict) else {}
    modes = card.get("defaultInputModes")
    return Endpoint(
        url=str(chosen["url"]).rstrip("/"),
        binding=str(chosen["protocolBinding"]),
        streaming=bool((capabilities or {}).get("streaming")),
        name=str(card.get("name") or ""),
        input_modes=tuple(m for m in modes if isinstance(m, str))
        if isinstance(modes, list)
        else (),
    )


def message(
    text: str,
    attachments: list[dict[str, Any]],
    *,
    context_id: str | None,
    task_id: str | None,
    metadata: dict[str, Any],
) -> dict[str, Any]:
    """A user message: its text part, then each fetched attachment as a ``raw`` part (base64
    in JSON) with its ``mediaType`` and ``filename``."""
    parts: list[dict[str, Any]] = [{"text": text}]
    for a in attachments:
        url = str(a.get("url") or "")
        if not url.startswith("data:") or ";base64," not in url:
            continue
        mime, data = url[5:].split(";base64,", 1)
        part = {"raw": data, "mediaType": str(a.get("mime") or mime)}
        if a.get("name"):
            part["filename"] = str(a["name"])
        parts.append(part)
    out: dict[str, Any] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": parts,
        "metadata": metadata,
    }
    if context_id:
        out["contextId"] = context_id
    if task_id:
        out["taskId"] = task_id
    return out


def parts_text(parts: Any) -> str:
    """The text of a message's or artifact's parts; a ``data`` part as its JSON."""
    out = []
    for p in parts if isinstance(parts, list) else []:
        if not isinstance(p, dict):
            continue
        if isinstance(p.get("text"), str):
            out.append(p["text"])
        elif "data" in p and "raw" not in p and "url" not in p:
            out.append("```json\n" + json.dumps(p["data"], ensure_ascii=False, indent=2) + "\n```")
    return "".join(out)


def file_parts(parts: Any) -> list[ArtifactEvent]:
    """A message's or artifact's files: ``raw`` bytes as a data: URL, ``url`` as it is."""
    out = []
    for p in parts if isinstance(parts, list) else []:
        if not isinstance(p, dict) or not ("raw" in p or "url" in p):
            continue
        mime = str(p.get("mediaType") or "")
        name = str(p.get("filename") or "")
        if not mime and name:
            mime = mimetypes.MimeTypes(filenames=()).guess_type(name)[0] or ""
        mime = mime or "application/octet-stream"
        kind: Literal["image", "file"] = "image" if mime.startswith("image/") else "file"
        if "raw" in p:
            try:
                base64.b64decode(str(p["raw"]), validate=True)
            except ValueError:
                continue
            url = f"data:{mime};base64,{p['raw']}"
        else:
            url = str(p["url"])
        out.append(ArtifactEvent(kind, url, name or ("image" if kind == "image" else "file")))
    return out


@dataclass
class A2AStream:
    """One exchange's responses, in order: what the agent came to is kept for the end."""

    context_id: str | None = None
    task_id: str | None = None
    state: str = ""
    status_text: str = ""  # the last status message's text
    answered: bool = False
    _artifact: str | None = None
    _steps: int = 0
    _step_title: str = ""
    _files: set[str] = field(default_factory=set)

    def feed(self, result: Any) -> list[RunEvent]:
        """One ``StreamResponse`` (or ``SendMessageResponse``: the same ``task`` /
        ``message`` members)."""
        if not isinstance(result, dict):
            return []
        if isinstance(result.get("task"), dict):
            return self._task(result["task"])
        if isinstance(result.get("message"), dict):
            return self._message(result["message"])
        if isinstance(result.get("statusUpdate"), dict):
            update = result["statusUpdate"]
            self._ids(update.get("contextId"), update.get("taskId"))
            return self._status(update.get("status"))
        if isinstance(result.get("artifactUpdate"), dict):
            update = result["artifactUpdate"]
            self._ids(update.get("contextId"), update.get("taskId"))
            return self._artifact_events(update.get("artifact"), bool(update.get("append")))
        return []

    def _ids(self, context_id: Any, task_id: Any) -> None:
        if isinstance(context_id, str) and context_id:
            self.context_id = context_id
        if isinstance(task_id, str) and task_id:
            self.task_id = task_id

    def _task(self, task: dict[str, Any]) -> list[RunEvent]:
        self._ids(task.get("contextId"), task.get("id"))
        out: list[RunEvent] = []
        for artifact in task.get("artifacts") or []:
            out += self._artifact_events(artifact, False)
        return out + self._status(task.get("status"))

    def _message(self, msg: dict[str, Any]) -> list[RunEvent]:
        self._ids(msg.get("contextId"), msg.get("taskId"))
        if not msg.get("taskId"):
            self.state = DONE  # a message without a task is the whole answer
        return self._text(
            parts_text(msg.get("parts")), str(msg.get("messageId"))
        ) + self._new_files(file_parts(msg.get("parts")))

    def _status(self, status: Any) -> list[RunEvent]:
        if not isinstance(status, dict):
            return []
        self.state = str(status.get("state") or self.state)
        msg = status.get("message")
        text = parts_text(msg.get("parts")).strip() if isinstance(msg, dict) else ""
        out: list[RunEvent] = []
        if text:
            self.status_text = text
        if text and self.state not in TERMINAL:  # a step; the one before it is done
            if self._steps:
                out.append(StepEvent(f"status:{self._steps}", self._step_title, "done"))
            self._steps += 1
            self._step_title = text
            out.append(StepEvent(f"status:{self._steps}", text, "running"))
        if self.state == DONE and text and not self.answered:
            out += self._text(text, "status")  # the agent's last word is its answer
        return out

    def _artifact_events(self, artifact: Any, append: bool) -> list[RunEvent]:
        if not isinstance(artifact, dict):
            return []
        key = str(artifact.get("artifactId") or artifact.get("name") or "")
        out = self._text(parts_text(artifact.get("parts")), key, append=append)
        return out + self._new_files(file_parts(artifact.get("parts")))

    def _text(self, text: str, key: str, *, append: bool = False) -> list[RunEvent]:
        if not text:
            return []
        out: list[RunEvent] = []
        if self.answered and key != self._artifact and not append:
            out.append(TextDelta("\n\n"))
        self._artifact, self.answered = key, True
        out.append(TextDelta(text))
        return out

    def _new_files(self, files: list[ArtifactEvent]) -> list[RunEvent]:
        """Each file once: bytes as an artifact the final card sends as a file; a URL also as
        a Markdown link in the answer, fetched from the allowed origins like any
        (gateway/edge/media.py)."""
        new: list[RunEvent] = []
        for f in files:
            if f.url in self._files:
                continue
            self._files.add(f.url)
            if not f.url.startswith("data:"):
                mark = "!" if f.kind == "image" else ""
                new += self._text(f"{mark}[{f.name}]({f.url})", f"file:{f.url}")
            new.append(f)
        return new
