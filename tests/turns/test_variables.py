"""``sys.*`` date and time text: right per time zone, and the same whether formatted or kept."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from gateway.turns.variables import system_variables


def _sys(timezone: str | None, now: datetime) -> dict[str, str]:
    return system_variables(language=None, locale=None, timezone=timezone, thread_id="t",
                            user_id="u", now=now)  # fmt: skip


def test_date_and_time_follow_the_zone_and_the_second() -> None:
    now = datetime(2026, 11, 30, 23, 59, 59, 900_000, tzinfo=UTC)
    for _ in range(2):  # formatted, then kept: the same text
        utc, shanghai = _sys(None, now), _sys("Asia/Shanghai", now)
        assert (utc["sys.date"], utc["sys.datetime"]) == ("2026-11-30", "2026-11-30 23:59:59 UTC")
        assert shanghai["sys.date"] == "2026-12-01"
        assert shanghai["sys.datetime"] == "2026-12-01 07:59:59 CST"
    later = _sys("Asia/Shanghai", now + timedelta(milliseconds=200))
    assert later["sys.datetime"] == "2026-12-01 08:00:00 CST"
    for zone in ("Europe/Berlin", "America/New_York"):
        expected = now.astimezone(ZoneInfo(zone)).strftime("%Y-%m-%d %H:%M:%S %Z")
        assert _sys(zone, now)["sys.datetime"] == expected
