"""The intake chain, in the manner of aiogram's routers: each kind of incoming thing is a
``Handler`` with a filter (``matches``), and a ``Router`` offers an envelope to its handlers in
the ONE order they were registered (``gateway.intake.pipeline.Pipeline`` lists it).

A handler that matches may still answer None ("not mine, go on": a group message no watch takes,
a Confirm that goes on into the burst): the next handler that matches is offered it. A handler
may also replace ``Incoming.env`` before going on (``/new <text>``: the text, as a message).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from gateway.config.bases import IntegrationBase
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Envelope
from gateway.intake.commands import Command, parse_command


@dataclass(slots=True)
class Incoming:
    """One envelope on its way through the chain: its integration and conversation."""

    env: Envelope
    integ: IntegrationBase
    conversation: str

    @property
    def said(self) -> bool:
        """A message (or command) someone typed into the chat."""
        return self.env.kind in ("message", "command")

    @property
    def unaddressed(self) -> bool:
        """A group message that does not mention the bot where the bot answers only mentions."""
        env = self.env
        return (
            self.said
            and env.chat.type == "group"
            and self.integ.group_reply_strategy == "mention_only"
            and not env.bot_mentioned
        )

    @property
    def command(self) -> Command | None:
        """The chat command it is (a known one or not), or None."""
        return parse_command(self.env.text) if self.said else None

    @property
    def busy_mode(self) -> Literal["collect", "reject"]:
        """What its burst does while a turn runs: ``busyPolicy: reject`` turns it away."""
        return "reject" if self.integ.busy_policy == "reject" else "collect"


class Handler(Protocol):
    """One kind of incoming thing: ``matches`` is its filter (no I/O), ``handle`` its work;
    None from ``handle``: not mine after all, the chain goes on."""

    def matches(self, incoming: Incoming) -> bool: ...

    async def handle(self, incoming: Incoming) -> IngestOutcome | None: ...


class ChatSchedules(Protocol):
    """A chat's own schedules, as commands (``SCHEDULE_COMMANDS``) and the Confirm / Cancel of a
    routine's card (``gateway.triggers.routines.ChatSchedules``, handed in by the runtime)."""

    async def command(
        self, integ: IntegrationBase, env: Envelope, name: str, rest: str
    ) -> None: ...

    async def click(
        self, integ: IntegrationBase, env: Envelope, conversation: str
    ) -> IngestOutcome: ...


class Router:
    def __init__(self, *handlers: Handler) -> None:
        self.handlers: Sequence[Handler] = handlers  # the order they are offered an envelope

    async def route(self, incoming: Incoming) -> IngestOutcome:
        for handler in self.handlers:
            if handler.matches(incoming):
                outcome = await handler.handle(incoming)
                if outcome is not None:
                    return outcome
        return IngestOutcome("ignored", f"no handler for kind {incoming.env.kind!r}")
