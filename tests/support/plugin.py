"""The pytest plugin of the suite (registered by tests/conftest.py): markers, the Redis target
of each test and its own key prefix, and in-process gateways that are stopped at teardown.

Redis is this worker's own server (tests/support/redis_targets.py) unless a test module runs
on both targets with ``pytestmark = BOTH_REDIS``: each test then runs once on it and once on a
real 3-primary Redis Cluster (tests/support/cluster.py), started once for the whole session
when first needed and stopped at its end."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from tests.fakes.lark import FakeLark
from tests.fakes.xpertai import FakeXpertAI
from tests.support.agent_servers import AgentServer, a2a_server, langgraph_dev
from tests.support.cluster import LocalCluster
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, Gateways, serve
from tests.support.postgres import own_database
from tests.support.redis_targets import (
    STANDALONE,
    RedisTarget,
    delete_prefix,
    set_current,
    sweep,
)

_USED_PREFIXES: list[str] = []


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "both_redis: run on the shared Redis and on a cluster")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_redis") is None:
        return
    if "redis_target" in metafunc.fixturenames:
        metafunc.parametrize("redis_target", ["standalone", "cluster"], indirect=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Again at the end: a gateway torn down after its test's prefix may have written more."""
    for name in _USED_PREFIXES:
        sweep(STANDALONE, name)


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A 3-primary Redis Cluster of this test session (started on first use, ~2 s)."""
    cluster = LocalCluster(Path(tmp_path_factory.mktemp("redis-cluster"))).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture(scope="session")
def langgraph_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    """``langgraph dev`` serving tests/agents/ (tests/support/agent_servers.py), once per
    worker, started on first use (~4 s)."""
    server = langgraph_dev(Path(tmp_path_factory.mktemp("langgraph")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def a2a_agent(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AgentServer]:
    """An a2a-sdk server running tests/agents/a2a_agent.py, once per worker (~1 s)."""
    server = a2a_server(Path(tmp_path_factory.mktemp("a2a")))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_target(request: pytest.FixtureRequest) -> Iterator[RedisTarget]:
    target = STANDALONE
    if getattr(request, "param", "standalone") == "cluster":
        cluster: LocalCluster = request.getfixturevalue("redis_cluster")
        target = RedisTarget("cluster", cluster.url)
    set_current(target)
    try:
        yield target
    finally:
        set_current(STANDALONE)


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


@pytest.fixture
async def redis_client(prefix: str, redis_target: RedisTarget) -> AsyncIterator[aioredis.Redis]:
    client = redis_target.client()
    try:
        yield client
    finally:
        await delete_prefix(client, prefix)
        await client.aclose()


@pytest.fixture
async def gateways(prefix: str, redis_client: aioredis.Redis) -> AsyncIterator[Gateways]:
    """In-process gateways of the test (real Redis, real HTTP server): ``await gateways(config)``
    starts one, ``gateways.append(gw)`` adopts one a platform helper started; all are stopped,
    newest first, at teardown."""
    pool = Gateways()
    try:
        yield pool
    finally:
        await pool.stop_all()


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


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    """The fake XpertAI served on a free port, and its API base URL (a module may define its
    own ``xpert`` fixture for a differently set-up fake)."""
    fake = FakeXpertAI(keepalive_s=0.2)
    async for url in serve(fake.app()):
        yield fake, url + "/api/ai"


@pytest.fixture
async def lark() -> AsyncIterator[FakeLark]:
    """The fake Lark OpenAPI server, started and stopped with the test."""
    server = FakeLark()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A PostgreSQL database of this test's own (tests/support/postgres.py), dropped after."""
    async with own_database() as url:
        yield url


@pytest.fixture(params=["postgresql", "sqlite"])
async def archive_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    """An empty archive database, once on PostgreSQL and once on a SQLite file."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'archive.sqlite3'}"
        return
    async with own_database() as url:
        yield url
