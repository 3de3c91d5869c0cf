"""A WeCom AI bot's file over callbacks (direct chats) reaches an XpertAI agent: its encrypted
download link decrypts with the callback's key, the PDF is uploaded to XpertAI and the run's
``input.files`` carries the AgentFile the upload returned (tests/fakes/xpertai_files.py). An
app's file (``media/get``) and the long connection's (its own ``aeskey``) are tested with every
platform's: tests/conformance/test_files_in.py."""

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
    encrypt_json,
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
    await gw.idle()  # the run's end, before the gateway stops
