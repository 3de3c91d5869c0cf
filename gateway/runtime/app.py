"""One replica: assembles Redis, adapters, pipeline, flusher, runner and scheduler, each part
built once and handed what it needs, and takes them down gracefully. What it serves over HTTP:
gateway.runtime.http; its heartbeat: gateway.runtime.heartbeat; the process around it, sockets
and signals: gateway.runtime.daemon."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from gateway.archive.service import ArchiveService, open_migrated
from gateway.clock import now_ms
from gateway.config.bases import IntegrationBase
from gateway.config.live import LiveSettings
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.edge.context import AdapterContext, budgets_for
from gateway.edge.factory import AdapterFactory, discover_adapters
from gateway.edge.platform_api import log_failure
from gateway.intake.spool import store_identity
from gateway.intake.spooler import Spooler
from gateway.ops.collectors import GatewayCollector
from gateway.ops.metrics import Metrics
from gateway.policy.budgets import Budgets
from gateway.runtime import http, quiet
from gateway.runtime.heartbeat import Heartbeat
from gateway.runtime.intake import build_intake
from gateway.triggers.schedules import Scheduler
from gateway.turns.claims import Claims, RidingClaims
from gateway.turns.control import Control
from gateway.turns.flusher import Flusher
from gateway.turns.runner import Runner
from sessions import (
    HistoryStore,
    KeyBuilder,
    PlatformBudgets,
    RecordStore,
    RedisHandle,
    SessionRecords,
    SessionStore,
    TimelineStore,
    confirm_durable,
    connect_redis,
)

log = structlog.get_logger("gateway.runtime.app")


class Gateway:
    """One replica. ``start`` brings it up, ``shutdown`` takes it down gracefully."""

    def __init__(
        self,
        *,
        settings: Settings,
        factories: dict[str, AdapterFactory] | None = None,
        worker: int | None = None,
        embedded_redis_url: str | None = None,
        clock: Callable[[], int] = now_ms,
    ):
        self.live = LiveSettings(settings)  # the current settings; a reload replaces them there
        self.factories = factories if factories is not None else discover_adapters()
        # Every process is its own replica, each worker of a supervisor too (``worker``: its
        # index there, None for a process on its own; ``embedded_redis_url``: the embedded
        # Redis the supervisor started for its workers, used as this process would its own).
        self.worker = worker
        self.embedded_redis_url = embedded_redis_url
        self.replica_id = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.redis: RedisHandle | None = None
        self.archive: ArchiveService | None = None  # with archive.enabled
        self.adapters: dict[str, Adapter] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.clock = clock  # epoch ms of pipeline, runner, flusher and scheduler (tests move it)
        self.ingests = quiet.InFlight()  # ingests under way (``idle``)
        self.metrics = Metrics()
        self.started_at = time.time()
        self.stopping = False
        self._stop_event = asyncio.Event()
        self._force = asyncio.Event()  # a second signal: the grace period ends now
        self._loops: list[asyncio.Task[None]] = []

    @property
    def settings(self) -> Settings:
        return self.live()

    # --- assembly --------------------------------------------------------------------------
    def spawn(self, coro: Awaitable[Any]) -> None:
        """Background work (replies, notices) kept in a set and awaited at shutdown."""

        async def guarded() -> None:
            try:
                await coro
            except Exception as exc:  # a reply the platform refused: one line with its code
                log_failure(log, "background task failed", exc)

        task = asyncio.create_task(guarded())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def start(self) -> None:
        """Bring the replica up. A start that fails or is cancelled part way (Ctrl-C while Redis
        is unreachable, an adapter that cannot start) closes what it opened: nothing is left
        running, the embedded Redis included."""
        try:
            await self._assemble()
        except BaseException:
            await self._close_partial()
            raise

    async def _close_partial(self) -> None:
        for task in self._loops:
            task.cancel()
        if self._loops:
            await asyncio.wait(self._loops, timeout=5)
        for adapter in self.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.stop()
        parts = (getattr(self, "spooler", None), self.archive, getattr(self, "store", None))
        for part in parts:
            if part is not None:
                with contextlib.suppress(Exception):
                    await part.close()
        if self.redis is not None:
            with contextlib.suppress(Exception):
                await self.redis.close()

    async def _assemble(self) -> None:
        s = self.settings
        url = s.redis.url.get_secret_value() if s.redis.url else None
        self.redis = await connect_redis(
            url or self.embedded_redis_url,
            data_dir=s.data_dir,
            mode=s.redis.mode,
            sentinels=s.redis.sentinels,
            master_name=s.redis.master_name,
            connect_timeout_s=s.redis.connect_timeout_seconds,
        )
        client = self.redis.client
        keys = KeyBuilder(prefix=s.redis.key_prefix, shards=s.runtime.due_shards)
        self.store = SessionStore(
            client=client,
            keys=keys,
            sharded_pubsub=self.redis.sharded_pubsub,
            dedup_ttl_ms=int(s.runtime.dedup_ttl_hours * 3_600_000),
            on_exchange=self.metrics.redis_exchange,  # xgw_redis_script_seconds
        )
        await self.store.prepare()  # LayoutMismatch (a RedisStartupError): another dueShards
        self.records = SessionRecords(
            client=client, keys=keys, audit_limits=lambda: self.live().audit_limits()
        )
        if s.archive.enabled:  # a schema newer than this release: ArchiveRefused
            db, migrated = await open_migrated(s)
            self.archive = archive = ArchiveService(
                settings=self.live, db=db, client=client, keys=keys, records=self.records,
                migrated=migrated,
            )  # fmt: skip
            self.metrics.track_archive(archive.collector, archive.collector.refresh)
        self.timeline = TimelineStore(
            client=client, keys=keys, pubsub=self.store.pubsub, pipe=self.store.pipe
        )
        # One set of budgets: intake checks them, the runner spends tokens.
        self.budgets = Budgets(store=self.store)
        self.claims = Claims(
            store=self.store,
            settings=self.live,
            replica_id=self.replica_id,
            records=self.records,
            max_runs=s.runtime.max_concurrent_runs,
        )
        self.runner = Runner(
            store=self.store, settings=self.live, adapters=self.adapters,
            replica_id=self.replica_id, history=HistoryStore(client=client, keys=keys),
            records=self.records, claims=self.claims, observer=self.metrics,
            budgets=self.budgets, clock=self.clock,
        )  # fmt: skip
        self.flusher = Flusher(
            store=self.store,
            runner=self.runner,
            claims=self.claims,
            poll_ms=s.runtime.poll_interval_ms,
            clock=self.clock,
        )
        # A message due at once has its turn claimed by its intake call: the runner starts it,
        # or the flusher reads its shard.
        self.rides = RidingClaims(self.claims, start=self.runner.start, missed=self.flusher.missed)
        self.control = Control(store=self.store)
        # A schedule made in a chat (intake) wakes the scheduler built after intake: one event.
        self._schedules_changed = asyncio.Event()
        self.intake = build_intake(
            store=self.store, records=self.records, settings=self.live, adapters=self.adapters,
            wake=self.flusher.wake, spawn=self.spawn, clock=self.clock, control=self.control,
            budgets=self.budgets, rides=self.rides, observer=self.metrics,
            on_schedule_change=self._schedules_changed.set,
        )  # fmt: skip
        self.pipeline = self.intake.pipeline
        ingest = self.ingests.wrap(self.metrics.wrap_ingest(self.pipeline.ingest))
        self.scheduler = Scheduler(
            store=self.intake.schedules.book.store,
            settings=self.live,
            ingest=ingest,
            adapters=self.adapters,
            owner=self.replica_id,
            wake=self._schedules_changed,
            clock=self.clock,
        )
        # Long connections whose platform never delivers an event again spool it while Redis
        # is unreachable; opened before the adapters start, so their events queue up behind
        # what a previous run left spooled, and replayed once they are up (replies need them).
        self.spooler = Spooler(
            directory=s.data_dir / "spool",
            # The Redis a spool replays into: its URL (for a cluster the node this config names:
            # replicas sharing a dataDir share a config), or the sentinels and master name.
            store=store_identity(
                self.redis.url if s.redis.mode == "sentinel" else url, s.redis.key_prefix
            ),
            max_bytes=s.runtime.spool_max_bytes,
            ingest=ingest,
            store_raw=self._store_raw,
            durable=lambda: confirm_durable(client, keys.spool_sync()),
        )
        await self.spooler.open()
        # What /metrics reads of this replica when scraped.
        self.metrics.track(
            GatewayCollector(
                settings=self.live,
                store=self.store,
                active_runs=lambda: len(self.runner.active),
                adapters=self.adapters,
                schedules=self.scheduler,
            )
        )
        self.metrics.track_spool(self.spooler)
        self.heartbeat = Heartbeat(
            store=self.store,
            replica_id=self.replica_id,
            started_at=self.started_at,
            active_runs=lambda: len(self.runner.active),
        )
        context = AdapterContext(
            ingest=ingest,
            ingest_or_spool=self.spooler.ingest,
            timeline=self.timeline,
            records=RecordStore(client=client, keys=keys, pipe=self.store.pipe),
            spawn=self.spawn,
            public_url=s.server.public_url,
            connection_lease_ms=int(s.runtime.connection_lease_seconds * 1000),
            api_calls=self.metrics.api_calls,
            platform_budget=budgets_for(PlatformBudgets(store=self.store), self.metrics),
            admin_api=lambda: self.settings.admin.token is not None,
        )
        self.context = context
        for integ in s.integrations:
            if integ.enabled:
                await self._add_adapter(integ)
        self.spooler.start()
        if self.archive is not None:
            self.archive.start()
        self._loops = [
            asyncio.create_task(self.flusher.run(), name="flusher"),
            asyncio.create_task(self.control.listen(self.runner, self._stop_event), name="control"),
            asyncio.create_task(self.heartbeat.run(), name="heartbeat"),
            asyncio.create_task(self.scheduler.run(), name="scheduler"),
        ]
        log.info(
            "gateway started",
            replica=self.replica_id,
            integrations=list(self.adapters),
            embedded_redis=self.redis.embedded is not None,
        )

    async def idle(self) -> None:
        """Return once nothing is under way here (gateway.runtime.quiet): what a test awaits
        (within a timeout of its own) instead of sleeping to see that nothing more happens."""
        await quiet.idle(
            quiet.watcher(
                ingests=self.ingests,
                tasks=self.tasks,
                runs=self.runner.active,
                parts=[self.runner, self.flusher, self.scheduler],
            )
        )

    def _store_raw(self, integration_id: str) -> bool:
        integ = self.settings.integration(integration_id)
        return integ is not None and integ.store_raw

    async def _add_adapter(self, integ: IntegrationBase) -> None:
        adapter = self.factories[integ.platform].create(settings=integ, context=self.context)
        await adapter.start()
        self.adapters[integ.id] = adapter

    async def reload(self, settings: Settings) -> None:
        """Apply a new config (SIGHUP): experts, routes and integration options take effect for
        new sessions (running sessions keep their snapshot); changed integrations get a new
        adapter and the old one is closed. Server, Redis and runtime settings need a restart."""
        wanted = {i.id: i for i in settings.integrations if i.enabled}
        for integ_id, adapter in list(self.adapters.items()):
            if wanted.get(integ_id) != adapter.settings:
                del self.adapters[integ_id]
                with contextlib.suppress(Exception):
                    await adapter.stop()
        settings = self.live.replace(settings)
        for integ_id, integ in wanted.items():
            if integ_id not in self.adapters:
                await self._add_adapter(integ)
        log.info("configuration reloaded", integrations=sorted(self.adapters))

    def web_app(self) -> web.Application:
        """What this replica serves (gateway.runtime.http); after :meth:`start`."""
        return http.web_app(
            settings=self.live, replica=self, metrics=self.metrics, store=self.store,
            records=self.records, watch=self.intake.watch, book=self.intake.schedules.book,
            schedules_changed=self.scheduler.wake, budgets=self.budgets,
            factories=self.factories, adapters=self.adapters,
            archive=self.archive.reader if self.archive is not None else None,
        )  # fmt: skip

    # --- what /readyz reads (gateway.ops.health) -----------------------------------------------
    async def ping_redis(self) -> None:
        assert self.redis is not None
        await self.redis.client.ping()

    def probe_state(self) -> dict[str, Any]:
        return {"activeRuns": len(self.runner.active), "spool": self.spooler.state()}

    # --- shutdown --------------------------------------------------------------------------
    def force_stop(self) -> None:
        """A second SIGINT/SIGTERM: the grace period ends now, unfinished runs are handed back."""
        if not self._force.is_set():
            log.warning("second stop signal: handing running turns back now")
            self._force.set()

    async def shutdown(self) -> None:
        """Stop intake, let runs finish within the grace period (cut short by
        :meth:`force_stop`), hand back the rest, close."""
        if self.stopping:
            return
        self.stopping = True
        self.pipeline.accepting = False
        grace = self.settings.runtime.shutdown_grace_seconds
        active = len(self.runner.active)
        hint = {"hint": "press Ctrl-C again to hand them back now"} if active and grace else {}
        log.info("shutting down", active_runs=active, grace_s=grace, **hint)
        # Order matters. 1: no new claims - the flusher ends its tick by itself (a tick that is
        # mid-claim would otherwise start a run after the snapshot below, and a task cancelled
        # inside a Redis call drops its connection unclosed).
        self.flusher.stop()
        self.scheduler.stop()
        self.heartbeat.stop()
        self._stop_event.set()
        flusher, _control, heartbeat, scheduler = self._loops
        await asyncio.wait([flusher, heartbeat, scheduler], timeout=3)
        # 2: runs get the grace period, then are handed back to another replica.
        running = [r.task for r in self.runner.active.values() if r.task is not None]
        if running:
            waits = [
                asyncio.ensure_future(asyncio.wait(running)),
                asyncio.ensure_future(self._force.wait()),
            ]
            try:
                await asyncio.wait(waits, timeout=grace, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for w in waits:
                    w.cancel()
            pending = [t for t in running if not t.done()]
            if pending:
                log.info("handing back unfinished turns", count=len(pending))
                await self.runner.hand_back_all()
        await self.runner.close()
        # 3: what is left of the loops (the pub/sub listener) is cancelled; bounded, since a
        # cancel that lands inside a pub/sub (re)subscribe can be slow to take effect.
        for task in self._loops:
            task.cancel()
        await asyncio.wait(self._loops, timeout=5)
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)
        for adapter in self.adapters.values():
            with contextlib.suppress(Exception):
                await adapter.stop()
        # 4: the spool last (adapters may spool to the end), then the archiver (before Redis).
        await self.spooler.close()
        if self.archive is not None:
            await self.archive.close()
        if self.store is not None:
            await self.store.close()
        if self.redis is not None:
            await self.redis.close()
        log.info("gateway stopped")
