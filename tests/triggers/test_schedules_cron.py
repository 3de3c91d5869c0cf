"""Cron and time zone validation, the /schedule argument rule, and fire times across DST changes
in Europe/Berlin and America/New_York (gateway/config/cron.py)."""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from gateway.config.cron import Cron, CronError, split_command
from gateway.config.errors import ConfigError
from gateway.config.file import load_settings
from gateway.runtime.cli import settings_model


def ms(text: str, zone: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone)).timestamp() * 1000)


def local(fires: list[int], zone: str) -> list[str]:
    tz = ZoneInfo(zone)
    return [datetime.fromtimestamp(f / 1000, tz).isoformat() for f in fires]


@pytest.mark.parametrize(
    ("expr", "reason"),
    [
        ("0 9 * *", "has 4 fields"),
        ("0 0 9 * * * *", "has 7 fields"),
        ("61 9 * * *", "not a valid cron"),
        ("0 25 * * *", "not a valid cron"),
        ("0 9 * * mon-xyz", "not a valid cron"),
        ("99 0 9 * * *", "not a valid cron"),
        ("0 0 30 2 *", "never fires"),
        ("", "has 0 fields"),
    ],
)
def test_a_bad_cron_says_what_is_wrong(expr: str, reason: str) -> None:
    with pytest.raises(CronError, match=reason):
        Cron.parse(expr)


@pytest.mark.parametrize("name", ["Mars/Base", "", "../etc/passwd", "Europe/Berlin "])
def test_an_unknown_time_zone_is_refused(name: str) -> None:
    with pytest.raises(CronError, match="unknown time zone"):
        Cron.parse("0 9 * * *", name)


def test_six_fields_put_the_seconds_first() -> None:
    cron = Cron.parse("*/5 * * * * *", "UTC")
    start = ms("2026-01-01T00:00:01", "UTC")
    assert cron.between(start, start + 12_000) == [start + 4_000, start + 9_000]
    assert Cron.parse("30 0 9 * * *", "UTC").next_after(ms("2026-01-01T00:00:00", "UTC")) == ms(
        "2026-01-01T09:00:30", "UTC"
    )


@pytest.mark.parametrize(
    ("rest", "cron", "text"),
    [
        ("0 9 * * 1-5 summarize yesterday", "0 9 * * 1-5", "summarize yesterday"),
        ("*/5 * * * * * ping the team", "*/5 * * * * *", "ping the team"),
        ("0 30 9 * * MON-FRI standup", "0 30 9 * * MON-FRI", "standup"),
        # "report" is no cron field: five fields, and the text is the rest.
        ("0 9 * * 1 report the week", "0 9 * * 1", "report the week"),
        # a 6th token that is a field, but six fields that do not validate: five.
        ("0 9 * * 1 60 minutes of review", "0 9 * * 1", "60 minutes of review"),
        ("30 8 * * * 每天总结", "30 8 * * *", "每天总结"),
    ],
)
def test_schedule_command_argument_rule(rest: str, cron: str, text: str) -> None:
    assert split_command(rest) == (cron, text)


@pytest.mark.parametrize("rest", ["", "0 9 * * *", "0 9 * * * ", "61 9 * * * text", "hello"])
def test_schedule_command_without_a_cron_and_text_is_refused(rest: str) -> None:
    with pytest.raises(CronError):
        split_command(rest)


# --- DST -------------------------------------------------------------------------------------
# (zone, the day before spring forward, the day before fall back)
ZONES = [
    ("Europe/Berlin", "2026-03-28", "2026-10-24"),
    ("America/New_York", "2026-03-07", "2026-10-31"),
]


@pytest.mark.parametrize(("zone", "spring", "fall"), ZONES)
def test_a_daily_0230_job_fires_once_on_both_dst_days(zone: str, spring: str, fall: str) -> None:
    cron = Cron.parse("30 2 * * *", zone)
    for day in (spring, fall):
        start = ms(f"{day}T12:00:00", zone)
        fires = cron.between(start, start + 3 * 86_400_000)
        assert len(fires) == 3, local(fires, zone)  # one a day: no day skipped, none doubled
    # Spring forward: 02:30 does not exist that night; croniter fires at the first instant after
    # the gap, 03:00 local (DST offset).
    start = ms(f"{spring}T12:00:00", zone)
    gap_day = local(cron.between(start, start + 86_400_000), zone)
    assert [t[11:] for t in gap_day] == [
        "03:00:00+02:00" if zone == "Europe/Berlin" else "03:00:00-04:00"
    ]


def test_fall_back_repeats_berlin_0230_but_it_fires_once_in_the_first_pass() -> None:
    zone = "Europe/Berlin"
    cron = Cron.parse("30 2 * * *", zone)
    start = ms("2026-10-24T12:00:00", zone)
    assert local(cron.between(start, start + 2 * 86_400_000), zone) == [
        "2026-10-25T02:30:00+02:00",  # CEST; the 02:30 CET an hour later does not fire
        "2026-10-26T02:30:00+01:00",
    ]


@pytest.mark.parametrize(
    ("zone", "day", "expected"),
    [
        # New York falls back at 02:00 EDT to 01:00 EST: 01:00-01:59 happens twice, and a job
        # pinned to 01:30 fires in the first pass only.
        ("America/New_York", "2026-11-01", ["01:30:00-04:00"]),
        ("Europe/Berlin", "2026-10-25", ["01:30:00+02:00"]),
    ],
)
def test_a_fixed_time_in_the_repeated_hour_fires_once(
    zone: str, day: str, expected: list[str]
) -> None:
    cron = Cron.parse("30 1 * * *", zone)
    start = ms(f"{day}T00:00:00", zone)
    assert [t[11:] for t in local(cron.between(start, start + 6 * 3_600_000), zone)] == expected


@pytest.mark.parametrize(("zone", "spring", "fall"), ZONES)
def test_an_hourly_job_follows_real_time_through_both_changes(
    zone: str, spring: str, fall: str
) -> None:
    cron = Cron.parse("0 * * * *", zone)
    for day, hours in ((spring, 23), (fall, 25)):
        nxt = datetime.fromisoformat(day).replace(tzinfo=ZoneInfo(zone))
        start = int(nxt.timestamp() * 1000) + 86_400_000 - 1  # just before the change day
        end = start + hours * 3_600_000
        fires = cron.between(start, end)
        # one fire per real hour: the 23-hour day has 23, the 25-hour day 25, none twice
        assert len(fires) == hours and len(set(fires)) == hours, local(fires, zone)
        assert all(b - a == 3_600_000 for a, b in itertools.pairwise(fires))


def test_a_5_second_job_fires_every_5_real_seconds_across_fall_back() -> None:
    zone = "America/New_York"
    cron = Cron.parse("*/5 * * * * *", zone)
    start = ms("2026-11-01T01:59:50", zone)  # first pass (EDT)
    fires = cron.between(start, start + 30_000)
    assert all(b - a == 5_000 for a, b in itertools.pairwise(fires))
    assert len(fires) == 6


# --- config ----------------------------------------------------------------------------------
def config(**schedule: object) -> dict[str, object]:
    entry = {
        "id": "daily",
        "integrationId": "console",
        "chatId": "team",
        "chatType": "group",
        "cron": "0 9 * * 1-5",
        "text": "summarize",
        **schedule,
    }
    return {
        "experts": [{"id": "echo", "kind": "echo"}],
        "integrations": [
            {"id": "console", "platform": "console", "xpertId": "echo", "timezone": "Asia/Shanghai"}
        ],
        "schedules": [entry],
    }


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ({"cron": "0 9 * *"}, "schedules[daily].cron: cron '0 9 * *' has 4 fields"),
        ({"timezone": "Mars/Base"}, "schedules[daily].timezone: unknown time zone 'Mars/Base'"),
        ({"integrationId": "nope"}, "schedules[daily].integrationId: unknown integration 'nope'"),
        ({"xpertId": "gpt"}, "schedules[daily].xpertId: 'gpt' names no expert"),
        ({"chatType": "channel"}, "schedules[daily].chatType"),
        ({"misfireGraceSeconds": 0}, "schedules[daily].misfireGraceSeconds"),
    ],
)
def test_config_errors_name_the_schedule_and_the_problem(
    schedule: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(config(**schedule), model=settings_model())
    assert message in str(caught.value)


def test_config_defaults_and_the_integrations_time_zone() -> None:
    settings = load_settings(config(), model=settings_model())
    [schedule] = settings.schedules
    assert schedule.enabled and schedule.misfire_grace_seconds == 60
    assert schedule.zone_name(settings) == "Asia/Shanghai"
    settings = load_settings(config(timezone="Europe/Berlin"), model=settings_model())
    assert settings.schedules[0].zone_name(settings) == "Europe/Berlin"
