"""Stop and New, what both the ``/stop`` and ``/new`` commands and the Stop and New buttons do:
cancel the turn running in a conversation, or end its session."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from gateway.config.settings import Settings
from gateway.envelope import Envelope
from gateway.intake.replies import Replies
from gateway.turns.control import Control
from sessions import SessionRecords, SessionStore


class Controls:
    def __init__(
        self,
        *,
        store: SessionStore,
        records: SessionRecords,
        control: Control,
        settings: Callable[[], Settings],
        replies: Replies,
        clock: Callable[[], int],
    ) -> None:
        self.store = store
        self.records = records
        self.control = control
        self._settings = settings
        self.replies = replies
        self.clock = clock

    async def current_card(self, conv: str, clicked: str | None) -> bool:
        """Whether a click came from the session's current card (a card of an earlier session,
        or an earlier card of this one, must not end the session going on now)."""
        current = (await self.store.binding(conv)).get("cardTurn")
        return not (clicked and current and clicked != current)

    async def stop(self, conv: str, env: Envelope, turn_id: str | None) -> None:
        turn = await self.store.turn(conv)
        running = turn.get("id")
        # A Retry or a Confirm runs in an earlier turn's card, whose buttons carry that turn's
        # id ("shows"): their Stop stops the run going on in it.
        if not running or (turn_id and turn_id not in (running, turn.get("shows"))):
            if env.kind != "action":
                self.replies.text(env, "Nothing is running right now.")
            return
        lease_ms = int(self._settings().runtime.lease_seconds * 1000)
        await self.store.request_cancel(conv, running, ttl_ms=3 * lease_ms)
        await self.control.cancel(conv, running)
        await asyncio.sleep(0)

    async def new(self, conv: str, env: Envelope, *, announce: bool) -> None:
        old = await self.store.end_session(conv)
        if old:
            await self.store.audit(
                {
                    "event": "session.end",
                    "session": old.get("sessionId", ""),
                    "conversation": conv,
                    "at": self.clock(),
                    "by": "user",
                }
            )
            if old.get("sessionId"):
                integration_id = env.integration_id
                await self.records.ended(
                    integration_id, old["sessionId"], at_ms=self.clock(), by="user"
                )
        if announce:
            self.replies.text(env, "Started a new conversation. What can I do for you?")
