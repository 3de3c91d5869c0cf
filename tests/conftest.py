"""Shared fixtures: real Redis (own key prefix per test, cleaned up), in-process and
subprocess daemons driven through the console API.

Redis is the shared server at ``REDIS_URL`` unless a test module runs on both targets with
``pytestmark = BOTH_REDIS``: each test then runs once on it and once on a real 3-primary Redis
Cluster (``tests/cluster_support.py``), started once for the whole session when first needed and
stopped at its end. ``base_config`` names the current target."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster

from tests.cluster_support import LocalCluster
from tests.helpers import ConsoleClient, InProcessGateway
from tests.support.redis_server import RedisServer


def _worker_redis() -> str:
    """The Redis of this test process. Under pytest-xdist every worker starts its own server
    (stopped when the worker exits) and exports it as ``REDIS_URL``, so subprocess daemons and
    support modules use it too; a plain ``pytest`` run uses ``$REDIS_URL`` (the shared one)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if not worker or os.environ.get("XGW_TEST_SHARED_REDIS"):
        return os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    directory = Path(tempfile.mkdtemp(prefix=f"xgw-redis-{worker}-"))
    server = RedisServer(directory).start()

    def stop() -> None:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)

    atexit.register(stop)
    os.environ["REDIS_URL"] = server.url
    return server.url


REDIS_URL = _worker_redis()


@dataclass(frozen=True)
class RedisTarget:
    """Where a test's Redis state lives: ``mode`` and ``url`` as ``redis.mode`` / ``redis.url``."""

    mode: str
    url: str

    def client(self) -> Any:
        """A client for the test itself (``RedisCluster`` on the cluster)."""
        if self.mode == "cluster":
            return RedisCluster.from_url(self.url, decode_responses=True)
        return aioredis.Redis.from_url(self.url, decode_responses=True)

    def settings(self, prefix: str) -> dict[str, Any]:
        return {"url": self.url, "keyPrefix": prefix, "mode": self.mode}


STANDALONE = RedisTarget("standalone", REDIS_URL)
# The ``gateways`` fixture: start an in-process gateway of a config.
Gateways = Callable[[dict[str, Any]], Awaitable[InProcessGateway]]
_current = STANDALONE  # the target of the running test (tests run one at a time)

# ``pytestmark = BOTH_REDIS``: every test of the module that uses Redis runs on the shared Redis
# and on the cluster (pytest_generate_tests below).
BOTH_REDIS = pytest.mark.both_redis


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_redis: run on the shared Redis and on a cluster")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_redis") is None:
        return
    if "redis_target" in metafunc.fixturenames:
        metafunc.parametrize("redis_target", ["standalone", "cluster"], indirect=True)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-primary Redis Cluster of this test session (started on first use, ~2 s)."""
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("redis-cluster"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def redis_target(request: pytest.FixtureRequest) -> Iterator[RedisTarget]:
    global _current
    target = STANDALONE
    if getattr(request, "param", "standalone") == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        target = RedisTarget("cluster", cluster.url)
    _current = target
    try:
        yield target
    finally:
        _current = STANDALONE


@pytest.fixture
def redis_url(redis_target: RedisTarget) -> str:
    return redis_target.url


@pytest.fixture
def prefix(redis_target: RedisTarget) -> Iterator[str]:
    """The test's own key prefix; whatever it left under it is deleted afterwards."""
    name = f"t{uuid.uuid4().hex[:10]}"
    if redis_target.mode != "cluster":  # the cluster goes with the session
        _USED_PREFIXES.append(name)
    try:
        yield name
    finally:
        sweep(redis_target, name)


_USED_PREFIXES: list[str] = []


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Again at the end: a gateway torn down after its test's prefix may have written more."""
    for name in _USED_PREFIXES:
        sweep(STANDALONE, name)


def sweep(target: RedisTarget, prefix: str) -> None:
    """Delete the keys of ``prefix`` (on every primary of a cluster); a Redis that a test
    stopped or broke is left as it is."""
    client: Any = (
        SyncRedisCluster.from_url(target.url, socket_timeout=5)
        if target.mode == "cluster"
        else redis.Redis.from_url(target.url, socket_timeout=5)
    )
    try:
        for key in client.scan_iter(match=f"{prefix}:*", count=1000):
            client.delete(key)
    except redis.RedisError:
        pass
    finally:
        client.close()


async def delete_prefix(client: Any, prefix: str) -> None:
    async for key in client.scan_iter(match=f"{prefix}:*", count=500):
        await client.delete(key)


@pytest.fixture
async def redis_client(prefix: str, redis_target: RedisTarget) -> AsyncIterator[aioredis.Redis]:
    client = redis_target.client()
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
        "redis": _current.settings(prefix),
        "logging": {"level": "warning", "format": "json"},
        "runtime": {"leaseSeconds": 2, "pollIntervalMs": 50, "shutdownGraceSeconds": 2},
        "experts": [
            {"id": "echo", "kind": "echo", "stepDelayMs": 20, "charDelayMs": 2, "chunkChars": 4}
        ],
        "integrations": [console],
    }


@pytest.fixture
async def gateways(prefix: str, redis_client: aioredis.Redis) -> AsyncIterator[Gateways]:
    """Start in-process gateways from a config (real Redis, real HTTP server); stopped, newest
    first, at teardown."""
    started: list[InProcessGateway] = []

    async def start(config: dict[str, Any]) -> InProcessGateway:
        gw = InProcessGateway(config)
        await gw.start()
        started.append(gw)
        return gw

    try:
        yield start
    finally:
        for gw in reversed(started):
            await gw.stop()


@pytest.fixture
async def make_gateway(prefix: str, gateways: Gateways) -> Callable[..., Awaitable[ConsoleClient]]:
    """An in-process gateway of ``config`` (or the base config with ``integration`` options);
    its console client."""

    async def factory(config: dict[str, Any] | None = None, **integration: Any) -> ConsoleClient:
        return (await gateways(config or base_config(prefix, **integration))).client

    return factory


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
