"""Fixtures of the WeCom tests: the fake WeCom server and the gateways a test starts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.fakes.wecom import FakeWeCom
from tests.support.helpers import InProcessGateway
from tests.support.wecom import CORP_ID


@pytest.fixture
async def fake() -> AsyncIterator[FakeWeCom]:
    server = FakeWeCom(corp_id=CORP_ID)
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def gateways(prefix: str, redis_client: aioredis.Redis) -> AsyncIterator[list[Any]]:
    started: list[InProcessGateway] = []
    yield started
    for gw in reversed(started):
        await gw.stop()
