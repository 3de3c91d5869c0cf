"""The admin HTTP API under ``/v1.0`` (bearer ``admin.token``), answering
``{"success": true, "result": …, "t": <ms>}`` or ``{"success": false, "code": …, "msg": …}``."""

from __future__ import annotations

import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from aiohttp import web

from gateway.config.settings import Settings
from gateway.edge.body import BodyTimeout
from sessions import STORE_DOWN, SessionRecords, SessionStore

log = structlog.get_logger("gateway.ops.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def ok(result: Any) -> web.Response:
    return web.json_response({"success": True, "result": result, "t": int(time.time() * 1000)})


def fail(status: int, code: str, msg: str) -> web.Response:
    return web.json_response({"success": False, "code": code, "msg": msg}, status=status)


class AdminApi:
    def __init__(
        self, *, settings: Callable[[], Settings], store: SessionStore, records: SessionRecords
    ) -> None:
        self.settings = settings  # read per request, so a reloaded admin.token applies
        self.store = store
        self.records = records

    def guarded(self, handler: Handler) -> Handler:
        """Bearer auth and storage errors for one admin route (Host, cross-site and JSON checks
        come first: gateway/runtime/http_guard.py)."""

        async def guarded(request: web.Request) -> web.StreamResponse:
            return await self._auth(request, handler)

        return guarded

    async def _auth(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        token = self.settings().admin.token
        if token is None:
            return fail(404, "admin_disabled", "the admin API is off: set admin.token")
        scheme, _, given = request.headers.get("Authorization", "").strip().partition(" ")
        given = given.strip()
        # Undecodable header bytes arrive as surrogates, which no encode() takes: a token is
        # ASCII, so anything else is refused as it is, unauthenticated. No header, another
        # scheme or an empty token: refused before any compare.
        if (
            scheme.lower() != "bearer"
            or not given
            or not given.isascii()
            or not hmac.compare_digest(given.encode(), token.get_secret_value().encode())
        ):
            log.info("admin request refused", path=request.path)
            return fail(401, "unauthorized", "a valid bearer token is required")
        try:
            response: web.StreamResponse = await handler(request)
        except BodyTimeout:  # a TimeoutError, so an OSError: the body's, not Redis's (a 408)
            raise
        except STORE_DOWN as exc:  # Redis could not serve it; anything else is a bug of ours
            log.warning("admin request failed: storage unavailable", error=type(exc).__name__)
            return fail(503, "storage_unavailable", "Redis did not answer")
        return response

    async def variables(self, request: web.Request) -> web.Response:
        session_id = request.match_info["sessionId"]
        record = await self.records.get(session_id)
        if not record:
            return fail(404, "not_found", "no such session")
        prefix = request.query.get("prefix", "")
        values = await self.records.variables(session_id, record)  # on the record's chat
        # Conversation variables (var.*) are stored as JSON and answered as values; backend.*
        # (what an expert backend already holds of them) is bookkeeping, not a variable.
        return ok(
            [
                {"variable_key": k, "variable_value": json.loads(v) if k.startswith("var.") else v}
                for k, v in sorted(values.items())
                if k.startswith(prefix) and not k.startswith("backend.")
            ]
        )

    async def end(self, request: web.Request) -> web.Response:
        session_id = request.match_info["sessionId"]
        record = await self.records.get(session_id)
        if not record:
            return fail(404, "not_found", "no such session")
        binding = await self.store.binding(record["conversation"])
        if binding.get("sessionId") != session_id:
            return fail(409, "not_active", "the session has already ended")
        await self.store.end_session(record["conversation"])
        at = int(time.time() * 1000)
        await self.store.audit(
            {
                "event": "session.end",
                "session": session_id,
                "conversation": record["conversation"],
                "at": at,
                "by": "admin",
            }
        )
        if record.get("integrationId"):
            await self.records.ended(record["integrationId"], session_id, at_ms=at, by="admin")
        return ok({"sessionId": session_id, "status": "ended"})

    async def memory(self, request: web.Request) -> web.Response:
        items = await self.records.memory(
            request.match_info["integrationId"], request.match_info["chatId"]
        )
        return ok([{"index": i, **item} for i, item in enumerate(items, 1)])

    def setup(self, app: web.Application) -> None:
        r, g = app.router, self.guarded
        # GET /v1.0/sessions, /v1.0/sessions/{id}[/audit], /v1.0/audit: gateway/ops/audit_api.py.
        r.add_get("/v1.0/sessions/{sessionId}/variables", g(self.variables))
        r.add_delete("/v1.0/sessions/{sessionId}", g(self.end))
        r.add_get("/v1.0/chats/{integrationId}/{chatId}/memory", g(self.memory))
