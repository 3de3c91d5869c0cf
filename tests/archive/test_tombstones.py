"""An erasure's race with a batch being written (PostgreSQL and SQLite): the archiver read an
erased sender's and chat's entries out of the outbox before the erasure and commits them after
it; the erasure's tombstones keep those rows out, while what others did, and what the sender
does after the erasure, is archived. Tombstones go after a day. On PostgreSQL an erasure waits
for a batch's transaction (one advisory lock)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import asyncpg
from sqlalchemy import select

from gateway.archive.database import ArchiveDatabase
from gateway.archive.erasure import erase_chat, erase_sender
from gateway.archive.migrations import migrate
from gateway.archive.schema import erasures, memory_changes, sessions, turns
from gateway.archive.tombstones import LOCK_KEY, TOMBSTONE_KEEP_MS, expire
from gateway.archive.writer import batch_of, write
from gateway.clock import now_ms
from gateway.config.archive import ArchiveSettings
from tests.support.archive import outbox_entry
from tests.support.waits import eventually


def turn(record_id: str, *, chat: str, sender: str, session: str, end: int) -> str:
    return json.dumps(
        {"id": record_id, "turnId": record_id, "integrationId": "c", "platform": "console",
         "chatId": chat, "chatType": "group", "conversation": f"c:{chat}", "sessionId": session,
         "senderId": sender, "input": {"text": f"{sender} in {chat}"}, "outcome": "done",
         "answer": "ok", "timings": {"receivedAt": end - 10, "finishedAt": end}}
    )  # fmt: skip


def memory(chat: str, by: str, at: int) -> str:
    return json.dumps(
        {"integrationId": "c", "chatId": chat, "action": "remember", "item": {"text": by},
         "by": by, "at": at}
    )  # fmt: skip


def opened(session: str, chat: str, sender: str, at: int) -> str:
    return json.dumps(
        {"sessionId": session, "integrationId": "c", "chatId": chat, "senderId": sender,
         "openedAt": at, "timeoutMs": 60_000}
    )  # fmt: skip


async def test_a_batch_read_before_an_erasure_cannot_add_the_erased_records_back(
    archive_url: str,
) -> None:
    db = ArchiveDatabase.open(ArchiveSettings(url=archive_url).database_url(Path(".")))

    async def table(which: Any) -> list[dict[str, Any]]:
        async with db.engine.connect() as conn:
            return [dict(r._mapping) for r in await conn.execute(select(which))]

    try:
        await migrate(db)
        t = now_ms() - 5_000
        # What the archiver had taken from the outbox when the erasures came.
        in_flight = [
            outbox_entry("1-0", "session", "s-alice", opened("s-alice", "dm-alice", "alice", t)),
            outbox_entry("2-0", "turn", "ta", turn("ta", chat="dm-alice", sender="alice",
                                            session="s-alice", end=t + 1)),
            outbox_entry("3-0", "memory", "ma", memory("team", "alice", t + 2)),
            outbox_entry("4-0", "session", "s-team", opened("s-team", "team", "bob", t)),
            outbox_entry("5-0", "turn", "tb", turn("tb", chat="team", sender="bob",
                                            session="s-team", end=t + 3)),
            outbox_entry("6-0", "turn", "tc", turn("tc", chat="secret", sender="carol",
                                            session="s-secret", end=t + 4)),
            outbox_entry("7-0", "memory", "mb", memory("team", "bob", t + 5)),
        ]  # fmt: skip
        batch = batch_of(in_flight, now_ms=t)
        assert await erase_sender(db, "c", "alice") == {
            "turns": 0,
            "redactedTurns": 0,
            "sessions": 0,
            "memoryChanges": 0,
        }
        assert await erase_chat(db, "c", "secret") == {
            "turns": 0,
            "sessions": 0,
            "memoryChanges": 0,
        }
        await write(db, batch, now_ms=now_ms())
        assert batch.erased == 4  # alice's session, turn and memory change; the secret chat's turn
        assert [r["id"] for r in await table(turns)] == ["tb"]
        assert sorted(r["id"] for r in await table(sessions)) == ["s-team"]
        assert [r["by"] for r in await table(memory_changes)] == ["bob"]

        # Alice again, after the erasure: archived as usual.
        later = now_ms() + 1_000
        after = [
            outbox_entry("8-0", "turn", "ta2", turn("ta2", chat="team", sender="alice",
                                             session="s-team", end=later)),
        ]  # fmt: skip
        await write(db, batch_of(after, now_ms=later), now_ms=later)
        assert sorted(r["id"] for r in await table(turns)) == ["ta2", "tb"]
        [team] = await table(sessions)
        assert team["turns"] == 2

        # The tombstones (which hold the erased ids) go after a day.
        assert {(r["kind"], r["subject"]) for r in await table(erasures)} == {
            ("sender", "alice"),
            ("chat", "secret"),
        }
        assert await expire(db, now_ms()) == 0
        assert await expire(db, now_ms() + TOMBSTONE_KEEP_MS + 1_000) == 2
        assert await table(erasures) == []
    finally:
        await db.close()


async def test_on_postgresql_an_erasure_waits_for_a_batch_being_written(pg_url: str) -> None:
    """The batch's transaction holds the lock (as ``write`` takes it first); the erasure waits
    for its commit, then deletes what it wrote."""
    db = ArchiveDatabase.open(ArchiveSettings(url=pg_url).database_url(Path(".")))
    blocker = await asyncpg.connect(pg_url)
    try:
        await migrate(db)
        t = now_ms() - 1_000
        await blocker.execute("BEGIN")
        await blocker.execute("SELECT pg_advisory_xact_lock($1)", LOCK_KEY)
        row = turn("tx", chat="team", sender="dave", session="s-x", end=t)
        await blocker.execute(
            "INSERT INTO turns (id, turn_id, integration_id, platform, chat_id, chat_type,"
            " conversation, session_id, sender_id, trigger_kind, input_text, outcome, error,"
            " answer, received_at, finished_at, replica, record, archived_at) VALUES ($1, $1,"
            " 'c', 'console', 'team', 'group', 'c:team', '', 'dave', 'message', '', 'done', '',"
            " '', $2, $2, '', $3, $2)",
            "tx", t, row,
        )  # fmt: skip
        erasing = asyncio.ensure_future(erase_sender(db, "c", "dave"))

        async def waiting() -> bool:
            """The erasure's connection waits for the advisory lock."""
            found = await blocker.fetchval(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            return bool(found)

        await eventually(waiting, timeout=10)
        assert not erasing.done()
        await blocker.execute("COMMIT")
        assert (await asyncio.wait_for(erasing, 10))["turns"] == 1
        assert await blocker.fetchval("SELECT count(*) FROM turns") == 0
    finally:
        await blocker.close()
        await db.close()
