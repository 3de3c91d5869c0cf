"""What ``/metrics`` reads when scraped: the replica's active runs, each integration's readiness
and long-connection state, schedules fired and missed, the script pipe's counters, the local
spool, and the due backlog of all replicas (one bounded Redis read, cached for a second so a
storm of scrapes costs one read)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Protocol

import structlog
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gateway.clock import now_ms
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.intake.spooler import Spooler
from sessions import SessionStore
from sessions.backlog import DueBacklog, due_backlog

log = structlog.get_logger("gateway.ops.metrics")

BACKLOG_CACHE_S = 1.0
BACKLOG_TIMEOUT_S = 1.0


class FireCounts(Protocol):
    """What is read of the scheduler (``gateway.triggers.schedules.Scheduler``): per
    integration, the fires it started and the fires it skipped as too old."""

    @property
    def fired_by(self) -> Mapping[str, int]: ...

    @property
    def missed_by(self) -> Mapping[str, int]: ...


class GatewayCollector(Collector):
    """The replica's state, read when scraped (``refresh`` first, for what needs Redis): handed
    what it reads, the replica's parts, when the replica is assembled."""

    def __init__(
        self,
        *,
        settings: Callable[[], Settings],
        store: SessionStore,
        active_runs: Callable[[], int],
        adapters: Mapping[str, Adapter],
        schedules: FireCounts,
    ) -> None:
        self.settings = settings
        self.store = store
        self.active_runs = active_runs
        self.adapters = adapters
        self.schedules = schedules
        self.backlog: DueBacklog | None = None
        self.backlog_at_ms = 0
        self.reads = 0  # Redis reads of the backlog (tests: a scrape storm costs one)
        self._read_at = float("-inf")
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        """Read the due backlog unless read in the last second; concurrent scrapes share one
        read. A failed read leaves the backlog series out of the scrape (not a stale value)."""
        if time.monotonic() - self._read_at < BACKLOG_CACHE_S:
            return
        async with self._lock:
            if time.monotonic() - self._read_at < BACKLOG_CACHE_S:
                return  # another scrape read it while this one waited
            store = self.store
            at = now_ms()
            try:
                async with asyncio.timeout(BACKLOG_TIMEOUT_S):
                    self.reads += 1
                    self.backlog = await due_backlog(store.redis, store.keys, at)
                self.backlog_at_ms = at
            except Exception as exc:
                self.backlog = None
                log.debug("due backlog not read", error=str(exc) or type(exc).__name__)
            self._read_at = time.monotonic()

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "xgw_active_runs", "Turns this replica runs now", value=self.active_runs()
        )
        yield GaugeMetricFamily(
            "xgw_max_runs",
            "Turns this replica runs at most at once (runtime.maxConcurrentRuns)",
            value=self.settings().runtime.max_concurrent_runs,
        )
        if self.backlog is not None:
            yield GaugeMetricFamily(
                "xgw_due_conversations",
                "Conversations due now and not running, all replicas (the same on each)",
                value=self.backlog.due,
            )
            oldest = self.backlog.oldest_ms
            age = 0.0 if oldest is None else max(0, self.backlog_at_ms - oldest) / 1000
            yield GaugeMetricFamily(
                "xgw_due_oldest_age_seconds",
                "How long the longest-due conversation has waited to be claimed (0: none)",
                value=age,
            )
        yield from self._integrations()
        yield from self._budgets()
        yield from self._schedules()
        stats = self.store.pipe.stats
        for name, doc, count in (
            ("xgw_redis_script_calls", "Script calls sent through the auto-pipeline", stats.calls),
            (
                "xgw_redis_script_writes",
                "Writes (batches per server) of script calls",
                stats.writes,
            ),
            ("xgw_redis_reconnects", "Script pipe connections opened again", stats.reconnects),
        ):
            yield CounterMetricFamily(name, doc, value=count)

    def _integrations(self) -> Iterator[Metric]:
        ready = GaugeMetricFamily(
            "xgw_integration_ready",
            "1 while the integration is ready (/readyz: its long connection up or on standby)",
            labels=["integration", "platform"],
        )
        states = GaugeMetricFamily(
            "xgw_connection_state",
            "1 for a long connection's current state on this replica, 0 for the others",
            labels=["integration", "platform", "state"],
        )
        for integ_id, adapter in list(self.adapters.items()):
            platform = adapter.settings.platform
            try:
                info = adapter.readiness()
            except Exception:
                info = {"ready": False}
            ready.add_metric([integ_id, platform], 1.0 if info.get("ready", True) else 0.0)
            current = info.get("connection", info.get("state"))
            if not isinstance(current, str):
                continue  # no long connection (webhooks, the console)
            declared = adapter.connection_states  # each adapter names its own (Adapter)
            current = current if current in declared else "other"
            for state in (*declared, "other"):
                if state != "other" or current == "other":
                    states.add_metric([integ_id, platform, state], 1.0 if state == current else 0.0)
        yield ready
        yield states

    def _budgets(self) -> Iterator[Metric]:
        """Each paced integration's platform budget as this replica sees it."""
        labels = ["integration", "platform"]
        queued = GaugeMetricFamily(
            "xgw_platform_budget_queued",
            "Platform calls (and intermediate card updates) waiting for the budget here",
            labels=labels,
        )
        used = GaugeMetricFamily(
            "xgw_platform_quota_used",
            "Platform calls counted this month (all replicas), as of this replica's last call",
            labels=labels,
        )
        limit = GaugeMetricFamily(
            "xgw_platform_quota_limit", "platformLimits.callsPerMonth", labels=labels
        )
        forecast = GaugeMetricFamily(
            "xgw_platform_quota_forecast_seconds",
            "When the month's quota runs out at this month's rate (absent: not forecast)",
            labels=labels,
        )
        mode = GaugeMetricFamily(
            "xgw_card_mode",
            "1 for the card mode the month's quota set (normal, lean, finals), 0 for the others",
            labels=[*labels, "mode"],
        )
        for integ_id, adapter in list(self.adapters.items()):
            budget = adapter.call_budget
            if budget is None:
                continue
            key = [integ_id, adapter.settings.platform]
            queued.add_metric(key, budget.queued())
            if budget.month_used is not None:
                used.add_metric(key, budget.month_used)
            if budget.limits.calls_per_month is not None:
                limit.add_metric(key, budget.limits.calls_per_month)
            if budget.forecast_s is not None:
                forecast.add_metric(key, budget.forecast_s)
            for name in ("normal", "lean", "finals"):
                mode.add_metric([*key, name], 1.0 if budget.mode == name else 0.0)
        yield from (queued, used, limit, forecast, mode)

    def _schedules(self) -> Iterator[Metric]:
        sched = self.schedules
        fired = CounterMetricFamily(
            "xgw_schedule_fires", "Schedule fires this replica started", labels=["integration"]
        )
        missed = CounterMetricFamily(
            "xgw_schedule_misfires",
            "Schedule fires skipped: older than misfireGraceSeconds when a replica got to them",
            labels=["integration"],
        )
        integrations = {i.id for i in self.settings().integrations}
        for integ_id in sorted(integrations | set(sched.fired_by) | set(sched.missed_by)):
            fired.add_metric([integ_id], sched.fired_by.get(integ_id, 0))
            missed.add_metric([integ_id], sched.missed_by.get(integ_id, 0))
        yield fired
        yield missed


class ShownCard(Protocol):
    """A live card as the stalest card's age reads it (``gateway.turns.render.CardRenderer``)."""

    @property
    def pending_since(self) -> float | None: ...


class LiveCardsCollector(Collector):
    """How long the stalest live card's newest state has waited to be shown (0: none waits)."""

    def __init__(self, cards: Collection[ShownCard]) -> None:
        self.cards = cards

    def collect(self) -> Iterator[Metric]:
        now = time.monotonic()
        waits = [now - c.pending_since for c in list(self.cards) if c.pending_since is not None]
        yield GaugeMetricFamily(
            "xgw_card_stalest_seconds",
            "How long the live card waiting longest has had a newer state than it shows",
            value=max(waits, default=0.0),
        )
        yield GaugeMetricFamily(
            "xgw_cards_live", "Cards this replica updates now", value=len(self.cards)
        )


class SpoolCollector(Collector):
    """The local spool's depth and bound, read when scraped."""

    def __init__(self, spooler: Spooler) -> None:
        self.spooler = spooler

    def collect(self) -> Iterator[Metric]:
        sp = self.spooler
        for name, doc, value in (
            ("xgw_spool_records", "Long-connection events waiting in the local spool", sp.records),
            ("xgw_spool_bytes", "Bytes of the local spool", sp.size),
            (
                "xgw_spool_max_bytes",
                "Bound of the local spool (runtime.spoolMaxBytes)",
                sp.max_bytes,
            ),
            ("xgw_spool_full", "1 while the local spool refuses events for lack of room", sp.full),
        ):
            yield GaugeMetricFamily(name, doc, value=float(value))
        for name, doc, count in (
            (
                "xgw_spooled",
                "Events kept in the local spool while Redis was unreachable",
                sp.spooled,
            ),
            ("xgw_spool_refused", "Events the full local spool refused", sp.refused),
            ("xgw_spool_replayed", "Spooled events fed into intake", sp.replayed),
            ("xgw_spool_dropped", "Spooled events intake failed on (logged), skipped", sp.dropped),
        ):
            yield CounterMetricFamily(name, doc, value=count)
