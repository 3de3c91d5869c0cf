"""The archive end to end, on a real Redis and a real database: a console turn with the echo
expert, its session and the chat's memory changes are in the archive after their Redis records
expired (PostgreSQL and SQLite); turns run while PostgreSQL is unreachable are archived once it
is back, each once; an archiver killed mid-batch (SIGKILL, its write blocked on a table lock)
loses nothing and doubles nothing once another replica took its lease over."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import asyncpg
import redis.asyncio as aioredis
from sqlalchemy import select

from gateway.archive.database import ArchiveDatabase
from gateway.archive.migrations import migrate
from gateway.archive.schema import memory_changes, sessions, turns
from gateway.archive.writer import batch_of, write
from gateway.config.archive import ArchiveSettings
from sessions import KeyBuilder
from tests.support.archive import archive_config, outbox_entry, rows, turn_record
from tests.support.cli import quickstart
from tests.support.helpers import DaemonProcess, Gateways
from tests.support.metrics import scrape
from tests.support.postgres import TcpProxy, server_url, with_database
from tests.support.waits import eventually


async def test_a_turn_its_session_and_memory_are_archived_past_their_redis_expiry(
    archive_url: str, prefix: str, gateways: Gateways, redis_client: aioredis.Redis
) -> None:
    config = archive_config(prefix, archive_url)
    config["audit"] = {"retentionDays": 2 / 86_400}  # Redis keeps the records 2 s
    gw = await gateways(config)
    await gw.client.send("hello archive")
    [card] = await gw.client.wait_cards()
    await gw.client.send("/remember the deploy window is Friday")
    await gw.client.send("/forget 1")

    async def archived() -> list[dict[str, Any]] | None:
        found = await rows(archive_url, turns)
        changes = await rows(archive_url, memory_changes)
        return found if found and len(changes) == 2 else None

    [turn] = await eventually(archived, timeout=20)
    keys = KeyBuilder(prefix=prefix)
    records = keys.audit_records("console")
    # The Redis records expire (the retention as their TTL); the archive keeps them.
    await eventually(lambda: _gone(redis_client, records), timeout=10)
    assert turn["input_text"] == "hello archive"
    assert turn["outcome"] == "done" and turn["chat_id"] == "dm-alice"
    assert turn["answer"] and turn["answer"] in card["card"]["answer"]
    assert turn["expert_id"] == "echo" and turn["sender_id"] == "alice"
    assert turn["record"]["id"] == turn["id"] and turn["record"]["steps"]
    assert turn["record"]["timings"]["finishedAt"] == turn["finished_at"]
    [session] = await rows(archive_url, sessions)
    assert session["id"] == turn["session_id"]
    assert session["turns"] == 1 and session["final_text"] == turn["answer"]
    assert session["xpert_id"] == "echo" and session["scope"] == "chat"
    assert session["snapshot_hash"] and session["opened_at"] <= turn["finished_at"]
    assert session["last_active_at"] == turn["finished_at"]
    changes = sorted(await rows(archive_url, memory_changes), key=lambda r: r["action"])
    assert [(c["action"], c["by"], c["text"]) for c in changes] == [
        ("forget", "alice", "the deploy window is Friday"),
        ("remember", "alice", "the deploy window is Friday"),
    ]
    # Everything archived left the outbox.
    assert await redis_client.xlen(keys.audit_outbox("console")) == 0


async def _gone(client: aioredis.Redis, key: str) -> bool:
    return not await client.exists(key)


async def test_turns_run_while_postgresql_is_unreachable_are_archived_once_when_it_is_back(
    pg_url: str, prefix: str, gateways: Gateways, redis_client: aioredis.Redis
) -> None:
    server = urlsplit(server_url())
    proxy = TcpProxy(server.hostname or "127.0.0.1", server.port or 5432)
    await proxy.open()
    url = with_database(pg_url, urlsplit(pg_url).path.strip("/"), port=proxy.port)
    gw = await gateways(archive_config(prefix, url))
    base = f"http://127.0.0.1:{gw.port}"
    try:
        await proxy.close()  # the database stops answering
        chats = ["dm-alice", "dm-bob"]
        for n in range(3):
            for chat in chats:
                await gw.client.send(f"turn {n} in {chat}", chat=chat, sender=chat[3:])
                await gw.client.wait_cards(chat, count=n + 1)

        async def backed_up() -> bool:
            s = await scrape(base)
            waiting = s.value("xgw_archive_outbox_length", integration="console")
            return waiting >= 6 and s.value("xgw_archive_write_errors_total") >= 1

        await eventually(backed_up, timeout=20)
        assert await rows(pg_url, turns) == []
        await proxy.open()  # back
        outbox = KeyBuilder(prefix=prefix).audit_outbox("console")

        async def drained() -> list[dict[str, Any]] | None:
            found = await rows(pg_url, turns)
            empty = await redis_client.xlen(outbox) == 0
            return found if len(found) == 6 and empty else None

        found = await eventually(drained, timeout=30)
        stored = await redis_client.hkeys(KeyBuilder(prefix=prefix).audit_records("console"))
        assert sorted(r["id"] for r in found) == sorted(stored)
        texts = sorted(r["input_text"] for r in found)
        assert texts == sorted(f"turn {n} in {c}" for n in range(3) for c in chats)
        by_session = {s["id"]: s["turns"] for s in await rows(pg_url, sessions)}
        assert sorted(by_session.values()) == [3, 3]

        async def caught_up() -> Any:
            s = await scrape(base)  # the outbox is read at most once a second
            return s if s.value("xgw_archive_outbox_length", integration="console") == 0 else None

        s = await eventually(caught_up, timeout=5)
        assert s.value("xgw_archive_lag_seconds", integration="console") == 0
        # 6 turns and 2 sessions opened, each written once.
        assert s.value("xgw_archive_written_total") == 8
    finally:
        await proxy.close()


async def test_an_archiver_killed_mid_batch_loses_nothing_and_doubles_nothing(
    pg_url: str,
    prefix: str,
    gateways: Gateways,
    redis_client: aioredis.Redis,
    tmp_path: Path,
) -> None:
    config = archive_config(prefix, pg_url)
    config["logging"] = {"level": "info", "format": "json"}
    first = DaemonProcess(config, tmp_path, name="first")
    await first.start()
    try:
        await eventually(lambda: "archiver lease taken" in first.log_path.read_text(), timeout=20)
        second = await gateways(config)  # stands by: the lease is the daemon's
        blocker = await asyncpg.connect(pg_url)
        await blocker.execute("BEGIN; LOCK TABLE turns IN EXCLUSIVE MODE")
        for n in range(3):
            await second.client.send(f"message {n}", chat=f"dm-u{n}", sender=f"u{n}")
        for n in range(3):
            await second.client.wait_cards(f"dm-u{n}")
        outbox = KeyBuilder(prefix=prefix).audit_outbox("console")
        mine = second.gateway.archive
        assert mine is not None and mine.archiver.role == "standby"

        async def taken_by_the_daemon() -> bool:
            """The daemon read the turns and is blocked writing them."""
            pending = await redis_client.xpending(outbox, "archiver")
            consumers = {c["name"] for c in pending["consumers"]}
            return pending["pending"] >= 3 and mine.archiver.consumer not in consumers

        await eventually(taken_by_the_daemon, timeout=20)
        first.kill(signal.SIGKILL)
        await asyncio.to_thread(first.proc.wait, 10)  # type: ignore[union-attr]
        await blocker.execute("COMMIT")
        await blocker.close()

        async def drained() -> list[dict[str, Any]] | None:
            found = await rows(pg_url, turns)
            pending = await redis_client.xpending(outbox, "archiver")
            done = await redis_client.xlen(outbox) == 0 and pending["pending"] == 0
            return found if done else None

        found = await eventually(drained, timeout=30)
        assert mine.archiver.role == "owner"
        stored = await redis_client.hkeys(KeyBuilder(prefix=prefix).audit_records("console"))
        assert sorted(r["id"] for r in found) == sorted(stored) and len(found) == 3
        assert sorted(s["turns"] for s in await rows(pg_url, sessions)) == [1, 1, 1]
    finally:
        await first.stop()


async def test_a_batch_written_twice_leaves_the_same_rows(archive_url: str) -> None:
    """An archiver that died after its commit and before its acknowledgement: the next writes
    the batch again, to the same rows (the session's count recomputed, not added to)."""
    db = ArchiveDatabase.open(ArchiveSettings(url=archive_url).database_url(Path(".")))
    try:
        await migrate(db)
        entries = [
            outbox_entry("1-0", "session", "s1", _session()),
            outbox_entry("2-0", "turn", "t1-a", turn_record("t1-a", 1_000, "first")),
            outbox_entry("3-0", "turn", "t2-a", turn_record("t2-a", 2_000, "second")),
            outbox_entry("4-0", "memory", "m1", _memory()),
            outbox_entry("5-0", "session_end", "s1", '{"sessionId":"s1","integrationId":"c",'
                   '"endedAt":3000,"by":"user"}'),
        ]  # fmt: skip
        for _ in range(2):
            await write(db, batch_of(entries, now_ms=5_000), now_ms=5_000)
        async with db.engine.connect() as conn:
            counts = [
                len((await conn.execute(select(t))).all())
                for t in (turns, sessions, memory_changes)
            ]
            session = (await conn.execute(select(sessions))).one()._mapping
        assert counts == [2, 1, 1]
        assert session["turns"] == 2 and session["final_text"] == "second"
        assert session["ended_at"] == 3000 and session["ended_by"] == "user"
        assert session["artifacts"] == [{"kind": "link", "url": "https://x.example/r", "name": ""}]
        # An entry that cannot be read is skipped (and said), not retried forever.
        bad = batch_of([outbox_entry("6-0", "turn", "t3", "{not json")], now_ms=1)
        assert [e.stream_id for e in bad.rejected] == ["6-0"]
    finally:
        await db.close()


def _session() -> str:
    return json.dumps(
        {"sessionId": "s1", "integrationId": "c", "chatId": "g1", "chatType": "group",
         "conversation": "c:g1", "xpertId": "echo", "scope": "chat", "snapshot": "abc",
         "senderId": "alice", "openedAt": 500}
    )  # fmt: skip


def _memory() -> str:
    return (
        '{"integrationId":"c","chatId":"g1","action":"remember",'
        '"item":{"text":"rule","by":"alice","at":7},"by":"alice","at":7}'
    )


async def test_rows_past_the_archive_retention_are_purged(
    archive_url: str, prefix: str, gateways: Gateways
) -> None:
    gw = await gateways(archive_config(prefix, archive_url, retentionDays=8 / 86_400))
    await gw.client.send("soon gone")
    await gw.client.wait_cards()
    await gw.client.send("/remember briefly")
    await eventually(lambda: _has(archive_url, memory_changes), timeout=20)
    assert await rows(archive_url, turns)  # archived, then purged 8 s after it ended

    async def purged() -> bool:
        return not any([await rows(archive_url, t) for t in (turns, sessions, memory_changes)])

    await eventually(purged, timeout=30)


async def _has(url: str, table: Any) -> bool:
    return bool(await rows(url, table))


async def test_the_quick_start_archives_in_sqlite_under_data_dir_with_the_embedded_redis(
    tmp_path: Path, gateways: Gateways
) -> None:
    """No archive settings, no redis.url: the embedded Redis (6.2) feeds dataDir's SQLite file."""
    config = quickstart(tmp_path)
    config["integrations"][0] |= {"summaryWindowSeconds": 0, "updateIntervalMs": 100}
    config["experts"][0] |= {"stepDelayMs": 20, "charDelayMs": 2}
    gw = await gateways(config)
    await gw.client.send("kept across restarts")
    await gw.client.wait_cards()
    url = f"sqlite:///{tmp_path / 'archive.sqlite3'}"
    found = await eventually(lambda: rows(url, turns), timeout=20)
    assert [r["input_text"] for r in found] == ["kept across restarts"]
