"""Writing a batch of outbox entries into the archive: one transaction, every row an upsert
keyed by its id (a turn's record id, a session id, a memory change's id), so a batch written
twice - an archiver that died after the commit and before its acknowledgement, two archivers
for a moment - leaves the same rows as once. A session's counts are recomputed from its turns
in the same transaction rather than incremented, for the same reason.
"""

from __future__ import annotations

import functools
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import structlog
from sqlalchemy import Table, bindparam, case, func, null, select
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.archive import tombstones
from gateway.archive.database import ArchiveDatabase, insert_of
from gateway.archive.schema import memory_changes, sessions, turns
from gateway.archive.tombstones import erased
from sessions import OutboxEntry

log = structlog.get_logger("gateway.archive")
MAX_ARTIFACTS = 200  # kept per session


@dataclass
class Batch:
    """A batch's rows by table, and the entries that could not be read (skipped, logged)."""

    turns: dict[str, dict[str, Any]] = field(default_factory=dict)
    opened: dict[str, dict[str, Any]] = field(default_factory=dict)
    ended: dict[str, dict[str, Any]] = field(default_factory=dict)
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)
    artifacts: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # by turn row id
    rejected: list[OutboxEntry] = field(default_factory=list)
    erased: int = 0  # rows dropped: their chat or sender was erased after (tombstones)

    def drop_erased(self, stones: dict[tuple[str, str, str], int]) -> None:
        """Leave out the rows of chats and senders erased after they were made."""
        if not stones:
            return
        before = len(self.turns) + len(self.opened) + len(self.memory)
        self.turns = {
            k: r
            for k, r in self.turns.items()
            if not erased(stones, r, chat=r["chat_id"], sender=r["sender_id"], at=r["finished_at"])
        }
        self.opened = {
            k: r
            for k, r in self.opened.items()
            if not erased(stones, r, chat=r["chat_id"], sender=r["sender_id"], at=r["opened_at"])
        }
        self.memory = {
            k: r
            for k, r in self.memory.items()
            if not erased(stones, r, chat=r["chat_id"], sender=r["by"], at=r["at"])
        }
        self.erased += before - len(self.turns) - len(self.opened) - len(self.memory)


def batch_of(entries: Sequence[OutboxEntry], *, now_ms: int) -> Batch:
    batch = Batch()
    for entry in entries:
        try:
            body = orjson.loads(entry.body)
            _add(batch, entry, body, now_ms)
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
            log.error(
                "archive entry unreadable, skipped",
                integration_id=entry.integration_id,
                kind=entry.kind,
                entry=entry.stream_id,
                error=type(exc).__name__,
            )
            batch.rejected.append(entry)
    return batch


def _add(batch: Batch, entry: OutboxEntry, body: dict[str, Any], now_ms: int) -> None:
    if entry.kind == "turn":
        row = turn_row(body, now_ms)
        batch.turns[row["id"]] = row
        found = [a for a in body.get("artifacts") or [] if isinstance(a, dict)]
        batch.artifacts[row["id"]] = found
    elif entry.kind == "session":
        row = session_row(body, now_ms)
        batch.opened[row["id"]] = row
    elif entry.kind == "session_end":
        batch.ended[str(body["sessionId"])] = body
    elif entry.kind == "memory":
        batch.memory[entry.id] = memory_row(entry.id, body, now_ms)
    else:
        raise ValueError(f"unknown kind {entry.kind!r}")


def turn_row(record: dict[str, Any], now_ms: int) -> dict[str, Any]:
    """An audit record as the row of ``turns`` (the record itself kept whole)."""
    expert = record.get("expert") or {}
    usage = record.get("usage") or {}
    timings = record["timings"]
    return {
        "id": str(record["id"]),
        "turn_id": str(record["turnId"]),
        "integration_id": str(record["integrationId"]),
        "platform": str(record["platform"]),
        "chat_id": str(record["chatId"]),
        "chat_type": str(record["chatType"]),
        "conversation": str(record["conversation"]),
        "session_id": str(record.get("sessionId") or ""),
        "sender_id": str(record["senderId"]),
        "trigger_kind": str((record.get("trigger") or {}).get("kind", "message")),
        "input_text": str((record.get("input") or {}).get("text", "")),
        "expert_id": expert.get("id"),
        "model": expert.get("model"),
        "input_tokens": usage.get("inputTokens"),
        "output_tokens": usage.get("outputTokens"),
        "cost": usage.get("cost"),
        "outcome": str(record["outcome"]),
        "error": str(record.get("error") or ""),
        "answer": str(record.get("answer") or ""),
        "received_at": int(timings["receivedAt"]),
        "finished_at": int(timings["finishedAt"]),
        "replica": str(record.get("replica") or ""),
        "record": record,
        "archived_at": now_ms,
    }


def session_row(body: dict[str, Any], now_ms: int) -> dict[str, Any]:
    return {
        "id": str(body["sessionId"]),
        "integration_id": str(body["integrationId"]),
        "chat_id": str(body["chatId"]),
        "chat_type": body.get("chatType"),
        "conversation": body.get("conversation"),
        "scope": body.get("scope"),
        "xpert_id": body.get("xpertId"),
        "snapshot_hash": body.get("snapshot"),
        "sender_id": body.get("senderId"),
        "opened_at": int(body["openedAt"]),
        "timeout_ms": int(body["timeoutMs"]) if body.get("timeoutMs") else None,
        "archived_at": now_ms,
    }


def memory_row(change_id: str, body: dict[str, Any], now_ms: int) -> dict[str, Any]:
    item = body.get("item") or {}
    return {
        "id": change_id,
        "integration_id": str(body["integrationId"]),
        "chat_id": str(body["chatId"]),
        "action": str(body["action"]),
        "by": body.get("by") or None,
        "text": str(item.get("text", "")),
        "item": item,
        "at": int(body.get("at") or now_ms),
        "archived_at": now_ms,
    }


async def write(db: ArchiveDatabase, batch: Batch, *, now_ms: int) -> None:
    """The batch's rows, in one transaction."""
    async with db.engine.begin() as conn:
        await _write(db, conn, batch, now_ms)


async def _write(db: ArchiveDatabase, conn: AsyncConnection, batch: Batch, now_ms: int) -> None:
    await tombstones.lock(conn)
    integrations = {str(r["integration_id"]) for r in batch.turns.values()}
    integrations |= {str(r["integration_id"]) for r in batch.opened.values()}
    integrations |= {str(r["integration_id"]) for r in batch.memory.values()}
    batch.drop_erased(await tombstones.of(conn, integrations))
    if batch.opened:
        opened = [{**row, "turns": 0, "artifacts": []} for row in batch.opened.values()]
        keys = tuple(k for k in next(iter(batch.opened.values())) if k != "id")
        await conn.execute(_upsert(db.dialect, sessions, keys), opened)
    if batch.turns:
        rows = list(batch.turns.values())
        keys = tuple(k for k in rows[0] if k != "id")
        await conn.execute(_upsert(db.dialect, turns, keys), rows)
        # A session the archive has no row of yet (opened before the archive was on, or its
        # opening entry was refused by a full outbox): made from its turn.
        stubs = {
            r["session_id"]: {
                "id": r["session_id"],
                "integration_id": r["integration_id"],
                "chat_id": r["chat_id"],
                "chat_type": r["chat_type"],
                "conversation": r["conversation"],
                "xpert_id": r["expert_id"],
                "turns": 0,
                "artifacts": [],
                "archived_at": now_ms,
            }
            for r in rows
            if r["session_id"]
        }
        if stubs:
            await conn.execute(_upsert(db.dialect, sessions, ()), list(stubs.values()))
        produced: dict[str, list[dict[str, Any]]] = {}
        for r in rows:
            produced.setdefault(r["session_id"], []).extend(batch.artifacts.get(r["id"], []))
        await recount(conn, stubs.keys(), produced, now_ms)
    if batch.ended:
        ends: list[dict[str, Any]] = [
            {
                "id": session_id,
                "integration_id": str(end["integrationId"]),
                "chat_id": "",
                "turns": 0,
                "artifacts": [],
                "ended_at": int(end["endedAt"]),
                "ended_by": end.get("by"),
                "archived_at": now_ms,
            }
            for session_id, end in batch.ended.items()
        ]
        await conn.execute(_upsert(db.dialect, sessions, ("ended_at", "ended_by")), ends)
    if batch.memory:
        await conn.execute(_upsert(db.dialect, memory_changes, ()), list(batch.memory.values()))


@functools.cache
def _upsert(dialect: str, table: Table, update: tuple[str, ...]) -> Any:
    """``INSERT`` of rows keyed by ``id`` that sets ``update`` from the new row on a conflict
    (none: the row kept as it is). Built once per shape: a statement made per batch cost its
    construction and cache key on the event loop each time."""
    stmt = insert_of(dialect, table)
    if not update:
        return stmt.on_conflict_do_nothing(index_elements=[table.c.id])
    return stmt.on_conflict_do_update(
        index_elements=[table.c.id], set_={k: stmt.excluded[k] for k in update}
    )


def _recount() -> Any:
    of = turns.c.session_id == sessions.c.id  # correlated to the row being updated
    newest = select(turns.c.outcome, turns.c.answer).where(of)
    newest = newest.order_by(turns.c.finished_at.desc(), turns.c.id.desc()).limit(1)
    # An end the idle pass gave it (gateway.archive.ends) no longer holds once a later turn is
    # in: cleared, and set again from the new last activity when that is idle long enough.
    by_timeout = sessions.c.ended_by == "timeout"
    return (
        sessions.update()
        .where(sessions.c.id.in_(bindparam("ids", expanding=True)))
        .values(
            turns=select(func.count()).where(of).scalar_subquery(),
            last_active_at=select(func.max(turns.c.finished_at)).where(of).scalar_subquery(),
            last_outcome=newest.with_only_columns(turns.c.outcome).scalar_subquery(),
            final_text=newest.with_only_columns(turns.c.answer).scalar_subquery(),
            archived_at=bindparam("now"),
            ended_at=case((by_timeout, null()), else_=sessions.c.ended_at),
            ended_by=case((by_timeout, null()), else_=sessions.c.ended_by),
        )
    )


_RECOUNT = _recount()  # one statement for every batch (SQLAlchemy caches its compiled form)


async def recount(
    conn: AsyncConnection,
    session_ids: Collection[str],
    artifacts: Mapping[str, list[dict[str, Any]]],
    now_ms: int,
) -> None:
    """Sessions' turns, last activity, last outcome and final answer from their archived turns
    (an idle end cleared), in one statement for all of them; each one's artifacts with the
    batch's added (each once)."""
    if not session_ids:
        return
    await conn.execute(_RECOUNT, {"ids": sorted(session_ids), "now": now_ms})
    for session_id, produced in artifacts.items():
        if produced and session_id in session_ids:
            await _add_artifacts(conn, session_id, produced)


async def _add_artifacts(
    conn: AsyncConnection, session_id: str, artifacts: list[dict[str, Any]]
) -> None:
    held = (
        await conn.execute(select(sessions.c.artifacts).where(sessions.c.id == session_id))
    ).scalar_one()
    merged = list(held or [])
    seen = {(a.get("kind"), a.get("url")) for a in merged}
    for a in artifacts:
        if (a.get("kind"), a.get("url")) not in seen and len(merged) < MAX_ARTIFACTS:
            seen.add((a.get("kind"), a.get("url")))
            merged.append({k: a.get(k) for k in ("kind", "url", "name")})
    if len(merged) != len(held or []):
        await conn.execute(
            sessions.update().where(sessions.c.id == session_id).values(artifacts=merged)
        )
