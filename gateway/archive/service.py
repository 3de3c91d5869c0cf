"""The archive as a replica runs it: the database opened and migrated at start (a schema newer
than this release refuses the start; a database that does not answer yet only delays archiving,
the outbox keeps what it must write), the archiver's task, and what ``/metrics`` shows of it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import structlog
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import text

from gateway.archive.archiver import LEASE_NS, Archiver
from gateway.archive.database import ArchiveDatabase
from gateway.archive.migrations import SchemaTooNew, migrate
from gateway.archive.offloop import WriterThread
from gateway.archive.reader import ArchiveReader
from gateway.config.settings import Settings
from gateway.edge.leases import OwnerLease
from gateway.errors import GatewayError
from sessions import KeyBuilder, Outbox, RecordStore, RedisClient, SessionRecords

log = structlog.get_logger("gateway.archive")
STATE_CACHE_S = 1.0
PING_TIMEOUT_S = 2.0  # Redis' reads for /readyz (as its own PING)
# The database's: short, so a database that hangs cannot make /readyz miss a probe's timeout
# (1 s by default in Kubernetes) - which would turn the replica unready over the archive.
DB_PING_TIMEOUT_S = 0.8


class ArchiveRefused(GatewayError):
    """The archive's database cannot be used by this release (its schema is newer)."""


async def open_migrated(settings: Settings) -> tuple[ArchiveDatabase, bool]:
    """The archive's database, migrated when it answers within its connect timeout (True);
    raises :class:`ArchiveRefused` on a schema newer than this release."""
    a = settings.archive
    db = ArchiveDatabase.open(
        a.database_url(settings.data_dir), connect_timeout_s=a.connect_timeout_seconds
    )
    try:
        async with asyncio.timeout(a.connect_timeout_seconds):
            done = await migrate(db)
    except SchemaTooNew as exc:
        await db.close()
        raise ArchiveRefused(f"archive ({a.describe(settings.data_dir)}): {exc}") from exc
    except Exception as exc:
        log.warning(
            "archive database not reachable at start; archiving begins once it answers",
            archive=a.describe(settings.data_dir),
            error=str(exc) or type(exc).__name__,
        )
        return db, False
    if done.applied:
        log.info("archive migrated", before=done.before, after=done.after)
    return db, True


class ArchiveService:
    """Started by ``Gateway.start`` when ``archive.enabled``; closed at shutdown."""

    def __init__(
        self,
        *,
        settings: Callable[[], Settings],
        db: ArchiveDatabase,
        client: RedisClient,
        keys: KeyBuilder,
        records: SessionRecords,
        migrated: bool,
    ) -> None:
        self.settings = settings
        self.db = db
        self.records = records
        self.outbox = Outbox(client=client, keys=keys)
        a = settings().archive
        lease = OwnerLease(
            RecordStore(client=client, keys=keys),
            namespace=LEASE_NS,
            key="archiver",
            ttl_ms=int(a.lease_seconds * 1000),
        )
        # PostgreSQL's statements run on a loop of their own (asyncpg works on the loop it is
        # on); SQLite's already run in aiosqlite's thread, and a second thread did not help.
        self.writer: WriterThread | None = None
        if db.dialect == "postgresql":
            self.writer = WriterThread(
                a.database_url(settings().data_dir), connect_timeout_s=a.connect_timeout_seconds
            )
        self.archiver = Archiver(
            db=db,
            writer=self.writer.write if self.writer else None,
            on_owner=self.writer.warm if self.writer else None,
            outbox=self.outbox,
            lease=lease,
            integrations=lambda: [i.id for i in self.settings().integrations],
            settings=lambda: self.settings().archive,
            migrated=migrated,
        )
        self.collector = ArchiveCollector(self)
        self.reader = ArchiveReader(db)  # the admin API's read-back
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self.archiver.run(), name="archiver")

    async def readiness(self) -> dict[str, Any]:
        """For ``/readyz``, informative only: a database that is down does not make the replica
        unready (turns keep going into the outbox), and the answer says so in ``status``."""
        s = self.settings()
        ids = [i.id for i in s.integrations]
        bound = s.archive.outbox_max_length
        database, outbox, holder = await asyncio.gather(
            self._ping(),
            self._read(self.outbox.state(ids)),
            self._read(self.archiver.lease.holder()),
        )
        state: dict[str, Any] = {"where": s.archive.describe(s.data_dir), "database": database}
        waiting: dict[str, Any] = {}
        if isinstance(outbox, dict):
            for integration_id, (length, _oldest) in sorted(outbox.items()):
                waiting[integration_id] = {"length": length, "max": bound, "full": length >= bound}
        state["outbox"] = waiting
        state["archiver"] = {
            "role": self.archiver.role,
            "holder": holder if isinstance(holder, str) else None,
        }
        state["status"] = _status(database, waiting, self.archiver.role)
        return state

    async def _ping(self) -> dict[str, Any]:
        try:
            async with asyncio.timeout(DB_PING_TIMEOUT_S):
                async with self.db.engine.connect() as conn:
                    await conn.execute(text("SELECT 1"))
        except Exception as exc:
            return {"reachable": False, "error": type(exc).__name__}
        return {"reachable": True}

    @staticmethod
    async def _read(read: Awaitable[Any]) -> Any:
        """A Redis read, or None when Redis does not answer (``/readyz`` says Redis' state)."""
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                return await read
        except Exception:
            return None

    async def close(self) -> None:
        self.archiver.stop()
        if self._task is not None:
            try:
                async with asyncio.timeout(5):
                    await asyncio.shield(self._task)
            except TimeoutError:
                self._task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._task
        if self.writer is not None:
            await self.writer.close()
        await self.db.close()


def _status(database: dict[str, Any], outbox: dict[str, Any], role: str) -> str:
    """``/readyz``'s one line on the archive, plainly."""
    said = []
    if role == "refused":
        said.append("not archiving: the database's schema is newer than this release")
    if not database["reachable"]:
        said.append(
            "database unreachable: finished turns wait in the Redis outbox and are archived "
            "once it answers (readiness does not depend on it)"
        )
    if full := sorted(i for i, o in outbox.items() if o["full"]):
        said.append(f"outbox full ({', '.join(full)}): new records are not archived")
    return "; ".join(said) or "ok"


class ArchiveCollector(Collector):
    """The archive's series: outbox length and bound, lag (the oldest waiting entry's age), and
    this replica's archiver counters; the outbox read when scraped (at most once a second)."""

    def __init__(self, service: ArchiveService) -> None:
        self.service = service
        self.state: dict[str, tuple[int, int | None]] = {}
        self._read_at = float("-inf")
        self._at_ms = 0

    async def refresh(self) -> None:
        if time.monotonic() - self._read_at < STATE_CACHE_S:
            return
        self._read_at = time.monotonic()
        ids = [i.id for i in self.service.settings().integrations]
        try:
            async with asyncio.timeout(2):
                self.state = await self.service.outbox.state(ids)
            self._at_ms = int(time.time() * 1000)
        except Exception as exc:
            self.state = {}
            log.debug("archive outbox not read", error=str(exc) or type(exc).__name__)

    def collect(self) -> Iterator[Metric]:
        length = GaugeMetricFamily(
            "xgw_archive_outbox_length",
            "Entries waiting in the Redis outbox for the archive database",
            labels=["integration"],
        )
        lag = GaugeMetricFamily(
            "xgw_archive_lag_seconds",
            "Age of the oldest entry not yet archived (0: none waiting)",
            labels=["integration"],
        )
        for integration_id, (count, oldest) in sorted(self.state.items()):
            length.add_metric([integration_id], count)
            age = 0.0 if oldest is None else max(0, self._at_ms - oldest) / 1000
            lag.add_metric([integration_id], age)
        yield length
        yield lag
        yield GaugeMetricFamily(
            "xgw_archive_outbox_max_length",
            "Entries the outbox holds per integration at most (archive.outboxMaxLength)",
            value=self.service.settings().archive.outbox_max_length,
        )
        a = self.service.archiver
        for name, doc, value in (
            ("xgw_archive_written", "Outbox entries this replica committed", a.written),
            ("xgw_archive_batches", "Archive transactions this replica committed", a.batches),
            (
                "xgw_archive_write_errors",
                "Archive writes (or migrations) that failed on this replica; retried",
                a.write_errors,
            ),
            (
                "xgw_archive_dropped",
                "Records this replica could not queue: the outbox was full",
                self.service.records.audit.outbox_refused,
            ),
        ):
            yield CounterMetricFamily(name, doc, value=value)
