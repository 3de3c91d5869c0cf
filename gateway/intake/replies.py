"""What intake says in the chat by itself (no turn's card): a short text reply (a command's
answer, busy, full) and a notice card (a budget refusal)."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from gateway.edge.adapter import Adapter
from gateway.edge.call_budget import Priority, calls_as
from gateway.envelope import Envelope
from gateway.progress import Progress


class Replies:
    def __init__(
        self, *, adapters: Mapping[str, Adapter], spawn: Callable[[Awaitable[Any]], None]
    ) -> None:
        self.adapters = adapters
        self.spawn = spawn

    def text(self, env: Envelope, text: str) -> None:
        """A text in the chat of ``env``, sent once per event (its idempotency key)."""
        adapter = self.adapters.get(env.integration_id)
        if adapter is not None:
            with calls_as(Priority.CLICK, chat=env.chat.id):  # the spawned task takes it along
                self.spawn(adapter.send_text(env, text, idempotency_key=f"{env.event_id}#reply"))

    def notice(self, env: Envelope, conversation: str, headline: str, text: str) -> None:
        """A short card that is no turn's (a budget refusal): final at once, no buttons."""
        adapter = self.adapters.get(env.integration_id)
        if adapter is not None:
            key = f"{env.event_id}#notice"
            card = Progress(
                turn_id=hashlib.sha256(key.encode()).hexdigest()[:32],
                conversation=conversation,
                status="ended",
                headline=headline,
                answer=text,
                actions=(),
                version=1,
            )
            with calls_as(Priority.CLICK, chat=env.chat.id):
                self.spawn(adapter.send_card(env, card, idempotency_key=key))
