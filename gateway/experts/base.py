"""The expert interface every backend implements (DESIGN.md §7)."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from gateway.events import RunEvent

Decision = Literal["confirm", "reject"]


@dataclass(frozen=True, slots=True)
class TurnInput:
    """What a turn hands the expert: the merged input and where it comes from."""

    turn_id: str
    session_id: str
    integration_id: str
    xpert_id: str
    text: str
    chat_id: str
    chat_type: str
    sender_id: str
    sender_name: str | None = None
    thread_id: str | None = None
    attachments: tuple[dict[str, Any], ...] = ()
    state: dict[str, Any] = field(default_factory=dict)  # conversation variables, as we hold them
    variables: dict[str, str] = field(default_factory=dict)  # sys.*, memory.*, var.* as text
    backend_state: dict[str, Any] = field(default_factory=dict)  # what the backend last had
    declared_variables: tuple[str, ...] = ()  # the session's declared conversation variables
    expert_thread_id: str | None = None  # the backend's conversation, kept with the session
    group_history: tuple[dict[str, Any], ...] = ()  # recent group messages not sent to the bot


class Expert(abc.ABC):
    """A backend. ``run`` and ``resume`` stream events and end with exactly one ``Finished``."""

    kind: str

    @abc.abstractmethod
    def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]: ...

    @abc.abstractmethod
    def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]: ...

    supports_steer = False
    accepts_images = False  # the runner fetches image attachments through the adapter for it

    async def steer(self, turn: TurnInput, text: str) -> None:
        """Hand a follow-up message to the running run (busyPolicy steer)."""
        raise NotImplementedError(f"{self.kind} experts cannot be steered")

    async def cancel(self, turn: TurnInput) -> None:  # noqa: B027 - optional hook
        """Ask the backend to stop the run; the runner cancels the local stream itself."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""
