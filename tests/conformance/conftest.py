"""Fixtures of the conformance suite: ``platform`` is each platform's harness in its default
mode, ``platform_mode`` each platform in each of its modes (for a behaviour whose wire shape
differs per mode); both are opened before the test and closed after it, the gateway first."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from tests.support.conformance import Harness, harnesses

HARNESSES = harnesses()
EVERY_MODE = [(pid, mode) for pid, cls in HARNESSES.items() for mode in cls.modes]


async def _opened(harness: Harness) -> AsyncIterator[Harness]:
    await harness.open()
    try:
        yield harness
    finally:
        await harness.stop()
        await harness.shut()


@pytest.fixture(params=list(HARNESSES))
async def platform(
    request: pytest.FixtureRequest, prefix: str, redis_client: aioredis.Redis
) -> AsyncIterator[Harness]:
    async for harness in _opened(HARNESSES[request.param](prefix)):
        yield harness


@pytest.fixture(params=EVERY_MODE, ids=[f"{pid}-{mode}" for pid, mode in EVERY_MODE])
async def platform_mode(
    request: pytest.FixtureRequest, prefix: str, redis_client: aioredis.Redis
) -> AsyncIterator[Harness]:
    pid, mode = request.param
    async for harness in _opened(HARNESSES[pid](prefix, mode)):
        yield harness
