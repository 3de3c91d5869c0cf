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
from aiohttp import web
from yarl import URL

from adapters.wecom.api import LinkDownloads, sniff_mime
from adapters.wecom.crypto import CryptoError, decrypt_media
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import InProcessGateway, serve
from tests.support.waits import eventually
from tests.support.wecom import (
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
            "id": "echo",  # the integrations of tests.support.wecom route to "echo"
            "kind": "openai",
            "baseUrl": base + "/v1",
            "apiKey": OPENAI_KEY,
            "model": "qwen-vl",
            "vision": True,
        }
        yield fake, expert


def image_parts(fake: FakeOpenAI) -> list[dict[str, Any]]:
    content = fake.requests[0]["messages"][-1]["content"]
    if isinstance(content, str):  # no picture went along: the text alone
        return []
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


# --- where links may point, and how much goes along (issue 25) ---------------------------------
def test_only_wecoms_media_host_over_https_is_fetched() -> None:
    real = LinkDownloads(integration_id="wc", bot_key=None, api_base="https://qyapi.weixin.qq.com")
    cos = "ww-aibot-img-1258476243.cos.ap-guangzhou.myqcloud.com"  # doc 100719's links
    assert real.allowed(URL(f"https://{cos}/BHoPdA3/757?sign=q"))
    assert real.allowed(URL("https://ww-aibot-img-1258476243.cos.ap-shanghai.myqcloud.com/x"))
    for refused in (
        f"http://{cos}/x",  # plain http
        f"https://{cos}:8443/x",
        f"https://user@{cos}/x",
        f"https://{cos}.evil.example/x",
        "https://ww-aibot-img-9999.cos.ap-guangzhou.myqcloud.com/x",  # another tenant's bucket
        "https://169.254.169.254/latest/meta-data",
        "http://127.0.0.1:6379/",
    ):
        assert not real.allowed(URL(refused)), refused
    # A local fake's own origin only when apiBase is that fake (as the other adapters allow)
    fake = LinkDownloads(integration_id="wc", bot_key=None, api_base="http://127.0.0.1:8123")
    assert fake.allowed(URL("http://127.0.0.1:8123/files/f-1"))
    assert not fake.allowed(URL("http://127.0.0.1:8124/files/f-1"))


@pytest.fixture
async def elsewhere() -> AsyncIterator[tuple[list[str], str]]:
    """Another server on the operator's network, which a link must not make the gateway call."""
    hits: list[str] = []

    async def anything(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=b"internal")

    app = web.Application()
    app.router.add_get("/{tail:.*}", anything)
    async for base in serve(app):
        yield hits, base


async def test_a_plain_http_link_is_not_fetched(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    model: tuple[FakeOpenAI, dict[str, Any]],
) -> None:
    vision, expert = model
    # apiBase is WeCom's real one: the fake's http:// link is just some address on the network
    gw = await start_gateway(
        prefix, fake, "aibot", expert=expert, apiBase="https://qyapi.weixin.qq.com"
    )
    gateways.append(gw)
    link = fake.encrypted_link(PNG, base64.b64decode(AES_KEY + "="))
    query, body = encrypt_json(aibot_message("cb-http", "image", {"url": link}))
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200
    await eventually(lambda: vision.requests, timeout=15)
    assert image_parts(vision) == [] and fake.downloads == []  # the turn ran without it


async def test_a_redirect_off_the_media_host_is_not_followed(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    model: tuple[FakeOpenAI, dict[str, Any]],
    elsewhere: tuple[list[str], str],
) -> None:
    vision, expert = model
    hits, other = elsewhere
    gw = await start_gateway(prefix, fake, "aibot", expert=expert)
    gateways.append(gw)
    key = base64.b64decode(AES_KEY + "=")
    away = fake.redirect_link(other + "/admin/secret")
    inside = fake.redirect_link(fake.encrypted_link(PNG, key))  # within the host: followed
    message = {
        "msg_item": [
            {"msgtype": "image", "image": {"url": away}},
            {"msgtype": "image", "image": {"url": inside}},
        ]
    }
    query, body = encrypt_json(aibot_message("cb-redirect", "mixed", message))
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200
    await eventually(lambda: vision.requests, timeout=15)
    assert hits == []  # the other server was never asked
    assert image_parts(vision) == [{"type": "image_url", "image_url": {"url": data_url(PNG)}}]


async def test_an_app_media_redirect_off_the_api_base_is_not_followed(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    model: tuple[FakeOpenAI, dict[str, Any]],
    elsewhere: tuple[list[str], str],
) -> None:
    """Issue 25 item 9: media/get carries the access token; a redirect from it is followed by
    hand, and only within apiBase's origin, never to another address of the network."""
    vision, expert = model
    hits, other = elsewhere
    gw = await start_gateway(prefix, fake, "app", expert=expert)
    gateways.append(gw)
    fake.media["m-1"] = (PNG, "image/png")
    fake.media_redirects["m-away"] = other + "/admin/secret"
    fake.media_redirects["m-in"] = "m-1"  # a relative redirect on apiBase's origin: followed
    async with aiohttp.ClientSession() as http:
        for n, media_id in enumerate(("m-away", "m-in")):
            xml = app_message("alice", "x", f"910{n}").replace(
                "<MsgType><![CDATA[text]]></MsgType><Content><![CDATA[x]]></Content>",
                "<MsgType><![CDATA[image]]></MsgType><PicUrl><![CDATA[http://p/1]]></PicUrl>"
                f"<MediaId><![CDATA[{media_id}]]></MediaId>",
            )
            query, body = encrypt_xml(xml)
            status, _ = await post(http, url(gw), query, body)
            assert status == 200
            await eventually(lambda n=n: len(vision.requests) > n, timeout=15)  # type: ignore[misc]
    assert hits == []  # the other server was never asked
    assert image_parts(vision) == []  # the first turn ran without its image
    content = vision.requests[1]["messages"][-1]["content"]
    assert {"type": "image_url", "image_url": {"url": data_url(PNG)}} in content
    assert fake.downloads == ["m-away", "m-in", "m-1"]


async def test_attachments_past_the_caps_are_left_out_and_the_card_says_so(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    model: tuple[FakeOpenAI, dict[str, Any]],
) -> None:
    vision, expert = model
    gw = await start_gateway(
        prefix,
        fake,
        "aibot_ws",
        expert=expert,
        maxAttachmentsPerTurn=3,
        maxAttachmentBytesPerTurn=2 * len(PNG) + 100,  # room for two of these pictures
    )
    gateways.append(gw)
    await eventually(lambda: fake.subscribes == 1)
    key = os.urandom(32)
    aeskey = base64.b64encode(key).decode()
    pictures = [PNG[:-1] + bytes([i]) for i in range(4)]
    items = [{"msgtype": "text", "text": {"content": "compare these"}}] + [
        {"msgtype": "image", "image": {"url": fake.encrypted_link(p, key), "aeskey": aeskey}}
        for p in pictures
    ]
    await fake.push(
        "aibot_msg_callback", aibot_message("w-many", "mixed", {"msg_item": items}), "req-many"
    )
    await eventually(lambda: vision.requests, timeout=15)
    # four sent, three go along (the count), of which two fit the bytes: the turn runs on them
    assert image_parts(vision) == [
        {"type": "image_url", "image_url": {"url": data_url(p)}} for p in pictures[:2]
    ]
    assert len(fake.downloads) == 3  # the fourth was never downloaded

    def told() -> str | None:
        frames = fake.stream_frames("req-many")
        last = frames[-1]["body"]["stream"] if frames else {}
        return str(last["content"]) if last.get("finish") else None

    content = await eventually(told, timeout=15)
    assert "1 of 4 attachments were left out: at most 3 go along with one message" in content
    assert "1 picture(s) were left out: at most" in content
