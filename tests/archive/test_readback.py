"""The admin API reads the archive back: once Redis' records expired, ``/v1.0/audit`` and the
session routes answer from the archive, filtered as before, searched with ``q=`` and bounded with
``since`` / ``until``; while a record is in both it is listed once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy import select

from gateway.archive.database import ArchiveDatabase
from gateway.archive.schema import turns
from gateway.config.archive import ArchiveSettings
from sessions import KeyBuilder
from tests.support.admin import TOKEN, admin
from tests.support.configs import base_config
from tests.support.helpers import Gateways, InProcessGateway
from tests.support.waits import eventually


async def archived_count(url: str) -> int:
    db = ArchiveDatabase.open(ArchiveSettings(url=url).database_url(Path(".")))
    try:
        async with db.engine.connect() as conn:
            return len((await conn.execute(select(turns.c.id))).all())
    finally:
        await db.close()


async def listed(gw: InProcessGateway, path: str, **params: str) -> list[dict[str, Any]]:
    status, body = await admin(gw.client, "GET", path, **params)
    assert status == 200, body
    result: list[dict[str, Any]] = body["result"]
    return result


async def test_expired_records_are_listed_searched_and_bounded_from_the_archive(
    archive_url: str, prefix: str, gateways: Gateways, redis_client: aioredis.Redis
) -> None:
    config = base_config(prefix)
    config["admin"] = {"token": TOKEN}
    config["audit"] = {"retentionDays": 2 / 86_400}
    config["archive"] = {"url": archive_url, "leaseSeconds": 1}
    gw = await gateways(config)
    sent = [("dm-alice", "apple pie recipe"), ("dm-bob", "Banana bread"), ("dm-alice", "cherry")]
    for n, (chat, text) in enumerate(sent):
        await gw.client.send(text, chat=chat, sender=chat[3:])
        await gw.client.wait_cards(chat, count=1 + (n == 2))
    await eventually(lambda: _equals(archived_count(archive_url), 3), timeout=20)
    records = KeyBuilder(prefix=prefix).audit_records("console")
    await eventually(lambda: _expired(redis_client, records), timeout=10)

    everything = await listed(gw, "/v1.0/audit")
    assert [r["input"]["text"] for r in everything] == [
        "cherry",
        "Banana bread",
        "apple pie recipe",
    ]
    assert [r["input"]["text"] for r in await listed(gw, "/v1.0/audit", q="BANANA")] == [
        "Banana bread"
    ]
    alice = await listed(gw, "/v1.0/audit", chatId="dm-alice")
    assert [r["input"]["text"] for r in alice] == ["cherry", "apple pie recipe"]
    middle = everything[1]["timings"]["finishedAt"]
    bounded = await listed(gw, "/v1.0/audit", since=str(middle), until=str(middle))
    assert [r["id"] for r in bounded] == [everything[1]["id"]]
    assert await listed(gw, "/v1.0/audit", q="nothing like it") == []
    status, body = await admin(gw.client, "GET", "/v1.0/audit", q="x" * 201)
    assert status == 400 and body["msg"].startswith("q:")

    # Sessions: the archive's, newest first, and one found by what was said in it.
    found = await listed(gw, "/v1.0/sessions")
    assert [(s["chatId"], s["turns"], s["archived"]) for s in found] == [
        ("dm-alice", 2, True),
        ("dm-bob", 1, True),
    ]
    [bob] = await listed(gw, "/v1.0/sessions", q="banana")
    assert bob["chatId"] == "dm-bob" and bob["outcomes"] == {"done": 1}
    status, body = await admin(gw.client, "GET", f"/v1.0/sessions/{found[0]['sessionId']}")
    assert status == 200 and body["result"]["turns"] == 2
    assert body["result"]["finalText"] == everything[0]["answer"]
    in_order = await listed(gw, f"/v1.0/sessions/{found[0]['sessionId']}/audit")
    assert [r["input"]["text"] for r in in_order] == ["apple pie recipe", "cherry"]

    # A new turn is in Redis and, soon after, in the archive too: listed once all along.
    await gw.client.send("durian", chat="dm-bob", sender="bob")
    await gw.client.wait_cards("dm-bob", count=2)
    for _ in range(2):
        ids = [r["id"] for r in await listed(gw, "/v1.0/audit")]
        assert len(ids) == len(set(ids)) == 4
        await eventually(lambda: _equals(archived_count(archive_url), 4), timeout=20)


async def _equals(count: Any, wanted: int) -> bool:
    return bool(await count == wanted)


async def _expired(client: aioredis.Redis, key: str) -> bool:
    return not await client.exists(key)
