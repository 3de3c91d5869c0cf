"""Ends of sessions nobody ended: one left idle past its ``sessionTimeoutSeconds`` just lapses
in Redis (its binding expires, the next message opens a new session), so no entry says it
ended. The archiver's owner gives such a session ``ended_at`` = its last activity + the
timeout it opened with (``sessions.timeout_ms``), ``ended_by`` "timeout", once that time passed.

Stored, not computed on read: the rows stay plain for SQL and reporting tools, and filters, the
retention purge and the admin API see one value. It is correct across replicas because only the
lease holder writes it and the value is a function of the row alone (two archivers for a moment
write the same thing). An archive that is behind - a later turn of the session still in the
outbox - can mark a session too early: writing that turn recounts the session
(``gateway.archive.writer.recount``), which clears an end "timeout" so this pass sets it again
from the new last activity.
"""

from __future__ import annotations

from sqlalchemy import literal

from gateway.archive.database import ArchiveDatabase
from gateway.archive.schema import sessions

BY = "timeout"


async def end_idle(db: ArchiveDatabase, now_ms: int) -> int:
    """Give the sessions idle past their timeout at ``now_ms`` their end; returns how many."""
    idle_end = sessions.c.last_active_at + sessions.c.timeout_ms
    stmt = (
        sessions.update()
        .where(
            sessions.c.ended_at.is_(None),
            sessions.c.timeout_ms.is_not(None),
            sessions.c.last_active_at.is_not(None),
            idle_end < literal(now_ms),
        )
        .values(ended_at=idle_end, ended_by=BY)
    )
    async with db.engine.begin() as conn:
        return int((await conn.execute(stmt)).rowcount)
