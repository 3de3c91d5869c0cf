"""The MCP chat tools on every platform, end to end with the official MCP client against the
platform's fake: every tool is listed; each one the adapter offers (``chat_tools()``) works in
the chat a session runs in — a message shown there once, a file sent as a file, the history
holding the gateway's transcript, the members — and each one it does not offer says so and
sends nothing; every call is in the audit trail. A chat without a session, or an integration
that does not exist, is refused with nothing sent (one gateway for all: each start costs).
(Each platform's own: mentions, targets, pages, file types, an AI bot on callbacks:
tests/{lark,dingtalk,wecom}/test_mcp.py.)"""

from __future__ import annotations

import base64
from typing import Any

from gateway.edge.chat_actions import HISTORY, MEMBERS, SEND_FILE, SEND_MESSAGE, TOOLS
from tests.fakes.media import PDF
from tests.support.conformance import Harness
from tests.support.mcp import answer, audit_rows, mcp_client

TEXT = "**Report** ready"
ARGS: dict[str, dict[str, Any]] = {
    SEND_MESSAGE: {"text": TEXT},
    SEND_FILE: {"name": "q3.pdf", "contentBase64": base64.b64encode(PDF).decode()},
    HISTORY: {"limit": 5},
    MEMBERS: {},
}


def shown_count(platform: Harness) -> int:
    return sum(TEXT in shown for shown in platform.shown())


async def test_the_tools_a_platform_offers_work_the_rest_say_so_and_no_session_no_send(
    platform: Harness,
) -> None:
    await platform.start_mcp()
    sent = await platform.send("hello")
    await platform.answer(sent)
    platform.seat_members(sent, ["alice", "bob", "carol"])
    offered = platform.adapter.chat_tools()
    where = {"integrationId": platform.integration_id, "chatId": platform.chat_id(sent)}
    async with mcp_client(platform.gateway.port) as client:
        listed = {t.name for t in (await client.list_tools()).tools}
        results = {tool: await client.call_tool(tool, {**where, **ARGS[tool]}) for tool in TOOLS}
        await platform.idle()
        written = platform.written()
        elsewhere = await client.call_tool(
            SEND_MESSAGE, {**where, "chatId": "elsewhere", "text": "hi"}
        )
        unknown = await client.call_tool(SEND_MESSAGE, {**where, "integrationId": "nope"})
    await platform.idle()
    assert elsewhere.is_error and "no live or recent session" in elsewhere.content[0].text
    assert unknown.is_error
    assert platform.written() == written  # not one platform call for either
    assert listed == set(TOOLS)
    for tool, result in results.items():
        if tool not in offered:
            assert result.is_error and "not offered on" in result.content[0].text, tool
    if SEND_MESSAGE in offered:
        assert answer(results[SEND_MESSAGE])["sent"]
    assert shown_count(platform) == (SEND_MESSAGE in offered)
    if SEND_FILE in offered:
        assert answer(results[SEND_FILE])["kind"] == "file"
    assert platform.chat_files() == ([("q3.pdf", PDF)] if SEND_FILE in offered else [])
    if HISTORY in offered:
        history = answer(results[HISTORY])
        assert history["transcript"][0]["text"].strip().endswith("hello")
    if MEMBERS in offered:
        members = answer(results[MEMBERS])["members"]
        assert len(members) == 3
    outcomes = sorted((r["tool"], r["outcome"]) for r in await audit_rows(platform.gateway.port))
    expected = [(t, "ok" if t in offered else "unsupported") for t in TOOLS]
    assert outcomes == sorted([*expected, *[(SEND_MESSAGE, "refused")] * 2])
    assert platform.refused() == []
