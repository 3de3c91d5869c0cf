"""Attachments reach experts that accept them: a DingTalk picture, fetched through the adapter
(downloadCode -> download URL -> bytes), is handed to a vision model as a data URL."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from tests.fakes.dingtalk import PNG
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.support.dingtalk import robot_message, running
from tests.support.helpers import serve
from tests.support.waits import eventually


@pytest.fixture
async def openai() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    async for url in serve(fake.app()):
        yield fake, url + "/v1"


async def test_dingtalk_picture_reaches_a_vision_model(
    openai: tuple[FakeOpenAI, str], prefix: str, redis_client: Any
) -> None:
    model, url = openai
    experts = [
        {
            "id": "vision",
            "kind": "openai",
            "baseUrl": url,
            "apiKey": OPENAI_KEY,
            "model": "qwen-vl",
            "vision": True,
        }
    ]
    async with running(prefix, experts=experts, xpertId="vision") as (fake, harness):
        body = robot_message(fake, "")
        body["msgtype"] = "richText"
        body["content"] = {
            "richText": [
                {"text": "what is in this picture?"},
                {"downloadCode": "dc-42", "type": "picture"},
            ]
        }
        status, _ = await harness.post(body)
        assert status == 200
        await eventually(lambda: model.requests, timeout=15)
        content = model.requests[0]["messages"][-1]["content"]
        assert content[0] == {"type": "text", "text": "what is in this picture?"}
        expected = base64.b64encode(PNG + b"dc-42").decode()
        assert content[1] == {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{expected}"},
        }
        downloads = [c for c in fake.calls if c.path == "/v1.0/robot/messageFiles/download"]
        assert downloads[0].body == {"downloadCode": "dc-42", "robotCode": "dingappkey"}


@pytest.fixture
async def elsewhere() -> AsyncIterator[tuple[list[str], str]]:
    """Another server on the operator's network, which a download URL must not reach."""
    hits: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=PNG + b"internal", content_type="image/png")

    app = web.Application()
    app.router.add_get("/{tail:.*}", anything)
    async for base in serve(app):
        yield hits, base


async def test_dingtalk_downloads_go_only_to_https_and_redirects_are_checked(
    openai: tuple[FakeOpenAI, str], prefix: str, elsewhere: tuple[list[str], str]
) -> None:
    model, url = openai
    hits, other = elsewhere
    experts = [
        {
            "id": "vision",
            "kind": "openai",
            "baseUrl": url,
            "apiKey": OPENAI_KEY,
            "model": "qwen-vl",
            "vision": True,
        }
    ]
    async with running(prefix, experts=experts, xpertId="vision") as (fake, harness):
        fake.download_urls["plain"] = other + "/plain.png"  # plain http, another origin
        fake.file_redirects["away"] = other + "/away.png"  # a redirect off the fake
        fake.file_redirects["within"] = fake.base + "/f/dc-ok"  # one within it is followed
        body = robot_message(fake, "")
        body["msgtype"] = "richText"
        body["content"] = {
            "richText": [
                {"text": "three pictures"},
                {"downloadCode": "plain", "type": "picture"},
                {"downloadCode": "away", "type": "picture"},
                {"downloadCode": "within", "type": "picture"},
            ]
        }
        status, _ = await harness.post(body)
        assert status == 200
        await eventually(lambda: model.requests, timeout=15)
        content = model.requests[0]["messages"][-1]["content"]
        images = [part for part in content if part.get("type") == "image_url"]
        expected = base64.b64encode(PNG + b"dc-ok").decode()
        assert images == [
            {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{expected}"}}
        ]
        assert hits == []  # the other server was never asked


async def test_experts_without_vision_get_only_the_attachment_keys(
    openai: tuple[FakeOpenAI, str], prefix: str, redis_client: Any
) -> None:
    model, url = openai
    experts = [
        {"id": "text", "kind": "openai", "baseUrl": url, "apiKey": OPENAI_KEY, "model": "qwen"}
    ]
    async with running(prefix, experts=experts, xpertId="text") as (fake, harness):
        body = robot_message(fake, "")
        body["msgtype"] = "picture"
        body["content"] = {"downloadCode": "dc-7"}
        await harness.post(body)
        await eventually(lambda: model.requests, timeout=15)
        assert not [c for c in fake.calls if c.path == "/v1.0/robot/messageFiles/download"]


async def test_lark_image_reaches_a_vision_model(
    openai: tuple[FakeOpenAI, str], prefix: str, redis_client: Any
) -> None:
    from tests.fakes.lark import FakeLark
    from tests.support.helpers import InProcessGateway
    from tests.support.lark import LarkHarness, lark_config, message_event

    model, url = openai
    lark = FakeLark()
    await lark.start()
    config = lark_config(prefix, lark, xpertId="vision")
    config["experts"] = [
        {
            "id": "vision",
            "kind": "openai",
            "baseUrl": url,
            "apiKey": OPENAI_KEY,
            "model": "qwen-vl",
            "vision": True,
        }
    ]
    gateway = InProcessGateway(config)
    await gateway.start()
    harness = LarkHarness(lark, gateway)
    try:
        event = message_event(
            message_id="om_img1", message_type="image", content={"image_key": "img_v3_9"}
        )
        status, _ = await harness.post(event)
        assert status == 200
        await eventually(lambda: model.requests, timeout=15)
        content = model.requests[0]["messages"][-1]["content"]
        data = base64.b64encode(b"\x89PNG fake bytes").decode()
        assert {
            "type": "image_url",
            "image_url": {"url": f"data:image/png;base64,{data}"},
        } in content
        [call] = lark.of("resource")
        assert call.path == "/open-apis/im/v1/messages/om_img1/resources/img_v3_9"
        assert call.query == {"type": "image"}
    finally:
        await harness.close()
        await lark.stop()
