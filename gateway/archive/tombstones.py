"""Tombstones of erasures: an erasure (``gateway.archive.erasure``) records, in the transaction
that deletes the rows, which chat or sender of which integration it erased and when; the
archiver's write (``gateway.archive.writer``) drops from its batch every row of an erased chat
or sender from before that time. So a batch the archiver had read before the erasure and
commits after it - its entries already taken out of the outbox, beyond the erasure's reach -
cannot add the erased records back; what that chat or sender does after the erasure is archived
as usual.

Both transactions take one lock first (``pg_advisory_xact_lock`` on PostgreSQL; on SQLite every
write transaction is ``BEGIN IMMEDIATE``, one writer at a time): an erasure waits for a batch
being written and then deletes its rows, or the batch waits and then sees the tombstone.
Tombstones are kept a day (``TOMBSTONE_KEEP_MS``: a batch in flight lives seconds, and the
outbox's own entries were removed by the erasure), then deleted, so the archive keeps no list
of erased people's ids.
"""

from __future__ import annotations

from typing import Any, Literal

from sqlalchemy import delete, select, text
from sqlalchemy.ext.asyncio import AsyncConnection

from gateway.archive.database import ArchiveDatabase
from gateway.archive.schema import erasures

LOCK_KEY = 0x78677765  # "xgwe": erasures against the archiver's writes
TOMBSTONE_KEEP_MS = 86_400_000

Kind = Literal["chat", "sender"]


async def lock(conn: AsyncConnection) -> None:
    """Serialise this transaction with erasures (a no-op on SQLite: it already is)."""
    if conn.dialect.name == "postgresql":
        await conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})


async def record(
    db: ArchiveDatabase,
    conn: AsyncConnection,
    integration_id: str,
    kind: Kind,
    subject: str,
    at: int,
) -> None:
    stmt = db.insert(erasures).values(
        integration_id=integration_id, kind=kind, subject=subject, erased_at=at
    )
    await conn.execute(
        stmt.on_conflict_do_update(
            index_elements=[erasures.c.integration_id, erasures.c.kind, erasures.c.subject],
            set_={"erased_at": stmt.excluded.erased_at},
        )
    )


async def of(conn: AsyncConnection, integration_ids: set[str]) -> dict[tuple[str, str, str], int]:
    """The tombstones of ``integration_ids``: (integration, kind, subject) -> erased at."""
    if not integration_ids:
        return {}
    found = await conn.execute(
        select(erasures).where(erasures.c.integration_id.in_(sorted(integration_ids)))
    )
    return {(r.integration_id, r.kind, r.subject): int(r.erased_at) for r in found}


def erased(
    stones: dict[tuple[str, str, str], int],
    row: dict[str, Any],
    *,
    chat: str | None,
    sender: str | None,
    at: int,
) -> bool:
    """Whether a row (of integration ``row["integration_id"]``, in ``chat``, by ``sender``,
    made ``at``) is of a chat or sender erased after it was made."""
    integration_id = str(row["integration_id"])
    for kind, subject in (("chat", chat), ("sender", sender)):
        if subject is not None and at <= stones.get((integration_id, kind, subject), -1):
            return True
    return False


async def expire(db: ArchiveDatabase, now_ms: int) -> int:
    async with db.engine.begin() as conn:
        old = delete(erasures).where(erasures.c.erased_at < now_ms - TOMBSTONE_KEEP_MS)
        return int((await conn.execute(old)).rowcount)
