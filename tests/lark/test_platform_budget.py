"""Lark turns at the app's real limits, end to end: signed webhooks into gateways whose Lark
integration points at a fake Lark that enforces Lark's limits (tests/fakes/limits.py), on the
shared Redis. Many live cards at a tight per-API limit get no throttle answer and every final
state lands; two replicas share one budget; a throttle answer one replica gets pauses the API
for the other; the month's quota makes cards update less, then refuses."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from tests.fakes.lark import FakeLark
from tests.fakes.limits import LarkLimits
from tests.support.helpers import InProcessGateway
from tests.support.lark import (
    SLOW_ECHO,
    LarkHarness,
    final_card,
    lark_config,
    message_event,
    reply_to,
)
from tests.support.metrics import scrape
from tests.support.waits import eventually

PER_SECOND = 4  # the tenant's per-API limit in these tests (Lark's is 50)


@pytest.fixture
async def limited() -> AsyncIterator[FakeLark]:
    server = FakeLark(limits=LarkLimits(per_second=PER_SECOND, per_minute=1000))
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def replicas(
    limited: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> AsyncIterator[list[LarkHarness]]:
    started: list[LarkHarness] = []
    for _ in range(2):
        config = lark_config(
            prefix,
            limited,
            platformLimits={"callsPerSecond": PER_SECOND},
            updateIntervalMs=100,
        )
        config["experts"] = [SLOW_ECHO]
        gw = InProcessGateway(config)
        await gw.start()
        started.append(LarkHarness(limited, gw))
    yield started
    for harness in started:
        await harness.close()


def windows_over(fake: FakeLark, api_prefix: str, limit: int) -> list[float]:
    """Times where the fake served more than ``limit`` calls of one API within a second."""
    assert fake.limits is not None
    served: dict[str, list[float]] = {}
    for a in fake.limits.answers:
        if a.api.startswith(api_prefix) and a.status < 300:
            served.setdefault(a.api, []).append(a.at_ms)
    over = []
    for times in served.values():
        times.sort()
        over += [t for i, t in enumerate(times[limit:]) if t - times[i] < 1000]
    return over


async def test_many_live_cards_at_a_tight_limit_get_no_throttle_answer_and_every_final_lands(
    replicas: list[LarkHarness], limited: FakeLark
) -> None:
    messages = [f"om_b{i}" for i in range(10)]
    for i, mid in enumerate(messages):  # two replicas, ten chats, each card updating every 0.1 s
        payload = message_event(f"count to ten {i}", chat_id=f"oc_b{i}", message_id=mid)
        assert (await replicas[i % 2].post(payload))[0] == 200
    for mid in messages:
        await eventually(final_card(limited, mid), timeout=60)
    assert limited.limits is not None
    assert limited.limits.throttled() == []  # not one 429 / 230020 although both replicas push
    assert windows_over(limited, "PATCH", PER_SECOND) == []
    patches = [a for a in limited.limits.answers if a.api.startswith("PATCH")]
    assert len(patches) >= len(messages)  # each card moved, and its final state landed


async def test_a_throttle_answer_on_one_replica_pauses_the_api_for_the_other(
    replicas: list[LarkHarness], limited: FakeLark, redis_client: aioredis.Redis, prefix: str
) -> None:
    limited.fail("reply", code=99991400, reset=2)  # Lark names a 2 s reset
    assert (await replicas[0].post(message_event("first", message_id="om_t1")))[0] == 200
    await eventually(lambda: any(a.status == 429 for a in limited.limits.answers))  # type: ignore[union-attr]
    paused = [k async for k in redis_client.scan_iter(f"{prefix}:pb:*pause*")]
    assert paused, "the pause is in Redis, for every replica"
    refused_at = max(a.at_ms for a in limited.limits.answers if a.status == 429)  # type: ignore[union-attr]
    assert (await replicas[1].post(message_event("second", message_id="om_t2", chat_id="oc_t2")))[
        0
    ] == 200
    await eventually(final_card(limited, "om_t1"), timeout=20)
    await eventually(final_card(limited, "om_t2"), timeout=20)
    replies = [
        a.at_ms for a in limited.limits.answers if a.api.startswith("POST") and "reply" in a.path
    ]
    served = [t for t in replies if t > refused_at]
    assert served and min(served) - refused_at >= 1900  # nobody replied within the named reset


async def test_the_month_quota_thins_the_updates_then_refuses(
    limited: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> None:
    config = lark_config(
        prefix,
        limited,
        platformLimits={"callsPerMonth": 8},
        typingReaction=False,
        lookupSenderEmail=False,
    )
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(limited, gw)
    try:
        assert (await lark.post(message_event("one", message_id="om_q1")))[0] == 200
        await eventually(final_card(limited, "om_q1"))
        after_first = await scrape(lark.base)
        # 2 of 8 spent on the first of the month's days: at this rate it runs out early.
        assert after_first.value("xgw_card_mode", mode="lean") == 1
        assert after_first.value("xgw_platform_quota_limit") == 8
        assert after_first.value("xgw_platform_quota_forecast_seconds") > 0
        for n in range(2, 6):
            assert (await lark.post(message_event(f"n{n}", message_id=f"om_q{n}")))[0] == 200
            await lark.idle()
        assert limited.limits is not None
        served = [a for a in limited.limits.answers if a.status < 300 and "/auth/" not in a.path]
        assert len(served) == 8  # the month's quota, and not one call more
        assert reply_to(limited, "om_q5") == []  # a spent month sends nothing
        last = await scrape(lark.base)
        assert last.value("xgw_card_mode", mode="finals") == 1
        assert last.value("xgw_platform_quota_used") == 8
    finally:
        await lark.close()
