"""Images and files out on WeCom, what is WeCom's own (the behaviour on every platform is
tests/conformance/test_media_out.py). App mode: the answer's markdown first, then each JPG/PNG
image as an ``image`` message and each file as a ``file`` message of temporary media uploaded
first; an image WeCom does not take (a GIF, or one it refuses for its size) stays a link. AI bot:
the images go in the final stream frame only, as ``msg_item`` (base64 + MD5), over the long
connection and as the callbacks' last refresh alike."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.media import PDF, PNG, FakeMediaHost
from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import InProcessGateway, serve
from tests.support.waits import eventually
from tests.support.wecom import (
    aibot_message,
    app_message,
    decrypt_reply,
    encrypt_json,
    encrypt_xml,
    post,
    start_gateway,
    url,
)

GIF = b"GIF89a\x01\x00\x01\x00\x00\x00\x00;"


@pytest.fixture
def own() -> FakeMediaHost:
    return FakeMediaHost()


@pytest.fixture
async def expert(own: FakeMediaHost) -> AsyncIterator[dict[str, Any]]:
    async for base in serve(FakeOpenAI(media=own).app()):
        own.url = base
        yield {
            "id": "echo",
            "kind": "openai",
            "baseUrl": base + "/v1",
            "apiKey": OPENAI_KEY,
            "model": "m",
        }


@pytest.fixture
async def stranger() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


def answer_of(own: FakeMediaHost, stranger: FakeMediaHost) -> str:
    own.files["/files/chart.png"] = (PNG, "image/png")
    own.files["/files/anim.gif"] = (GIF, "image/gif")
    own.files["/files/q3.pdf"] = (PDF, "application/pdf")
    stranger.files["/x.png"] = (PNG, "image/png")
    return (
        f"![chart]({own.url}/files/chart.png) ![anim]({own.url}/files/anim.gif) "
        f"![x]({stranger.url}/x.png) [the report]({own.url}/files/q3.pdf)"
    )


async def test_an_apps_answer_sends_its_images_and_files_as_messages(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    own: FakeMediaHost,
    stranger: FakeMediaHost,
    expert: dict[str, Any],
) -> None:
    gw = await start_gateway(prefix, fake, "app", expert=expert)
    gateways.append(gw)
    text = answer_of(own, stranger)
    query, body = encrypt_xml(app_message("alice", text, "9401"))
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200

    def media_sent() -> list[dict[str, Any]] | None:
        sent = [m for m in fake.sent if m["msgtype"] in ("image", "file")]
        return sent if len(sent) == 2 else None

    image, file = await eventually(media_sent, timeout=15)
    assert image["touser"] == file["touser"] == "alice"
    assert fake.uploads[image["image"]["media_id"]] == ("image", "chart.png")
    assert fake.uploads[file["file"]["media_id"]] == ("file", "q3.pdf")
    [markdown] = [m["markdown"]["content"] for m in fake.sent if m["msgtype"] == "markdown"]
    assert "![" not in markdown  # app markdown has no images: links only
    assert f"[anim]({own.url}/files/anim.gif)" in markdown  # a GIF stays a link
    assert fake.sent.index(markdown_message(fake)) < fake.sent.index(image)  # the text first


def markdown_message(fake: FakeWeCom) -> dict[str, Any]:
    return next(m for m in fake.sent if m["msgtype"] == "markdown")


async def test_a_refused_upload_keeps_the_link_and_the_answer_lands(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    own: FakeMediaHost,
    expert: dict[str, Any],
) -> None:
    gw = await start_gateway(prefix, fake, "app", expert=expert)
    gateways.append(gw)
    # A JPEG's first five bytes: an image to the gateway, too small for WeCom (over 5 bytes)
    own.files["/files/tiny.jpg"] = (b"\xff\xd8\xff\xe0\x00", "image/jpeg")
    own.files["/files/ok.pdf"] = (PDF, "application/pdf")
    text = f"![t]({own.url}/files/tiny.jpg) [f]({own.url}/files/ok.pdf)"
    query, body = encrypt_xml(app_message("alice", text, "9402"))
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200
    await eventually(lambda: [m for m in fake.sent if m["msgtype"] == "file"], timeout=15)
    assert [m["msgtype"] for m in fake.sent if m["msgtype"] != "template_card"] == [
        "markdown",
        "file",
    ]
    assert ("media/upload", {"type": "image", "filename": "tiny.jpg"}) in fake.calls  # refused
    assert f"[t]({own.url}/files/tiny.jpg)" in markdown_message(fake)["markdown"]["content"]


def expected_items(*images: bytes) -> list[dict[str, Any]]:
    return [
        {
            "msgtype": "image",
            "image": {"base64": base64.b64encode(i).decode(), "md5": hashlib.md5(i).hexdigest()},
        }
        for i in images
    ]


async def test_an_ai_bots_last_stream_frame_carries_the_images_long_connection(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    own: FakeMediaHost,
    stranger: FakeMediaHost,
    expert: dict[str, Any],
) -> None:
    gw = await start_gateway(prefix, fake, "aibot_ws", expert=expert, pingIntervalSeconds=0.2)
    gateways.append(gw)
    await eventually(lambda: fake.subscribes == 1)
    text = answer_of(own, stranger)
    message = aibot_message("w-media", "text", {"content": text}, create_time=1700000000)
    await fake.push("aibot_msg_callback", message, "req-media")

    def last() -> dict[str, Any] | None:
        frames = fake.stream_frames("req-media")
        stream = frames[-1]["body"]["stream"] if frames else None
        return stream if stream and stream["finish"] else None

    stream = await eventually(last, timeout=15)
    assert stream["msg_item"] == expected_items(PNG)  # the PNG; the GIF is no JPG/PNG
    frames = fake.stream_frames("req-media")
    assert all("msg_item" not in f["body"]["stream"] for f in frames[:-1])


async def test_an_ai_bots_last_refresh_carries_the_images_callbacks(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    own: FakeMediaHost,
    stranger: FakeMediaHost,
    expert: dict[str, Any],
) -> None:
    gw = await start_gateway(prefix, fake, "aibot", expert=expert)
    gateways.append(gw)
    text = answer_of(own, stranger)
    message = aibot_message(
        "cb-media", "text", {"content": text}, response_url=fake.response_url("cb-media")
    )
    async with aiohttp.ClientSession() as http:
        query, body = encrypt_json(message)
        status, reply = await post(http, url(gw), query, body)
        assert status == 200
        stream_id = decrypt_reply(reply)["stream"]["id"]
        poll = {
            "msgid": "poll",
            "msgtype": "stream",
            "stream": {"id": stream_id},
            "from": {"userid": "alice"},
        }

        async def refreshed() -> dict[str, Any] | None:
            query, body = encrypt_json(poll)
            _, answer = await post(http, url(gw), query, body)
            stream: dict[str, Any] = decrypt_reply(answer)["stream"]
            return stream if stream["finish"] else None

        stream = await eventually(refreshed, timeout=15)
    assert stream["msg_item"] == expected_items(PNG)
    assert "![" not in stream["content"]
