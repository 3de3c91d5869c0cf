"""The MCP chat tools on WeCom, end to end with the official MCP client against the fake WeCom:
an app posts a markdown message and a PNG as an ``image`` message of temporary media to the
user whose chat it is (message/send, as an answer's go); an AI bot answering callbacks cannot
post unprompted, so its sends are refused with nothing sent; the history is the gateway's
transcript (WeCom offers none), members are not offered. (What every platform's tools do:
tests/conformance/test_chat_actions.py.)"""

from __future__ import annotations

import base64

import aiohttp

from tests.fakes.media import PNG
from tests.fakes.wecom import FakeWeCom
from tests.support.configs import base_config
from tests.support.helpers import Gateways, InProcessGateway
from tests.support.mcp import answer, audit_rows, mcp_client, with_mcp
from tests.support.waits import eventually
from tests.support.wecom import (
    ECHO_FAST,
    aibot_message,
    app_message,
    control_subscribed,
    encrypt_json,
    encrypt_xml,
    integration,
    post,
    url,
)


async def started(gateways: Gateways, prefix: str, fake: FakeWeCom, mode: str) -> InProcessGateway:
    config = base_config(prefix)
    config["experts"] = [ECHO_FAST]
    config["integrations"] = [integration(fake, mode)]
    gw = InProcessGateway(with_mcp(config))
    await gw.start()
    await control_subscribed(gw)
    gateways.append(gw)
    return gw


async def test_an_app_posts_markdown_and_an_image_to_the_user(
    gateways: Gateways, prefix: str, fake: FakeWeCom
) -> None:
    gw = await started(gateways, prefix, fake, "app")
    query, body = encrypt_xml(app_message("alice", "hello", "9501"))
    async with aiohttp.ClientSession() as http:
        assert (await post(http, url(gw), query, body))[0] == 200
    await eventually(lambda: any(m["msgtype"] == "markdown" for m in fake.sent), timeout=15)
    await gw.idle()
    before = len(fake.sent)
    where = {"integrationId": "wc", "chatId": "alice"}
    async with mcp_client(gw.port) as client:
        said = answer(await client.call_tool(
            "chat_send_message", {**where, "text": "**Done** <@bob>"}))  # fmt: skip
        shown = answer(await client.call_tool(
            "chat_send_file",
            {**where, "name": "chart.png", "contentBase64": base64.b64encode(PNG).decode()},
        ))  # fmt: skip
        history = answer(await client.call_tool("chat_history", where))
        members = await client.call_tool("chat_members", where)
    markdown, image = fake.sent[before:]
    assert markdown == {**markdown, "touser": "alice", "msgtype": "markdown"}
    assert markdown["markdown"]["content"] == "**Done** \uff1c@bob>"  # notifies nobody
    assert image["msgtype"] == "image" and image["touser"] == "alice"
    assert fake.uploads[image["image"]["media_id"]] == ("image", "chart.png")
    assert said["sent"] and shown["kind"] == "image"
    assert history["platform"] is None and history["transcript"][0]["text"] == "hello"
    assert members.is_error
    outcomes = sorted((r["tool"], r["outcome"]) for r in await audit_rows(gw.port))
    assert outcomes == [("chat_history", "ok"), ("chat_members", "unsupported"),
                        ("chat_send_file", "ok"), ("chat_send_message", "ok")]  # fmt: skip


async def test_an_ai_bot_on_callbacks_cannot_post_unprompted(
    gateways: Gateways, prefix: str, fake: FakeWeCom
) -> None:
    gw = await started(gateways, prefix, fake, "aibot")
    message = aibot_message(
        "m-1", "text", {"content": "hello"}, response_url=fake.response_url("m-1")
    )
    query, body = encrypt_json(message)
    async with aiohttp.ClientSession() as http:
        assert (await post(http, url(gw), query, body))[0] == 200
    await gw.idle()
    sent = len(fake.sent)
    async with mcp_client(gw.port) as client:
        result = await client.call_tool(
            "chat_send_message", {"integrationId": "wc", "chatId": "alice", "text": "hi"}
        )
    assert result.is_error and "not offered on wecom" in result.content[0].text
    assert len(fake.sent) == sent
