"""The schedules there are (the config's and the runtime ones in Redis) and the changes made at
run time: what the admin API, the chat commands and confirmed routines share."""

from __future__ import annotations

import functools
import secrets
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import structlog
from pydantic import ValidationError

from gateway.clock import now_ms
from gateway.config.bases import IntegrationBase
from gateway.config.cron import Cron, CronError, iso, min_gap_seconds
from gateway.config.schedule_settings import RuntimeSchedule, ScheduleConfig, problems_of
from gateway.config.settings import Settings
from gateway.errors import Refused, first_problem
from sessions import ScheduleStore

log = structlog.get_logger("gateway.schedules")

MAX_PER_CHAT = 50  # runtime schedules per chat: a chat cannot flood the scheduler


def _duration(seconds: int) -> str:
    for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60)):
        if seconds >= size and seconds % size == 0:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


@functools.lru_cache(maxsize=4096)
def _gap(cron: Cron, least: int) -> int:
    return min_gap_seconds(cron, enough=least)  # the scheduler asks each tick


def too_often(integ: IntegrationBase, cron: Cron) -> str | None:
    """Why a schedule made in a chat may not have ``cron``: it fires more often than the
    integration's ``scheduleMinIntervalSeconds`` (issue 25: a chat member cannot make the bot
    run every second); None when it may. The admin API's and the config file's schedules are
    the operator's, and not held to it."""
    least = integ.schedule_min_interval_seconds
    if not least:
        return None
    gap = _gap(cron, least)
    if gap >= least:
        return None
    return (
        f"schedules made in a chat may fire at most once every {_duration(least)}, and "
        f"`{cron.expr}` fires {_duration(gap)} apart"
    )


def made_in_chat(schedule: ScheduleConfig) -> bool:
    return isinstance(schedule, RuntimeSchedule) and schedule.source in ("chat", "routine")


@dataclass(frozen=True)
class Entry:
    """One schedule as it stands: where it comes from, and its cron in its zone (None when it
    cannot fire now, e.g. its integration is gone)."""

    schedule: ScheduleConfig
    source: Literal["config", "runtime"]
    zone: str
    cron: Cron | None

    def next_fire(self, after_ms: int) -> int | None:
        if self.cron is None or not self.schedule.enabled:
            return None
        try:
            return self.cron.next_after(after_ms)
        except CronError:
            return None

    def describe(self, after_ms: int) -> dict[str, Any]:
        """The admin API's view: the schedule's fields, its source and next fire time."""
        data = self.schedule.model_dump(mode="json", by_alias=True, exclude_none=True)
        if "source" in data:  # how a runtime one was made: admin, chat or routine
            data["origin"] = data["source"]
        data.update(source=self.source, timezone=self.zone)
        nxt = self.next_fire(after_ms)
        data["nextFireAt"] = iso(nxt, self.cron.tz) if nxt is not None and self.cron else None
        data["nextFireAtMs"] = nxt
        return data


@functools.lru_cache(maxsize=4096)
def _parsed(expr: str, zone: str) -> Cron | None:
    """A cron in a zone, parsed once (the scheduler lists every schedule each tick)."""
    try:
        return Cron.parse(expr, zone)
    except CronError:
        return None


def entries_of(settings: Settings, runtime: Mapping[str, str]) -> list[Entry]:
    """The config's schedules in config order, then the runtime ones oldest first."""
    made: list[RuntimeSchedule] = []
    for schedule_id, raw in runtime.items():
        try:
            made.append(RuntimeSchedule.model_validate_json(raw))
        except ValidationError:
            log.warning("runtime schedule unreadable; ignored", schedule_id=schedule_id)
    made.sort(key=lambda s: (s.created_at, s.id))
    out: list[Entry] = []
    for source, group in (("config", settings.schedules), ("runtime", made)):
        for schedule in group:
            zone = schedule.zone_name(settings)
            cron: Cron | None = None
            if settings.integration(schedule.integration_id) is not None:
                cron = _parsed(schedule.cron, zone)
            out.append(Entry(schedule, source, zone, cron))  # type: ignore[arg-type]
    return out


class ScheduleBook:
    def __init__(
        self,
        *,
        store: ScheduleStore,
        settings: Callable[[], Settings],
        clock: Callable[[], int] = now_ms,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock

    async def entries(self, integration_id: str = "", chat_id: str = "") -> list[Entry]:
        found = entries_of(self.settings(), await self.store.runtime())
        return [
            e
            for e in found
            if (not integration_id or e.schedule.integration_id == integration_id)
            and (not chat_id or e.schedule.chat_id == chat_id)
        ]

    async def create(self, data: Mapping[str, Any]) -> RuntimeSchedule:
        """Validate and store a runtime schedule (an id is made up when none is given);
        Refused 400 for what is wrong with it, 409 for an id in use."""
        body = dict(data)
        body.setdefault("id", "s-" + secrets.token_hex(4))
        body["createdAt"] = self.clock()
        try:
            schedule = RuntimeSchedule.model_validate(body)
        except ValidationError as exc:
            raise Refused(400, first_problem(exc, unknown="unknown field")) from None
        settings = self.settings()
        problems = problems_of(schedule, settings.integrations, settings.experts)
        if problems:
            raise Refused(400, problems[0])
        if any(s.id == schedule.id for s in settings.schedules):
            raise Refused(409, f"schedule {schedule.id!r} is in the config file")
        chat = await self.entries(schedule.integration_id, schedule.chat_id)
        if sum(e.source == "runtime" for e in chat) >= MAX_PER_CHAT:
            raise Refused(
                409, f"this chat has {MAX_PER_CHAT} runtime schedules already; remove one first"
            )
        text = schedule.model_dump_json(by_alias=True, exclude_none=True)
        if not await self.store.add(schedule.id, text, start_ms=schedule.created_at):
            raise Refused(409, f"schedule {schedule.id!r} exists")
        log.info("schedule created", schedule_id=schedule.id, source=schedule.source)
        return schedule

    async def delete(self, schedule_id: str) -> None:
        """Remove a runtime schedule; Refused 409 for one of the config file, 404 for none."""
        if any(s.id == schedule_id for s in self.settings().schedules):
            raise Refused(409, f"schedule {schedule_id!r} is in the config file; change it there")
        if not await self.store.remove(schedule_id):
            raise Refused(404, f"no schedule {schedule_id!r}")
        log.info("schedule deleted", schedule_id=schedule_id)
