"""A throwaway expert kind living outside the core, the way a third-party package would ship one.

Only the temporary distribution that tests/experts/test_expert_kinds.py puts on ``sys.path``
registers it (entry point group ``xpert_gateway.experts``): nothing in ``gateway/`` names it. It
brings its own settings (with a secret), says it can be steered, and shouts the input back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field, SecretStr

from gateway.config.bases import ExpertBase
from gateway.events import Decision, Finished, RunEvent, Started, StepEvent, TextDelta
from gateway.experts.base import Expert, ExpertContext, TurnInput

STEP = "Taking a deep breath"


class ShoutSettings(ExpertBase):
    """Shouts the input back."""

    kind: Literal["shout"]
    volume: int = Field(1, ge=1, le=5, description="Exclamation marks after the answer")
    token: SecretStr | None = None
    steer_wait_seconds: float = Field(
        0, ge=0, le=30, description="How long a run waits for a follow-up message"
    )


class ShoutExpert(Expert):
    kind = "shout"
    settings_model = ShoutSettings
    supports_steer = True

    def __init__(self, *, settings: ShoutSettings) -> None:
        self.settings = settings
        self._steers: dict[str, asyncio.Queue[str]] = {}  # turn id -> follow-ups

    @classmethod
    def create(cls, *, settings: ExpertBase, context: ExpertContext) -> ShoutExpert:
        assert isinstance(settings, ShoutSettings)
        return cls(settings=settings)

    def _queue(self, turn: TurnInput) -> asyncio.Queue[str]:
        return self._steers.setdefault(turn.turn_id, asyncio.Queue())

    async def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]:
        yield Started(run_id=turn.turn_id, thread_id=turn.session_id)
        yield StepEvent("breath", STEP, "running")
        heard = [turn.text]
        if self.settings.steer_wait_seconds:
            with contextlib.suppress(TimeoutError):
                follow_up = self._queue(turn).get()
                heard.append(await asyncio.wait_for(follow_up, self.settings.steer_wait_seconds))
        self._steers.pop(turn.turn_id, None)
        yield StepEvent("breath", STEP, "done")
        yield TextDelta(" ".join(heard).upper() + "!" * self.settings.volume)
        yield Finished("success")

    async def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        yield Finished("error", "This expert does not ask for confirmations.")

    async def steer(
        self, turn: TurnInput, text: str, attachments: tuple[dict[str, Any], ...] = ()
    ) -> tuple[RunEvent, ...]:
        self._queue(turn).put_nowait(text)
        return ()
