"""The archiver's PostgreSQL writes on an event loop of their own, in a thread, with their own
engine (``ArchiveService``; SQLite's statements already run in aiosqlite's thread, and a second
thread there only added GIL hand-offs).

A batch's statements cost the event loop they run on a few milliseconds of CPU at a time: with
asyncpg its protocol and SQLAlchemy's parameter handling run there (aiosqlite runs the SQLite
statement itself in its thread, but not the rest). On the replica's loop that held live cards
back: an event-loop lag probe found 7-15 stalls of 4-5 ms per benchmark run, nearly all during
the archiver's PostgreSQL statements; with the writes here, 2-5 per run, and the first card's
p99 went from 7.5-13 ms to 4.7-5.9 ms (docs/performance.md). The replica's loop only waits for
the result; a timeout or a cancellation there cancels the write here (its transaction rolls
back).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

import structlog
from sqlalchemy import text

from gateway.archive.database import ArchiveDatabase
from gateway.archive.writer import Batch, write

log = structlog.get_logger("gateway.archive")
JOIN_TIMEOUT_S = 5.0


class WriterThread:
    """``write`` a batch on the thread's loop; started by ``warm`` (the archiver took its lease)
    or else the first write, ended by ``close``."""

    def __init__(self, url: str, *, connect_timeout_s: float) -> None:
        self.url = url
        self.connect_timeout_s = connect_timeout_s
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._db: ArchiveDatabase | None = None

    @property
    def thread(self) -> threading.Thread | None:
        """The thread the writes run on (None before it started and after ``close``)."""
        return self._thread

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def _started(self) -> tuple[asyncio.AbstractEventLoop, ArchiveDatabase]:
        if self._loop is None or self._db is None:
            loop = asyncio.new_event_loop()
            thread = threading.Thread(target=loop.run_forever, name="archive-writer", daemon=True)
            thread.start()
            self._loop, self._thread = loop, thread
            self._db = ArchiveDatabase.open(self.url, connect_timeout_s=self.connect_timeout_s)
        return self._loop, self._db

    def warm(self) -> None:
        """Start the thread and open its connection now, not in the first batch (connecting
        costs the process tens of milliseconds of CPU); not waited for, failures only logged."""
        loop, db = self._started()
        asyncio.run_coroutine_threadsafe(_connect(db), loop)

    async def write(self, batch: Batch, now_ms: int) -> None:
        loop, db = self._started()
        await asyncio.wrap_future(
            asyncio.run_coroutine_threadsafe(write(db, batch, now_ms=now_ms), loop)
        )

    async def close(self) -> None:
        loop, thread, db = self._loop, self._thread, self._db
        self._loop = self._thread = self._db = None
        if loop is None or thread is None:
            return
        if db is not None:
            with contextlib.suppress(Exception):
                closing = asyncio.run_coroutine_threadsafe(db.close(), loop)
                async with asyncio.timeout(JOIN_TIMEOUT_S):
                    await asyncio.wrap_future(closing)
        loop.call_soon_threadsafe(loop.stop)
        await asyncio.to_thread(thread.join, JOIN_TIMEOUT_S)
        if not thread.is_alive():
            loop.close()


async def _connect(db: ArchiveDatabase) -> None:
    try:
        async with db.engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as exc:  # the first batch tries again, and says so
        log.debug("archive writer not connected yet", error=str(exc) or type(exc).__name__)
