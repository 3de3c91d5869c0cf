"""The replica's one aiohttp application: the guard middleware, the probes (``gateway.ops.health``),
``/metrics``, the admin API and its parts (audit, watches, schedules, usage), each platform's
webhook routes and the external events; everything it serves, handed in built."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from aiohttp import web

from gateway.actions.chats import CallMetrics, Governor
from gateway.actions.server import ChatActionsServer
from gateway.archive.reader import ArchiveReader
from gateway.clock import now_ms
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.edge.factory import AdapterFactory
from gateway.edge.server_log import ServerLog
from gateway.ops.admin import AdminApi
from gateway.ops.audit_api import AuditApi
from gateway.ops.erasure_api import ErasureApi
from gateway.ops.health import Health, Replica
from gateway.ops.metrics import Metrics
from gateway.ops.principals_api import PrincipalsApi
from gateway.ops.usage_api import UsageApi
from gateway.policy.budgets import Budgets
from gateway.runtime.http_guard import guard
from gateway.triggers import external
from gateway.triggers.schedule_api import ScheduleApi
from gateway.triggers.schedule_book import ScheduleBook
from gateway.triggers.watch_admin import WatchAdmin
from gateway.triggers.watch_intake import GroupWatch
from sessions import PrincipalStore, RecordStore, SessionRecords, SessionStore
from sessions.erasure import RedisErasure


def web_app(
    *,
    settings: Callable[[], Settings],
    replica: Replica,
    metrics: Metrics,
    store: SessionStore,
    records: SessionRecords,
    watch: GroupWatch,
    book: ScheduleBook,
    schedules_changed: Callable[[], None],
    budgets: Budgets,
    factories: Mapping[str, AdapterFactory],
    adapters: dict[str, Adapter],
    archive: ArchiveReader | None = None,
) -> web.Application:
    """``settings`` is read per request where a reload may change the answer (the admin token,
    the integrations); the server's limits are those of the start (a restart changes them)."""
    server = settings().server
    app = web.Application(
        client_max_size=server.max_body_bytes,
        # Body deadline; Host, cross-site and JSON checks of the console and admin API.
        middlewares=[guard(lambda: settings().server)],
        handler_args={
            # aiohttp's own 400s (bad URL bytes, duplicate headers) as one line, no traceback
            "logger": ServerLog(),
            # an idle connection, or one whose request head is slow to come, is closed
            "keepalive_timeout": server.keep_alive_seconds,
        },
    )
    Health(replica).setup(app)  # GET /, /healthz, /readyz
    app.router.add_get("/metrics", metrics.handler)
    admin = AdminApi(settings=settings, store=store, records=records)
    admin.setup(app)
    AuditApi(settings=settings, records=records, archive=archive).setup(app, admin.guarded)
    erasure = RedisErasure(client=store.redis, keys=store.keys)
    db = archive.db if archive is not None else None
    ErasureApi(settings=settings, redis=erasure, archive=db).setup(app, admin.guarded)
    WatchAdmin(settings=settings, watch=watch).setup(app, admin.guarded)
    ScheduleApi(book=book, on_change=schedules_changed).setup(app, admin.guarded)
    UsageApi(settings=settings, budgets=budgets).setup(app, admin.guarded)
    principals = PrincipalStore(client=store.redis, keys=store.keys)
    PrincipalsApi(settings=settings, store=principals).setup(app, admin.guarded)
    for factory in factories.values():
        factory.setup_routes(app, adapters)
    external.setup_routes(app, adapters)  # POST /api/events/{integrationId}/{source}
    if settings().mcp.enabled:  # the MCP server of chat actions (docs/mcp.md)
        limits = RecordStore(client=store.redis, keys=store.keys)
        ChatActionsServer(
            settings=settings, adapters=adapters, records=records,
            governor=Governor(records=records, store=store, limits=limits),
            metrics=CallMetrics.of(metrics.registry), clock=now_ms,
        ).setup(app)  # fmt: skip
    return app
