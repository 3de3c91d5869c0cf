"""Shared fixtures: real Redis (own key prefix per test, cleaned up), in-process and
subprocess daemons driven through the console API."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.helpers import ConsoleClient, InProcessGateway

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


@pytest.fixture
def redis_url() -> str:
    return REDIS_URL


@pytest.fixture
def prefix() -> str:
    return f"t{uuid.uuid4().hex[:10]}"


async def delete_prefix(client: aioredis.Redis, prefix: str) -> None:
    async for key in client.scan_iter(match=f"{prefix}:*", count=500):
        await client.delete(key)


@pytest.fixture
async def redis_client(prefix: str) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        yield client
    finally:
        await delete_prefix(client, prefix)
        await client.aclose()


def base_config(prefix: str, **integration: Any) -> dict[str, Any]:
    """A config with one console integration and a fast echo expert."""
    console: dict[str, Any] = {
        "id": "console",
        "platform": "console",
        "xpertId": "echo",
        "summaryWindowSeconds": 0,
        "maxWindowSeconds": 5,
        "updateIntervalMs": 100,
    }
    console.update(integration)
    return {
        "redis": {"url": REDIS_URL, "keyPrefix": prefix},
        "logging": {"level": "warning", "format": "json"},
        "runtime": {"leaseSeconds": 2, "pollIntervalMs": 50, "shutdownGraceSeconds": 2},
        "experts": [
            {"id": "echo", "kind": "echo", "stepDelayMs": 20, "charDelayMs": 2, "chunkChars": 4}
        ],
        "integrations": [console],
    }


@pytest.fixture
async def make_gateway(
    prefix: str, redis_client: aioredis.Redis
) -> AsyncIterator[Callable[..., Any]]:
    """Start in-process gateways (real Redis, real HTTP server); stopped at teardown."""
    started: list[InProcessGateway] = []

    async def factory(config: dict[str, Any] | None = None, **integration: Any) -> ConsoleClient:
        gw = InProcessGateway(config or base_config(prefix, **integration))
        await gw.start()
        started.append(gw)
        return gw.client

    try:
        yield factory
    finally:
        for gw in reversed(started):
            await gw.stop()


@pytest.fixture
async def console(make_gateway: Callable[..., Any]) -> ConsoleClient:
    client: ConsoleClient = await make_gateway()
    return client


async def eventually(
    check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05
) -> Any:
    """Poll ``check`` (sync or async) until it returns a truthy value; fail after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while True:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value: {last!r})")
        await asyncio.sleep(interval)
