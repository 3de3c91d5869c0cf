"""The Prometheus series move as an operator expects (real Redis, in-process daemons, the fake
platforms): turns by outcome, their timings, throttled card updates, platform API calls with
the platform's result codes, the due backlog, Redis script latency, schedules, budget refusals,
and no label that names a chat, a user or a session."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.ops.metrics import MAX_CODES, Metrics
from sessions import KeyBuilder
from sessions.backlog import due_backlog
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.lark import FakeLark
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, InProcessGateway, clocked_scheduler, serve
from tests.support.lark import INTEGRATION, LarkHarness, final_card, lark_config, message_event
from tests.support.metrics import Scrape, scrape
from tests.support.redis_targets import BOTH_REDIS
from tests.support.waits import eventually

SLOW_ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 300, "charDelayMs": 20, "chunkChars": 1}


def base(gw: InProcessGateway) -> str:
    return f"http://127.0.0.1:{gw.port}"


async def metric(gw: InProcessGateway, name: str, **labels: str) -> float:
    return (await scrape(base(gw))).value(name, **labels)


# --- turns ------------------------------------------------------------------------------------
async def test_turns_are_counted_by_outcome_with_their_timings(
    gateways: Callable[..., Any], prefix: str
) -> None:
    fake = FakeOpenAI(fail_with=[500])
    async for url in serve(fake.app()):
        cfg = base_config(prefix)
        cfg["experts"] = [
            SLOW_ECHO,
            {"id": "gpt", "kind": "openai", "baseUrl": url + "/v1", "apiKey": OPENAI_KEY,
             "model": "m", "retries": 0},
        ]  # fmt: skip
        cfg["integrations"].append({**cfg["integrations"][0], "id": "broken", "xpertId": "gpt"})
        gw = await gateways(cfg)
        console = gw.client
        before = await scrape(base(gw))
        # Every outcome of every integration is there at zero before any turn.
        for outcome in ("done", "error", "cancelled", "interrupted", "handback", "gave_up"):
            [zero] = before.of("xgw_turns_total", integration="console", outcome=outcome)
            assert zero.value == 0 and zero.labels["expert"] == "echo"
            assert zero.labels["platform"] == "console"

        await console.send("hello", chat="dm-done")
        await console.wait_cards("dm-done", timeout=20)
        await console.send("please [confirm] this", chat="dm-wait")
        await console.wait_cards("dm-wait", status="waiting", timeout=20)
        await console.send("a long one to stop " * 5, chat="dm-stop")
        [card] = await console.wait_cards("dm-stop", status="running")
        assert await console.click("dm-stop", card["id"], "stop") == 202
        await console.wait_cards("dm-stop", status="cancelled")
        broken = ConsoleClient(console.base, integration_id="broken")
        try:
            await broken.send("fail please", chat="dm-err")
            await broken.wait_cards("dm-err", status="error")
        finally:
            await broken.close()

        async def counted(gw: InProcessGateway = gw) -> Scrape | None:
            s = await scrape(base(gw))
            return s if s.value("xgw_turns_total") == 4 else None

        after = await eventually(counted)
        turns = {
            (s.labels["integration"], s.labels["expert"], s.labels["outcome"]): s.value
            for s in after.of("xgw_turns_total")
            if s.value
        }
        assert turns == {
            ("console", "echo", "done"): 1,
            ("console", "echo", "interrupted"): 1,
            ("console", "echo", "cancelled"): 1,
            ("broken", "gpt", "error"): 1,
        }
        # Each turn observed its run time and queue time; each showed a card.
        assert after.value("xgw_turn_duration_seconds_count", integration="console") == 3
        assert after.value("xgw_turn_queue_seconds_count", integration="broken") == 1
        firsts = after.value("xgw_turn_first_card_seconds_count", integration="console")
        assert firsts == 3
        # The slow echo's card shows within its first step: under a second, not after the run.
        first_sum = after.value("xgw_turn_first_card_seconds_sum", integration="console")
        run_sum = after.value("xgw_turn_duration_seconds_sum", integration="console")
        assert 0 < first_sum < run_sum
        assert (
            after.value("xgw_turn_first_card_seconds_bucket", integration="console", le="+Inf") == 3
        )
        # Every turn took script calls through the auto-pipeline: their exchanges were timed.
        assert after.value("xgw_redis_script_seconds_count") > 0
        assert (
            after.value("xgw_redis_script_calls_total")
            >= after.value("xgw_redis_script_writes_total")
            > 0
        )
        assert after.value("xgw_card_updates_total", integration="broken", kind="send") == 1
        assert after.value("xgw_active_runs") == 0


async def test_fast_updates_are_coalesced_not_sent(
    gateways: Callable[..., Any], prefix: str
) -> None:
    cfg = base_config(prefix, updateIntervalMs=400)
    cfg["experts"] = [
        {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 2, "chunkChars": 1}
    ]
    gw = await gateways(cfg)
    text = "every character is its own update " * 4  # 136 text deltas in about 0.3 s
    await gw.client.send(text)
    [card] = await gw.client.wait_cards()
    assert text.strip() in card["card"]["answer"]
    s = await eventually(
        lambda: _when(scrape(base(gw)), lambda s: s.value("xgw_turns_total", outcome="done") == 1)
    )
    sent = s.value("xgw_card_updates_total", integration="console", kind="send", result="ok")
    updated = s.value("xgw_card_updates_total", integration="console", kind="update", result="ok")
    coalesced = s.value("xgw_card_updates_coalesced_total", integration="console")
    assert sent == 1
    assert 1 <= updated <= 6  # the interval allows a handful at most
    # Deltas fold into the card's state at most every 50 ms (gateway/turns/drive.py): far
    # fewer states than deltas, and those the interval did not show were replaced.
    assert 0 < sent + updated + coalesced < 100
    assert coalesced >= 1
    assert s.value("xgw_card_updates_total", result="error") == 0


async def _when(pending: Any, ok: Callable[[Scrape], bool]) -> Scrape | None:
    s = await pending
    return s if ok(s) else None


# --- platform API calls -----------------------------------------------------------------------
@pytest.fixture
async def fake_lark() -> AsyncIterator[FakeLark]:
    server = FakeLark()
    await server.start()
    yield server
    await server.stop()


async def test_platform_api_calls_by_endpoint_and_code(
    gateways: Callable[..., Any], prefix: str, fake_lark: FakeLark
) -> None:
    gw = await gateways(lark_config(prefix, fake_lark))
    lark = LarkHarness(fake_lark, gw)
    try:
        fake_lark.fail("reply", code=230020)  # Lark's frequency limit, once: retried
        status, _ = await lark.post(message_event("count me", message_id="om_m1"))
        assert status == 200
        await eventually(final_card(fake_lark, "om_m1"))
        s = await eventually(
            lambda: _when(
                scrape(base(gw)), lambda s: s.value("xgw_turns_total", outcome="done") == 1
            )
        )
    finally:
        await lark.http.close()
    labels = {"integration": INTEGRATION, "platform": "lark"}
    assert s.value("xgw_platform_api_calls_total", **labels, endpoint="reply", code="230020") == 1
    assert s.value("xgw_platform_api_calls_total", **labels, endpoint="reply", code="ok") == 1
    assert s.value("xgw_platform_api_calls_total", **labels, endpoint="patch", code="ok") >= 1
    assert s.value("xgw_platform_api_calls_total", **labels, endpoint="token", code="ok") == 1
    assert s.value("xgw_platform_api_calls_total", **labels, endpoint="bot_info", code="ok") == 1
    # Each exchange was timed under its endpoint, whatever it answered.
    assert s.value("xgw_platform_api_seconds_count", platform="lark", endpoint="reply") == 2
    # No endpoint label carries a URL or an id.
    endpoints = {x.labels["endpoint"] for x in s.of("xgw_platform_api_calls_total")}
    assert all("/" not in e and "om_" not in e for e in endpoints)


class Calls:
    """An ``ApiCalls`` hook that keeps what it is told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def __call__(self, endpoint: str, code: str, seconds: float) -> None:
        assert 0 <= seconds < 10
        self.seen.append((endpoint, code))


async def test_dingtalk_calls_report_the_flow_control_code() -> None:
    from adapters.dingtalk.api import DingTalkApi
    from tests.fakes.dingtalk import CLIENT_ID, CLIENT_SECRET, FakeDingTalk

    fake = FakeDingTalk()
    await fake.start()
    calls = Calls()
    api = DingTalkApi(
        base=fake.base, client_id=CLIENT_ID, client_secret=CLIENT_SECRET, observe=calls
    )
    api.backoff_s = 0.01
    try:
        fake.flow_control("/v1.0/robot/groupMessages/send")
        body = {"robotCode": CLIENT_ID, "openConversationId": "cid1", "msgKey": "sampleText",
                "msgParam": '{"content": "hi"}'}  # fmt: skip
        await api.call("POST", "/v1.0/robot/groupMessages/send", body)
    finally:
        await api.close()
        await fake.stop()
    assert calls.seen == [
        ("token", "ok"),
        ("group_send", "Forbidden.AccessDenied.QpsLimitForApi"),
        ("group_send", "ok"),
    ]


async def test_wecom_calls_report_the_frequency_limit() -> None:
    from adapters.wecom.api import WeComApi, WeComApiError
    from tests.fakes.wecom import FakeWeCom

    fake = FakeWeCom()
    await fake.start()
    fake.limit("message/send", 1)
    calls = Calls()
    api = WeComApi(
        api_base=fake.base_url,
        corp_id=fake.corp_id,
        corp_secret=fake.secret,
        backoff_s=(0.01,),
        observe=calls,
    )
    body = {"touser": "zhangsan", "msgtype": "text", "agentid": 1000002, "text": {"content": "hi"}}
    try:
        await api.call("message/send", body)
        with pytest.raises(WeComApiError):
            await api.call("message/send", body)  # over the limit: one retry, then it gives up
    finally:
        await api.close()
        await fake.stop()
    assert calls.seen == [
        ("token", "ok"),
        ("message_send", "ok"),
        ("message_send", "45009"),
        ("message_send", "45009"),
    ]


def test_result_codes_are_capped_per_platform() -> None:
    metrics = Metrics()
    hook = metrics.api_calls("lark-main", "lark")
    for n in range(MAX_CODES + 30):
        hook("reply", str(100000 + n), 0.01)
    hook("reply", "a code/with a url?id=1", 0.01)
    codes = {
        s.labels["code"]
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "xgw_platform_api_calls_total"
    }
    assert len(codes) == MAX_CODES + 1 and "other" in codes


# --- the due backlog --------------------------------------------------------------------------
async def test_backlog_gauges_show_due_conversations_waiting_for_a_run_slot(
    gateways: Callable[..., Any], prefix: str
) -> None:
    cfg = base_config(prefix)
    cfg["experts"] = [SLOW_ECHO]
    cfg["runtime"]["maxConcurrentRuns"] = 1
    gw = await gateways(cfg)
    assert await metric(gw, "xgw_due_conversations") == 0
    for chat in ("dm-a", "dm-b", "dm-c"):
        await gw.client.send("wait your turn", chat=chat)

    async def backlog() -> Scrape | None:
        s = await scrape(base(gw))
        return s if s.value("xgw_due_conversations") == 2 else None

    s = await eventually(backlog)
    assert s.value("xgw_active_runs") == 1 and s.value("xgw_max_runs") == 1
    await asyncio.sleep(1.2)  # the cached read expires; they have waited longer now
    s = await scrape(base(gw))
    assert s.value("xgw_due_oldest_age_seconds") >= 1.0
    for chat in ("dm-a", "dm-b", "dm-c"):
        await gw.client.wait_cards(chat, timeout=30)
    await asyncio.sleep(1.1)
    s = await scrape(base(gw))
    assert s.value("xgw_due_conversations") == 0 and s.value("xgw_due_oldest_age_seconds") == 0


async def test_a_scrape_storm_reads_the_backlog_once(
    gateways: Callable[..., Any], prefix: str
) -> None:
    gw = await gateways(base_config(prefix))
    collector = gw.gateway.metrics.collector
    assert collector is not None
    reads = collector.reads
    scrapes = await asyncio.gather(*(scrape(base(gw)) for _ in range(25)))
    assert all("xgw_due_conversations" in s.names() for s in scrapes)
    assert collector.reads - reads <= 1


@BOTH_REDIS
async def test_due_backlog_counts_only_what_is_due_in_every_shard(
    redis_client: aioredis.Redis, prefix: str
) -> None:
    keys = KeyBuilder(prefix=prefix, shards=4)
    now = int(time.time() * 1000)
    await redis_client.zadd(keys.due(0), {"c0": now - 5_000, "c1": now + 60_000})
    await redis_client.zadd(keys.due(3), {"c3": now - 1_000})
    await redis_client.zadd(keys.due(2), {"running": now + 10_000})  # a lease held
    backlog = await due_backlog(redis_client, keys, now)
    assert backlog.due == 2 and backlog.oldest_ms == now - 5_000
    empty = await due_backlog(redis_client, KeyBuilder(prefix=prefix + "x", shards=4), now)
    assert empty.due == 0 and empty.oldest_ms is None


# --- schedules and budgets ----------------------------------------------------------------------
async def test_schedule_fires_and_misfires_are_counted(
    gateways: Callable[..., Any], prefix: str
) -> None:
    gw = await gateways(base_config(prefix))
    assert await metric(gw, "xgw_schedule_misfires_total", integration="console") == 0
    sched = {"id": "minutely", "integrationId": "console", "chatId": "team", "chatType": "group",
             "cron": "0 * * * * *", "text": "tick", "misfireGraceSeconds": 10}  # fmt: skip
    minute = (int(time.time()) // 60 - 10) * 60_000
    clock = [minute + 1_000]
    scheduler = clocked_scheduler(gw, {**base_config(prefix), "schedules": [sched]}, clock)
    gw.gateway.scheduler.stop()
    collector = gw.gateway.metrics.collector
    assert collector is not None
    collector.schedules = scheduler  # what /metrics reads: a scheduler on the test's clock
    await scheduler.tick()
    clock[0] = minute + 184_000  # three fires passed: the newest runs, two are skipped
    await scheduler.tick()
    s = await scrape(base(gw))
    assert s.value("xgw_schedule_fires_total", integration="console") == 1
    assert s.value("xgw_schedule_misfires_total", integration="console") == 2
    await gw.client.wait_cards("team")


def test_budget_refusals_are_counted_by_limit() -> None:
    metrics = Metrics()
    metrics.budget_refused("console", "turnsPerHourPerChat")
    metrics.budget_refused("console", "turnsPerHourPerChat")
    metrics.budget_refused("console", "no such limit")
    got = {
        (s.labels["limit"]): s.value
        for family in metrics.registry.collect()
        for s in family.samples
        if s.name == "xgw_budget_refusals_total"
    }
    assert got == {"turnsPerHourPerChat": 2, "other": 1}


# --- cardinality --------------------------------------------------------------------------------
async def test_no_label_names_a_chat_a_user_or_a_session(
    gateways: Callable[..., Any], prefix: str
) -> None:
    gw = await gateways(base_config(prefix))
    chats = [f"dm-chat{n}-zq" for n in range(3)] + ["grp-team-zq"]
    senders = ["alice-zq", "bob-zq"]
    for n, chat in enumerate(chats):
        await gw.client.send(f"hi {n}", chat=chat, sender=senders[n % 2], mention=True)
    for chat in chats:
        await gw.client.wait_cards(chat)
    s = await eventually(
        lambda: _when(scrape(base(gw)), lambda s: s.value("xgw_turns_total") == len(chats))
    )
    values = s.label_values()
    records = [m for chat in chats for m in await gw.client.messages(chat)]
    ids = {*chats, *senders} | {str(m.get("id")) for m in records}
    assert not values & ids
    assert not [v for v in values if v.endswith("-zq")]
    # Every label set is small: nothing grows with the number of chats.
    per_name: dict[str, int] = {}
    for sample in s.samples:
        per_name[sample.name] = per_name.get(sample.name, 0) + 1
    assert max(per_name.values()) < 100, per_name


# --- the series' own bookkeeping ----------------------------------------------------------------
def test_counters_and_histograms_render_as_prometheus_client_s_own() -> None:
    """``gateway.ops.metrics`` keeps its counters and histograms in plain floats: what a scrape
    shows is what prometheus_client's Counter and Histogram show for the same calls (a value
    on a bucket's bound counts in that bucket; series without labels are there at zero)."""
    from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

    from gateway.ops.metrics import _Family

    Metrics()  # switches off prometheus_client's *_created series, as the gateway runs
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    buckets = (0.001, 0.01, 0.1, 1.0)
    pairs = [
        (
            _Family("x_calls_total", "Calls", ["kind"], registry=ours),
            Counter("x_calls_total", "Calls", ["kind"], registry=theirs),
        ),
        (
            _Family("x_seconds", "Time", ["kind"], registry=ours, buckets=buckets),
            Histogram("x_seconds", "Time", ["kind"], registry=theirs, buckets=buckets),
        ),
    ]
    _Family("x_idle_seconds", "Never observed", registry=ours, buckets=buckets)
    Histogram("x_idle_seconds", "Never observed", registry=theirs, buckets=buckets)
    _Family("x_idle_total", "Never counted", registry=ours)
    Counter("x_idle_total", "Never counted", registry=theirs)
    for value in (0.0, 0.001, 0.0011, 0.01, 0.5, 1.0, 3.0, 1e9):
        for kind in ("a", "b"):
            pairs[0][0].labels(kind).inc(value)
            pairs[0][1].labels(kind).inc(value)
            pairs[1][0].labels(kind).observe(value)
            pairs[1][1].labels(kind).observe(value)
    pairs[0][0].labels("unused")
    pairs[0][1].labels("unused")
    assert generate_latest(ours) == generate_latest(theirs)
