"""Where a test's Redis state lives: this worker's own ``redis-server`` (or ``$REDIS_URL``), or a
real Redis Cluster for modules marked ``BOTH_REDIS``; and how a test's keys are swept away."""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster

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

# ``pytestmark = BOTH_REDIS``: every test of the module that uses Redis runs on the shared Redis
# and on the cluster (``pytest_generate_tests`` of tests/support/plugin.py).
BOTH_REDIS = pytest.mark.both_redis

_current = [STANDALONE]  # the target of the running test (tests run one at a time)


def current() -> RedisTarget:
    """The Redis target of the running test (what ``base_config`` points at)."""
    return _current[0]


def set_current(target: RedisTarget) -> None:
    _current[0] = target


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
