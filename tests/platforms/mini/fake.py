"""The Mini platform's API, served for the tests: messages sent (once per idempotency key) and
cards replaced in place, behind a bearer token and (``limited``) Mini's published rate limits
(20 calls a second to each API, 5 new messages a second to one chat; past either a 429 with
``Retry-After``), which its adapter declares (``adapter/settings.py``); a text (or a card's)
past 16,000 bytes is refused. Built without ``limited`` it refuses no burst; ``throttle_next``
gives one API's next call the throttle answer all the same. Mini is no real platform: this
fake is its specification, so there is no outside source to cite."""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from tests.support.redis_server import free_port

BOT_TOKEN = "mini-bot-token"
CALLS_PER_SECOND = 20
CHAT_SENDS_PER_SECOND = 5
# A second as the fake counts it by default: 0.1 s of a call's way here (a connection opened, a
# loaded machine's event loop) is forgiven, as a platform's edge would see the gateway's calls a
# little unevenly too; the gateway keeps its own windows 0.05 s longer (gateway/edge/calls.py).
WINDOW_MS = 900.0
TEXT_BYTES = 16_000  # of a message's text, or a card's


def too_long(text: Any) -> bool:
    return isinstance(text, str) and len(text.encode()) > TEXT_BYTES


@dataclass
class Message:
    id: str
    chat: str
    key: str
    reply_to: str | None
    text: str = ""
    card: dict[str, Any] | None = None
    versions: list[dict[str, Any]] = field(default_factory=list)  # every card it showed


class Window:
    """At most ``limit`` calls in any ``window_ms``, per key (a sliding log; refused calls do not
    count)."""

    def __init__(self, limit: int, window_ms: float) -> None:
        self.limit, self.window_ms = limit, window_ms
        self.log: dict[str, deque[float]] = {}

    def admit(self, key: str, now: float) -> float | None:
        """None when a call that arrived at ``now`` (ms) is admitted (and counted), else the ms
        until one would be."""
        log = self.log.setdefault(key, deque())
        while log and now - log[0] >= self.window_ms:
            log.popleft()
        if len(log) >= self.limit:
            return self.window_ms - (now - log[0])
        log.append(now)
        return None


@dataclass(frozen=True)
class Call:
    """The fake's answer to one call: when (ms on its clock), which API, its HTTP status."""

    at: float
    endpoint: str
    status: int


def monotonic_ms() -> float:
    return time.monotonic() * 1000


class FakeMini:
    """``limited``: Mini's limits kept, ``calls_per_second`` to each API (default the published
    figure) in ``window_ms`` on ``clock`` (ms)."""

    def __init__(
        self,
        *,
        limited: bool = False,
        clock: Callable[[], float] = monotonic_ms,
        window_ms: float = WINDOW_MS,
        calls_per_second: int = CALLS_PER_SECOND,
    ) -> None:
        self.messages: dict[str, Message] = {}
        self.by_key: dict[str, str] = {}
        self.answers: list[Call] = []  # every call's
        self.clock = clock
        self.limited = limited
        self.api_window = Window(calls_per_second, window_ms)
        self.chat_window = Window(CHAT_SENDS_PER_SECOND, window_ms)
        self.throttle: dict[str, float] = {}  # endpoint: the seconds its next call is told to rest
        self._ids = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self.port = 0

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def throttled(self) -> int:
        return sum(1 for call in self.answers if call.status == 429)

    def replies_to(self, message_id: str) -> list[Message]:
        return [m for m in self.messages.values() if m.reply_to == message_id]

    def throttle_next(self, endpoint: str, rest_s: int) -> None:
        """The next call of ``endpoint`` gets the throttle answer, ``Retry-After: rest_s``."""
        self.throttle[endpoint] = rest_s * 1000.0

    def seed_card(self, chat: str) -> str:
        """A card message in ``chat``, there without a call (for a client to update); its id."""
        message = Message(id=f"mm_{next(self._ids)}", chat=chat, key="seed", reply_to=None)
        message.card = {"text": ""}
        self.messages[message.id] = message
        return message.id

    # --- the server ----------------------------------------------------------------------------
    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/messages", self._send)
        app.router.add_put("/v1/messages/{id}", self._update)
        return app

    async def start(self) -> None:
        self._runner = web.AppRunner(self.app())
        await self._runner.setup()
        self.port = free_port()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def _answer(self, endpoint: str, status: int, at: float, **body: Any) -> web.Response:
        self.answers.append(Call(at, endpoint, status))
        headers = {}
        if status == 429:
            headers["Retry-After"] = str(max(1, round(body.pop("wait") / 1000)))
        return web.json_response({"ok": status == 200, **body}, status=status, headers=headers)

    def _admitted(
        self, request: web.Request, endpoint: str, chat: str | None, at: float
    ) -> web.Response | None:
        """None when the call (arrived ``at``) is authorised and within the limits, else the
        refusal."""
        if request.headers.get("Authorization") != f"Bearer {BOT_TOKEN}":
            return self._answer(endpoint, 401, at, error="invalid_auth")
        wait = self.throttle.pop(endpoint, None)
        if wait is None and self.limited:
            wait = self.api_window.admit(endpoint, at)
            if wait is None and chat is not None:
                wait = self.chat_window.admit(chat, at)
        if wait is not None:
            return self._answer(endpoint, 429, at, error="rate_limited", wait=wait)
        return None

    async def _send(self, request: web.Request) -> web.Response:
        at = self.clock()
        body = await request.json()
        chat = str(body.get("chat") or "")
        if not chat or not body.get("key"):
            return self._answer("send", 400, at, error="invalid_arguments")
        if too_long(body.get("text")) or too_long((body.get("card") or {}).get("text")):
            return self._answer("send", 400, at, error="too_long")
        refused = self._admitted(request, "send", chat, at)
        if refused is not None:
            return refused
        key = f"{chat}:{body['key']}"
        if key in self.by_key:  # the same key again: the message already sent
            return self._answer("send", 200, at, id=self.by_key[key])
        message = Message(
            id=f"mm_{next(self._ids)}", chat=chat, key=str(body["key"]),
            reply_to=body.get("replyTo"), text=str(body.get("text") or ""), card=body.get("card"),
        )  # fmt: skip
        if message.card is not None:
            message.versions.append(message.card)
        self.messages[message.id] = message
        self.by_key[key] = message.id
        return self._answer("send", 200, at, id=message.id)

    async def _update(self, request: web.Request) -> web.Response:
        at = self.clock()
        body = await request.json()
        if too_long((body.get("card") or {}).get("text")):
            return self._answer("update", 400, at, error="too_long")
        refused = self._admitted(request, "update", None, at)
        if refused is not None:
            return refused
        message = self.messages.get(request.match_info["id"])
        if message is None or message.card is None:
            return self._answer("update", 404, at, error="message_not_found")
        message.card = body.get("card")
        message.versions.append(body.get("card"))
        return self._answer("update", 200, at, id=message.id)
