"""``/v1.0/schedules`` on the admin API (the same bearer auth as the other admin routes):
``GET`` lists the config's and the runtime schedules with their next fire time, ``POST`` makes a
runtime schedule (400 with the reason for a bad cron, time zone, integration or expert; 409 for
an id in use), ``DELETE /v1.0/schedules/{id}`` (or ``?id=``) removes a runtime one (404
unknown, 409 for a schedule of the config file)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable

import structlog
from aiohttp import web

from gateway.errors import Refused
from gateway.ops.admin import fail, ok
from gateway.triggers.schedule_book import ScheduleBook

log = structlog.get_logger("gateway.ops.admin")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ScheduleApi:
    def __init__(self, *, book: ScheduleBook, on_change: Callable[[], None]) -> None:
        self.book = book
        self.on_change = on_change

    async def list(self, request: web.Request) -> web.Response:
        entries = await self.book.entries(
            request.query.get("integrationId", ""), request.query.get("chatId", "")
        )
        now = self.book.clock()
        return ok([e.describe(now) for e in entries])

    async def create(self, request: web.Request) -> web.Response:
        try:
            body = json.loads(await request.text())
        except (ValueError, UnicodeDecodeError):
            return self._refused(Refused(400, "the body must be a JSON object"))
        if not isinstance(body, dict):
            return self._refused(Refused(400, "the body must be a JSON object"))
        for field in ("source", "createdAt"):
            if field in body:
                return self._refused(Refused(400, f"{field}: set by the gateway"))
        try:
            schedule = await self.book.create({**body, "source": "admin"})
        except Refused as exc:
            return self._refused(exc)
        self.on_change()
        entries = await self.book.entries(schedule.integration_id, schedule.chat_id)
        found = next(e for e in entries if e.schedule.id == schedule.id)
        return ok(found.describe(self.book.clock()))

    async def delete(self, request: web.Request) -> web.Response:
        schedule_id = request.match_info.get("scheduleId") or request.query.get("id", "")
        if not schedule_id:
            return self._refused(Refused(400, "name the schedule: /v1.0/schedules/{id}"))
        try:
            await self.book.delete(schedule_id)
        except Refused as exc:
            return self._refused(exc)
        return ok({"id": schedule_id, "deleted": True})

    def _refused(self, exc: Refused) -> web.Response:
        log.info("schedule request refused", status=exc.status, reason=exc.reason)
        return fail(exc.status, exc.code, exc.public)

    def setup(self, app: web.Application, guarded: Callable[[Handler], Handler]) -> None:
        r = app.router
        r.add_get("/v1.0/schedules", guarded(self.list))
        r.add_post("/v1.0/schedules", guarded(self.create))
        r.add_delete("/v1.0/schedules", guarded(self.delete))  # ?id=
        r.add_delete("/v1.0/schedules/{scheduleId}", guarded(self.delete))
