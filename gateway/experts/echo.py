"""The built-in echo expert: deterministic steps and a streamed reply quoting the merged input.

Input containing ``[confirm]`` raises an interrupt; Confirm carries on, Reject stops.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any

from gateway.events import (
    Finished,
    Interrupt,
    RunEvent,
    Started,
    StepEvent,
    TextDelta,
    VariablesEvent,
)
from gateway.experts.base import Decision, Expert, TurnInput
from gateway.settings import EchoExpertSettings

CONFIRM_MARKER = "[confirm]"
SET_MARKER = re.compile(r"\[set ([A-Za-z_]\w*)=([^\]]*)\]")


class EchoExpert(Expert):
    kind = "echo"

    def __init__(self, *, settings: EchoExpertSettings) -> None:
        self.settings = settings

    def reply_for(self, text: str) -> str:
        quoted = "\n".join(f"> {line}" for line in text.splitlines()) or "> (empty message)"
        return f"{self.settings.reply_prefix}\n{quoted}"

    async def _stream(self, text: str) -> AsyncIterator[RunEvent]:
        size = self.settings.chunk_chars
        delay = self.settings.char_delay_ms * size / 1000
        for i in range(0, len(text), size):
            if delay:
                await asyncio.sleep(delay)
            yield TextDelta(text[i : i + size])

    async def _steps(self, titles: list[str], prefix: str) -> AsyncIterator[RunEvent]:
        for i, title in enumerate(titles):
            step_id = f"{prefix}{i}"
            yield StepEvent(step_id, title, "running")
            if self.settings.step_delay_ms:
                await asyncio.sleep(self.settings.step_delay_ms / 1000)
            yield StepEvent(step_id, title, "done")

    async def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]:
        yield Started(run_id=turn.turn_id, thread_id=turn.session_id)
        titles = self.settings.step_titles
        if CONFIRM_MARKER in turn.text:
            async for ev in self._steps(titles[:1], "s"):
                yield ev
            yield Interrupt(prompt="Please confirm: shall I go ahead?", data={"text": turn.text})
            yield Finished("interrupted")
            return
        async for ev in self._steps(titles, "s"):
            yield ev
        writes = dict(SET_MARKER.findall(turn.text))
        if writes:  # "[set name=value]" writes conversation variables back, like an agent would
            yield VariablesEvent(values=writes)
        async for ev in self._stream(self.reply_for(turn.text)):
            yield ev
        yield Finished("success")

    async def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        yield Started(run_id=turn.turn_id, thread_id=turn.session_id)
        if decision == "reject":
            async for ev in self._stream("Rejected: nothing was done."):
                yield ev
            yield Finished("success")
            return
        async for ev in self._steps(self.settings.step_titles[1:], "r"):
            yield ev
        original = str(interrupt.get("text", turn.text))
        async for ev in self._stream("Confirmed. " + self.reply_for(original)):
            yield ev
        yield Finished("success")
