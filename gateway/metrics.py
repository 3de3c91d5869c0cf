"""Prometheus metrics for ``/metrics``; one registry per replica object (no module singletons)."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from gateway.adapter import Ingest, IngestOutcome
from gateway.envelope import Envelope


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
