"""The replica's unauthenticated probes: ``GET /`` (to the console, or the name and version),
``GET /healthz`` (liveness: the process serves) and ``GET /readyz`` (readiness: not stopping,
Redis answers a PING within 2 s, every adapter ready; 503 otherwise; the archive is shown but
never decides it). They hold no secret and no
chat or user id (docs/security.md)."""

from __future__ import annotations

import asyncio
import os
from typing import Any, Protocol

from aiohttp import web

from gateway import __version__
from gateway.edge.adapter import Adapter


class ArchiveProbe(Protocol):
    async def readiness(self) -> dict[str, Any]: ...


class Replica(Protocol):
    """What the probes read of a replica (gateway.runtime.app.Gateway)."""

    replica_id: str
    worker: int | None
    stopping: bool
    adapters: dict[str, Adapter]

    async def ping_redis(self) -> None: ...

    def probe_state(self) -> dict[str, Any]: ...

    @property
    def archive(self) -> ArchiveProbe | None: ...  # gateway.archive.service.ArchiveService


class Health:
    def __init__(self, replica: Replica) -> None:
        self.replica = replica

    def setup(self, app: web.Application) -> None:
        app.router.add_get("/", self.root)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)

    async def root(self, request: web.Request) -> web.StreamResponse:
        if any(a.settings.platform == "console" for a in self.replica.adapters.values()):
            raise web.HTTPFound("/console/")
        return web.json_response({"name": "xpert-gateway", "version": __version__})

    async def healthz(self, request: web.Request) -> web.Response:
        r = self.replica
        body: dict[str, Any] = {"status": "ok", "replica": r.replica_id, "pid": os.getpid()}
        if r.worker is not None:
            body["worker"] = r.worker
        return web.json_response(body)

    async def readyz(self, request: web.Request) -> web.Response:
        r = self.replica
        checks: dict[str, Any] = {}
        ready = not r.stopping
        try:
            async with asyncio.timeout(2):
                await r.ping_redis()
            checks["redis"] = {"ready": True}
        except Exception as exc:
            checks["redis"] = {"ready": False, "error": type(exc).__name__}
            ready = False
        for integ_id, adapter in r.adapters.items():
            state = adapter.readiness()
            checks[integ_id] = state
            ready = ready and bool(state.get("ready", True))
        body = {"ready": ready, "stopping": r.stopping, "checks": checks, **r.probe_state()}
        if r.archive is not None:  # informative: the outbox holds turns while it is down
            body["archive"] = await r.archive.readiness()
        return web.json_response(body, status=200 if ready else 503)
