"""An XpertAI agent's ``ask_clarification`` on a WeCom app (tests/fakes/xpertai_agent.py
``clarify``): the final template card carries the options as buttons, the answer message the
question; a click (``template_card_event``) is the clicker's next message in the session."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.wecom import FakeWeCom
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_agent import RESTATED
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.wecom import (
    aibot_message,
    app_message,
    card_click,
    encrypt_xml,
    post,
    start_gateway,
    url,
)


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    async for base in serve(fake.app()):
        yield fake, base + "/api/ai"


def inputs(server: FakeXpertAI) -> list[str]:
    return [r["input"]["message"]["input"]["input"] for r in server.requests]


async def test_an_option_button_on_the_app_card_answers_the_question(
    gateways: list[Any], prefix: str, fake: FakeWeCom, xpert: tuple[FakeXpertAI, str]
) -> None:
    server, base = xpert
    expert = {"id": "sales", "kind": "xpert", "baseUrl": base, "apiKey": API_KEY}
    gw = await start_gateway(prefix, fake, expert=expert, xpertId="sales")
    gateways.append(gw)
    async with aiohttp.ClientSession() as http:
        query, body = encrypt_xml(app_message("zoe", "[clarify] the report", "6001"))
        assert await post(http, url(gw), query, body) == (200, "")
        await eventually(lambda: fake.updates, timeout=15)
        [update] = fake.updates
        card = update["template_card"]
        assert card["main_title"]["title"] == "A question for you"
        keys = {b["text"]: json.loads(b["key"]) for b in card["button_list"]}
        assert list(keys) == ["China", "Europe", "Americas", "New conversation"]
        await eventually(lambda: fake.texts("zoe"))
        assert fake.texts("zoe")[0] == RESTATED  # the model's text after the question, once
        click = card_click(
            "zoe",
            card["button_list"][2]["key"],
            card["task_id"],
            fake.issue_code(),
            int(time.time()),
        )
        query, body = encrypt_xml(click)
        assert await post(http, url(gw), query, body) == (200, "")
        await eventually(lambda: len(server.requests) == 2, timeout=15)
        assert inputs(server) == ["[clarify] the report", "Americas"]
        assert len({r["thread"] for r in server.requests}) == 1  # the same session
        await eventually(
            lambda: any("Hello from xpert [Americas]" in t for t in fake.texts("zoe")), timeout=15
        )
        # The question card's buttons became one grey label, with the click's code.
        closed = await eventually(lambda: fake.updates[1:] or None, timeout=15)
        assert closed[0]["button"] == {"replace_name": "Answer sent"}
        assert "template_card" not in closed[0]


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
