"""Prometheus metrics for ``/metrics``; one registry per replica object (no module singletons)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from gateway.adapter import Ingest, IngestOutcome
from gateway.envelope import Envelope

if TYPE_CHECKING:
    from gateway.spooler import Spooler


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.ingested = Counter(
            "xgw_ingested_total",
            "Inbound events by outcome",
            ["integration", "status"],
            registry=self.registry,
        )
        self.ingest_seconds = Histogram(
            "xgw_ingest_seconds",
            "Time to make an inbound event durable",
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0),
        )

    def track_spool(self, spooler: Spooler) -> None:
        self.registry.register(_SpoolCollector(spooler))

    def wrap_ingest(self, ingest: Ingest) -> Ingest:
        children: dict[tuple[str, str], Any] = {}  # labels() takes a lock per call

        async def measured(envelope: Envelope) -> IngestOutcome:
            start = time.perf_counter()
            outcome = await ingest(envelope)
            self.ingest_seconds.observe(time.perf_counter() - start)
            key = (envelope.integration_id, outcome.status)
            counter = children.get(key)
            if counter is None:
                counter = children[key] = self.ingested.labels(*key)
            counter.inc()
            return outcome

        return measured

    async def handler(self, request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


class _SpoolCollector(Collector):
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
