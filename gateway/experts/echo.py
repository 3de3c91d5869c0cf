"""The built-in echo expert: deterministic steps and a streamed reply quoting the merged input.

Input containing ``[confirm]`` raises an interrupt; Confirm carries on, Reject stops.
``[repeat N]`` repeats the reply N times (at most ``MAX_REPEAT``): a long answer on demand, for
tests and ``bench/huge_answer.py``. Each step is done when its work is: the last one ("Writing
the answer") runs while the reply streams.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from typing import Any, Literal

from pydantic import Field

from gateway.config.bases import ExpertBase
from gateway.events import (
    Decision,
    Finished,
    Interrupt,
    RunEvent,
    Started,
    StepEvent,
    TextDelta,
    VariablesEvent,
)
from gateway.experts.base import Expert, ExpertContext, TurnInput

CONFIRM_MARKER = "[confirm]"
SET_MARKER = re.compile(r"\[set ([A-Za-z_]\w*)=([^\]]*)\]")
REPEAT_MARKER = re.compile(r"\[repeat (\d{1,6})\]")
MAX_REPEAT = 100_000


class EchoExpertSettings(ExpertBase):
    """The built-in deterministic expert: steps, a streamed reply quoting the input, interrupts."""

    kind: Literal["echo"]
    step_titles: list[str] = Field(
        default_factory=lambda: ["Reading your message", "Thinking it over", "Writing the answer"]
    )
    step_delay_ms: int = Field(400, ge=0, le=60_000)
    char_delay_ms: int = Field(15, ge=0, le=10_000)
    chunk_chars: int = Field(4, ge=1, le=10_000)
    reply_prefix: str = "You said:"


class EchoExpert(Expert):
    kind = "echo"
    settings_model = EchoExpertSettings

    def __init__(self, *, settings: EchoExpertSettings) -> None:
        self.settings = settings

    @classmethod
    def create(cls, *, settings: ExpertBase, context: ExpertContext) -> EchoExpert:
        assert isinstance(settings, EchoExpertSettings)
        return cls(settings=settings)

    def reply_for(self, text: str) -> str:
        quoted = "\n".join(f"> {line}" for line in text.splitlines()) or "> (empty message)"
        reply = f"{self.settings.reply_prefix}\n{quoted}"
        repeat = REPEAT_MARKER.search(text)
        times = min(int(repeat[1]), MAX_REPEAT) if repeat else 1
        return "\n\n".join([reply] * times) if times > 1 else reply

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

    async def _answer(self, titles: list[str], prefix: str, text: str) -> AsyncIterator[RunEvent]:
        """The steps, the last of which writes ``text``: it is done once the text is out."""
        *before, writing = titles or [""]
        async for ev in self._steps(before, prefix):
            yield ev
        step_id = f"{prefix}{len(before)}"
        if writing:
            yield StepEvent(step_id, writing, "running")
        async for ev in self._stream(text):
            yield ev
        if writing:
            yield StepEvent(step_id, writing, "done")

    async def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]:
        yield Started(run_id=turn.turn_id, thread_id=turn.session_id)
        titles = self.settings.step_titles
        if CONFIRM_MARKER in turn.text:
            async for ev in self._steps(titles[:1], "s"):
                yield ev
            yield Interrupt(prompt="Please confirm: shall I go ahead?", data={"text": turn.text})
            yield Finished("interrupted")
            return
        writes = dict(SET_MARKER.findall(turn.text))
        if writes:  # "[set name=value]" writes conversation variables back, like an agent would
            yield VariablesEvent(values=writes)
        async for ev in self._answer(titles, "s", self.reply_for(turn.text)):
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
        original = str(interrupt.get("text", turn.text))
        reply = "Confirmed. " + self.reply_for(original)
        async for ev in self._answer(self.settings.step_titles[1:], "r", reply):
            yield ev
        yield Finished("success")
