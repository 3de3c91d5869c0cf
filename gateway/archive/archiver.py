"""The archiver: moves the Redis outbox (sessions/outbox.py) into the archive database, on one
replica of all at a time.

One owner lease (``gateway.edge.leases.OwnerLease``, as a long connection's) decides who
archives; the others stand by and one takes over within about a lease after the owner died. The
owner, per integration, takes a batch (what is pending first: a dead owner's unacknowledged
entries, claimed with ``XAUTOCLAIM``), writes it in one transaction of idempotent upserts
(``gateway.archive.writer``), and only then acknowledges and deletes it. So an owner killed
before its commit leaves the entries to the next owner, and one killed after its commit and
before its acknowledgement has them written again, to the same rows: nothing lost, nothing
twice. Between batches it purges past ``archive.retentionDays`` and gives sessions left idle
their end (``gateway.archive.ends``). While the database is away the outbox grows (bounded by
``archive.outboxMaxLength``, which the writers enforce) and the archiver retries with a growing
pause; it drains when the database answers again. The schema is migrated (or checked) before
the first write.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Literal

import structlog

from gateway.archive import tombstones
from gateway.archive.database import ArchiveDatabase
from gateway.archive.ends import end_idle
from gateway.archive.erasure import purge_before
from gateway.archive.migrations import SchemaTooNew, migrate
from gateway.archive.writer import Batch, batch_of, write
from gateway.clock import now_ms
from gateway.config.archive import ArchiveSettings
from gateway.edge.leases import OwnerLease
from sessions import Outbox

log = structlog.get_logger("gateway.archive")

LEASE_NS = "archive-lease"
DAY_MS = 86_400_000
MAX_BACKOFF_S = 5.0
WRITE_TIMEOUT_S = 60.0
ENDS_EVERY_MS = 5_000  # how often idle sessions are given their end

Role = Literal["starting", "owner", "standby", "stopped", "refused"]


class Archiver:
    def __init__(
        self,
        *,
        db: ArchiveDatabase,
        outbox: Outbox,
        lease: OwnerLease,
        integrations: Callable[[], list[str]],
        settings: Callable[[], ArchiveSettings],
        clock: Callable[[], int] = now_ms,
        poll_s: float = 0.5,
        migrated: bool = False,
        writer: Callable[[Batch, int], Awaitable[None]] | None = None,
        on_owner: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        # How a batch is written (ArchiveService: on a thread's loop, gateway.archive.offloop).
        self.write = writer or (lambda batch, at: write(db, batch, now_ms=at))
        self.on_owner = on_owner  # called (not awaited) each time the lease is taken
        self.outbox = outbox
        self.lease = lease
        self.integrations = integrations
        self.settings = settings
        self.clock = clock
        self.poll_s = poll_s
        self.migrated = migrated
        self.role: Role = "starting"
        self.written = 0  # entries committed (xgw_archive_written_total)
        self.batches = 0  # transactions committed (xgw_archive_batches_total)
        self.write_errors = 0  # failed writes (xgw_archive_write_errors_total)
        self.rejected = 0  # unreadable entries skipped
        self.busy = False  # a batch under way (``Gateway.idle``)
        self.purged_at = 0  # when the owner last purged past archive.retentionDays (epoch ms)
        self.ends_at = 0  # when it last ended idle sessions (gateway.archive.ends)
        self._failures = 0
        self._stopping = asyncio.Event()
        self._wake = asyncio.Event()

    @property
    def consumer(self) -> str:
        return self.lease.me

    def wake(self) -> None:
        """Look at the outbox now, not after the poll interval."""
        self._wake.set()

    async def run(self) -> None:
        """Until :meth:`stop`: hold or wait for the lease, archive while holding it. A graceful
        stop releases the lease (another replica takes over at once); a killed process's lapses."""
        try:
            while not self._stopping.is_set():
                await self._pause(await self._tick())
        finally:
            if self.role == "owner":
                with contextlib.suppress(Exception):
                    await self.lease.release()
            self.role = "stopped"

    def stop(self) -> None:
        self._stopping.set()

    async def _tick(self) -> float:
        """One round; returns how long to pause before the next."""
        try:
            mine = await self.lease.take()
        except Exception as exc:  # Redis away: nothing to move either
            log.warning("archive lease not taken (storage unavailable)", error=str(exc))
            return self.lease.standby_s
        if not mine:
            self.role = "standby"
            return self.lease.standby_s
        if self.role != "owner":
            log.info("archiver lease taken", consumer=self.consumer)
            if self.on_owner is not None:
                self.on_owner()
        self.role = "owner"
        if not self.migrated:
            try:
                await migrate(self.db)
                self.migrated = True
            except SchemaTooNew as exc:
                log.error("archive not written: schema newer than this release", error=str(exc))
                self.role = "refused"
                await self.lease.release()
                return float(self.lease.ttl_ms / 1000)
            except Exception as exc:
                return self._failed("archive database not migrated", exc)
        try:
            backlog = await self.drain(budget_s=self.lease.renew_s / 2)
            await self.purge()
            await self.end_idle()
        except Exception as exc:
            return self._failed("archive batch not written", exc)
        self._failures = 0
        # Straight on only while full batches wait; else the outbox gathers for a poll interval
        # (a batch a turn would pay a transaction, and on SQLite an fsync, per turn).
        return 0.0 if backlog else self.poll_s

    def _failed(self, what: str, exc: Exception) -> float:
        self.write_errors += 1
        self._failures += 1
        pause: float = min(MAX_BACKOFF_S, 0.2 * 2.0 ** min(self._failures, 10))
        if self._failures in (1, 10) or self._failures % 100 == 0:
            log.warning(what, error=str(exc) or type(exc).__name__, failures=self._failures)
        return pause

    async def drain(self, *, budget_s: float) -> bool:
        """Batches of every integration's outbox until they are empty or ``budget_s`` passed
        (the lease is renewed between rounds); returns whether full batches are left."""
        loop = asyncio.get_running_loop()
        until = loop.time() + budget_s
        pending = list(dict.fromkeys(self.integrations()))
        while pending and loop.time() < until:
            for integration_id in list(pending):
                if await self.move(integration_id) < self.settings().batch_size:
                    pending.remove(integration_id)
        return bool(pending)

    async def purge(self) -> None:
        """Daily (or every half retention, when shorter) while owner: rows past
        ``archive.retentionDays``."""
        days = self.settings().retention_days
        if days is None:
            return
        retention_ms, now = int(days * DAY_MS), self.clock()
        if now - self.purged_at < min(DAY_MS, retention_ms // 2):
            return
        purged = await purge_before(self.db, now - retention_ms)
        self.purged_at = now
        if any(purged.values()):
            log.info("archive purged past its retention", days=days, **purged)

    async def end_idle(self) -> None:
        """Every few seconds while owner: sessions idle past their timeout get their end, and
        erasures' tombstones past a day go."""
        now = self.clock()
        if now - self.ends_at < ENDS_EVERY_MS:
            return
        ended = await end_idle(self.db, now)
        expired = await tombstones.expire(self.db, now)
        self.ends_at = now
        if ended or expired:
            log.debug("idle sessions ended in the archive", sessions=ended, tombstones=expired)

    async def move(self, integration_id: str) -> int:
        """One batch of one integration: taken, written, then acknowledged."""
        entries = await self.outbox.take(
            integration_id, consumer=self.consumer, count=self.settings().batch_size
        )
        if not entries:
            return 0
        self.busy = True
        try:
            batch = batch_of(entries, now_ms=self.clock())
            # A database that hangs rather than refuses: the batch is taken again next round.
            async with asyncio.timeout(WRITE_TIMEOUT_S):
                await self.write(batch, self.clock())
            self.batches += 1
            await self.outbox.ack(entries)
        finally:
            self.busy = False
        self.rejected += len(batch.rejected)
        if batch.erased:
            log.info("archive batch: rows of erased chats or senders left out", rows=batch.erased)
        self.written += len(entries) - len(batch.rejected)
        return len(entries)

    async def _pause(self, seconds: float) -> None:
        if seconds <= 0:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                stop = asyncio.ensure_future(self._stopping.wait())
                wake = asyncio.ensure_future(self._wake.wait())
                try:
                    await asyncio.wait([stop, wake], return_when=asyncio.FIRST_COMPLETED)
                finally:
                    stop.cancel()
                    wake.cancel()
        self._wake.clear()
