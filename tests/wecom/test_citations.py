"""Knowledge-base citations on WeCom (issue 28 item 3), in app mode (markdown answer) and over
the AI bot's long connection (the stream reply): the fake XpertAI's "[kb]" run cites with
``xpert://knowledgebase/chunk?…`` links (knowledgebase/citation.ts:33-74); the chat shows
footnote markers and the sources, and nothing sent to WeCom holds a link."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.wecom import FakeWeCom
from tests.fakes.xpertai import FakeXpertAI
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.wecom import aibot_message, app_message, encrypt_xml, post, start_gateway, url
from tests.support.xpert import CITED, xpert_expert

QUESTION = "how long do refunds take? [kb]"


@pytest.fixture
async def expert() -> AsyncIterator[dict[str, Any]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    async for base in serve(fake.app()):
        yield xpert_expert(base + "/api/ai")


def no_links(fake: FakeWeCom) -> bool:
    written = json.dumps([fake.sent, fake.updates, fake.ws.frames], ensure_ascii=False)
    return "xpert://" not in written


async def test_a_wecom_app_answer_shows_footnotes_and_sources(
    gateways: list[Any], prefix: str, fake: FakeWeCom, expert: dict[str, Any]
) -> None:
    gw = await start_gateway(prefix, fake, expert=expert, xpertId="sales")
    gateways.append(gw)
    async with aiohttp.ClientSession() as http:
        query, body = encrypt_xml(app_message("zhangsan", QUESTION, "7101"))
        status, _ = await post(http, url(gw), query, body)
    assert status == 200
    text = await eventually(lambda: next((t for t in fake.texts() if "Sources" in t), None))
    assert text.rstrip().endswith(CITED)
    assert no_links(fake)


async def test_a_wecom_ai_bot_stream_shows_footnotes_and_sources(
    gateways: list[Any], prefix: str, fake: FakeWeCom, expert: dict[str, Any]
) -> None:
    gw = await start_gateway(prefix, fake, "aibot_ws", expert=expert, xpertId="sales")
    gateways.append(gw)
    await eventually(lambda: fake.subscribes == 1)
    body = aibot_message("w-kb", "text", {"content": QUESTION}, user="alice")
    await fake.push("aibot_msg_callback", body, "req-kb")

    def final() -> str | None:
        frames = fake.stream_frames("req-kb")
        done = frames and frames[-1]["body"]["stream"]["finish"]
        return str(frames[-1]["body"]["stream"]["content"]) if done else None

    text = await eventually(final)
    assert text.rstrip().endswith(CITED)
    assert no_links(fake)
