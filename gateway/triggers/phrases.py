"""Routines said in plain words: a chat message -> a 5-field cron routine, read deterministically.

``parse_routine`` reads the common Chinese and English phrasings of a recurring request
("每天 9 点总结本群", "every weekday at 9:30 summarize this group", "每周一上午10点提醒我交周报",
"check the queue every 15 minutes") and answers one of three things:

- ``RoutineSpec``: a recurrence, a time (or an interval) and an instruction were all read;
- ``Unrecognised``: it clearly is a routine request (the recurrence leads the message, after
  请/帮我/please/can you…, or follows 提醒/remind/schedule) but a part cannot be read or cannot be
  written as 5-field cron; the caller says so and shows ``USAGE_TEXT``. Nothing is guessed;
- ``None``: ordinary chat. A recurrence word alone is not a request: it must lead the message,
  follow 提醒/remind/schedule, or (fully read, with its time) close it ("summarize this group every
  day at 9am"); a leftover that reads as a statement (我…, 都…, I/we/it/the…, "X is …") or a
  question is chat.

Text rule: the instruction is the message minus the recurrence, the time, the timezone, leading
politeness (请, 帮我, please, can you…) and edge punctuation. 提醒我/remind me are kept: they are
part of what the xpert is asked to do ("每周一上午10点提醒我交周报" -> "提醒我交周报").
A time without 上午/下午/am/pm is read on the 24-hour clock ("每天 8 点" -> 08:00). "Every 7
minutes" is */7, which restarts at :00 each hour; the description says so.
Unrecognised on purpose: a day with no time (no default 09:00), the last day of a month (cron "L"
is not standard), every N days/weeks/months, intervals above 59 minutes or 23 hours, an interval
limited to certain hours or days ("every hour from 9 to 5", "every hour at :15"), several times
with different minutes, a bare 中午/早上 with no hour.
Messages longer than ``phrasebook.LONGEST`` characters are chat: a routine is said in a line or
two, and the cap keeps the time patterns cheap on hostile input.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gateway.triggers import phrasebook as book


@dataclass(frozen=True, slots=True)
class RoutineSpec:
    """A recurring instruction read from a message."""

    cron: str  # 5 fields: minute hour day-of-month month day-of-week
    text: str  # the instruction without the time phrase
    timezone: str | None  # only when the message names one ("UTC", "北京时间")
    description: str  # short, in the message's language: "每个工作日 09:30"


@dataclass(frozen=True, slots=True)
class Unrecognised:
    """A routine request that could not be read; ``reason`` is one line in its language."""

    reason: str


USAGE_TEXT = (
    "/schedule <cron> <text>, e.g. /schedule 0 9 * * 1-5 summarize this group\n"
    "/schedule <cron> <内容>，例如 /schedule 30 9 * * * 总结本群\n"
    "Or say it / 也可以直接说: “every weekday at 9:30 summarize this group”, “every Monday and "
    "Thursday at 6pm …”, “monthly on the 1st at 10:00 …”, “every 15 minutes …”, "
    "“每天 9 点总结本群”, “每周一上午10点提醒我交周报”, “每月1号 9:00 …”, “每隔2小时 …”"
)


@dataclass(frozen=True, slots=True)
class _Rule:
    """What a recurrence marker said: ``cron`` has {m} {h} slots when a time is still to come."""

    cron: str
    zh: str
    en: str
    timed: bool = True
    period: str | None = None  # implied by the marker: 每晚 -> 晚上, every morning -> am


def _num(t: str) -> int | None:
    """Digits, English number words or Chinese numerals up to 九十九; None for anything else."""
    t = t.lower().strip().replace("两", "二").replace("〇", "零")
    if t.isascii() and t.isdigit():
        return int(t)
    if t in book.WORDS:
        return book.WORDS[t]
    digits = "零一二三四五六七八九"
    if len(t) > 1 and "十" not in t:
        t = t.lstrip("零") or "零"  # 零五 -> 五
    tens, ten, ones = t.rpartition("十")
    if len(tens) > 1 or len(ones) > 1 or not set(tens + ones) <= set(digits) or not (ten or ones):
        return None
    return (digits.index(tens) if tens else int(bool(ten))) * 10 + (
        digits.find(ones) if ones else 0
    )


def _say(zh: bool, why: str, n: str = "") -> Unrecognised:
    return Unrecognised(book.WHY[why][0 if zh else 1].format(n=n))


def _week(days: set[int]) -> _Rule:
    """A day-of-week set as a rule with both descriptions (Monday first)."""
    ds = sorted(days)
    order = sorted(ds, key=lambda d: (d + 6) % 7)
    names = [book.EN_NAMES[d] for d in order]
    if len(ds) == 7:
        return _Rule("{m} {h} * * *", "每天", "every day")
    if ds == [1, 2, 3, 4, 5]:
        return _Rule("{m} {h} * * 1-5", "每个工作日", "every weekday")
    run = len(ds) > 2 and ds == list(range(ds[0], ds[-1] + 1))
    field = f"{ds[0]}-{ds[-1]}" if run else ",".join(map(str, ds))
    en = ", ".join(names[:-1]) + " and " + names[-1] if len(names) > 1 else names[0]
    zh = "每周" + "、".join("日一二三四五六"[d] for d in order)
    return _Rule(f"{{m}} {{h}} * * {field}", zh, f"every {en}")


def _dow(token: str, zh: bool) -> int:
    if zh:
        return "日一二三四五六天".index(token) % 7
    return [n[:3].lower() for n in book.EN_NAMES].index(token[:3].lower())


def _recurrence(kind: str, zh: bool, m: re.Match[str]) -> _Rule | Unrecognised | None:
    """What one recurrence marker says; None when the words are not a recurrence after all."""
    g = {k: (v or "") for k, v in m.groupdict().items()}
    if kind in ("weekdays", "weekend", "days") and not zh and g["w"].strip().lower() in ("", "on"):
        tokens = re.findall(book.DAY, g["d"], re.I) if kind == "days" else [m[0]]
        if not all(t.lower().rstrip(".").endswith("s") for t in tokens):
            return None  # "on Monday", "see you Sunday": one day, not a recurrence
    if kind == "daily":
        said = (g["p"] or g.get("q", "")).lower()
        return _Rule(
            "{m} {h} * * *", "每天", "every day", period=book.ALIASES.get(said, said) or None
        )
    if kind in ("weekdays", "weekend"):
        return _week({1, 2, 3, 4, 5} if kind == "weekdays" else {0, 6})
    if kind == "range":
        a, b = _dow(g["a"], zh), _dow(g["b"], zh)
        return _week({(a + i) % 7 for i in range((b - a) % 7 + 1)})
    if kind == "days":
        return _week({_dow(t, zh) for t in re.findall(book.DZ if zh else book.DAY, g["d"], re.I)})
    if kind == "month":
        n = g["n"].lower()
        if g.get("last") or n == "last":
            return _say(zh, "last")
        day = 1 if n == "first" else _num(n.rstrip("stndrh"))
        if not n or day is None or not 1 <= day <= 31:
            return _say(zh, "bad_day", n) if n else _say(zh, "no_day")
        zh_d, en_d = f"每月 {day} 日", f"every month on day {day}"
        if day > 28:  # cron skips the months that have no such day
            zh_d, en_d = f"{zh_d}（当月有这一天时）", f"{en_d} (in months that have it)"
        return _Rule(f"{{m}} {{h}} {day} * *", zh_d, en_d)
    unit = "hour" if g.get("h") else g["u"].lower()
    if unit[:1] not in ("分", "m", "小", "钟", "h") or unit.startswith("mo"):
        return _say(zh, "days")
    minutes = unit[:1] in ("分", "m")
    n = _num(g["n"]) if g["n"] else 1
    if g["n"] == "半" or g["n"].lower().startswith("half"):
        n, minutes = (None, True) if minutes else (30, True)
    if n is None or not 1 <= n <= (59 if minutes else 23):
        return _say(zh, "step", m[0])
    step, zh_u, en_u = (
        "*" if n == 1 else f"*/{n}",
        *(("分钟", "minute") if minutes else ("小时", "hour")),
    )
    zh_d, en_d = (
        (f"每 {n} {zh_u}", f"every {n} {en_u}s") if n > 1 else (f"每{zh_u}", f"every {en_u}")
    )
    if (60 if minutes else 24) % n:
        zh_d += "（每小时从 0 分重新计）" if minutes else "（每天从 0 点重新计）"
        en_d += " (restarting at :00 each hour)" if minutes else " (restarting at 00:00 each day)"
    return _Rule(f"{step} * * * *" if minutes else f"0 {step} * * *", zh_d, en_d, timed=False)


def _marker(s: str) -> tuple[int, int, bool, _Rule | Unrecognised] | None:
    """The earliest recurrence marker in ``s`` (at the same start, the earlier pattern)."""
    best: tuple[int, int, bool, _Rule | Unrecognised] | None = None
    for pattern, kind, zh in book.MARKERS:
        for m in pattern.finditer(s):
            if (rule := _recurrence(kind, zh, m)) is not None:
                if best is None or m.start() < best[0]:
                    best = (m.start(), m.end(), zh, rule)
                break
    return best


def _bare(m: re.Match[str] | None) -> bool:
    """A lone English number ("every day 9 …") is not a time: it needs at, am/pm, :MM or o'clock."""
    said = ("eat", "eap", "em", "eoc", "epart")
    return m is None or (m["eh"] is not None and not any(m[k] for k in said))


def _times(s: str, a: int, b: int) -> list[re.Match[str]]:
    """Time phrases right after the recurrence, else right before it, else closing the text."""
    first = book.AFTER.match(s, b)
    if first is not None and not _bare(first):
        found = [first]
        while not _bare(more := book.MORE.match(s, found[-1].end())) and more is not None:
            found.append(more)
        return found
    for m in (book.BEFORE.search(s, 0, a), book.BEFORE.search(s, b)):
        if m is not None and not _bare(m):
            return [m]
    return []


def _clock(m: re.Match[str], implied: str | None) -> tuple[int, int] | None:
    """(hour, minute) of one time phrase on a 24-h clock (hour 24 kept), or None if impossible."""
    if m["ew"]:
        return (0, 0) if m["ew"].lower() == "midnight" else (12, 0)
    if m["zh"] is not None:
        hour, said = _num(m["zh"]), m["zp"]
        minute: int | None = 30 if m["zhalf"] else {"一刻": 15, "三刻": 45}.get(m["zq"] or "", 0)
        if m["zm"] or m["zc"]:
            minute = _num(m["zm"] or m["zc"])
    else:
        hour, minute, said = int(m["eh"]), int(m["em"] or 0), None
        if m["eap"] or m["epart"]:
            said = m["eap"].strip()[0] + "m" if m["eap"] else m["epart"].split()[-1]
    period = book.ALIASES.get(said.lower(), said.lower()) if said else implied
    if hour is None or minute is None or not 0 <= minute <= 59 or period not in book.PERIODS:
        return None
    for low, high, add in book.PERIODS[period]:
        if low <= hour <= high and not (hour + add == 24 and minute):
            return hour + add, minute
    return None


def _zone(text: str) -> str | None:
    t = " ".join(text.lower().split())
    if m := re.fullmatch(r"(?:utc|gmt)\s*([+-])\s*(\d+)(?::00)?", t):
        n, east = int(m[2]), m[1] == "+"
        if n == 0 or n > (14 if east else 12):
            return "UTC" if n == 0 else None
        return f"Etc/GMT{'-' if east else '+'}{n}"  # POSIX signs: Etc/GMT-8 is UTC+8
    return book.ZONES.get(re.sub(r"\s*(?:时间|time)$", "", t))


def _text(raw: str, s: str, cut: list[tuple[int, int]]) -> str:
    """``raw`` without the cut spans, leading filler and edge punctuation (spans index both)."""
    joined_s = joined_raw = ""
    pos = 0
    for a, b in [*sorted(cut), (len(s), len(s))]:
        lo, hi = pos, a
        while lo < hi and s[lo] in book.EDGE:
            lo += 1
        while hi > lo and s[hi - 1] in book.EDGE:
            hi -= 1
        if lo < hi:
            sep = " " if joined_s and (joined_s[-1].isascii() or s[lo].isascii()) else ""
            joined_s, joined_raw = joined_s + sep + s[lo:hi], joined_raw + sep + raw[lo:hi]
        pos = max(pos, b)
    lead = book.LEAD.match(joined_s)
    return joined_raw[lead.end() if lead else 0 :].strip()


def _checked(cron: str) -> str:
    """Guard on this module's own output: five fields, every number in its cron range."""
    fields = cron.split()
    ranges = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
    shape = re.compile(r"\*(?:/\d+)?|\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*")
    ok = len(fields) == 5
    for field, (low, high) in zip(fields, ranges, strict=False):
        base, _, step = field.partition("/")
        values = [int(v) for v in re.findall(r"\d+", base)]
        ok = ok and shape.fullmatch(field) is not None and all(low <= v <= high for v in values)
        ok = ok and (not step or 0 < int(step) <= high)
    if not ok:
        raise ValueError(f"phrases produced an invalid cron {cron!r}")
    return cron


def parse_routine(text: str) -> RoutineSpec | Unrecognised | None:
    """Read ``text`` as a recurring routine; see the module docstring for the three answers."""
    if len(text) > book.LONGEST:
        return None
    s = text if text.isascii() else text.translate(book.WIDE)
    found = _marker(s) if book.ANY_MARKER.search(s.lower()) else None
    if found is None:
        return None
    a, b, zh, rule = found
    times = _times(s, a, b) if isinstance(rule, _Rule) else []
    spans = [(a, b), *((t.start(), t.end()) for t in times)]
    start, end = min(x for x, _ in spans), max(y for _, y in spans)
    remind = book.REMIND.match(s, 0, start) is not None
    polite = book.POLITE.match(s) is not None
    instruction = _text(text, s, spans)
    if polite:
        instruction = re.sub(r"[吗呢么]$", "", instruction).strip()
    chatty = (book.CHAT_ZH if zh else book.CHAT_EN).match(instruction) is not None
    if not remind and (chatty or (book.QUESTION.search(s) and not polite)):
        return None
    asked = remind or book.OPENING.fullmatch(s, 0, start) is not None  # its failures are reported
    if not asked and (book.JUNK.fullmatch(s, end) is None or not instruction):
        return None  # neither leading nor closing the message: chat that mentions a recurrence
    if not asked and (isinstance(rule, Unrecognised) or rule.timed != bool(times)):
        return None  # only a fully read routine may close the message
    if isinstance(rule, Unrecognised):
        return rule
    if not rule.timed and (times or book.LIMITED.match(s, b)):
        return _say(zh, "both")
    if rule.timed and not times:
        return _say(zh, "unread" if book.ATTEMPT.search(s[:a] + " " + s[b:]) else "no_time")
    zones = [t[k] for t in times for k in ("tz1", "tz2") if t[k]]
    zone = _zone(zones[0]) if zones else None
    if zones and zone is None:
        return _say(zh, "zone", zones[0])
    cron, description = rule.cron, rule.zh if zh else rule.en
    if rule.timed:
        clocks = [_clock(t, rule.period) for t in times]
        for t, c in zip(times, clocks, strict=True):
            if c is None or (c[0] == 24 and not rule.cron.endswith("* * *")):
                return _say(zh, "bad_time", t[0].strip(" ,的"))
        minutes = {c[1] for c in clocks if c}
        if len(minutes) > 1:
            return _say(zh, "minutes")
        minute, hours = minutes.pop(), sorted({c[0] % 24 for c in clocks if c})
        cron = rule.cron.format(m=minute, h=",".join(map(str, hours)))
        at = [f"{h:02d}:{minute:02d}" for h in hours]
        description += f" {'、'.join(at)}" if zh else f" at {' and '.join(at)}"
    if not instruction:
        return _say(zh, "no_text")
    if zone:
        description += f"（{zone}）" if zh else f" ({zone})"
    return RoutineSpec(_checked(cron), instruction, zone, description)
