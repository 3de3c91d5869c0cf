"""Lark turns at the app's real limits, end to end: signed webhooks into gateways whose Lark
integration points at a fake Lark that enforces Lark's limits (tests/fakes/limits.py), on the
shared Redis. Two replicas share one budget: a throttle answer one replica gets pauses the API
for the other; the month's quota makes cards update less, then refuses. (Many turns at a tight
limit, and a throttle answer's rest, on every platform: tests/conformance/
test_platform_budget.py.)"""

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
