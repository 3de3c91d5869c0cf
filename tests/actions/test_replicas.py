"""The MCP server across replicas: it keeps no session of its own (stateless), so a client's
calls may land on any replica - a chat whose session one replica opened is acted in through
another - and a client's calls per minute are counted once for all of them."""

from __future__ import annotations

from tests.support.configs import base_config
from tests.support.helpers import Gateways
from tests.support.mcp import audit_rows, mcp_client, with_mcp


async def test_any_replica_serves_a_call_and_the_rate_is_shared(
    gateways: Gateways, prefix: str
) -> None:
    one = await gateways(with_mcp(base_config(prefix), callsPerMinute=4))
    two = await gateways(with_mcp(base_config(prefix), callsPerMinute=4))
    await one.client.send("hello")
    await one.client.wait_cards("dm-alice")
    await gateways.idle()
    where = {"integrationId": "console", "chatId": "dm-alice"}
    outcomes = []
    for gw in (two, one, two, one, two):
        async with mcp_client(gw.port) as client:
            result = await client.call_tool(
                "chat_send_message", {**where, "text": f"via {gw.port}"}
            )
            outcomes.append(result.is_error)
    assert outcomes == [False, False, False, False, True]  # 4 a minute, both replicas together
    async with mcp_client(one.port) as client:
        history = await client.call_tool("chat_history", where)
    assert history.is_error  # still over the shared bound
    texts = await two.client.texts("dm-alice")
    assert texts.count(f"via {two.port}") == 2 and texts.count(f"via {one.port}") == 2
    rows = await audit_rows(one.port)  # one audit trail, whichever replica served the call
    assert sorted(r["outcome"] for r in rows) == ["ok"] * 4 + ["rate_limited"] * 2
