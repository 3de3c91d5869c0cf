"""A WeCom file reaches an XpertAI agent where the mode delivers files: an app's by MediaId
(``media/get``), an AI bot's (callbacks; direct chats) by its encrypted download link. The PDF
is uploaded to XpertAI (``POST /api/ai/contexts/file``) and the run's ``input.files`` carries
the AgentFile the upload returned (tests/fakes/xpertai_files.py)."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from tests.fakes.wecom import FakeWeCom
from tests.fakes.xpertai import API_KEY, FakeXpertAI
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

PDF = b"%PDF-1.5\n" + os.urandom(50_000) + b"\n%%EOF\n"


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, dict[str, Any]]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    async for base in serve(fake.app()):
        # "echo" is the expert the integrations of tests.support.wecom route to
        expert = {
            "id": "echo",
            "kind": "xpert",
            "baseUrl": base + "/api/ai",
            "apiKey": API_KEY,
            "assistantId": "sales",
        }
        yield fake, expert


def assert_uploaded_and_attached(server: FakeXpertAI, name: str) -> None:
    [stored] = server.files.stored.values()
    assert stored.data == PDF
    assert stored.agent_file["originalName"] == name
    assert stored.agent_file["mimeType"] == "application/pdf"
    [thread] = server.threads
    assert stored.fields == {"threadId": thread, "xpertId": "sales"}
    assert server.requests[0]["input"]["message"]["input"]["files"] == [stored.agent_file]
    assert server.files.attached == {thread: [stored.agent_file["id"]]}


async def test_an_app_file_is_fetched_by_media_id_and_uploaded(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    xpert: tuple[FakeXpertAI, dict[str, Any]],
) -> None:
    server, expert = xpert
    gw = await start_gateway(prefix, fake, "app", expert=expert)
    gateways.append(gw)
    fake.media["m-pdf"] = (PDF, "application/pdf")
    xml = app_message("alice", "x", "9301").replace(
        "<MsgType><![CDATA[text]]></MsgType><Content><![CDATA[x]]></Content>",
        "<MsgType><![CDATA[file]]></MsgType><MediaId><![CDATA[m-pdf]]></MediaId>"
        "<FileName><![CDATA[minutes.pdf]]></FileName>",
    )
    query, body = encrypt_xml(xml)
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200
    await eventually(lambda: server.requests, timeout=15)
    assert fake.downloads == ["m-pdf"]
    assert_uploaded_and_attached(server, "minutes.pdf")


async def test_an_ai_bot_file_is_decrypted_and_uploaded(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    xpert: tuple[FakeXpertAI, dict[str, Any]],
) -> None:
    server, expert = xpert
    gw = await start_gateway(prefix, fake, "aibot", expert=expert)
    gateways.append(gw)
    # An AI bot's file link serves octet-stream and the message names no file: the bytes say PDF
    link = fake.encrypted_link(PDF, base64.b64decode(AES_KEY + "="), "x.pdf")
    query, body = encrypt_json(aibot_message("cb-file", "file", {"url": link}))
    async with aiohttp.ClientSession() as http:
        status, _ = await post(http, url(gw), query, body)
    assert status == 200
    await eventually(lambda: server.requests, timeout=15)
    assert_uploaded_and_attached(server, "file.pdf")


async def test_a_long_connection_file_decrypts_with_its_own_aeskey_and_is_uploaded(
    gateways: list[InProcessGateway],
    prefix: str,
    fake: FakeWeCom,
    xpert: tuple[FakeXpertAI, dict[str, Any]],
) -> None:
    server, expert = xpert
    gw = await start_gateway(prefix, fake, "aibot_ws", expert=expert)
    gateways.append(gw)
    await eventually(lambda: fake.subscribes == 1)
    key = os.urandom(32)
    link = fake.encrypted_link(PDF, key, "y.pdf")
    message = {"url": link, "aeskey": base64.b64encode(key).decode()}
    await fake.push("aibot_msg_callback", aibot_message("w-file", "file", message), "req-file")
    await eventually(lambda: server.requests, timeout=15)
    assert_uploaded_and_attached(server, "file.pdf")
