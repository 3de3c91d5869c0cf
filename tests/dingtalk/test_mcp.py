"""The MCP chat tools on DingTalk, end to end with the official MCP client against the fake
DingTalk: a message as a robot markdown message and a file as a ``sampleFile`` (uploaded with
``/media/upload``) into a group and a direct chat (to the person the session runs for, by
``oToMessages/batchSend``), a file by URL only from the expert's allowed origins, a type
DingTalk takes no message of refused, the history the gateway's transcript only (DingTalk
offers robots none), members not offered. (What every platform's tools do:
tests/conformance/test_chat_actions.py.)"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakes.dingtalk import SEND_PATHS, FakeDingTalk
from tests.fakes.media import PDF, FakeMediaHost
from tests.support.dingtalk import DingTalkHarness, dingtalk_config, robot_message
from tests.support.helpers import InProcessGateway, free_port
from tests.support.mcp import answer, audit_rows, mcp_client, with_mcp
from tests.support.waits import eventually


@pytest.fixture
async def files() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


@pytest.fixture
async def stranger() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


@pytest.fixture
async def dingtalk(prefix: str, files: FakeMediaHost) -> AsyncIterator[DingTalkHarness]:
    fake = FakeDingTalk()
    await fake.start()
    port = free_port()
    config = with_mcp(dingtalk_config(prefix, fake, port))
    config["experts"][0]["mediaHosts"] = [files.url]  # the echo expert's allowed origin
    gw = InProcessGateway(config)
    gw.port = port
    await gw.start()
    harness = DingTalkHarness(fake, gw)
    try:
        yield harness
    finally:
        await harness.close()
        await fake.stop()


def openapi_sends(fake: FakeDingTalk) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    return [
        (c.path, c.body, json.loads(c.body["msgParam"]))
        for c in fake.calls
        if c.path in SEND_PATHS and c.status < 300
    ]


@pytest.mark.parametrize("group", [True, False])
async def test_messages_and_files_into_a_dingtalk_chat(
    dingtalk: DingTalkHarness, files: FakeMediaHost, stranger: FakeMediaHost, group: bool
) -> None:
    fake = dingtalk.fake
    status, _ = await dingtalk.post(robot_message(fake, "hello", group=group))
    assert status == 200
    await eventually(lambda: any("hello" in (m.get("text") or "") for m in fake.sent()))
    await dingtalk.idle()
    files.files["/reports/q3.pdf"] = (PDF, "application/pdf")
    stranger.files["/q3.pdf"] = (PDF, "application/pdf")
    where = {"integrationId": "dt", "chatId": "cidGROUP" if group else "cidP2Pstaff1"}
    before = len(openapi_sends(fake))
    async with mcp_client(dingtalk.gw.port) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        said = answer(await client.call_tool("chat_send_message", {**where, "text": "## Done"}))
        by_url = answer(await client.call_tool(
            "chat_send_file", {**where, "name": "q3.pdf", "url": f"{files.url}/reports/q3.pdf"}
        ))  # fmt: skip
        foreign = await client.call_tool(
            "chat_send_file", {**where, "name": "q3.pdf", "url": f"{stranger.url}/q3.pdf"}
        )
        text_file = base64.b64encode(b"just notes").decode()
        refused = await client.call_tool(
            "chat_send_file", {**where, "name": "notes.txt", "contentBase64": text_file}
        )
        history = answer(await client.call_tool("chat_history", where))
        members = await client.call_tool("chat_members", where)
    assert listed == {"chat_send_message", "chat_send_file", "chat_history", "chat_members"}
    assert said["sent"] and by_url["kind"] == "file"
    assert foreign.is_error and "allowed origins" in foreign.content[0].text
    assert stranger.hits == []  # never fetched
    assert refused.is_error and "DingTalk sends files of" in refused.content[0].text
    assert members.is_error and "not offered on dingtalk" in members.content[0].text
    sends = openapi_sends(fake)[before:]
    path = SEND_PATHS[0] if group else SEND_PATHS[1]
    assert [(p, b["msgKey"]) for p, b, _ in sends] == [
        (path, "sampleMarkdown"), (path, "sampleFile"),
    ]  # fmt: skip
    target = sends[0][1]
    if group:
        assert target["openConversationId"] == "cidGROUP"
    else:
        assert target["userIds"] == ["staff1"]  # the person the session runs for
    assert sends[0][2]["text"] == "## Done"
    assert sends[1][2]["fileName"] == "q3.pdf" and sends[1][2]["fileType"] == "pdf"
    assert history["platform"] is None and history["transcript"][0]["text"].strip() == "hello"
    outcomes = sorted((r["tool"], r["outcome"]) for r in await audit_rows(dingtalk.gw.port))
    assert outcomes == [
        ("chat_history", "ok"), ("chat_members", "unsupported"), ("chat_send_file", "ok"),
        ("chat_send_file", "refused"), ("chat_send_file", "unsupported"),
        ("chat_send_message", "ok"),
    ]  # fmt: skip
