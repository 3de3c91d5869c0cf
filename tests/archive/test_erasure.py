"""Erasure on request removes a sender's, then a chat's, records from Redis and the archive
(PostgreSQL and SQLite): audit records, sessions, memory and its changes, what waits in the
outbox; what others said stays until their chat is erased."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy import select

from gateway.archive.database import ArchiveDatabase
from gateway.archive.schema import memory_changes, sessions, turns
from gateway.config.archive import ArchiveSettings
from sessions import KeyBuilder
from tests.support.admin import TOKEN, admin
from tests.support.configs import base_config
from tests.support.helpers import Gateways
from tests.support.waits import eventually


async def table(url: str, which: Any) -> list[dict[str, Any]]:
    db = ArchiveDatabase.open(ArchiveSettings(url=url).database_url(Path(".")))
    try:
        async with db.engine.connect() as conn:
            return [dict(r._mapping) for r in await conn.execute(select(which))]
    finally:
        await db.close()


async def test_a_sender_then_a_chat_are_erased_from_redis_and_the_archive(
    archive_url: str, prefix: str, gateways: Gateways, redis_client: aioredis.Redis
) -> None:
    config = base_config(prefix)
    config["admin"] = {"token": TOKEN}
    config["archive"] = {"url": archive_url, "leaseSeconds": 1}
    gw = await gateways(config)
    c = gw.client
    await c.send("bob asks in the team", chat="team", sender="bob", mention=True)
    await c.wait_cards("team")
    await c.send("alice asks in the team", chat="team", sender="alice", mention=True)
    await c.wait_cards("team", count=2)
    await c.send("/remember alice's team rule", chat="team", sender="alice", mention=True)
    await c.send("/remember bob's team rule", chat="team", sender="bob", mention=True)
    await c.send("alice alone")
    await c.wait_cards()
    await c.send("/remember alice's own rule")

    async def archived() -> bool:
        return len(await table(archive_url, turns)) == 3 and (
            len(await table(archive_url, memory_changes)) == 3
        )

    await eventually(archived, timeout=20)
    status, body = await admin(c, "DELETE", "/v1.0/senders/console/alice/records")
    assert status == 200, body
    result = body["result"]
    assert result["redis"] == {
        "turns": 2,
        "redactedTurns": 0,
        "memoryItems": 2,
        "historyMessages": 0,
        "queued": 0,
    }
    assert result["archive"] == {
        "turns": 2,
        "redactedTurns": 0,
        "sessions": 1,
        "memoryChanges": 2,
    }
    status, body = await admin(c, "GET", "/v1.0/audit")
    assert [r["senderId"] for r in body["result"]] == ["bob"]
    assert {r["sender_id"] for r in await table(archive_url, turns)} == {"bob"}
    assert [m["by"] for m in await table(archive_url, memory_changes)] == ["bob"]
    [team] = await table(archive_url, sessions)
    assert team["chat_id"] == "team" and team["turns"] == 1
    assert team["final_text"] and "bob asks" in (await table(archive_url, turns))[0]["input_text"]
    status, body = await admin(c, "GET", "/v1.0/chats/console/team/memory")
    assert [m["text"] for m in body["result"]] == ["bob's team rule"]

    status, body = await admin(c, "DELETE", "/v1.0/chats/console/team/records")
    assert status == 200, body
    assert body["result"]["redis"]["turns"] == 1 and body["result"]["redis"]["memoryItems"] == 1
    assert body["result"]["archive"] == {"turns": 1, "sessions": 1, "memoryChanges": 1}
    await gw.idle()
    for which in (turns, sessions, memory_changes):
        assert await table(archive_url, which) == []
    status, body = await admin(c, "GET", "/v1.0/audit")
    assert body["result"] == []
    keys = KeyBuilder(prefix=prefix)
    assert await redis_client.llen(keys.memory("console", "team")) == 0
    assert await redis_client.hlen(keys.timeline_messages("console", "team")) == 0
    assert await redis_client.xlen(keys.audit_outbox("console")) == 0

    status, body = await admin(c, "DELETE", "/v1.0/chats/nowhere/team/records")
    assert status == 404


async def test_a_senders_words_in_another_senders_archived_turn_are_redacted(
    archive_url: str, prefix: str, gateways: Gateways
) -> None:
    """Issue 36: a merged turn ran as alice with bob's message in it; bob's erasure redacts its
    input in Redis and in the archive (alice's record stays, without his words)."""
    config = base_config(prefix, summaryWindowSeconds=1)
    config["admin"] = {"token": TOKEN}
    config["archive"] = {"url": archive_url, "leaseSeconds": 1}
    gw = await gateways(config)
    c = gw.client
    await c.send("bob's secret plan", chat="team", sender="bob", mention=True)
    await c.send("alice asks", chat="team", sender="alice", mention=True)
    await c.wait_cards("team")

    async def archived() -> bool:
        return len(await table(archive_url, turns)) == 1

    await eventually(archived, timeout=20)
    status, body = await admin(c, "DELETE", "/v1.0/senders/console/bob/records")
    assert status == 200, body
    assert body["result"]["archive"]["redactedTurns"] == 1
    assert body["result"]["redis"]["redactedTurns"] == 1
    [row] = await table(archive_url, turns)
    assert row["sender_id"] == "alice"
    assert "secret" not in row["input_text"] and "secret" not in str(row["record"]["input"])
    assert row["record"]["input"]["senders"] == ["alice"]
