"""Attachments reach experts that accept them: a DingTalk picture, fetched through the adapter
(downloadCode -> download URL -> bytes), is handed to a vision model as a data URL."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.conftest import eventually
from tests.dingtalk_support import robot_message, running
from tests.fakes.dingtalk import PNG
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.test_experts import serve


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
    from tests.helpers import InProcessGateway
    from tests.lark_support import LarkHarness, lark_config, message_event

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
