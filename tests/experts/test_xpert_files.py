"""Files to XpertAI: a parse the server queued (a file over 2 MB) is waited for before the run,
within ``fileParseWaitSeconds``; past it the run goes on and the card says so. The fake
server's file routes refuse and resolve as the real ones do (tests/fakes/xpertai_files.py):
what a run's ``input.files`` must carry is the AgentFile as returned, never a bare id."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

import aiohttp
import pytest

from tests.fakes.lark import FakeLark
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.support.helpers import InProcessGateway
from tests.support.lark import LarkHarness, final_card, lark_config, message_event
from tests.support.waits import eventually

BIG_PDF = b"%PDF-1.7\n" + os.urandom(2_100_000) + b"\n%%EOF\n"  # parsed in the background


@pytest.fixture
async def gateway(
    lark: FakeLark, prefix: str, xpert: tuple[FakeXpertAI, str], redis_client: Any
) -> AsyncIterator[Callable[..., Any]]:
    started: list[LarkHarness] = []

    async def start(**expert: Any) -> LarkHarness:
        config = lark_config(prefix, lark, xpertId="sales")
        config["experts"] = [
            {"id": "sales", "kind": "xpert", "baseUrl": xpert[1], "apiKey": API_KEY, **expert}
        ]
        gw = InProcessGateway(config)
        await gw.start()
        started.append(LarkHarness(lark, gw))
        return started[-1]

    yield start
    for harness in started:
        await harness.close()


async def send_big_pdf(lark: FakeLark, harness: LarkHarness, message_id: str) -> str:
    lark.resources["file_big"] = (BIG_PDF, "application/pdf")
    content = {"file_key": "file_big", "file_name": "annual.pdf"}
    event = message_event(message_id=message_id, message_type="file", content=content)
    status, _ = await harness.post(event)
    assert status == 200
    card = await eventually(final_card(lark, message_id), timeout=30)
    return json.dumps(card, ensure_ascii=False)


async def test_a_queued_parse_is_polled_until_ready_before_the_run(
    lark: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    server.files.parse_reads = 2  # the background parse ends at the second status read
    harness = await gateway()
    shown = await send_big_pdf(lark, harness, "om_q1")
    [stored] = server.files.stored.values()
    assert stored.agent_file["status"] == "ready"
    assert server.files.status_reads == [stored.agent_file["id"]] * 2
    files = server.requests[0]["input"]["message"]["input"]["files"]
    assert files[0]["status"] == "parsing"  # as the upload returned it
    assert files[0]["fileId"] == stored.agent_file["id"]
    assert "Uploaded annual.pdf" in shown and "still reading" not in shown


async def test_a_parse_still_queued_past_the_wait_is_told_and_the_run_goes_on(
    lark: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    server.files.parse_reads = None  # the parse never ends
    harness = await gateway(fileParseWaitSeconds=0.6)
    shown = await send_big_pdf(lark, harness, "om_q2")
    assert "XpertAI is still reading annual.pdf: the agent may not see all of it yet" in shown
    assert server.files.status_reads  # it was asked
    [stored] = server.files.stored.values()
    [thread] = server.threads
    assert server.files.attached == {thread: [stored.agent_file["id"]]}  # the run went on


async def test_a_refused_upload_is_told_and_the_run_goes_on_without_the_file(
    lark: FakeLark, xpert: tuple[FakeXpertAI, str], gateway: Callable[..., Any]
) -> None:
    server, _ = xpert
    server.files.proxy_max_body = 1024 * 1024  # a proxy in front of XpertAI: 1 MiB at most
    harness = await gateway()
    lark.resources["file_1"] = (b"%PDF-1.4\n" + os.urandom(1_500_000), "application/pdf")
    content = {"file_key": "file_1", "file_name": "a.pdf"}
    await harness.post(message_event(message_id="om_r1", message_type="file", content=content))
    card = await eventually(final_card(lark, "om_r1"), timeout=15)
    assert "a.pdf could not be uploaded to XpertAI" in json.dumps(card)
    assert not server.files.stored
    assert "files" not in server.requests[0]["input"]["message"]["input"]  # ran on the text


# --- the fake server, as the real one -----------------------------------------------------------
async def upload(
    http: aiohttp.ClientSession, base: str, data: bytes | None, **fields: str
) -> tuple[int, Any]:
    headers = {"x-api-key": fields.pop("key", API_KEY)}
    form = aiohttp.FormData(quote_fields=False)
    if data is not None:
        form.add_field("file", data, filename="r.pdf", content_type="application/pdf")
    for name, value in fields.items():
        form.add_field(name, value)
    async with http.post(f"{base}/contexts/file", data=form, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_the_fake_refuses_uploads_as_the_server_does(xpert: tuple[FakeXpertAI, str]) -> None:
    _, base = xpert
    async with aiohttp.ClientSession() as http:
        assert await upload(http, base, b"%PDF", key="nope") == (
            401,
            {"message": "Unauthorized", "statusCode": 401},
        )
        assert (await upload(http, base, None))[0] == 500  # no file part
        status, body = await upload(http, base, b"%PDF", parseMode="slow")
        assert (status, body["message"]) == (400, "Invalid parseMode payload")
        status, body = await upload(http, base, b"%PDF", target="{")
        assert (status, body["message"]) == (400, "Invalid target JSON")
        status, body = await upload(http, base, b"\x00binary", threadId="t")  # any type goes
        assert status == 201 and body["status"] == "ready" and body["parseMode"] == "auto"
        async with http.get(f"{base}/files/nope/status", headers={"x-api-key": API_KEY}) as resp:
            assert resp.status == 404
    assert set(body) >= {"id", "fileId", "storageFileId", "originalName", "size", "mimeType"}


async def run_with_files(
    http: aiohttp.ClientSession, base: str, files: list[dict[str, Any]]
) -> str:
    headers = {"x-api-key": API_KEY}
    async with http.post(f"{base}/threads", json={"assistant_id": "sales"}, headers=headers) as r:
        thread = (await r.json())["thread_id"]
    message = {"input": {"input": "read it", "files": files}}
    body = {"assistant_id": "sales", "input": {"action": "send", "message": message}}
    async with http.post(f"{base}/threads/{thread}/runs/stream", json=body, headers=headers) as r:
        return await r.text()


async def test_a_bare_id_or_an_unknown_agent_file_is_not_attached(
    xpert: tuple[FakeXpertAI, str],
) -> None:
    server, base = xpert
    async with aiohttp.ClientSession() as http:
        _, agent_file = await upload(http, base, b"%PDF-1.4 x")
        await run_with_files(http, base, [{"id": agent_file["id"]}])  # a legacy attachment
        unknown = {**agent_file, "fileId": "0b5e0c4e-0000-4000-8000-000000000000"}
        text = await run_with_files(http, base, [unknown])
    assert "violates foreign key constraint" in text  # the run failed at its start
    assert list(server.files.legacy.values()) == [[agent_file["id"]]]
    assert server.files.attached == {}
