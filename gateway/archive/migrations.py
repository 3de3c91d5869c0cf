"""Versioned migrations of the archive, applied at start (``gateway.archive.service``) and by
``xpert-gateway migrate``.

Our own table, not Alembic: the schema has a handful of tables and a linear history, and one
integer is the simplest thing to keep correct on both backends. ``xgw_schema`` holds one row
per applied version; a migration and its row are written in one transaction, under a lock that
serialises replicas starting together (``pg_advisory_xact_lock`` on PostgreSQL; on SQLite every
transaction is ``BEGIN IMMEDIATE``, ``gateway.archive.database``), so a version is applied once
and never half. A database whose version is newer than the newest here was migrated by a newer
release: :class:`SchemaTooNew`, and the gateway refuses to start rather than write rows that
release does not expect.

A migration is a function of a synchronous connection (run through ``run_sync``) using
SQLAlchemy's DDL (or SQL both dialects share), so it is written once for both. Version 1
creates the tables as they were then (``gateway.archive.schema_v1``, a frozen copy); each later
version alters them, and ``gateway.archive.schema`` is what the newest leaves (``tests/archive``
checks that the migrated database has exactly its tables and columns).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Integer,
    MetaData,
    Table,
    func,
    inspect,
    select,
    text,
)

from gateway.archive import schema, schema_v1
from gateway.archive.database import ArchiveDatabase
from gateway.clock import now_ms
from gateway.errors import GatewayError

LOCK_KEY = 0x78677761  # "xgwa": the advisory lock of the archive's migrations

_meta = MetaData()
versions = Table(
    "xgw_schema",
    _meta,
    Column("version", Integer, primary_key=True),
    Column("applied_at", BigInteger, nullable=False),
)


class SchemaTooNew(GatewayError):
    """The archive was migrated by a newer release than this one."""


def _v1(conn: Connection) -> None:
    schema_v1.metadata.create_all(conn)


def _v2(conn: Connection) -> None:
    """A session's idle timeout, an index to find the sessions not ended yet, and the erasures'
    tombstones (as ``schema.erasures`` is now: a later change of it alters it in a new version
    and freezes this one)."""
    conn.execute(text("ALTER TABLE sessions ADD COLUMN timeout_ms BIGINT"))
    conn.execute(text("CREATE INDEX sessions_ended ON sessions (ended_at)"))
    schema.erasures.create(conn)


MIGRATIONS: list[tuple[int, str, Callable[[Connection], None]]] = [
    (1, "turns, sessions, memory_changes", _v1),
    (2, "sessions.timeout_ms: idle sessions get an end; erasures' tombstones", _v2),
]
LATEST = MIGRATIONS[-1][0]


@dataclass(frozen=True)
class Migrated:
    before: int  # the version found (0: an empty database)
    after: int
    applied: list[int]


def _migrate(conn: Connection, *, apply: bool) -> Migrated:
    if not apply:  # only look: no lock taken, no table created
        if not inspect(conn).has_table(versions.name):
            return Migrated(before=0, after=0, applied=[])
    else:
        if conn.dialect.name == "postgresql":
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": LOCK_KEY})
        _meta.create_all(conn)
    current = int(conn.execute(select(func.coalesce(func.max(versions.c.version), 0))).scalar_one())
    if current > LATEST:
        raise SchemaTooNew(
            f"the archive's schema is version {current}, and this release knows versions up "
            f"to {LATEST}: it was migrated by a newer xpert-gateway. Run that release (or "
            f"point archive.url at another database)"
        )
    applied: list[int] = []
    if apply:
        for version, _what, step in MIGRATIONS:
            if version > current:
                step(conn)
                conn.execute(versions.insert().values(version=version, applied_at=now_ms()))
                applied.append(version)
    return Migrated(before=current, after=applied[-1] if applied else current, applied=applied)


async def migrate(db: ArchiveDatabase, *, apply: bool = True) -> Migrated:
    """Bring the schema to :data:`LATEST` (``apply`` False: only read the version, writing
    nothing, and check it is not newer).
    Raises :class:`SchemaTooNew`; the driver's errors when the database cannot be reached."""
    async with db.engine.begin() as conn:
        return await conn.run_sync(lambda sync: _migrate(sync, apply=apply))
