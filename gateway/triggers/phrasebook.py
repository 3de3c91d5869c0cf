"""The words ``phrases.parse_routine`` knows: recurrence markers, clock times, periods of the day,
timezones, filler and the one-line reasons it gives, in Chinese and English. Data and compiled
patterns only; the reading itself is in ``phrases``."""

from __future__ import annotations

import re

LONGEST = 500  # characters; a longer message is never read as a routine
WIDE = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}  # full width -> ASCII
CN = "[零〇一二两三四五六七八九十]"
DZ = "[一二三四五六日天]"
WK = "(?:周|星期|礼拜)"
DAY = (
    r"(?:mon(?:day)?|tue(?:s(?:day)?)?|wed(?:nesday)?|thu(?:r(?:s(?:day)?)?)?|fri(?:day)?"
    r"|sat(?:urday)?|sun(?:day)?)s?\b\.?"
)
EN_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
# fmt: off
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
         "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "fifteen": 15, "twenty": 20,
         "thirty": 30, "other": 2}
ZONES = {
    "utc": "UTC", "gmt": "UTC", "北京": "Asia/Shanghai", "中国": "Asia/Shanghai",
    "上海": "Asia/Shanghai", "beijing": "Asia/Shanghai", "china": "Asia/Shanghai",
    "shanghai": "Asia/Shanghai", "香港": "Asia/Hong_Kong", "hong kong": "Asia/Hong_Kong",
    "东京": "Asia/Tokyo", "日本": "Asia/Tokyo", "tokyo": "Asia/Tokyo", "japan": "Asia/Tokyo",
    "新加坡": "Asia/Singapore", "singapore": "Asia/Singapore", "伦敦": "Europe/London",
    "london": "Europe/London", "柏林": "Europe/Berlin", "berlin": "Europe/Berlin",
    "巴黎": "Europe/Paris", "paris": "Europe/Paris", "纽约": "America/New_York",
    "美东": "America/New_York", "new york": "America/New_York", "eastern": "America/New_York",
    "美西": "America/Los_Angeles", "pacific": "America/Los_Angeles",
    "悉尼": "Australia/Sydney", "sydney": "Australia/Sydney",
}
# (low, high, add): an hour said with this period in [low, high] is (hour + add) on a 24-h clock
PERIODS: dict[str | None, tuple[tuple[int, int, int], ...]] = {
    None: ((0, 24, 0),),  # 24 is kept and checked against the days (only daily may say 24点)
    "am": ((1, 11, 0), (12, 12, -12)), "pm": ((1, 11, 12), (12, 12, 0)),
    "night": ((6, 11, 12), (12, 12, -12)), "上午": ((0, 12, 0),),
    "凌晨": ((0, 6, 0), (12, 12, -12)), "中午": ((11, 12, 0), (1, 2, 12)),
    "下午": ((1, 11, 12), (12, 23, 0)), "傍晚": ((4, 7, 12), (16, 19, 0)),
    "晚上": ((5, 11, 12), (12, 12, -12), (17, 23, 0), (0, 0, 0)),
}
ALIASES = {"早上": "上午", "早晨": "上午", "清晨": "上午", "早": "上午", "夜里": "晚上",
           "夜间": "晚上", "夜晚": "晚上", "晚间": "晚上", "晚": "晚上", "morning": "am",
           "afternoon": "pm", "evening": "pm", "nightly": "night"}
WHY = {  # reasons for Unrecognised: (Chinese, English)
    "last": ("5 段 cron 写不出“每月最后一天”，请说具体日期",
             "the last day of a month cannot be written in 5-field cron; name a date"),
    "no_day": ("没有说每月几号", "no day of the month given"),
    "bad_day": ("每月没有 {n} 号", "a month has no day {n}"),
    "days": ("5 段 cron 写不出“每 N 天/周/月”，请说每天、每周一或每月1号",
             "every N days, weeks or months cannot be written in 5-field cron; say daily, "
             "every Monday or monthly on the 1st"),
    "step": ("“{n}”写不成 cron 步长（分钟 1–59，小时 1–23）",
             "'{n}' is not a cron step (minutes 1-59, hours 1-23)"),
    "both": ("间隔不能再限定时间或日期，请用 /schedule 写 cron",
             "an interval cannot be limited to certain times or days here; write the cron with "
             "/schedule"),
    "unread": ("看不懂时间，请写成“9点”“下午3点半”或“21:00”",
               "could not read the time; write it like 9:30, 9am or 21:00"),
    "no_time": ("没有给出时间（例如“每天 9 点”）", "no time given (e.g. every day at 9am)"),
    "bad_time": ("看不懂时间“{n}”", "could not read the time '{n}'"),
    "zone": ("看不懂时区“{n}”", "unknown timezone '{n}'"),
    "minutes": ("几个时间的分钟不同，请分成几个例行任务",
                "times with different minutes need separate routines"),
    "no_text": ("没有说要做什么", "no instruction given"),
}
# fmt: on


def _tz(name: str) -> str:
    zh = "|".join(k for k in ZONES if not k.isascii())
    en = "|".join(k for k in ZONES if k.isascii() and k not in ("utc", "gmt"))
    return (
        rf"(?P<{name}>(?:utc|gmt)\s*[+-]\s*(?:1[0-4]|\d)(?::00)?(?![\d:])"
        rf"|(?:utc|gmt)\b(?!\s*[+-]\s*\d)|(?:{zh})时间|(?:{en})\s+time\b)"
    )


ZH_TIME = (  # 九点, 9点半, 下午3点一刻, 9点05, 晚上十一点四十五, 21:00
    r"(?P<zp>上午|早上|早晨|清晨|凌晨|中午|下午|傍晚|晚上|夜里|夜间|夜晚|晚间|早|晚)?\s*"
    rf"(?P<zh>(?<!\d)\d{{1,2}}|{CN}{{1,3}})\s*(?:[点點时時](?:\s*(?:(?P<zhalf>半)|(?P<zq>[一三]刻)"
    rf"|(?P<zm>\d{{2}}(?!\d)|\d(?=\s*分)|{CN}{{2,3}}|{CN}(?=分))\s*分?)|整(?![理个天体齐顿治]))?"
    r"|:(?P<zc>\d{2})(?!\d)(?!\s*[ap]\.?m(?![a-z])))"
)
EN_TIME = (  # at 9, 9am, 9:30 pm, 21:00, at 8 in the evening, 9 o'clock, noon, midnight
    r"(?P<eat>\bat\s+)?(?:(?P<ew>noon|midday|midnight)|(?<![\d:])(?P<eh>\d{1,2})"
    r"(?:[:.](?P<em>\d{2}))?(?P<eap>\s*[ap]\.?m(?![a-z])\.?)?(?P<eoc>\s*o['’]?clock)?"
    r"(?:\s+(?P<epart>in\s+the\s+(?:morning|afternoon|evening)|at\s+night))?)(?![a-z0-9:])"
)
TIME = rf"(?:{_tz('tz1')}\s*)?(?:{ZH_TIME}|{EN_TIME})(?:\s*\(?\s*{_tz('tz2')}\s*\)?)?"
AFTER = re.compile(rf"[\s,的]*{TIME}", re.I)  # right after the recurrence
BEFORE = re.compile(rf"{TIME}[\s,]*$", re.I)  # ending where the recurrence (or the text) ends
MORE = re.compile(rf"\s*(?:和|与|及|、|,|and|&)\s*{TIME}", re.I)  # "9点和18点", "9am and 6pm"
ATTEMPT = re.compile(
    rf"\d|\bat\b|\b(?:am|pm|noon|midnight|o'?clock)\b|{CN}\s*[点點时時]"
    r"|上午|下午|晚上|早上|凌晨|中午|傍晚",
    re.I,
)
LIMITED = re.compile(  # right after an interval: it is being limited ("every hour from 9 to 5")
    r"[\s,]*(?:(?:at|from|between|during|past|after|until|till|on|only)\b|\d|:|的第|从"
    r"|[上下中]午|早上|晚上|白天|凌晨|工作日|周末)",
    re.I,
)
FILL = (
    r"(?:[\s,.:;!~\-—、。]|请你?(?![假客教求])|麻烦你?|帮我|帮忙|能不能|能否|可不可以|可以"
    r"|please\b|pls\b|(?:can|could|would|will)\s+you\b|/?schedule\b|定时|to\b|and\b|then\b|然后)"
)
LEAD = re.compile(rf"{FILL}*", re.I)
OPENING = re.compile(rf"(?:{FILL}|@\S+\s+)*", re.I)  # may come before a routine: filler, @mentions
REMIND = re.compile(rf"{FILL}*(?:提醒|remind\b|/?schedule\b|定时)", re.I)
POLITE = re.compile(
    r"\s*(?:请你?|麻烦你?)?(?:能不能|能否|可不可以|可以|(?:can|could|would|will)\s+you\b)", re.I
)
QUESTION = re.compile(r"(?:\?|吗|呢|么)[\s.!~]*$")
JUNK = re.compile(r"[\s,.:;!~\-—、。?]*")
EDGE = " \t\r\n,.:;!~-—、。?"
CHAT_ZH = re.compile(r"我|他|她|它|咱|大家|都|也|是|很|就|还|又|有人|没|这|那|.{1,3}都")
CHAT_EN = re.compile(
    r"(?:i|i'm|we|you|he|she|they|it|it's|my|our|your|his|her|their|its|the|this|that|there"
    r"|these|those|what|why|how|when|who)\b|(?:\S+\s+){0,2}(?:is|are|was|were|am)\b",
    re.I,
)
EACH = r"(?P<w>(?:every|each|on)\s+)?"
DAYS = rf"{DAY}(?:\s*(?:,\s*and|,|and|&|or)\s*{DAY})*"
TO = r"\s*(?:to|through|thru|until|till|-|–)\s*"
NTH = r"\d{1,2}(?:st|nd|rd|th)?|first|last"
N = rf"\d{{1,2}}|{CN}{{1,3}}"
UNIT = r"minutes?|mins?|hours?|hrs?|days?|weeks?|months?"
ZH_UNIT = r"分钟|小时|钟头|天|日|周|星期|礼拜|月"
# fmt: off
MARKERS: tuple[tuple[re.Pattern[str], str, bool], ...] = tuple(  # same start: the first wins
    (re.compile(pattern, re.I), kind, not pattern.startswith(r"\b")) for kind, pattern in (
        ("range", rf"每?{WK}(?P<a>{DZ})\s*(?:到|至|-|~)\s*{WK}?(?P<b>{DZ})"),
        ("weekdays", r"(?:每一?个?)?工作日"),
        ("weekend", r"每一?个?(?:周末|双休日)"),
        ("days", rf"(?:每|逢)个?{WK}(?P<d>{DZ}(?:\s*[、,和及与]?\s*{WK}?{DZ})*)"),
        ("month", rf"每一?个?月的?(?:(?P<n>{N})\s*[号日]|(?P<last>最后一天|月底|月末))?"),
        ("daily", rf"每一?天|每日|天天(?=\s*(?:\d|{CN}+\s*[点點时時]|[上下中]午|早上|晚上|凌晨))"
                  r"|每(?P<p>晚|早)"),  # 天天 only with a time: "天天开心" is chat
        ("every", rf"每隔?\s*(?P<n>\d+|{CN}{{1,3}}|半)?\s*个?\s*(?P<u>{ZH_UNIT})"),
        ("range", rf"\b(?:(?:every|each|from|on)\s+)?(?P<a>{DAY}){TO}(?P<b>{DAY})"),
        ("weekdays", rf"\b{EACH}(?:week|working\s+|work|business\s+)days?\b"),
        ("weekend", rf"\b{EACH}weekends?\b"),
        ("days", rf"\b(?P<w>(?:every|each)(?:\s+week\s+on)?\s+|weekly\s+on\s+|on\s+)?"
                 rf"(?P<d>{DAYS})"),
        ("month", rf"\b(?:(?:every|each)\s+month|monthly)(?:\s+on)?(?:\s+the)?"
                  rf"(?:\s+(?P<n>{NTH})\b)?(?:\s+day\b)?"),
        ("month", rf"\bon\s+the\s+(?P<n>{NTH})(?:\s+day)?\s+of\s+(?:every|each|the)\s+month\b"),
        ("daily", r"\b(?:(?:every|each)\s*day|daily|(?P<p>nightly)|(?:every|each)\s+"
                  r"(?P<q>morning|afternoon|evening|night))\b"),
        ("every", rf"\b(?:every\s+(?:(?P<n>\d+|{'|'.join(WORDS)}|half(?:\s+an?)?)\s+)?"
                  rf"(?P<u>{UNIT})|(?P<h>hourly))\b"),
    )
)
# fmt: on
# What every marker above needs to hold (a necessary condition, checked in
# tests/triggers/test_phrases.py against the markers themselves): one search, so an ordinary
# message costs a few microseconds on the intake path instead of one regex search per marker (issue
# 15). Every English marker starts its word there, so a word that merely contains one
# ("conversation") does not pass.
ANY_MARKER = re.compile(  # searched in the lower-cased text: re.I would cost 7x here
    r"每|逢|周|星期|礼拜|工作日|天天"
    rf"|\b(?:{DAY}|week|work|business|month|every|each|daily|nightly|hourly)"
)
