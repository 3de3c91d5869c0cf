"""WeCom images reach a vision model as data: an app's by MediaId (media/get), an AI bot's by
its encrypted five-minute download link, decrypted with the link's own aeskey (long connection)
or the bot's EncodingAESKey (callbacks)."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from adapters.wecom.api import sniff_mime
from adapters.wecom.crypto import CryptoError, decrypt_media
from tests.conftest import eventually
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.wecom import FakeWeCom
from tests.helpers import InProcessGateway
from tests.test_experts import serve
from tests.wecom_support import (
    AES_KEY,
    aibot_message,
    app_message,
    encrypt_json,
    encrypt_xml,
    post,
    start_gateway,
    url,
)

PNG = b"\x89PNG\r\n\x1a\n" + os.urandom(300_000)  # several socket reads long


@pytest.fixture
async def model() -> AsyncIterator[tuple[FakeOpenAI, dict[str, Any]]]:
    fake = FakeOpenAI()
    async for base in serve(fake.app()):
        expert = {
            "id": "echo",  # the integrations of wecom_support route to "echo"
            "kind": "openai",
            "baseUrl": base + "/v1",
            "apiKey": OPENAI_KEY,
            "model": "qwen-vl",
            "vision": True,
        }
        yield fake, expert


def image_parts(fake: FakeOpenAI) -> list[dict[str, Any]]:
    content = fake.requests[0]["messages"][-1]["content"]
    return [part for part in content if part.get("type") == "image_url"]


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def test_media_decrypts_with_a_32_byte_padding_block_and_refuses_garbage() -> None:
    # A fixed key: with a random one, the zeros below decrypt to valid padding about once in
    # 256 runs.
    key = bytes(range(32))
    fake = FakeWeCom()
    for size in (0, 1, 15, 16, 31, 32, 33, 1000):
        data = os.urandom(size)
        fake.encrypted_link(data, key)
        [(name, cipher)] = fake.files.items()
        assert decrypt_media(cipher, key) == data
        del fake.files[name]
    with pytest.raises(CryptoError):
        decrypt_media(b"\x00" * 48, key)  # decrypts to garbage: bad padding
    with pytest.raises(CryptoError):
        decrypt_media(b"\x00" * 20, key)
    with pytest.raises(CryptoError):
        decrypt_media(b"\x00" * 32, key[:16])
    assert sniff_mime(PNG) == "image/png" and sniff_mime(b"\xff\xd8\xff\xe0") == "image/jpeg"
    assert sniff_mime(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert sniff_mime(b"hello") == "application/octet-stream"


async def test_app_image_is_fetched_by_media_id(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    model: tuple[FakeOpenAI, dict[str, Any]],
) -> None:
    vision, expert = model
    gw = await start_gateway(prefix, fake, "app", expert=expert)
    gateways.append(gw)
    fake.media["m-1"] = (PNG, "image/png")
    xml = app_message("alice", "x", "9001").replace(
        "<MsgType><![CDATA[text]]></MsgType><Content><![CDATA[x]]></Content>",
        "<MsgType><![CDATA[image]]></MsgType><PicUrl><![CDATA[http://p/1]]></PicUrl>"
        "<MediaId><![CDATA[m-1]]></MediaId>",
    )
    query, body = encrypt_xml(xml)
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200
    await eventually(lambda: vision.requests, timeout=15)
    assert image_parts(vision) == [{"type": "image_url", "image_url": {"url": data_url(PNG)}}]
    assert fake.downloads == ["m-1"]


async def test_long_connection_image_decrypts_with_its_own_aeskey(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    model: tuple[FakeOpenAI, dict[str, Any]],
) -> None:
    vision, expert = model
    gw = await start_gateway(prefix, fake, "aibot_ws", expert=expert)
    gateways.append(gw)
    await eventually(lambda: fake.subscribes == 1)
    key = os.urandom(32)
    link = fake.encrypted_link(PNG, key)
    await fake.push(
        "aibot_msg_callback",
        aibot_message(
            "w-img",
            "mixed",
            {
                "msg_item": [
                    {"msgtype": "text", "text": {"content": "what is this?"}},
                    {
                        "msgtype": "image",
                        "image": {"url": link, "aeskey": base64.b64encode(key).decode()},
                    },
                ]
            },
        ),
        "req-img",
    )
    await eventually(lambda: vision.requests, timeout=15)
    assert image_parts(vision) == [{"type": "image_url", "image_url": {"url": data_url(PNG)}}]
    assert fake.downloads == [link.rsplit("/", 1)[1]]  # the key never went to the server


async def test_callback_image_decrypts_with_the_bots_key(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    model: tuple[FakeOpenAI, dict[str, Any]],
) -> None:
    vision, expert = model
    gw = await start_gateway(prefix, fake, "aibot", expert=expert)
    gateways.append(gw)
    link = fake.encrypted_link(PNG, base64.b64decode(AES_KEY + "="))
    query, body = encrypt_json(aibot_message("cb-img", "image", {"url": link}))
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200
    await eventually(lambda: vision.requests, timeout=15)
    assert image_parts(vision) == [{"type": "image_url", "image_url": {"url": data_url(PNG)}}]
