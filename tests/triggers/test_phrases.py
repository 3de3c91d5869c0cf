"""Routines said in plain words (issue 13): the phrasings a user would type in a group, in Chinese
and English, each read to the cron and the instruction it means; ordinary chat that merely mentions
a day or "every" stays chat; requests that cannot be read say why instead of guessing."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.triggers.phrasebook import ANY_MARKER, LONGEST, MARKERS, WIDE
from gateway.triggers.phrases import USAGE_TEXT, RoutineSpec, Unrecognised, parse_routine

ZH = [
    # the examples
    ("每天 9 点总结本群", "0 9 * * *", "总结本群"),
    ("每周一上午10点提醒我交周报", "0 10 * * 1", "提醒我交周报"),
    # daily, with every period of the day
    ("每天8点发日报", "0 8 * * *", "发日报"),
    ("每日 21:00 备份数据库", "0 21 * * *", "备份数据库"),
    ("天天9点半打卡", "30 9 * * *", "打卡"),
    ("每天下午3点检查构建", "0 15 * * *", "检查构建"),
    ("每天晚上8点发日报", "0 20 * * *", "发日报"),
    ("每天中午12点提醒大家吃饭", "0 12 * * *", "提醒大家吃饭"),
    ("每天凌晨2点清理日志", "0 2 * * *", "清理日志"),
    ("每天早上7点提醒我跑步", "0 7 * * *", "提醒我跑步"),
    ("每天傍晚6点总结今天的讨论", "0 18 * * *", "总结今天的讨论"),
    ("每天十点开站会", "0 10 * * *", "开站会"),
    ("每天九点半总结本群", "30 9 * * *", "总结本群"),
    ("每天9点15分汇总工单", "15 9 * * *", "汇总工单"),
    ("每天下午三点一刻喝茶", "15 15 * * *", "喝茶"),
    ("每天晚上十一点四十五提醒我关灯", "45 23 * * *", "提醒我关灯"),
    ("每天二十三点备份", "0 23 * * *", "备份"),
    ("每天早上9点整打卡", "0 9 * * *", "打卡"),
    ("每晚10点提醒我关电脑", "0 22 * * *", "提醒我关电脑"),
    ("每天9点和18点检查告警", "0 9,18 * * *", "检查告警"),
    # weekdays, weekly, several days, ranges
    ("工作日早上9点总结本群", "0 9 * * 1-5", "总结本群"),
    ("每个工作日上午9点半汇总工单", "30 9 * * 1-5", "汇总工单"),
    ("周一到周五 9:30 提醒大家站会", "30 9 * * 1-5", "提醒大家站会"),
    ("每周一三五下午4点同步进度", "0 16 * * 1,3,5", "同步进度"),
    ("每周一、三、五 18:00 提醒大家填工时", "0 18 * * 1,3,5", "提醒大家填工时"),
    ("每周二和周四上午10点开周会", "0 10 * * 2,4", "开周会"),
    ("每星期三 10点 整理周会纪要", "0 10 * * 3", "整理周会纪要"),
    ("每礼拜五下午5点提醒我写周报", "0 17 * * 5", "提醒我写周报"),
    ("每周日晚上9点总结本周", "0 21 * * 0", "总结本周"),
    ("每周二到周四 10点 站会", "0 10 * * 2-4", "站会"),
    ("每个周末上午10点 整理房间", "0 10 * * 0,6", "整理房间"),
    # monthly
    ("每月1号上午10点出月报", "0 10 1 * *", "出月报"),
    ("每个月的15日 9:00 发工资提醒", "0 9 15 * *", "发工资提醒"),
    ("每月十五号9点交房租", "0 9 15 * *", "交房租"),
    # intervals
    ("每隔15分钟检查一下队列", "*/15 * * * *", "检查一下队列"),
    ("每15分钟检查队列", "*/15 * * * *", "检查队列"),
    ("每2小时同步一次数据", "0 */2 * * *", "同步一次数据"),
    ("每小时看一下告警", "0 * * * *", "看一下告警"),
    ("每半小时刷新看板", "*/30 * * * *", "刷新看板"),
    ("每隔两小时拉取一次报表", "0 */2 * * *", "拉取一次报表"),
    # politeness, 提醒我 first, the routine last, full-width characters
    ("请每天9点总结本群", "0 9 * * *", "总结本群"),
    ("帮我每天9点总结本群", "0 9 * * *", "总结本群"),
    ("提醒我每天9点喝水", "0 9 * * *", "提醒我喝水"),
    ("能不能每天9点总结本群？", "0 9 * * *", "总结本群"),
    ("总结本群，每天9点", "0 9 * * *", "总结本群"),
    ("每天９点，总结本群，并@所有人", "0 9 * * *", "总结本群，并@所有人"),
    ("每天9:30 pm总结", "30 21 * * *", "总结"),
    ("@Alice 每周五下午5点提醒你写周报", "0 17 * * 5", "@Alice 提醒你写周报"),
]

EN = [
    # the example
    ("every weekday at 9:30 summarize this group", "30 9 * * 1-5", "summarize this group"),
    # daily, with am/pm, noon, midnight, o'clock, parts of the day
    ("every day at 9am summarize this group", "0 9 * * *", "summarize this group"),
    ("daily at 21:00 post the report", "0 21 * * *", "post the report"),
    ("Every day at 9 AM post the standup", "0 9 * * *", "post the standup"),
    ("every day at 9.30 summarize", "30 9 * * *", "summarize"),
    ("everyday at 7:45pm remind me to stretch", "45 19 * * *", "remind me to stretch"),
    ("every day at noon order lunch", "0 12 * * *", "order lunch"),
    ("every day at midnight rotate the logs", "0 0 * * *", "rotate the logs"),
    ("every day at 12am rotate the logs", "0 0 * * *", "rotate the logs"),
    ("every day at 12pm list open PRs", "0 12 * * *", "list open PRs"),
    ("every day at 9 o'clock stand up", "0 9 * * *", "stand up"),
    ("every day at 8 in the evening call mom", "0 20 * * *", "call mom"),
    ("every morning at 7 remind me to run", "0 7 * * *", "remind me to run"),
    ("every evening at 6:30 summarize the day", "30 18 * * *", "summarize the day"),
    ("every night at 11 back up the db", "0 23 * * *", "back up the db"),
    ("every day at 9am and 6pm check the inbox", "0 9,18 * * *", "check the inbox"),
    # weekdays, weekly, several days, ranges
    ("weekdays at 8am check the build", "0 8 * * 1-5", "check the build"),
    ("on weekdays at 9 check email", "0 9 * * 1-5", "check email"),
    ("Monday to Friday at 6pm remind me to leave", "0 18 * * 1-5", "remind me to leave"),
    ("every Monday at 10am send the weekly report", "0 10 * * 1", "send the weekly report"),
    ("on Mondays at 9 review PRs", "0 9 * * 1", "review PRs"),
    ("weekly on Friday at 5pm post a summary", "0 17 * * 5", "post a summary"),
    (
        "every Monday and Thursday at 2:30 pm sync with the team",
        "30 14 * * 1,4",
        "sync with the team",
    ),
    ("every Mon, Wed and Fri at 9 stand up", "0 9 * * 1,3,5", "stand up"),
    ("every Tue & Thu at 16:00 sync", "0 16 * * 2,4", "sync"),
    ("every Sunday at 8pm plan the week", "0 20 * * 0", "plan the week"),
    ("weekends at 10am clean up the board", "0 10 * * 0,6", "clean up the board"),
    # monthly
    ("every month on the 1st at 10:00 send the invoice", "0 10 1 * *", "send the invoice"),
    ("monthly on the 15th at 9am pay the rent", "0 9 15 * *", "pay the rent"),
    ("on the 1st of every month at 9am send the report", "0 9 1 * *", "send the report"),
    # intervals
    ("every 15 minutes check the queue", "*/15 * * * *", "check the queue"),
    ("every 2 hours sync the data", "0 */2 * * *", "sync the data"),
    ("hourly check alerts", "0 * * * *", "check alerts"),
    ("every hour ping the service", "0 * * * *", "ping the service"),
    ("every half hour refresh the board", "*/30 * * * *", "refresh the board"),
    ("every thirty minutes poll the feed", "*/30 * * * *", "poll the feed"),
    ("every other hour ping", "0 */2 * * *", "ping"),
    ("every 7 minutes poll", "*/7 * * * *", "poll"),
    # remind me / please / can you, the routine in the middle or last
    ("remind me to drink water every day at 3pm", "0 15 * * *", "remind me to drink water"),
    (
        "remind me every Monday at 10am to submit the weekly report",
        "0 10 * * 1",
        "remind me to submit the weekly report",
    ),
    ("at 9pm every day remind me to stretch", "0 21 * * *", "remind me to stretch"),
    ("summarize this group every weekday at 9:30", "30 9 * * 1-5", "summarize this group"),
    ("check the queue every 15 minutes", "*/15 * * * *", "check the queue"),
    ("please summarize this group every day at 9am", "0 9 * * *", "summarize this group"),
    ("can you summarize this group every day at 9am?", "0 9 * * *", "summarize this group"),
    ("every day at 9 please summarize", "0 9 * * *", "summarize"),
    ("/schedule every weekday at 9 summarize", "0 9 * * 1-5", "summarize"),
]

NOT_ROUTINES = [
    "every time I run it, it fails",
    "我每天都很忙",
    "每天都很开心",
    "天天开心",
    "every day is a gift",
    "I go to the gym every day at 7am",
    "daily standup is at 10",
    "see you on Monday at 9",
    "remind me to call mom on Sunday at 5pm",
    "我们每周一上午10点开会",
    "we meet every Monday at 10am",
    "Do you work every day at 9?",
    "每天9点总结本群吗",
    "the build fails every day at 2am",
    "每天早上都要喝咖啡",
    "周日 9点开会",
    "每分钟都很重要",
    "how is everyone doing today",
    "",
]

UNRECOGNISED = [
    ("每天 25 点", "25 点"),
    ("every weekday at half past noonish", "could not read the time"),
    ("每月32号 9点总结", "32"),
    ("every 0 minutes ping", "every 0 minutes"),
    ("every 45 hours ping", "every 45 hours"),
    ("every 90 minutes ping", "every 90 minutes"),
    ("每天总结本群", "没有给出时间"),
    ("every day summarize this group", "no time given"),
    ("提醒我每天喝水", "没有给出时间"),
    ("every month on the last day at 9 close the books", "last day of a month"),
    ("每月最后一天9点结账", "最后一天"),
    ("every 2 days at 9 water the plants", "every N days"),
    ("每隔一天9点浇花", "每 N 天"),
    ("每天9点", "没有说要做什么"),
    ("every day at 13pm eat", "13pm"),
    ("每天晚上3点吃药", "晚上3点"),
    ("每周一24点备份", "24点"),
    ("每2小时 9点检查", "间隔不能再限定"),
    ("每小时的第15分钟检查", "间隔不能再限定"),
    ("every hour at :15 ping", "interval cannot be limited"),
    ("every 2 hours from 9 to 5 check the build", "interval cannot be limited"),
    ("every 30 minutes between 9am and 5pm poll", "interval cannot be limited"),
    ("every hour on weekdays check", "interval cannot be limited"),
    ("每天9点和18点30分检查", "分钟不同"),
    ("每天 UTC-13 9点总结", "UTC-13"),
    ("每月 9点总结", "几号"),
]

PARSED = [*ZH, *EN]
RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))
CJK = re.compile(r"[\u4e00-\u9fff]")


def expand(field: str, low: int, high: int) -> set[int]:
    """The values a cron field stands for; fails on anything out of its range."""
    values: set[int] = set()
    for part in field.split(","):
        base, _, step = part.partition("/")
        first, last = (low, high) if base == "*" else map(int, (base.split("-") * 2)[:2])
        assert low <= first <= last <= high, field
        assert not step or 1 <= int(step) <= high, field
        values |= set(range(first, last + 1, int(step or 1)))
    return values


def assert_valid_cron(cron: str) -> None:
    fields = cron.split(" ")
    assert len(fields) == 5, cron
    for field, (low, high) in zip(fields, RANGES, strict=True):
        assert expand(field, low, high), cron


def test_there_are_enough_phrasings_in_both_languages() -> None:
    assert len(ZH) >= 35 and len(EN) >= 35
    assert len(NOT_ROUTINES) >= 10 and len(UNRECOGNISED) >= 10


@pytest.mark.parametrize(("phrase", "cron", "text"), ZH)
def test_a_chinese_phrasing_reads_to_its_cron_and_instruction(
    phrase: str, cron: str, text: str
) -> None:
    spec = parse_routine(phrase)
    assert isinstance(spec, RoutineSpec), spec
    assert (spec.cron, spec.text) == (cron, text)


@pytest.mark.parametrize(("phrase", "cron", "text"), EN)
def test_an_english_phrasing_reads_to_its_cron_and_instruction(
    phrase: str, cron: str, text: str
) -> None:
    spec = parse_routine(phrase)
    assert isinstance(spec, RoutineSpec), spec
    assert (spec.cron, spec.text) == (cron, text)


@pytest.mark.parametrize("phrase", NOT_ROUTINES)
def test_ordinary_chat_is_not_a_routine(phrase: str) -> None:
    assert parse_routine(phrase) is None


@pytest.mark.parametrize(("phrase", "said"), UNRECOGNISED)
def test_a_request_that_cannot_be_read_says_why_and_guesses_nothing(phrase: str, said: str) -> None:
    answer = parse_routine(phrase)
    assert isinstance(answer, Unrecognised), answer
    assert said in answer.reason and "\n" not in answer.reason
    # the reason is in the phrase's language
    assert (CJK.search(answer.reason) is None) == (CJK.search(phrase) is None)


@pytest.mark.parametrize(
    ("phrase", "timezone", "description"),
    [
        ("每天北京时间9点总结", "Asia/Shanghai", "每天 09:00（Asia/Shanghai）"),
        ("每周五 17:00（北京时间）提醒我写周报", "Asia/Shanghai", "每周五 17:00（Asia/Shanghai）"),
        ("每天 UTC 9:00 总结", "UTC", "每天 09:00（UTC）"),
        ("每天 UTC+8 9点总结", "Etc/GMT-8", "每天 09:00（Etc/GMT-8）"),
        ("every day at 9am UTC summarize", "UTC", "every day at 09:00 (UTC)"),
        ("every day at 9:00 Berlin time summarize", "Europe/Berlin", None),
        ("every weekday at 8am New York time check CI", "America/New_York", None),
        ("every weekday at 9:30 summarize this group", None, "every weekday at 09:30"),
        ("每个工作日上午9点半汇总工单", None, "每个工作日 09:30"),
        ("every Monday and Thursday at 2:30 pm sync", None, "every Monday and Thursday at 14:30"),
        ("每周一三五下午4点同步进度", None, "每周一、三、五 16:00"),
        ("monthly on the 15th at 9am pay the rent", None, "every month on day 15 at 09:00"),
        ("每月1号上午10点出月报", None, "每月 1 日 10:00"),
        ("每月31日9点结账", None, "每月 31 日（当月有这一天时） 09:00"),
        ("every 15 minutes check the queue", None, "every 15 minutes"),
        ("每2小时同步一次数据", None, "每 2 小时"),
        ("every 7 minutes poll", None, "every 7 minutes (restarting at :00 each hour)"),
        ("每天9点和18点检查告警", None, "每天 09:00、18:00"),
    ],
)
def test_the_timezone_is_only_the_one_named_and_the_description_speaks_the_phrases_language(
    phrase: str, timezone: str | None, description: str | None
) -> None:
    spec = parse_routine(phrase)
    assert isinstance(spec, RoutineSpec), spec
    assert spec.timezone == timezone
    if description is not None:
        assert spec.description == description


def test_a_time_without_am_or_pm_is_read_on_the_24_hour_clock() -> None:
    assert [
        getattr(parse_routine(p), "cron", None) for p in ("每天 8 点总结", "每天 20 点总结")
    ] == [
        "0 8 * * *",
        "0 20 * * *",
    ]
    daily = parse_routine("每天24点备份")
    assert isinstance(daily, RoutineSpec) and daily.cron == "0 0 * * *"


def test_the_instruction_keeps_the_users_own_characters() -> None:
    spec = parse_routine("每天９点：总结本群（含链接），然后@所有人。")
    assert isinstance(spec, RoutineSpec)
    assert spec.text == "总结本群（含链接），然后@所有人"


def test_a_message_longer_than_a_routine_is_chat() -> None:
    said = "每天 9 点总结本群，"
    longest = said + "重" * (LONGEST - len(said))
    assert isinstance(parse_routine(longest), RoutineSpec)
    assert parse_routine(longest + "点") is None
    assert parse_routine("every day" + " " * 5000 + "x") is None


def test_usage_names_the_command_and_both_languages() -> None:
    assert USAGE_TEXT.startswith("/schedule <cron> <text>")
    assert "0 9 * * 1-5" in USAGE_TEXT and "每天 9 点总结本群" in USAGE_TEXT
    assert "every weekday at 9:30 summarize this group" in USAGE_TEXT


@pytest.mark.parametrize(("phrase", "cron", "text"), PARSED)
def test_every_produced_cron_has_five_fields_in_range(phrase: str, cron: str, text: str) -> None:
    spec = parse_routine(phrase)
    assert isinstance(spec, RoutineSpec)
    assert_valid_cron(spec.cron)


def test_every_produced_cron_is_one_croniter_accepts() -> None:
    croniter = pytest.importorskip("croniter")
    specs = [parse_routine(p) for p, _, _ in PARSED]
    assert all(isinstance(s, RoutineSpec) and croniter.croniter.is_valid(s.cron) for s in specs)


RECURRENCES = st.sampled_from(
    ["每天", "每周一", "每周二到周五", "工作日", "每月15号", "每月31日", "每隔7分钟", "每3小时",
     "every day", "every Monday and Friday", "weekdays", "monthly on the 2nd", "every 5 minutes",
     "every 4 hours", "every night", "每晚", "on Sundays", "every month on the 31st"]
)  # fmt: skip
TIMES = st.sampled_from(
    ["", "9点", "下午3点半", "晚上12点", "凌晨0点", "中午1点", "二十四点", "12:59", "at 12am",
     "at 11:59 pm", "at noon", "at 0:00", "at 23:00", "7 o'clock", "at 6 in the morning", "at 25",
     "at 12 at night", "傍晚5点", "9点和21点", "at 9am and 9pm", "UTC 9:00", "at 9am Tokyo time"]
)  # fmt: skip


@settings(derandomize=True, max_examples=400, deadline=None)
@given(
    st.tuples(RECURRENCES, TIMES, st.sampled_from(["总结本群", "check the build", ""])),
    st.booleans(),
)
def test_any_composed_phrase_is_read_or_refused_and_a_read_one_is_valid_cron(
    parts: tuple[str, str, str], routine_last: bool
) -> None:
    recurrence, time, instruction = parts
    pieces = [instruction, recurrence, time] if routine_last else [recurrence, time, instruction]
    answer = parse_routine(" ".join(pieces))
    assert answer is None or isinstance(answer, RoutineSpec | Unrecognised)
    if isinstance(answer, RoutineSpec):
        assert_valid_cron(answer.cron)
        assert answer.text == instruction
    if not routine_last:
        assert answer is not None  # a recurrence at the start is always answered


NOISE = st.text(
    alphabet=list("每天周一月号点半上下午晚 0123456789:at every day pm,提醒我"), max_size=40
)


@settings(derandomize=True, max_examples=300, deadline=None)
@given(NOISE)
def test_arbitrary_text_never_raises(text: str) -> None:
    answer = parse_routine(text)
    if isinstance(answer, RoutineSpec):
        assert_valid_cron(answer.cron)


MARKER_TEXT = st.text(
    alphabet=list("每逢周星期礼拜工作日天月 ")
    + list("MondaytueWEDthfrisSUNweekorbBusinessmvygclhn "),
    max_size=30,
)


@settings(derandomize=True, max_examples=600, deadline=None)
@given(MARKER_TEXT)
def test_the_quick_marker_check_never_misses_what_a_marker_finds(text: str) -> None:
    # parse_routine only runs the markers when ANY_MARKER finds something in the lower-cased
    # text; it must hold wherever a marker matches, or a routine would be read as chat.
    if any(pattern.search(text) for pattern, _kind, _zh in MARKERS):
        assert ANY_MARKER.search(text.lower()) is not None


@pytest.mark.parametrize("phrase", [p[0] for p in PARSED] + [p[0] for p in UNRECOGNISED])
def test_every_table_phrase_passes_the_quick_marker_check(phrase: str) -> None:
    assert ANY_MARKER.search(phrase.translate(WIDE).lower()) is not None
