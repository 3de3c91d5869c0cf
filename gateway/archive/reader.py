"""Reading the archive back for the admin API (``gateway.ops.audit_api`` merges it with what
Redis still holds): turn records and sessions with the audit routes' filters, a text search
over inputs and answers (``q``) and a time range, newest first."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import ColumnElement, and_, func, or_, select

from gateway.archive.database import ArchiveDatabase
from gateway.archive.schema import sessions, turns


@dataclass(frozen=True)
class Filters:
    """What a listing asks for; None: any."""

    integrations: Sequence[str]
    chat: str | None = None
    session: str | None = None
    outcome: str | None = None
    since_ms: int = 0
    until_ms: int | None = None
    text: str | None = None  # q=: a substring of the input or the answer, any case


def _like(text: str) -> str:
    escaped = text.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


def matches(record: dict[str, Any], text: str | None) -> bool:
    """Whether a record (as Redis holds it) has ``text`` in its input or answer, any case: the
    same test as the archive's query."""
    if not text:
        return True
    needle = text.lower()
    said = str((record.get("input") or {}).get("text", "")) + "\n" + str(record.get("answer", ""))
    return needle in said.lower()


class ArchiveReader:
    def __init__(self, db: ArchiveDatabase) -> None:
        self.db = db

    async def turns(
        self, f: Filters, *, limit: int, newest_first: bool = True
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` archived records (as the admin API answers them) of ``f``."""
        where: list[ColumnElement[bool]] = [turns.c.integration_id.in_(list(f.integrations))]
        if f.chat is not None:
            where.append(turns.c.chat_id == f.chat)
        if f.session is not None:
            where.append(turns.c.session_id == f.session)
        if f.outcome is not None:
            where.append(turns.c.outcome == f.outcome)
        where.append(turns.c.finished_at >= f.since_ms)
        if f.until_ms is not None:
            where.append(turns.c.finished_at <= f.until_ms)
        if f.text:
            pattern = _like(f.text)
            where.append(
                or_(
                    func.lower(turns.c.input_text).like(pattern, escape="\\"),
                    func.lower(turns.c.answer).like(pattern, escape="\\"),
                )
            )
        order = turns.c.finished_at.desc() if newest_first else turns.c.finished_at.asc()
        query = select(turns.c.record).where(and_(*where)).order_by(order).limit(limit)
        async with self.db.engine.connect() as conn:
            return [dict(r) for r in (await conn.execute(query)).scalars()]

    async def sessions(self, f: Filters, *, limit: int) -> list[dict[str, Any]]:
        """Up to ``limit`` archived sessions of ``f`` (``text``: one of its turns matches), most
        recently active first, in the Sessions listing's shape."""
        active = func.coalesce(sessions.c.last_active_at, sessions.c.opened_at, 0)
        where: list[ColumnElement[bool]] = [sessions.c.integration_id.in_(list(f.integrations))]
        if f.chat is not None:
            where.append(sessions.c.chat_id == f.chat)
        if f.session is not None:
            where.append(sessions.c.id == f.session)
        where.append(active >= f.since_ms)
        if f.until_ms is not None:
            where.append(active <= f.until_ms)
        if f.outcome is not None or f.text:
            of_turns = [turns.c.session_id == sessions.c.id]
            if f.outcome is not None:
                of_turns.append(turns.c.outcome == f.outcome)
            if f.text:
                pattern = _like(f.text)
                of_turns.append(
                    or_(
                        func.lower(turns.c.input_text).like(pattern, escape="\\"),
                        func.lower(turns.c.answer).like(pattern, escape="\\"),
                    )
                )
            where.append(select(turns.c.id).where(*of_turns).exists())
        query = select(sessions).where(and_(*where)).order_by(active.desc()).limit(limit)
        async with self.db.engine.connect() as conn:
            rows = [dict(r._mapping) for r in await conn.execute(query)]
            ids = [r["id"] for r in rows]
            outcomes: dict[str, dict[str, int]] = {}
            if ids:
                counted = await conn.execute(
                    select(turns.c.session_id, turns.c.outcome, func.count())
                    .where(turns.c.session_id.in_(ids))
                    .group_by(turns.c.session_id, turns.c.outcome)
                )
                for session_id, outcome, count in counted:
                    outcomes.setdefault(session_id, {})[outcome] = int(count)
        return [_entry(r, outcomes.get(r["id"], {})) for r in rows]


def _entry(row: dict[str, Any], outcomes: dict[str, int]) -> dict[str, Any]:
    return {
        "sessionId": row["id"],
        "integrationId": row["integration_id"],
        "chatId": row["chat_id"],
        "chatType": row["chat_type"],
        "xpertId": row["xpert_id"],
        "scope": row["scope"],
        "snapshot": row["snapshot_hash"],
        "senderId": row["sender_id"],
        "createdAt": int(row["opened_at"] or 0),
        "status": "ended",
        "live": False,
        "turns": int(row["turns"]),
        "outcomes": outcomes,
        "lastOutcome": row["last_outcome"],
        "lastActiveAt": int(row["last_active_at"] or row["opened_at"] or 0),
        "endedAt": row["ended_at"],
        "endedBy": row["ended_by"],
        "finalText": row["final_text"],
        "artifacts": row["artifacts"] or [],
        "archived": True,
    }
