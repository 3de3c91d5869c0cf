"""The chat commands handler: what ``/help``, ``/stop``, ``/new [text]``, ``/remember``,
``/memory``, ``/forget`` and the schedule commands (``gateway.triggers.routines``) do, acting at
once (not behind the running turn); an unknown ``/command`` is answered "unknown command, try
/help" in the chat like any command's reply (``gateway.intake.commands`` says what a command is).
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from gateway.config.bases import IntegrationBase
from gateway.edge.ingest import IngestOutcome
from gateway.envelope import Envelope
from gateway.intake.commands import HELP_TEXT, SCHEDULE_COMMANDS
from gateway.intake.controls import Controls
from gateway.intake.replies import Replies
from gateway.intake.router import ChatSchedules, Incoming
from sessions import SessionRecords, SessionStore

log = structlog.get_logger("gateway.intake")

UNKNOWN_TEXT = "/{name}: unknown command, try /help"


class ChatCommands:
    def __init__(
        self,
        *,
        store: SessionStore,
        records: SessionRecords,
        controls: Controls,
        schedules: ChatSchedules,
        replies: Replies,
        clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.records = records
        self.controls = controls
        self.schedules = schedules
        self.replies = replies
        self.clock = clock

    def matches(self, incoming: Incoming) -> bool:
        return incoming.command is not None

    async def handle(self, incoming: Incoming) -> IngestOutcome | None:
        command = incoming.command
        assert command is not None
        env, integ, conv = incoming.env, incoming.integ, incoming.conversation
        if not await self.store.mark_seen(conv, env.event_id, self.clock()):
            return IngestOutcome("duplicate")
        log.info("command", command=command.name, known=command.known)
        reply = self.replies.text
        if not command.known:
            reply(env, UNKNOWN_TEXT.format(name=command.name))
            return IngestOutcome("handled", "unknown command")
        if command.name == "help":
            reply(env, HELP_TEXT)
            return IngestOutcome("handled", "help")
        if command.name == "stop":
            await self.controls.stop(conv, env, None)
            return IngestOutcome("handled", "stop")
        if command.name in ("remember", "memory", "forget"):
            await self._memory(integ, env, command.name, command.rest)
            return IngestOutcome("handled", command.name)
        if command.name in SCHEDULE_COMMANDS:
            await self.schedules.command(integ, env, command.name, command.rest)
            return IngestOutcome("handled", command.name)
        await self.controls.new(conv, env, announce=not command.rest)
        if not command.rest:
            return IngestOutcome("handled", "new")
        # /new <text>: the text goes on as the new session's first message.
        incoming.env = env.model_copy(
            update={"text": command.rest, "kind": "message", "event_id": env.event_id + "#new"}
        )
        return None

    async def _memory(self, integ: IntegrationBase, env: Envelope, name: str, rest: str) -> None:
        """Group memory: rules and facts a chat keeps across sessions (offered as memory.*)."""
        chat, reply = env.chat.id, self.replies.text
        if name == "memory":
            items = await self.records.memory(integ.id, chat)
            listing = "\n".join(f"{i}. {item['text']}" for i, item in enumerate(items, 1))
            reply(env, f"This chat's memory:\n{listing}" if items else "Memory is empty.")
            return
        if integ.memory_admins and env.sender.id not in integ.memory_admins:
            reply(env, "Only this chat's memory admins can change its memory.")
            return
        if name == "remember":
            if not rest:
                reply(env, "Usage: /remember <text>")
                return
            count = await self.records.remember(
                integ.id, chat, {"text": rest, "by": env.sender.id, "at": self.clock()}
            )
            reply(env, f"Remembered (item {count}).")
            return
        if not rest.isdigit() or int(rest) < 1:
            reply(env, "Usage: /forget <n> (see /memory for the numbers)")
            return
        removed = await self.records.forget(
            integ.id, chat, int(rest), by=env.sender.id, at_ms=self.clock()
        )
        reply(env, f"Forgot: {removed['text']}" if removed else f"There is no item {rest}.")
