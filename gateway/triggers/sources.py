"""What every external event source shares, and the generic source.

A source verifies a delivery (its headers before the body is read, then its signature over the
raw bytes), names its dedup id, and reads its payload into an :class:`ExternalEvent`: the object
it is about (the key that makes one card per object), the object's state, and whether that state
is final. The summary that goes to the expert is a few lines (what, state, title, link), never
the payload.
"""

from __future__ import annotations

import abc
import hashlib
import hmac
import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from gateway.config.event_settings import EventSource
from gateway.edge.body import HttpRequest, ascii_text
from gateway.errors import Refused

_DELIVERY = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_SPACES = re.compile(r"\s+")
MAX_KEY = 200


@dataclass(frozen=True, slots=True)
class ExternalEvent:
    """One event, read from its payload."""

    type: str  # pull_request, merge_request, pipeline, generic, …
    action: str | None  # the event's own action or status (for the types allow-list)
    key: str  # the object: pr:<repo>#<n>, mr:<project>!<iid>, run:<repo>:<id>, …
    what: str  # the object in words: "pull request octo/repo#2"
    state: str  # its state in words: "opened", "closed (merged)", "completed: success"
    final: bool  # the object reached a state after which its card is finished
    title: str = ""
    url: str = ""
    detail: str = ""  # generic: the event's own text
    chat_id: str | None = None  # generic: the chat the event asks for (if allowed)

    def summary(self, label: str) -> str:
        lines = [f"[{label}] {self.what}: {self.state}"]
        lines += [line for line in (self.title, self.url, self.detail) if line]
        return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Ignored:
    """A verified event the gateway does not act on (ping, a type not configured): 202."""

    reason: str


class Source(abc.ABC):
    """One kind of sender (GitHub, GitLab, generic); a stateless object."""

    name: ClassVar[str]
    label: ClassVar[str]  # the sender's name in the chat and in the summary

    @abc.abstractmethod
    def check(self, config: EventSource, request: HttpRequest) -> None:
        """Headers, before the body is read: a delivery without its signature is a 401."""

    @abc.abstractmethod
    def verify(self, config: EventSource, request: HttpRequest, body: bytes) -> None:
        """The signature over the raw body; :class:`Rejected` (401) when it does not match."""

    @abc.abstractmethod
    def delivery(self, headers: Mapping[str, str], body: bytes) -> str | None:
        """The sender's delivery id, for the logs (400 when it is malformed). It is not the
        dedup id: no sender signs it, so a replay could change it; the body's digest is."""

    @abc.abstractmethod
    def event(
        self, config: EventSource, headers: Mapping[str, str], payload: dict[str, Any]
    ) -> ExternalEvent | Ignored:
        """The event the verified payload tells of, or why it is ignored."""


# --- helpers -----------------------------------------------------------------------------------
def hmac_hex(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def body_digest(body: bytes) -> str:
    """The dedup id of a delivery: a retry resends the same bytes, and the bytes are what the
    signature covers."""
    return "body-" + hashlib.sha256(body).hexdigest()[:40]


def delivery_header(headers: Mapping[str, str], name: str) -> str | None:
    """A delivery id header, None when absent; 400 when it is not a plain id."""
    value = headers.get(name)
    if value is None:
        return None
    if not _DELIVERY.match(value):
        raise Refused(400, f"{name}: not a delivery id")
    return value


def signature(request: HttpRequest, name: str) -> str:
    """The signature header, 401 when it is missing (a header that is not ASCII too)."""
    value = ascii_text(request.headers.get(name), name).strip()
    if not value:
        raise Refused(401, f"{name} missing", public="signature missing")
    return value


def field(data: Any, *path: str) -> Any:
    """``data[path[0]][path[1]]…``, or None where the path leaves the objects."""
    for name in path:
        if not isinstance(data, dict):
            return None
        data = data.get(name)
    return data


def text(data: Any, *path: str, limit: int = 300, required: bool = False) -> str:
    """A text (or number) field on one line, cut to ``limit``; "" when absent unless
    ``required``; 400 when it is of another type."""
    value = field(data, *path)
    if value is None or value == "":
        if required:
            raise Refused(400, f"{'.'.join(path)}: missing")
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise Refused(400, f"{'.'.join(path)}: not text")
    line = _SPACES.sub(" ", str(value)).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def first_line(value: str, limit: int = 300) -> str:
    line = value.strip().splitlines()[0] if value.strip() else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def object_key(value: str) -> str:
    if not value or len(value) > MAX_KEY or _CONTROL.search(value):
        raise Refused(400, f"object key: 1 to {MAX_KEY} printable characters")
    return value


# --- generic -----------------------------------------------------------------------------------
# A generic sender signs the raw body with the shared secret: "X-Signature-256: sha256=<hex of
# HMAC-SHA256(secret, body)>", the scheme GitHub uses (https://docs.github.com/en/webhooks/
# using-webhooks/validating-webhook-deliveries); the bare hex without "sha256=" is taken too.
# A body may carry "sentAt" (unix seconds): being signed, it bounds replays to the source's
# replayWindowSeconds (GitHub and GitLab send no signed time: their replays are bounded by dedup).
FINAL_STATUSES = frozenset(
    {"done", "closed", "merged", "success", "failed", "cancelled", "canceled", "resolved"}
)


class GenericSource(Source):
    name = "generic"
    label = "event"

    def check(self, config: EventSource, request: HttpRequest) -> None:
        signature(request, "X-Signature-256")

    def verify(self, config: EventSource, request: HttpRequest, body: bytes) -> None:
        given = signature(request, "X-Signature-256").removeprefix("sha256=").lower()
        expected = hmac_hex(config.secret.get_secret_value(), body)
        if not hmac.compare_digest(given, expected):
            raise Refused(401, "X-Signature-256 does not match", public="bad signature")

    def delivery(self, headers: Mapping[str, str], body: bytes) -> str | None:
        return delivery_header(headers, "X-Delivery-Id")

    def event(
        self, config: EventSource, headers: Mapping[str, str], payload: dict[str, Any]
    ) -> ExternalEvent | Ignored:
        _fresh(config, field(payload, "sentAt"))
        key = field(payload, "key")
        if not isinstance(key, str):
            raise Refused(400, "key: missing or not text")
        status = text(payload, "status", limit=64, required=True)
        chat = field(payload, "chatId")
        return ExternalEvent(
            type="generic",
            action=status.lower(),
            key=object_key(key),
            what=key,
            state=status,
            final=status.lower() in FINAL_STATUSES,
            title=text(payload, "title", required=True),
            url=text(payload, "url", limit=500),
            detail=_detail(field(payload, "text")),
            chat_id=chat if isinstance(chat, str) else None,
        )


def _fresh(config: EventSource, sent_at: Any) -> None:
    """A generic event may carry ``sentAt`` (unix seconds) in its signed body: then a body
    replayed later than ``replayWindowSeconds`` is refused, whatever the dedup remembers."""
    if sent_at is None:
        return
    if (
        isinstance(sent_at, bool)
        or not isinstance(sent_at, int | float)
        or not math.isfinite(sent_at)
    ):
        raise Refused(400, "sentAt: not unix seconds")
    window = config.replay_window_seconds
    if window and abs(time.time() - sent_at) > window:
        raise Refused(401, "sentAt outside the replay window", public="stale event")


def _detail(value: Any, limit: int = 2000) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise Refused(400, "text: not text")
    detail: str = value.strip()
    return detail if len(detail) <= limit else detail[: limit - 1] + "…"
