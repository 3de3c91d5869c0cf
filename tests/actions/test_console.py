"""The MCP server of chat actions against the console, with the official MCP client (``mcp``'s
streamable HTTP client): the tools listed, each tool end to end, the refusals (no token, a
wrong one, a chat without a session of the client's experts, another expert's chat, an
oversize body, the rate per minute) and what each call leaves: an audit row, a count in
/metrics."""

from __future__ import annotations

import base64
from typing import Any

import aiohttp
import pytest

from tests.support.configs import base_config
from tests.support.helpers import Gateways, InProcessGateway
from tests.support.mcp import OTHER, TOKEN, answer, mcp_client, scrape, with_mcp
from tests.support.mcp import audit_rows as rows_of


def config(prefix: str, **mcp: Any) -> dict[str, Any]:
    return with_mcp(base_config(prefix), **mcp)


async def audit_rows(gw: InProcessGateway) -> list[dict[str, Any]]:
    return await rows_of(gw.port)


async def with_session(gateways: Gateways, prefix: str, **mcp: Any) -> InProcessGateway:
    """A gateway whose console chat dm-alice has had one turn of the echo expert."""
    gw = await gateways(config(prefix, **mcp))
    await gw.client.send("hello from alice")
    await gw.client.wait_cards("dm-alice")
    await gw.idle()
    return gw


async def test_lists_the_four_tools_and_acts_in_a_chat_with_a_session(
    gateways: Gateways, prefix: str
) -> None:
    gw = await with_session(gateways, prefix)
    async with mcp_client(gw.port) as client:
        tools = await client.list_tools()
        assert sorted(t.name for t in tools.tools) == [
            "chat_history", "chat_members", "chat_send_file", "chat_send_message",
        ]  # fmt: skip
        where = {"integrationId": "console", "chatId": "dm-alice"}
        sent = answer(await client.call_tool("chat_send_message", {**where, "text": "**hi** all"}))
        content = base64.b64encode(b"%PDF-1.4 report").decode()
        filed = answer(
            await client.call_tool(
                "chat_send_file", {**where, "name": "report.pdf", "contentBase64": content}
            )
        )
        history = answer(await client.call_tool("chat_history", {**where, "limit": 10}))
        members = answer(await client.call_tool("chat_members", where))
    assert sent["sent"] and filed == {**filed, "kind": "file", "mime": "application/pdf"}
    texts = await gw.client.texts("dm-alice")
    assert "**hi** all" in texts
    files = [m for m in await gw.client.messages("dm-alice") if m.get("type") == "file"]
    assert files and files[0]["file"]["name"] == "report.pdf"
    # the transcript the gateway keeps (the audited turn) and the console's own timeline
    assert history["transcript"][0]["text"] == "hello from alice"
    assert any(m["text"] == "**hi** all" for m in history["platform"])
    assert {m["id"] for m in members["members"]} == {"alice", "bot"}
    rows = await audit_rows(gw)
    assert sorted(r["tool"] for r in rows) == [
        "chat_history", "chat_members", "chat_send_file", "chat_send_message",
    ]  # fmt: skip
    assert {r["outcome"] for r in rows} == {"ok"} and {r["client"] for r in rows} == {"xpert-prod"}
    assert all(r["sessionId"] == sent["sessionId"] for r in rows)
    assert [r["bytes"] for r in rows if r["tool"] == "chat_send_file"] == [15]


async def test_refused_for_a_chat_without_a_session_of_its_experts(
    gateways: Gateways, prefix: str
) -> None:
    gw = await with_session(gateways, prefix)
    before = await gw.client.messages("team")
    async with mcp_client(gw.port) as client:
        none = await client.call_tool(
            "chat_send_message", {"integrationId": "console", "chatId": "team", "text": "x"}
        )
    async with mcp_client(gw.port, OTHER) as other:  # dm-alice runs echo, not this client's expert
        foreign = await other.call_tool(
            "chat_send_message", {"integrationId": "console", "chatId": "dm-alice", "text": "x"}
        )
    assert none.is_error and "no live or recent session" in none.content[0].text
    assert foreign.is_error and "no live or recent session" in foreign.content[0].text
    assert await gw.client.messages("team") == before
    assert "x" not in await gw.client.texts("dm-alice")
    rows = await audit_rows(gw)
    assert sorted((r["client"], r["chatId"], r["outcome"]) for r in rows) == [
        ("other-team", "dm-alice", "refused"), ("xpert-prod", "team", "refused"),
    ]  # fmt: skip
    metrics = await scrape(gw.port)
    line = 'xgw_mcp_calls_total{client="xpert-prod",outcome="refused",tool="chat_send_message"}'
    assert f"{line} 1.0" in metrics


@pytest.mark.parametrize("header", [None, "Bearer wrong-token-0123456789", "Basic " + TOKEN])
async def test_no_token_or_a_wrong_one_is_401(
    gateways: Gateways, prefix: str, header: str | None
) -> None:
    gw = await gateways(config(prefix))
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Authorization": header} if header else {}
    async with aiohttp.ClientSession() as http:
        async with http.post(f"http://127.0.0.1:{gw.port}/mcp", json=body, headers=headers) as r:
            assert r.status == 401
            assert r.headers["WWW-Authenticate"] == "Bearer"


async def test_an_oversize_request_is_413_and_a_big_file_a_tool_error(
    gateways: Gateways, prefix: str
) -> None:
    gw = await with_session(gateways, prefix, maxRequestBytes=65536, maxFileBytes=1000)
    where = {"integrationId": "console", "chatId": "dm-alice"}
    async with aiohttp.ClientSession() as http:
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"x": "y" * 70000}}
        headers = {"Authorization": f"Bearer {TOKEN}"}
        async with http.post(f"http://127.0.0.1:{gw.port}/mcp", json=body, headers=headers) as r:
            assert r.status == 413
    async with mcp_client(gw.port) as client:
        big = base64.b64encode(b"x" * 2000).decode()
        result = await client.call_tool(
            "chat_send_file", {**where, "name": "big.txt", "contentBase64": big}
        )
    assert result.is_error and "larger than 1000 bytes" in result.content[0].text
    assert not [m for m in await gw.client.messages("dm-alice") if m.get("type") == "file"]


async def test_calls_per_minute_per_client(gateways: Gateways, prefix: str) -> None:
    gw = await with_session(gateways, prefix, callsPerMinute=3)
    where = {"integrationId": "console", "chatId": "dm-alice"}
    async with mcp_client(gw.port) as client:
        results = [await client.call_tool("chat_members", where) for _ in range(5)]
    assert [r.is_error for r in results] == [False, False, False, True, True]
    assert "calls per minute" in results[-1].content[0].text
    rows = await audit_rows(gw)
    assert sorted(r["outcome"] for r in rows) == ["ok"] * 3 + ["rate_limited"] * 2


async def test_hostile_requests_are_4xx_or_tool_errors_never_500(
    gateways: Gateways, prefix: str
) -> None:
    gw = await with_session(gateways, prefix)
    url = f"http://127.0.0.1:{gw.port}/mcp"
    auth = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream"}  # fmt: skip
    async with aiohttp.ClientSession() as http:
        for body in (b"{not json", b"[]", b'{"jsonrpc": "2.0"}', "é".encode("latin-1")):
            async with http.post(url, data=body, headers=auth) as resp:
                assert 400 <= resp.status < 500, (body, resp.status)
        async with http.post(url, data=b"{}", headers={**auth, "Authorization": "Bearer é"}) as r:
            assert r.status == 401
    where = {"integrationId": "console", "chatId": "dm-alice"}
    async with mcp_client(gw.port) as client:
        bad = [
            await client.call_tool("no_such_tool", where),
            await client.call_tool("chat_send_message", {**where, "text": ""}),
            await client.call_tool("chat_send_message", {**where, "text": ["x"]}),
            await client.call_tool("chat_send_message", {"integrationId": {"a": 1}, "text": "x"}),
            await client.call_tool("chat_history", {**where, "limit": "all"}),
            await client.call_tool("chat_send_file", {**where, "name": "a.pdf"}),
            await client.call_tool(
                "chat_send_file", {**where, "name": "a.pdf", "contentBase64": "%%%"}
            ),
            await client.call_tool(
                "chat_send_file",
                {**where, "name": "a.html", "contentBase64": base64.b64encode(b"<html>").decode()},
            ),
            await client.call_tool(
                "chat_send_file", {**where, "name": "a.pdf", "url": "http://169.254.169.254/x"}
            ),
        ]
    assert all(r.is_error for r in bad), [r.content[0].text for r in bad if not r.is_error]
    rows = await audit_rows(gw)
    assert len(rows) == len(bad) and {r["outcome"] for r in rows} == {"refused"}
    assert {r["tool"] for r in rows} >= {"unknown", "chat_send_file"}
