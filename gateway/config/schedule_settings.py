"""Schedule models: ``schedules[]`` in the config, and the runtime schedules kept in Redis.

A schedule names a chat of an integration, a cron (5 fields, or 6 with seconds first), an IANA
time zone (default: the integration's ``timezone``, else UTC), the text its turn starts with and
optionally the expert to run. Errors name the schedule and what is wrong. Cross-checks against
the integrations and experts (``problems_of``) run in the settings' own cross-check.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Protocol

from pydantic import AfterValidator, Field, model_validator

from gateway.config.cron import Cron, CronError, zone
from gateway.config.model import GatewayModel


class _Zoned(Protocol):
    @property
    def timezone(self) -> str | None: ...


class Integrations(Protocol):
    """What a schedule asks of the settings: its integration, for the time zone (the settings
    model holds the schedules, so this module cannot name it)."""

    def integration(self, integration_id: str, /) -> _Zoned | None: ...


SCHEDULE_ID = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"


class ScheduleConfig(GatewayModel):
    """One schedule: a turn started in a chat at the times its cron names."""

    id: str = Field(pattern=SCHEDULE_ID)
    integration_id: str = Field(min_length=1)
    chat_id: str = Field(min_length=1, max_length=256)
    chat_type: Literal["p2p", "group"]
    cron: str = Field(description="5 fields, or 6 with seconds first, e.g. '0 9 * * 1-5'")
    timezone: str | None = Field(
        None, description="IANA name; default the integration's timezone, else UTC"
    )
    text: str = Field(min_length=1, max_length=20_000, description="What the turn is asked")
    xpert_id: str | None = Field(None, description="The expert to run; default: routing")
    enabled: bool = True
    misfire_grace_seconds: int = Field(
        60,
        ge=1,
        le=86_400,
        description="A fire missed (replicas down) by at most this long still runs, once",
    )

    @model_validator(mode="after")
    def _cron(self) -> ScheduleConfig:
        # "key: reason": the config's message points at the key (schedules[daily].cron).
        try:
            zone(self.timezone or "UTC")
        except CronError as exc:
            raise ValueError(f"timezone: {exc}") from None
        try:
            Cron.parse(self.cron, self.timezone or "UTC")
        except CronError as exc:
            raise ValueError(f"cron: {exc}") from None
        return self

    def zone_name(self, settings: Integrations) -> str:
        """The time zone it fires in: its own, else its integration's, else UTC."""
        if self.timezone:
            return self.timezone
        integ = settings.integration(self.integration_id)
        return (integ.timezone if integ is not None else None) or "UTC"

    def parsed(self, settings: Integrations) -> Cron:
        return Cron.parse(self.cron, self.zone_name(settings))


class RuntimeSchedule(ScheduleConfig):
    """A schedule made at run time (admin API, ``/schedule``, a confirmed routine)."""

    source: Literal["admin", "chat", "routine"] = "admin"
    created_at: int = 0
    created_by: str | None = None


def problems_of(
    schedule: ScheduleConfig, integrations: Any, experts: Any, path: str | None = None
) -> list[str]:
    """What is wrong with ``schedule`` against the configured integrations and experts: as
    ``schedule 'id': …``, or with ``path`` (``schedules.3``) as ``schedules.3.xpertId: …``."""
    out: list[str] = []
    integ = next((i for i in integrations if i.id == schedule.integration_id), None)
    expert_ids = {e.id for e in experts}

    def say(key: str, what: str, problem: str) -> None:
        out.append(f"{path}.{key}: {problem}" if path else f"schedule {schedule.id!r}: {what}")

    if integ is None:
        known = ", ".join(sorted(i.id for i in integrations)) or "none"
        unknown = f"unknown integration {schedule.integration_id!r} (integrations: {known})"
        say("integrationId", unknown, unknown)
    elif schedule.timezone is None and integ.timezone is not None:
        try:
            Cron.parse(schedule.cron, integ.timezone)
        except CronError as exc:
            say("cron", str(exc), str(exc))
    if schedule.xpert_id is not None and schedule.xpert_id not in expert_ids:
        known = f"(experts: {', '.join(sorted(expert_ids))})"
        say(
            "xpertId",
            f"xpertId {schedule.xpert_id!r} names no expert {known}",
            f"{schedule.xpert_id!r} names no expert {known}",
        )
    return out


def check_schedules(value: list[ScheduleConfig]) -> list[ScheduleConfig]:
    """Ids unique (the settings' cross-check looks at their integrations and experts, with
    problems_of, where it reports them together with the other sections')."""
    problems: list[str] = []
    seen: set[str] = set()
    for i, schedule in enumerate(value):
        if schedule.id in seen:
            problems.append(f"schedules.{i}.id: duplicate id {schedule.id!r}")
        seen.add(schedule.id)
    if problems:
        raise ValueError("; ".join(problems))
    return value


Schedules = Annotated[list[ScheduleConfig], AfterValidator(check_schedules)]
