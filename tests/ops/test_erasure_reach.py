"""A sender's erasure erases (issue 36), through the admin API: the memory items they added in a
chat where they have no turn, their words inside another sender's merged turn (its input
redacted), the conversation history the gateway keeps for an ``openai``
expert (not sent to the model again), and the records of an integration no longer in the config;
every answer says what it could not reach."""

from __future__ import annotations

import json
from typing import Any

from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.support.admin import TOKEN, admin
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, Gateways, serve


def config(prefix: str, **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, **integration)
    cfg["admin"] = {"token": TOKEN}
    return cfg


async def test_memory_in_any_chat_and_words_in_others_merged_turns_are_erased(
    prefix: str, gateways: Gateways
) -> None:
    gw = await gateways(config(prefix, summaryWindowSeconds=1))
    c = gw.client
    await c.send("/remember bob's quiet rule", chat="quiet", sender="bob", mention=True)
    await c.send("bob's secret plan", chat="team", sender="bob", mention=True)
    await c.send("alice asks", chat="team", sender="alice", mention=True)
    [card] = await c.wait_cards("team")
    assert "bob's secret plan" in card["card"]["answer"]  # one turn (echo merges senders)
    status, body = await admin(c, "GET", "/v1.0/audit", q="secret plan")
    assert [r["input"]["senders"] for r in body["result"]] == [["alice", "bob"]]

    status, body = await admin(c, "DELETE", "/v1.0/senders/console/bob/records")
    assert status == 200, body
    result = body["result"]
    assert result["redis"] == {
        "turns": 0,
        "redactedTurns": 1,
        "memoryItems": 1,
        "historyMessages": 0,
        "queued": 0,
    }
    assert "XpertAI thread" in result["notErased"]
    # (The answer, alice's, is kept: the echo expert's quotes the input, so q= still finds it
    # there; docs/security.md says so.)
    status, body = await admin(c, "GET", "/v1.0/audit", chatId="team")
    [record] = body["result"]
    assert record["senderId"] == "alice" and record["input"]["senders"] == ["alice"]
    assert "bob" not in json.dumps(record["input"]) and "secret" not in json.dumps(record["input"])
    status, body = await admin(c, "GET", "/v1.0/chats/console/quiet/memory")
    assert body["result"] == []


async def test_the_history_kept_for_a_model_loses_the_senders_messages(
    prefix: str, gateways: Gateways
) -> None:
    fake = FakeOpenAI()
    async for url in serve(fake.app()):
        cfg = config(prefix, xpertId="gpt")
        expert = {"id": "gpt", "kind": "openai", "baseUrl": url + "/v1", "apiKey": OPENAI_KEY}
        cfg["experts"] = [{**expert, "model": "m"}]
        gw = await gateways(cfg)
        c = gw.client
        await c.send("bob's secret plan", chat="dm-bob", sender="bob")
        await c.wait_cards("dm-bob")
        status, body = await admin(c, "DELETE", "/v1.0/senders/console/bob/records")
        assert status == 200, body
        assert body["result"]["redis"]["historyMessages"] == 2
        await c.send("what did I say?", chat="dm-bob", sender="bob")
        await c.wait_cards("dm-bob", count=2)
        sent = json.dumps(fake.requests[-1]["messages"])
        assert "secret plan" not in sent and "what did I say?" in sent
        assert "senders" not in sent  # the model never sees whose words a message holds


async def test_an_integration_no_longer_configured_can_still_be_erased(
    prefix: str, gateways: Gateways
) -> None:
    old = {"id": "old", "platform": "console", "xpertId": "echo", "summaryWindowSeconds": 0}
    first = config(prefix)
    first["integrations"].append(old)
    gw = await gateways(first)
    client = ConsoleClient(gw.client.base, integration_id="old")
    try:
        await client.send("alice on the old integration")
        await client.wait_cards()
    finally:
        await client.close()
    later = await gateways(config(prefix))  # the same Redis; "old" is no longer configured
    status, body = await admin(later.client, "DELETE", "/v1.0/senders/old/alice/records")
    assert status == 200, body
    assert body["result"]["redis"]["turns"] == 1
    status, body = await admin(later.client, "DELETE", "/v1.0/senders/never/alice/records")
    assert status == 404
