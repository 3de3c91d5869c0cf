"""An XpertAI agent's ``ask_clarification`` on the WeCom AI bot (tests/fakes/xpertai_agent.py
``clarify``): the stream lists the options numbered, to be typed. The app card's option buttons
are tested with every platform's: tests/conformance/test_clarifications.py."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakes.wecom import FakeWeCom
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_agent import RESTATED
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.wecom import (
    aibot_message,
    start_gateway,
)


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    async for base in serve(fake.app()):
        yield fake, base + "/api/ai"


def inputs(server: FakeXpertAI) -> list[str]:
    return [r["input"]["message"]["input"]["input"] for r in server.requests]


async def test_the_ai_bot_stream_lists_the_options_to_be_typed(
    gateways: list[Any], prefix: str, fake: FakeWeCom, xpert: tuple[FakeXpertAI, str]
) -> None:
    _, base = xpert
    expert = {"id": "sales", "kind": "xpert", "baseUrl": base, "apiKey": API_KEY}
    gw = await start_gateway(prefix, fake, "aibot_ws", expert=expert, xpertId="sales")
    gateways.append(gw)
    await eventually(lambda: fake.subscribes == 1)
    body = aibot_message("w-q", "text", {"content": "[clarify] the report"}, user="alice")
    await fake.push("aibot_msg_callback", body, "req-q")

    def final() -> str | None:
        frames = fake.stream_frames("req-q")
        done = frames and frames[-1]["body"]["stream"]["finish"]
        return str(frames[-1]["body"]["stream"]["content"]) if done else None

    text = await eventually(final, timeout=15)
    # the model's text after the question once, then the options once, numbered
    assert text.count(RESTATED) == 1 and text.count("China") == 1
    assert text.rstrip().endswith("1. China\n2. Europe\n3. Americas")
