"""Cron expressions on croniter with zoneinfo: validation, fire times, and the DST rule.

A cron has 5 fields (minute hour day-of-month month day-of-week) or 6, whose first is the
second (croniter's ``second_at_beginning``). Fire times are computed on zone-aware datetimes
in the schedule's IANA time zone, so a daily 09:00 stays at 09:00 local time across DST.

DST, as croniter gives it and one rule of ours on top (tests/triggers/test_schedules_cron.py):
- spring forward: a time inside the gap (02:30 in Europe/Berlin on the last Sunday of March)
  fires once, at the first instant after the gap (03:00 local);
- fall back: croniter yields a fixed time inside the repeated hour twice (02:30 CEST and
  02:30 CET). We drop the second pass when the hour field is fixed (not ``*`` or ``*/n``), so a
  02:30 daily job fires once; a job whose hour field is a wildcard (every minute, every 5
  seconds, hourly) keeps firing by real time through both passes, as Vixie cron does.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterBadDateError, CroniterError, croniter

from gateway.errors import GatewayError

# A day-of-week field of the 6-field form: digits and cron punctuation, or day names.
_FIELD = re.compile(r"^(?:[0-9*?/,\-LW#]+|(?:(?:MON|TUE|WED|THU|FRI|SAT|SUN)[,\-]?)+)$", re.I)


class CronError(GatewayError, ValueError):
    """A cron expression or time zone that cannot be used; the message says why."""


def zone(name: str) -> ZoneInfo:
    """The IANA time zone ``name``; CronError when there is none of that name."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise CronError(unknown_zone(name)) from None


def unknown_zone(name: str) -> str:
    """What to say of a time zone name zoneinfo does not know: the closest one it knows."""
    import difflib
    from zoneinfo import available_timezones

    known = sorted(available_timezones())
    by_case = {z.lower(): z for z in known}
    meant = by_case.get(name.strip().lower().replace(" ", "_"))
    if meant is None:
        found = difflib.get_close_matches(name, known, n=1, cutoff=0.75)
        meant = found[0] if found else None
    hint = f"did you mean `{meant}`?" if meant else "an IANA name, e.g. Asia/Shanghai"
    return f"unknown time zone {name!r} ({hint})"


# Each field's name and range, 5-field order (the 6-field form puts the second first).
_RANGES = [("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12)]
_RANGES.append(("day of week", 0, 7))  # 0 and 7 are Sunday


def _why(fields: Sequence[str]) -> str:
    """What is wrong with a cron croniter refused, in words: the field and value out of range
    (``the hour 25 is out of range 0-23``), or nothing when it cannot tell."""
    ranges = ([("second", 0, 59)] if len(fields) == 6 else []) + _RANGES
    for text, (name, low, high) in zip(fields, ranges, strict=False):
        for part in text.split(","):
            base = part.split("/", 1)[0]
            for number in re.findall(r"\d+", base):
                if not low <= int(number) <= high:
                    return f": the {name} {number} is out of range {low}-{high}"
    return ""


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _second_pass(moment: datetime) -> bool:
    """Whether ``moment`` lies in the second pass of a wall-clock hour that repeats (fall back)."""
    local = moment.replace(tzinfo=None)
    tz = moment.tzinfo
    first = local.replace(fold=0, tzinfo=tz).utcoffset()
    second = local.replace(fold=1, tzinfo=tz).utcoffset()
    return first != second and moment.utcoffset() == second


@dataclass(frozen=True)
class Cron:
    """A validated cron expression in a time zone."""

    expr: str
    tz: ZoneInfo
    seconds: bool = field(default=False)

    @classmethod
    def parse(cls, expr: str, timezone: str = "UTC") -> Cron:
        """Validate ``expr`` (5 or 6 fields) in ``timezone``; CronError says what is wrong."""
        tz = zone(timezone)
        fields = expr.split()
        if len(fields) not in (5, 6):
            raise CronError(
                f"cron {expr!r} has {len(fields)} fields; it needs 5 (minute hour day month "
                "weekday) or 6 (second first)"
            )
        seconds = len(fields) == 6
        normal = " ".join(fields)
        if not croniter.is_valid(normal, second_at_beginning=seconds):
            raise CronError(f"cron {expr!r} is not a valid cron expression{_why(fields)}")
        cron = cls(normal, tz, seconds)
        try:
            cron.next_after(_ms(datetime.now(UTC)))
        except CronError:
            raise CronError(f"cron {expr!r} never fires") from None
        return cron

    @property
    def _fixed_hour(self) -> bool:
        return not self.expr.split()[2 if self.seconds else 1].startswith("*")

    def _iter(self, start: datetime, *, backwards: bool = False) -> Iterator[datetime]:
        it = croniter(self.expr, start, second_at_beginning=self.seconds)
        step = it.get_prev if backwards else it.get_next
        while True:
            try:
                moment: datetime = step(datetime)
            except (CroniterBadDateError, CroniterError):
                raise CronError(f"cron {self.expr!r} never fires") from None
            if self._fixed_hour and _second_pass(moment):
                continue
            yield moment

    def _local(self, at_ms: int) -> datetime:
        return datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(self.tz)

    def next_after(self, after_ms: int) -> int:
        """The first fire strictly after ``after_ms`` (epoch ms)."""
        return _ms(next(self._iter(self._local(after_ms))))

    def latest_until(self, until_ms: int) -> int:
        """The last fire at or before ``until_ms``."""
        return _ms(next(self._iter(self._local(until_ms + 1), backwards=True)))

    def between(self, after_ms: int, until_ms: int, *, limit: int = 1000) -> list[int]:
        """The fires in (``after_ms``, ``until_ms``], at most ``limit`` of them (the first)."""
        out: list[int] = []
        for moment in self._iter(self._local(after_ms)):
            at = _ms(moment)
            if at > until_ms or len(out) >= limit:
                break
            out.append(at)
        return out

    def upcoming(self, after_ms: int, count: int) -> list[datetime]:
        """The next ``count`` fires after ``after_ms`` as local datetimes (cards, the API)."""
        it = self._iter(self._local(after_ms))
        return [next(it) for _ in range(count)]


DAY = 86_400
_DAY_SCAN = 400  # fire days looked at for two in a row


def _values(field: Sequence[int | str], size: int) -> list[int]:
    """One expanded croniter field as sorted values (``*`` is every value of ``size``)."""
    if list(field) == ["*"]:
        return list(range(size))
    return sorted({int(v) for v in field})


def _step(values: list[int]) -> int | None:
    """The smallest difference of two neighbouring ``values`` (None: fewer than two)."""
    return min((b - a for a, b in itertools.pairwise(values)), default=None)


def min_gap_seconds(cron: Cron, enough: int = 2 * DAY) -> int:
    """The smallest gap in seconds (wall clock) between two consecutive fires of ``cron``; a
    gap of ``enough`` or more is not looked into further (the answer is then ``enough`` or
    more).

    Cron's fields make every fire day fire at the same times of day, so the gaps are those
    between neighbouring seconds of a minute, minutes of an hour and hours of a day (each less
    what the finer fields span), and the one overnight, from the day's last fire to the first
    of the next day, when the cron fires on two days in a row. Computed from the expanded
    fields, not by walking fires, so a cron firing every second costs no more than a daily one;
    only an overnight gap below ``enough`` looks at up to ``_DAY_SCAN`` fire days. A DST change
    moves a fire by at most its shift, once; that is left out."""
    it = croniter(cron.expr, second_at_beginning=cron.seconds)
    minute_f, hour_f, dom, month, dow = it.expanded[:5]
    secs = _values(it.expanded[5], 60) if cron.seconds else [0]
    mins, hours = _values(minute_f, 60), _values(hour_f, 24)
    span_m = secs[-1] - secs[0]  # what a minute's fires span
    span_h = mins[-1] * 60 + secs[-1] - (mins[0] * 60 + secs[0])
    span_d = (
        hours[-1] * 3600 + mins[-1] * 60 + secs[-1] - (hours[0] * 3600 + mins[0] * 60 + secs[0])
    )
    step_s, step_m, step_h = _step(secs), _step(mins), _step(hours)
    gaps = [step_s] if step_s is not None else []
    if step_m is not None:
        gaps.append(step_m * 60 - span_m)
    if step_h is not None:
        gaps.append(step_h * 3600 - span_h)
    gap = min(gaps, default=2 * DAY)
    overnight = DAY - span_d
    if overnight < min(gap, enough) and _days_in_a_row(cron.expr, dom, month, dow):
        gap = overnight
    return gap


def _days_in_a_row(
    expr: str, dom: Sequence[int | str], month: Sequence[int | str], dow: Sequence[int | str]
) -> bool:
    """Whether a cron fires on two days in a row (looked for over its next fire days)."""
    if list(dom) == list(month) == list(dow) == ["*"]:
        return True
    days = croniter(" ".join(["0", "0", *expr.split()[-3:]]), datetime(2000, 1, 1))
    previous: datetime | None = None
    for _ in range(_DAY_SCAN):
        try:
            day: datetime = days.get_next(datetime)
        except (CroniterBadDateError, CroniterError):
            return False
        if previous is not None and (day - previous).days == 1:
            return True
        previous = day
    return False


def split_command(rest: str) -> tuple[str, str]:
    """``/schedule``'s argument -> (cron, text). The cron has 6 fields (seconds first) when the
    6th token is a valid cron field (digits, ``* / , - ? L W #`` or day names such as MON-FRI)
    and the first six tokens validate as a 6-field cron; otherwise it has 5. CronError when
    there are too few tokens, no text, or the 5 fields are not a cron."""
    tokens = rest.split()
    if len(tokens) >= 7 and _FIELD.match(tokens[5]):
        six = " ".join(tokens[:6])
        if croniter.is_valid(six, second_at_beginning=True):
            return six, " ".join(tokens[6:])
    if len(tokens) < 6:
        raise CronError("give a cron (5 fields, or 6 with seconds first) and then the text")
    five = " ".join(tokens[:5])
    if not croniter.is_valid(five):
        raise CronError(f"cron {five!r} is not a valid cron expression{_why(tokens[:5])}")
    return five, " ".join(tokens[5:])


def iso(at_ms: int, tz: ZoneInfo) -> str:
    """A fire time as ISO 8601 in ``tz`` (seconds precision)."""
    return datetime.fromtimestamp(at_ms / 1000, UTC).astimezone(tz).isoformat(timespec="seconds")
