"""The interface every platform harness of the conformance suite (tests/conformance/) keeps.

A harness is one platform in one mode, driven as its users and its servers drive it: it owns the
platform's fake (tests/fakes/), starts an in-process gateway with one integration pointed at it,
sends real signed or encrypted messages as a named user, and reads back what that user sees (the
answer's texts, in order). The behaviour tests speak only this interface; every wire detail
(payload shapes, signatures, which API a part went through, how a "done" card looks) stays in
the platform's harness module.

What a platform can do is declared by its adapter (``Adapter.capabilities()``,
gateway/edge/capabilities.py), not here: a behaviour test asks ``platform.can(...)`` and checks
the capability where it is declared and that its absence behaves sensibly where it is not.

Adding a platform: a module in this package (or a ``conformance.py`` in the platform's own test
folder, tests/platforms/<name>/) with a :class:`Harness` subclass that sets ``id``; the suite's
``platform`` fixture finds it (tests/support/conformance/__init__.py).
"""

from __future__ import annotations

import abc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from gateway.config.platform_limits import PlatformLimits, platform_defaults
from gateway.edge.adapter import Adapter
from gateway.edge.capabilities import Capability
from gateway.edge.factory import discover_adapters
from tests.support.configs import base_config
from tests.support.helpers import InProcessGateway, free_port
from tests.support.mcp import with_mcp
from tests.support.waits import eventually

# An echo expert that answers at once, in one chunk: for answers whose size is the point.
FAST_ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 10_000}


class NoButton(LookupError):
    """The user has no such button (or link) to click: the platform shows it to others only."""


@dataclass(frozen=True)
class Sent:
    """A message a user sent (or a click): its platform id, the user's name, whether in a group,
    and ``extra``, the harness's own marks (where the chat stood, so the answer after it is
    read; the name a file is known by)."""

    id: str
    user: str
    group: bool
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass
class Answer:
    """What the user sees of the answer to a message: its texts in order (the card or stream
    first, then any further messages), the labels of the buttons (or action links) it carries,
    and its title where the platform shows one (a card's header, a markdown message's title)."""

    parts: list[str]
    buttons: list[str] = field(default_factory=list)
    title: str = ""

    @property
    def text(self) -> str:
        return "\n".join(self.parts)


@dataclass(frozen=True)
class Webhook:
    """One request to the gateway's webhook as a platform's server makes it: the path (no host),
    query parameters, headers and body."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes


class Harness(abc.ABC):
    """One platform in one mode: a fake server, a gateway in front of it, its users."""

    # The suite's id of this platform ("lark", "wecom-app"); its modes, the first the default
    # (a behaviour whose wire shape differs per mode runs in each: ``platform_mode``).
    id: ClassVar[str]
    platform: ClassVar[str]  # the adapter's platform name (its entry point)
    modes: ClassVar[tuple[str, ...]] = ("default",)
    integration_id: ClassVar[str]

    def __init__(self, prefix: str, mode: str | None = None) -> None:
        self.prefix = prefix
        self.mode = mode or self.modes[0]
        self._gateway: InProcessGateway | None = None
        # The gateway's port, chosen before it starts (a platform's links point back at it);
        # 0 until then, as for the fake alone (``platform_fake``).
        self.port = 0

    # --- lifecycle ----------------------------------------------------------------------------
    @abc.abstractmethod
    async def open(self) -> None:
        """Start the platform's fake server."""

    @abc.abstractmethod
    async def shut(self) -> None:
        """Stop the platform's fake server (after the gateway)."""

    @abc.abstractmethod
    def integration(self, **options: Any) -> dict[str, Any]:
        """The integration config of this platform and mode pointed at the fake, ``options``
        (camelCase integration fields) merged over it."""

    def config(self, experts: list[dict[str, Any]] | None, **options: Any) -> dict[str, Any]:
        config = base_config(self.prefix)
        if experts is not None:
            config["experts"] = experts
        config["integrations"] = [self.integration(**options)]
        return config

    async def start(self, *, experts: list[dict[str, Any]] | None = None, **options: Any) -> None:
        """Start a gateway with this platform's integration (``options`` over its defaults) and
        ``experts`` (default: the base config's echo); returns once it takes messages."""
        self.port = free_port()  # known to the config: a platform's links point back at it
        gw = InProcessGateway(self.config(experts, **options))
        gw.port = self.port
        await gw.start()
        self._gateway = gw
        await self.connected()

    async def connected(self) -> None:
        """Until the gateway's long connection (if the mode has one) is up."""
        return None

    async def stop(self) -> None:
        """Stop the gateway (harmless twice)."""
        if self._gateway is not None:
            await self._gateway.stop()

    @property
    def gateway(self) -> InProcessGateway:
        assert self._gateway is not None, "start() first"
        return self._gateway

    @property
    def adapter(self) -> Adapter:
        return self.gateway.gateway.adapters[self.integration_id]

    def can(self, capability: Capability) -> bool:
        """Whether the platform in this mode declares ``capability``."""
        return capability in self.adapter.capabilities()

    async def idle(self, timeout: float = 30.0) -> None:
        await self.gateway.idle(timeout)

    # --- users' side --------------------------------------------------------------------------
    def user_id(self, user: str) -> str:
        """The platform's id of the user named ``user`` (what a config's principals name)."""
        return user

    @abc.abstractmethod
    async def send(self, text: str, *, user: str = "alice", group: bool = False) -> Sent:
        """``user`` writes ``text`` to the bot, in a direct chat or (``group``) mentioning it
        in a group; returns once the platform delivered it (the webhook answered, or the long
        connection's frame was pushed)."""

    async def send_file(
        self, data: bytes | None, name: str, *, user: str = "alice", group: bool = False
    ) -> Sent:
        """``user`` sends the file ``name`` holding ``data`` (None: the platform fails to serve
        it). The returned ``Sent`` names, in ``extra["name"]``, the name the gateway can know
        (where the message names no file, the one it gives the file)."""
        raise AssertionError(f"{self.id} takes no files here")

    def fetched(self) -> list[str]:
        """What the gateway downloaded from the platform (one line each; the harness checks the
        wire form of each download: its API, path and parameters)."""
        return []

    @abc.abstractmethod
    def seen(self, sent: Sent) -> Answer | None:
        """The answer to ``sent`` as its chat shows it now, once it is final (no part still
        to come); None before."""

    async def answer(self, sent: Sent, timeout: float = 30.0) -> Answer:
        """The final answer to ``sent``, once the gateway has nothing more under way."""

        async def final() -> Answer | None:
            await self.idle(timeout)
            return self.seen(sent)

        got: Answer = await eventually(final, timeout=timeout, interval=0.05)
        return got

    @abc.abstractmethod
    async def click(self, sent: Sent, label: str, *, user: str | None = None) -> tuple[Sent, str]:
        """``user`` (default: who sent ``sent``) clicks the button (or opens the action link
        and presses its page's button) labelled ``label`` on the answer to ``sent``; returns a
        handle whose :meth:`answer` is what follows the click (a new turn's answer), and what
        the platform showed the clicker at once (a toast, a page, a greyed button's label; ""
        where nothing). Raises :class:`NoButton` when ``user`` has no such button."""

    @abc.abstractmethod
    def shown(self) -> list[str]:
        """Every text the bot showed in any chat, in order (messages, cards' answers)."""

    def files(self) -> list[tuple[str, bytes]]:
        """The files the bot sent into chats, oldest first: (name, bytes) as the user gets them
        (the harness checks the platform's wire form, e.g. an archive it must be sent in)."""
        return []

    # --- hostile input (tests/conformance/test_hostile.py) ------------------------------------
    def webhook(self, payload: bytes) -> Webhook | None:
        """The request carrying ``payload`` (the platform's event as bytes, whatever they hold)
        signed and encrypted as the platform does; None where this mode takes no webhook (its
        messages come over a long connection)."""
        return None

    def misshapen(self) -> list[bytes]:
        """Payloads of the platform's format that are no event of it: a user's message with a
        field of the wrong type (the harness knows which fields the platform reads)."""
        return []

    def forged(self) -> dict[str, tuple[Webhook, int]]:
        """Requests carrying a good user message that the platform's authentication refuses, by
        what is wrong (a wrong signature, a timestamp past the window where the platform signs
        time, none at all), each with the status the gateway refuses it with."""
        return {}

    # --- the platform's directory -------------------------------------------------------------
    def member(self, user: str, email: str, *, work_address: bool = False) -> None:
        """``user`` is in the organisation's directory with ``email`` (``work_address``: in the
        platform's second address field where it has one, the first left empty)."""
        raise AssertionError(f"{self.id} has no directory here")

    def lookups(self) -> list[str]:
        """The platform ids of the users whose directory entry the gateway asked for."""
        return []

    # --- the platform's side ------------------------------------------------------------------
    @abc.abstractmethod
    def written(self) -> str:
        """Everything the gateway sent to the platform, as one string (JSON of the bodies)."""

    @abc.abstractmethod
    def refused(self) -> list[str]:
        """The platform calls the fake refused (each described in a line)."""

    def part_bytes(self) -> int | None:
        """Bytes one part of a long answer holds at most here (the adapter's declaration)."""
        return self.adapter.answer_part_bytes()

    def part_chars(self) -> int | None:
        return self.adapter.answer_part_chars()

    # --- media out (tests/conformance/test_media_out.py) --------------------------------------
    def media(self, sent: Sent) -> Media:
        """The pictures and files the chat shows with the answer to ``sent`` (in the card or
        stream, or messages after it), as their bytes; none where the platform shows none."""
        return Media()

    def refuse_uploads(self) -> bool:
        """The platform refuses every image upload from now on, as it answers a bad one; False
        where the platform takes no upload (its pictures travel inline)."""
        return False

    # --- the fake's limits (tests/conformance/test_fake_limits.py, test_platform_budget.py) ---
    def published(self) -> PlatformLimits:
        """The limits the platform's adapter declares it publishes (its settings model's)."""
        platform = str(self.integration()["platform"])
        return platform_defaults(discover_adapters()[platform].settings_model)

    def declares(self, capability: Capability) -> bool:
        """:meth:`can`, before :meth:`start`: the declaration of this mode's settings."""
        factory = discover_adapters()[str(self.integration()["platform"])]
        settings = factory.settings_model.model_validate(self.integration())
        return capability in factory.declared(settings)

    def fake_figures(self) -> dict[str, int]:
        """The figures the fake enforces when built with its platform's limits, named as
        ``PlatformLimits`` fields (``calls_per_second``, ``chat_sends_per_minute``...)."""
        return {}

    async def limit_fake(
        self,
        clock: Callable[[], float] | None = None,
        *,
        per_api: int | None = None,
    ) -> float:
        """From now on (before :meth:`start`) the fake enforces its platform's limits, on
        ``clock`` (ms; default the monotonic clock), with ``per_api`` calls of one API in its
        tightest window instead of the published figure. Returns that window in ms."""
        raise NotImplementedError(f"{self.id}: the fake keeps no limits")

    async def call_api(self, api: str) -> str:
        """One call a client makes to the fake: ``"a"`` and ``"b"`` are two different APIs,
        ``"chat:<id>"`` a message to that chat (or user). Its outcome: ``"ok"``, ``"throttled"``
        (the platform's answer to a call over a limit), ``"dropped"`` (taken, never delivered),
        or ``"refused <why>"``."""
        raise NotImplementedError(f"{self.id}: no client calls")

    def throttles(self) -> list[str]:
        """Every answer of the fake that told the gateway to slow down, each in a line."""
        return []

    # --- the platform budget (tests/conformance/test_platform_budget.py) ----------------------
    # The mode whose answers go through the platform's paced APIs (None: the first).
    paced_mode: ClassVar[str | None] = None

    def budget(self, per_api: int) -> dict[str, Any]:
        """The ``platformLimits`` of an app that may call each API ``per_api`` times in the
        fake's window (:meth:`limit_fake`, a second on the real clock)."""
        return {"callsPerSecond": per_api}

    def throttle_next(self) -> float:
        """The next call of the API an answer goes through gets the platform's throttle answer
        (after :meth:`limit_fake`, which records the fake's answers); returns the seconds the
        API is to rest, as that answer names them (or the platform's documented default)."""
        raise NotImplementedError(f"{self.id}: nothing of an answer is paced")

    def after_throttle(self) -> float | None:
        """Milliseconds from the throttle answer to the next call of that API the fake
        served; None before."""
        raise NotImplementedError(f"{self.id}: nothing of an answer is paced")

    # --- MCP chat actions (tests/conformance/test_chat_actions.py) ---------------------------
    async def start_mcp(
        self, *, experts: list[dict[str, Any]] | None = None, **options: Any
    ) -> None:
        """:meth:`start`, with the MCP server and its clients on (tests/support/mcp.py)."""
        self.port = free_port()
        gw = InProcessGateway(with_mcp(self.config(experts, **options)))
        gw.port = self.port
        await gw.start()
        self._gateway = gw
        await self.connected()

    def chat_id(self, sent: Sent) -> str:
        """The platform's id of the chat ``sent`` was written in (what a chat tool names)."""
        return self.user_id(sent.user)

    def chat_files(self) -> list[tuple[str, bytes]]:
        """Every file (name, bytes) the bot sent as a file message, in any chat."""
        return []

    def seat_members(self, sent: Sent, names: list[str]) -> None:
        """The chat of ``sent`` has these members (where the platform lists members)."""
        return None


@dataclass
class Media:
    """Pictures (their bytes) and files (name, bytes) a chat shows with an answer, in order."""

    images: list[bytes] = field(default_factory=list)
    files: list[tuple[str, bytes]] = field(default_factory=list)
