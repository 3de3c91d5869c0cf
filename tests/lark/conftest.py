"""Fixtures of the Lark tests: the fake Lark OpenAPI and gateways in front of it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import SLOW_ECHO, LarkHarness, lark_config


@pytest.fixture
async def fake() -> AsyncIterator[FakeLark]:
    server = FakeLark()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def make_lark(
    fake: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> AsyncIterator[Callable[..., Any]]:
    started: list[LarkHarness] = []

    async def factory(*, slow: bool = False, **options: Any) -> LarkHarness:
        config = lark_config(prefix, fake, **options)
        if slow:
            config["experts"] = [SLOW_ECHO]
        gw = InProcessGateway(config)
        await gw.start()
        harness = LarkHarness(fake, gw)
        started.append(harness)
        return harness

    yield factory
    for harness in started:
        await harness.close()


@pytest.fixture
async def lark(make_lark: Callable[..., Any]) -> LarkHarness:
    harness: LarkHarness = await make_lark()
    return harness
