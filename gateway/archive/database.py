"""The archive's database: one SQLAlchemy async engine for PostgreSQL (asyncpg) or SQLite
(aiosqlite), and the one difference the code sees between them, the dialect's ``INSERT … ON
CONFLICT`` (both have it, with the same SQLAlchemy API).

SQLite is opened in WAL mode with a busy timeout, and every transaction begins with ``BEGIN
IMMEDIATE`` (pysqlite's own transaction handling is turned off, SQLAlchemy's recipe for
aiosqlite): the file's writers - the archiver, a migration of another process - queue for the
lock instead of failing mid-transaction, and DDL runs inside the transaction that records it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from sqlalchemy import Table, event
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from gateway.errors import GatewayError

SQLITE_BUSY_MS = 10_000


class ArchiveUnavailable(GatewayError):
    """The archive's database cannot be reached or refused the work (the message says why)."""


class ArchiveDatabase:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.dialect = engine.dialect.name  # "postgresql" | "sqlite"

    @classmethod
    def open(cls, url: str, *, connect_timeout_s: float = 10.0) -> ArchiveDatabase:
        """An engine for ``url`` (``postgresql+asyncpg://`` or ``sqlite+aiosqlite://``); it
        connects on first use. A SQLite file's folder is made when missing."""
        parsed = make_url(url)
        args: dict[str, Any] = {}
        if parsed.get_backend_name() == "sqlite":
            if parsed.database and parsed.database != ":memory:":
                Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
            args["connect_args"] = {"timeout": SQLITE_BUSY_MS / 1000}
        else:
            args["connect_args"] = {"timeout": connect_timeout_s}
            args["pool_pre_ping"] = True
        # Errors never carry the rows' values (message bodies) into a log line. JSON columns
        # through orjson: a batch's records are encoded on the event loop (json.dumps took
        # about a third of a batch's time there).
        engine = create_async_engine(
            parsed,
            hide_parameters=True,
            json_serializer=_dumps,
            json_deserializer=orjson.loads,
            **args,
        )
        if engine.dialect.name == "sqlite":
            _sqlite_transactions(engine)
        return cls(engine)

    def insert(self, table: Table) -> Any:
        """``INSERT`` of the dialect, with ``on_conflict_do_update`` / ``_do_nothing``."""
        return insert_of(self.dialect, table)

    def where(self) -> str:
        """Where it is, for logs: the URL without its password."""
        return self.engine.url.render_as_string(hide_password=True)

    async def close(self) -> None:
        await self.engine.dispose()


def insert_of(dialect: str, table: Table) -> Any:
    """``INSERT`` of ``dialect`` ("postgresql" | "sqlite") with its ``ON CONFLICT`` clauses."""
    return (pg_insert if dialect == "postgresql" else sqlite_insert)(table)


def _dumps(value: Any) -> str:
    return orjson.dumps(value).decode()


def _sqlite_transactions(engine: AsyncEngine) -> None:
    @event.listens_for(engine.sync_engine, "connect")
    def _connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # no implicit BEGIN: ours below
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_MS}")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(conn: Any) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE")
