"""Prometheus metrics for ``/metrics``; one registry per replica object (no module singletons).

Labels are few and bounded - integration, platform, expert, outcome, endpoint, code, state -
never a chat, user or session id: integration and expert ids come from the config, endpoints
are fixed names per API method, codes are capped per platform (``MAX_CODES``, then ``other``).
What is cheap to read when scraped (active runs, connection states, the due backlog, spool,
schedules, the script pipe's counters) is read then (``gateway.ops.collectors``); the rest is
counted where it happens: intake, the end of each turn, each card sent or updated, each platform
API exchange, each Redis script exchange. The series list: docs/operations.md, "Metrics".
"""

from __future__ import annotations

import re
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Literal

from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Gauge,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from gateway import __version__
from gateway.config.settings import Settings
from gateway.edge.call_budget import CardMode
from gateway.edge.ingest import Ingest, IngestOutcome, IngestUnavailable, ShuttingDown
from gateway.edge.platform_api import ApiCalls
from gateway.envelope import Envelope
from gateway.intake.spooler import Spooler
from gateway.ops.collectors import GatewayCollector, LiveCardsCollector, SpoolCollector
from gateway.turns.records import TURN_OUTCOMES, TurnEnd
from gateway.turns.render import CardRenderer

MAX_CODES = 40  # distinct result codes kept per platform; later ones count as "other"
MAX_ENDPOINTS = 40  # distinct endpoint names kept per platform
BUDGET_LIMITS = ("turnsPerHourPerChat", "turnsPerHourPerSender", "tokensPerDayPerChat")
_LABEL_OK = re.compile(r"^[A-Za-z0-9_.:-]{1,64}$")


class _Count:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class _Spread:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)  # per bucket, not cumulative
        self.sum = 0.0

    def observe(self, amount: float) -> None:
        self.sum += amount
        self.counts[bisect_left(self.bounds, amount)] += 1  # the first bound >= amount


class _Family(Collector):
    """A counter or histogram kept in plain floats and turned into a metric family when
    scraped: prometheus_client's own take a lock and check their state on every call, 1-2 us
    each, a dozen times or more a turn (issue 15). Everything here runs on the event loop, as does
    the scrape, so nothing needs a lock. The exposition is the same as theirs."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry,
        buckets: Sequence[float] | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = (*buckets, float("inf")) if buckets is not None else None
        self.series: dict[tuple[str, ...], Any] = {}
        if not self.labelnames:  # a series without labels exists from the start
            self.labels()
        registry.register(self)

    def labels(self, *values: str) -> Any:
        """The series of these label values (made at zero the first time)."""
        series = self.series.get(values)
        if series is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: labels {self.labelnames}, got {values}")
            series = _Count() if self.bounds is None else _Spread(self.bounds)
            self.series[values] = series
        return series

    def inc(self, amount: float = 1.0) -> None:
        self.series[()].inc(amount)

    def observe(self, amount: float) -> None:
        self.series[()].observe(amount)

    def collect(self) -> Iterator[Metric]:
        if self.bounds is None:
            counters = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
            for values, count in self.series.items():
                counters.add_metric(values, count.value)
            yield counters
            return
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        les = [floatToGoString(b) for b in self.bounds]  # type: ignore[no-untyped-call]
        for values, spread in self.series.items():
            total, buckets = 0, []
            for le, count in zip(les, spread.counts, strict=True):
                total += count
                buckets.append((le, total))
            family.add_metric(values, buckets, spread.sum)
        yield family


class Metrics:
    def __init__(self) -> None:
        # No ``*_created`` series (prometheus_client's default): they double what Prometheus
        # stores and nothing here reads them. A process-wide switch; every registry is ours.
        disable_created_metrics()  # type: ignore[no-untyped-call]
        self.registry = r = CollectorRegistry()
        self.ingested = _Family(
            "xgw_ingested_total",
            "Inbound events by outcome; unavailable / shutting_down: intake did not store it "
            "(a webhook answered 503, a long connection spooled it)",
            ["integration", "status"],
            registry=r,
        )
        self.ingest_seconds = _Family(
            "xgw_ingest_seconds",
            "Time to make an inbound event durable",
            registry=r,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
        )
        self.turns = _Family(
            "xgw_turns_total",
            "Turns by how they ended (done, error, cancelled, interrupted, handback, gave_up, "
            "refused)",
            ["integration", "platform", "expert", "outcome"],
            registry=r,
        )
        self.turn_seconds = _Family(
            "xgw_turn_duration_seconds",
            "A turn's run time, from its claim to its end",
            ["integration"],
            registry=r,
            buckets=(0.25, 0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
        )
        self.queue_seconds = _Family(
            "xgw_turn_queue_seconds",
            "From a turn's first message to its claim (summary window and waiting included)",
            ["integration"],
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
        )
        self.first_card_seconds = _Family(
            "xgw_turn_first_card_seconds",
            "From a turn's first message to its card first showing in the chat",
            ["integration"],
            registry=r,
            buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60),
        )
        self.card_updates = _Family(
            "xgw_card_updates_total",
            "Cards sent (kind=send) and updated in place (kind=update), by result",
            ["integration", "kind", "result"],
            registry=r,
        )
        self.coalesced = _Family(
            "xgw_card_updates_coalesced_total",
            "Card states never shown: a newer one replaced them within updateIntervalMs",
            ["integration"],
            registry=r,
        )
        self.api_calls_total = _Family(
            "xgw_platform_api_calls_total",
            "Platform API exchanges (retries included) by endpoint and result code",
            ["integration", "platform", "endpoint", "code"],
            registry=r,
        )
        self.api_seconds = _Family(
            "xgw_platform_api_seconds",
            "Platform API exchange time",
            ["platform", "endpoint"],
            registry=r,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.redis_seconds = _Family(
            "xgw_redis_script_seconds",
            "One auto-pipelined exchange of script calls with Redis (write to last reply)",
            registry=r,
            buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
        )
        self.budget_waits = _Family(
            "xgw_platform_budget_wait_seconds",
            "How long a platform call waited for its turn under the app's platform budget",
            ["integration"],
            registry=r,
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120),
        )
        self.throttled = _Family(
            "xgw_platform_throttled_total",
            "Rate-limit answers from the platform (429, 99991400, 230020, QpsLimit, 45009), by "
            "what they paused for every replica (api, chat, app)",
            ["integration", "scope"],
            registry=r,
        )
        self.mode_changes = _Family(
            "xgw_card_mode_changes_total",
            "Card mode changes as the month's platform quota is spent (normal, lean, finals)",
            ["integration", "mode"],
            registry=r,
        )
        self.live_cards: set[CardRenderer] = set()  # cards updated by this replica now
        r.register(LiveCardsCollector(self.live_cards))
        self.budget_refusals = _Family(
            "xgw_budget_refusals_total",
            "Turns refused for a limit (limits.turnsPerHourPerChat, ...)",
            ["integration", "limit"],
            registry=r,
        )
        Gauge("xgw_build_info", "The gateway's version", ["version"], registry=r).labels(
            __version__
        ).set(1)
        self._children: dict[tuple[Any, ...], Any] = {}  # labels() takes a lock per call
        self._codes: dict[str, set[str]] = {}
        self._endpoints: dict[str, set[str]] = {}
        self._known: set[tuple[str, str, str]] = set()  # integrations whose series are made
        self.collector: GatewayCollector | None = None
        self._refresh: list[Callable[[], Awaitable[None]]] = []

    # --- wiring ----------------------------------------------------------------------------
    def track_spool(self, spooler: Spooler) -> None:
        self.registry.register(SpoolCollector(spooler))

    def track_archive(self, collector: Collector, refresh: Callable[[], Awaitable[None]]) -> None:
        """The archive's series (gateway.archive.metrics), read after ``refresh`` when scraped."""
        self.registry.register(collector)
        self._refresh.append(refresh)

    def track(self, collector: GatewayCollector) -> None:
        """Read the replica's state when scraped (its Redis script exchanges are timed by
        ``redis_exchange``, the session store's ``on_exchange``)."""
        self.collector = collector
        self.registry.register(collector)

    def prepare(self, settings: Settings) -> None:
        """Make every series of each configured integration, at zero, so queries and alerts
        see them before anything happened (Prometheus' advice for known label values)."""
        for integ in settings.integrations:
            key = (integ.id, integ.platform, integ.xpert_id)
            if key in self._known:
                continue
            self._known.add(key)
            for outcome in TURN_OUTCOMES:
                self.turns.labels(*key, outcome)
            for hist in (self.turn_seconds, self.queue_seconds, self.first_card_seconds):
                hist.labels(integ.id)
            for kind in ("send", "update"):
                for result in ("ok", "error"):
                    self.card_updates.labels(integ.id, kind, result)
            self.coalesced.labels(integ.id)
            for limit in BUDGET_LIMITS:
                self.budget_refusals.labels(integ.id, limit)
            for status in ("queued", "duplicate", "unavailable"):
                self.ingested.labels(integ.id, status)
            self.budget_waits.labels(integ.id)
            for scope in ("api", "chat", "app"):
                self.throttled.labels(integ.id, scope)
            for mode in ("normal", "lean", "finals"):
                self.mode_changes.labels(integ.id, mode)

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    # --- intake ----------------------------------------------------------------------------
    def wrap_ingest(self, ingest: Ingest) -> Ingest:
        async def measured(envelope: Envelope) -> IngestOutcome:
            start = time.perf_counter()
            try:
                outcome = await ingest(envelope)
            except IngestUnavailable as exc:
                status = "shutting_down" if isinstance(exc, ShuttingDown) else "unavailable"
                self._child(self.ingested, envelope.integration_id, status).inc()
                raise
            self.ingest_seconds.observe(time.perf_counter() - start)
            self._child(self.ingested, envelope.integration_id, outcome.status).inc()
            return outcome

        return measured

    # --- turns and cards (gateway.turns.Runner's observer) ----------------------------------
    def turn_ended(self, end: TurnEnd) -> None:
        integ = end.integration_id
        self._child(self.turns, integ, end.platform, end.expert or "none", end.outcome).inc()
        t = end.timings
        self._child(self.turn_seconds, integ).observe(t.run_ms / 1000)
        self._child(self.queue_seconds, integ).observe(t.queued_ms / 1000)
        if t.first_card_ms is not None:
            self._child(self.first_card_seconds, integ).observe(t.first_card_ms / 1000)

    def card_rendered(self, integration_id: str, kind: Literal["send", "update"], ok: bool) -> None:
        self._child(self.card_updates, integration_id, kind, "ok" if ok else "error").inc()

    def card_coalesced(self, integration_id: str) -> None:
        self._child(self.coalesced, integration_id).inc()

    def card_live(self, card: CardRenderer, live: bool) -> None:
        if live:
            self.live_cards.add(card)
        else:
            self.live_cards.discard(card)

    # --- the platform budget (gateway.edge.call_budget.BudgetEvents) -------------------------
    def budget_waited(self, integration_id: str, endpoint: str, seconds: float) -> None:
        self._child(self.budget_waits, integration_id).observe(seconds)

    def budget_throttled(self, integration_id: str, endpoint: str, scope: str) -> None:
        self._child(self.throttled, integration_id, scope).inc()

    def card_mode_changed(self, integration_id: str, mode: CardMode) -> None:
        self._child(self.mode_changes, integration_id, mode).inc()

    def budget_refused(self, integration_id: str, limit: str) -> None:
        """A turn refused for ``limit`` (one of ``BUDGET_LIMITS``; anything else is "other")."""
        self._child(
            self.budget_refusals, integration_id, limit if limit in BUDGET_LIMITS else "other"
        ).inc()

    # --- platform API calls (AdapterContext.api_calls) --------------------------------------
    def api_calls(self, integration_id: str, platform: str) -> ApiCalls:
        """The hook an integration's API clients report each exchange to."""

        def observe(endpoint: str, code: str, seconds: float) -> None:
            endpoint = self._bounded(self._endpoints, platform, endpoint, MAX_ENDPOINTS)
            code = self._bounded(self._codes, platform, code, MAX_CODES)
            self._child(self.api_calls_total, integration_id, platform, endpoint, code).inc()
            self._child(self.api_seconds, platform, endpoint).observe(seconds)

        return observe

    @staticmethod
    def _bounded(seen: dict[str, set[str]], platform: str, value: str, cap: int) -> str:
        """``value`` as a label: well-formed and one of at most ``cap`` per platform."""
        if not _LABEL_OK.match(value):
            return "other"
        known = seen.setdefault(platform, set())
        if value in known:
            return value
        if len(known) >= cap:
            return "other"
        known.add(value)
        return value

    # --- Redis (ScriptPipe.on_exchange) ------------------------------------------------------
    def redis_exchange(self, seconds: float, calls: int) -> None:
        self.redis_seconds.observe(seconds)

    # --- /metrics --------------------------------------------------------------------------
    async def handler(self, request: web.Request) -> web.Response:
        if self.collector is not None:
            self.prepare(self.collector.settings())
            await self.collector.refresh()
        for refresh in self._refresh:
            await refresh()
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )
