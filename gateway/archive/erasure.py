"""Erasure in the archive: a chat's rows (its turns, sessions and memory changes) or a sender's
(the turns that ran as them, the memory changes they made, the sessions they opened that have no
turn left, the others' counts and final answer recounted from what is left, and their words in
other senders' turns redacted), in one
transaction that also leaves a tombstone (``gateway.archive.tombstones``: a batch being written
at that moment cannot add them back). Redis' side is ``sessions.erasure``; the admin route does
both."""

from __future__ import annotations

from sqlalchemy import delete, func, select
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.archive import tombstones
from gateway.archive.database import ArchiveDatabase
from gateway.archive.schema import memory_changes, sessions, turns
from gateway.archive.writer import recount
from gateway.clock import now_ms
from sessions.erasure import redact

PAGE = 1000


async def archived(db: ArchiveDatabase, integration_id: str) -> bool:
    """Whether the archive holds a turn or a session of the integration."""
    async with db.engine.connect() as conn:
        for table in (turns, sessions):
            found = select(table.c.id).where(table.c.integration_id == integration_id).limit(1)
            if (await conn.execute(found)).first() is not None:
                return True
    return False


async def erase_chat(db: ArchiveDatabase, integration_id: str, chat_id: str) -> dict[str, int]:
    async with db.engine.begin() as conn:
        await tombstones.lock(conn)
        await tombstones.record(db, conn, integration_id, "chat", chat_id, now_ms())
        counts = {}
        for name, table in (("turns", turns), ("sessions", sessions)):
            where = (table.c.integration_id == integration_id) & (table.c.chat_id == chat_id)
            counts[name] = (await conn.execute(delete(table).where(where))).rowcount
        where = (memory_changes.c.integration_id == integration_id) & (
            memory_changes.c.chat_id == chat_id
        )
        counts["memoryChanges"] = (await conn.execute(delete(memory_changes).where(where))).rowcount
    return counts


async def erase_sender(db: ArchiveDatabase, integration_id: str, sender_id: str) -> dict[str, int]:
    async with db.engine.begin() as conn:
        await tombstones.lock(conn)
        await tombstones.record(db, conn, integration_id, "sender", sender_id, now_ms())
        of_turns = (turns.c.integration_id == integration_id) & (turns.c.sender_id == sender_id)
        touched = set((await conn.execute(select(turns.c.session_id).where(of_turns))).scalars())
        removed = (await conn.execute(delete(turns).where(of_turns))).rowcount
        of_memory = (memory_changes.c.integration_id == integration_id) & (
            memory_changes.c.by == sender_id
        )
        memory = (await conn.execute(delete(memory_changes).where(of_memory))).rowcount
        opened = (sessions.c.integration_id == integration_id) & (sessions.c.sender_id == sender_id)
        touched |= set((await conn.execute(select(sessions.c.id).where(opened))).scalars())
        gone, kept = 0, set[str]()
        for session_id in sorted(s for s in touched if s):
            left = (
                await conn.execute(select(func.count()).where(turns.c.session_id == session_id))
            ).scalar_one()
            if left:
                kept.add(session_id)
                mine = (sessions.c.id == session_id) & (sessions.c.sender_id == sender_id)
                await conn.execute(sessions.update().where(mine).values(sender_id=None))
                continue
            gone += (
                await conn.execute(delete(sessions).where(sessions.c.id == session_id))
            ).rowcount
        await recount(conn, kept, {}, now_ms())
        redacted = await _redact_others(conn, integration_id, sender_id)
    return {"turns": removed, "redactedTurns": redacted, "sessions": gone, "memoryChanges": memory}


async def _redact_others(conn: AsyncConnection, integration_id: str, sender_id: str) -> int:
    """Other senders' archived turns with the sender's words in them (a merged or steered turn:
    ``input.senders``): their input redacted, as in Redis (``sessions.erasure.redact``). Read a
    page at a time, by id: erasure is rare, and the archive's JSON is not queried alike on
    PostgreSQL and SQLite."""
    found, after = 0, ""
    theirs = (turns.c.integration_id == integration_id) & (turns.c.sender_id != sender_id)
    while True:
        page = (
            await conn.execute(
                select(turns.c.id, turns.c.record)
                .where(theirs & (turns.c.id > after))
                .order_by(turns.c.id)
                .limit(PAGE)
            )
        ).all()
        for row_id, record in page:
            senders = (record or {}).get("input", {}).get("senders", [])
            if isinstance(senders, list) and sender_id in senders:
                new = redact(record, sender_id)
                values = {"record": new, "input_text": new["input"]["text"]}
                await conn.execute(turns.update().where(turns.c.id == row_id).values(**values))
                found += 1
        if len(page) < PAGE:
            return found
        after = page[-1][0]


async def purge_before(db: ArchiveDatabase, cutoff_ms: int) -> dict[str, int]:
    """``archive.retentionDays``: turns that ended, memory changes made and sessions last active
    before ``cutoff_ms`` (a session only once none of its turns is left)."""
    async with db.engine.begin() as conn:
        old_turns = delete(turns).where(turns.c.finished_at < cutoff_ms)
        counts = {"turns": (await conn.execute(old_turns)).rowcount}
        old_memory = delete(memory_changes).where(memory_changes.c.at < cutoff_ms)
        counts["memoryChanges"] = (await conn.execute(old_memory)).rowcount
        active = func.coalesce(sessions.c.last_active_at, sessions.c.opened_at, 0)
        has_turns = select(turns.c.id).where(turns.c.session_id == sessions.c.id).exists()
        old_sessions = delete(sessions).where(active < cutoff_ms, ~has_turns)
        counts["sessions"] = (await conn.execute(old_sessions)).rowcount
    return counts
