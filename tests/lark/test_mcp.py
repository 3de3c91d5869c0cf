"""The MCP chat tools on Lark, end to end with the official MCP client against the fake Lark
OpenAPI: a message as a Markdown card posted into the chat (mentions inert unless asked for,
``@all`` always), a file uploaded and sent as a file message, the chat's history from Lark and
the gateway's transcript, its members; each call under the app's platform budget (counted in
/metrics like a turn's calls) and in the audit trail. (What every platform's tools do, and a
chat without a session refused: tests/conformance/test_chat_actions.py.)"""

from __future__ import annotations

import base64

from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import LarkHarness, lark_config, message_event
from tests.support.mcp import answer, audit_rows, mcp_client, scrape, with_mcp
from tests.support.metrics import scrape as metrics
from tests.support.waits import eventually

CHAT = "oc_group1"
WHERE = {"integrationId": "lark-main", "chatId": CHAT}


async def harness(fake: FakeLark, prefix: str) -> LarkHarness:
    gw = InProcessGateway(with_mcp(lark_config(prefix, fake)))
    await gw.start()
    lark = LarkHarness(fake, gw)
    message = message_event("@_user_1 hello", chat_id=CHAT, chat_type="group",
                            mentions=[{"key": "@_user_1", "id": {"open_id": "ou_bot"},
                                       "name": "Bot"}])  # fmt: skip
    status, _ = await lark.post(message)
    assert status == 200
    await eventually(lambda: any(c.op in ("reply", "card_create") for c in fake.calls))
    await lark.idle()
    return lark


async def test_each_tool_on_lark(fake: FakeLark, prefix: str) -> None:
    lark = await harness(fake, prefix)
    fake.members[CHAT] = [{"member_id": f"ou_{i}", "name": f"User {i}"} for i in range(130)]
    sent_before = len(fake.of("create"))
    try:
        async with mcp_client(lark.gw.port) as client:
            text = '**Report** ready <at id=ou_alice></at> <at user_id="all"></at>'
            quiet = answer(await client.call_tool("chat_send_message", {**WHERE, "text": text}))
            loud = answer(await client.call_tool(
                "chat_send_message", {**WHERE, "text": text, "allowMentions": True}))  # fmt: skip
            pdf = base64.b64encode(b"%PDF-1.7 quarterly").decode()
            filed = answer(await client.call_tool(
                "chat_send_file", {**WHERE, "name": "q3.pdf", "contentBase64": pdf}))  # fmt: skip
            history = answer(await client.call_tool("chat_history", {**WHERE, "limit": 5}))
            members = answer(await client.call_tool("chat_members", WHERE))
        creates = fake.of("create")[sent_before:]
        assert [c.body["msg_type"] for c in creates] == ["interactive", "interactive", "file"]
        assert all(c.body["receive_id"] == CHAT for c in creates)
        # inert unless asked; @all never
        assert fake.mentions().count("id=ou_alice") == 1
        assert not [m for m in fake.mentions() if "all" in m]
        assert quiet["sent"] and loud["sent"] and filed["kind"] == "file"
        uploads = fake.of("file_upload")
        assert uploads[-1].body["file_type"] == "pdf" and uploads[-1].body["file_name"] == "q3.pdf"
        # Lark's history (newest last, the file message the last) and the audited turn
        assert [m["kind"] for m in history["platform"]][-1] == "file"
        assert history["platform"][0]["sender"] in ("ou_alice", "bot")
        assert history["transcript"][0]["text"].endswith("hello")
        assert len(members["members"]) == 130  # two pages of 100
        rows = await audit_rows(lark.gw.port)
        assert sorted(r["tool"] for r in rows) == [
            "chat_history", "chat_members", "chat_send_file", "chat_send_message",
            "chat_send_message",
        ]  # fmt: skip
        assert {r["outcome"] for r in rows} == {"ok"}
        # every platform call counted as a turn's are (the app's budget in front of them)
        metrics = await scrape(lark.gw.port)
        assert 'endpoint="messages"' in metrics and 'endpoint="members"' in metrics
    finally:
        await lark.close()


async def test_calls_spend_the_apps_platform_budget(fake: FakeLark, prefix: str) -> None:
    """An agent's sends count against the month's quota the turns spend, and once it is spent a
    send is refused (outcome ``budget``) with nothing sent."""
    config = with_mcp(lark_config(prefix, fake, platformLimits={"callsPerMonth": 12},
                                  typingReaction=False, lookupSenderEmail=False))  # fmt: skip
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    try:
        status, _ = await lark.post(message_event("hello", chat_id=CHAT, chat_type="group",
                                                  mentions=[{"key": "@_user_1", "id": {"open_id":
                                                  "ou_bot"}, "name": "Bot"}]))  # fmt: skip
        assert status == 200
        await eventually(lambda: any(c.op in ("reply", "card_create") for c in fake.calls))
        await lark.idle()
        used = (await metrics(lark.base)).value("xgw_platform_quota_used")
        assert 0 < used < 12
        creates = len(fake.of("create"))
        outcomes = []
        async with mcp_client(gw.port) as client:
            for n in range(int(12 - used) + 2):
                result = await client.call_tool("chat_send_message", {**WHERE, "text": f"n{n}"})
                outcomes.append(result.is_error)
        assert outcomes == [False] * int(12 - used) + [True, True]
        assert len(fake.of("create")) - creates == 12 - used
        assert (await metrics(lark.base)).value("xgw_platform_quota_used") == 12
        rows = await audit_rows(gw.port)
        assert sorted(r["outcome"] for r in rows).count("budget") == 2
    finally:
        await lark.close()
