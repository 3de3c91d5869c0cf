"""Redis connection: one server by URL (or the embedded one), a Sentinel-watched master, or a
Redis Cluster (``redis.mode``), with bounded start-up retries.

What the rest of the gateway gets is a :class:`RedisHandle`: the client (``redis.asyncio.Redis``,
or ``RedisCluster`` whose every command goes to the node owning its keys' slot, following MOVED
and ASK), and whether the server has sharded pub/sub (Redis >= 7, on every primary).

Sentinel: the master is whichever the sentinels name, followed through a failover at once
(``sessions.sentinel``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import redis.asyncio as aioredis
import structlog
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from sessions.embedded import EmbeddedRedis, RedisStartupError
from sessions.sentinel import MasterWatch

__all__ = [
    "EmbeddedRedis",
    "RedisClient",
    "RedisHandle",
    "RedisMode",
    "RedisStartupError",
    "connect_redis",
    "redact_url",
]

log = structlog.get_logger("sessions.connection")

RedisClient: TypeAlias = aioredis.Redis | RedisCluster
RedisMode: TypeAlias = Literal["standalone", "sentinel", "cluster"]


@dataclass
class RedisHandle:
    """The client the gateway uses, plus what it owns (an embedded server, a sentinel watch)."""

    client: RedisClient
    url: str
    embedded: EmbeddedRedis | None = None
    mode: RedisMode = "standalone"
    sharded_pubsub: bool = False
    sentinel: Sentinel | None = None
    watch: MasterWatch | None = None  # sentinel mode

    @property
    def master(self) -> tuple[str, int] | None:
        """Sentinel mode: the master the connections go to."""
        return self.watch.master if self.watch is not None else None

    async def close(self) -> None:
        if self.watch is not None:
            await self.watch.close()
        await self.client.aclose()
        if self.sentinel is not None:
            with contextlib.suppress(Exception):
                await self.sentinel.aclose()
        if self.embedded is not None:
            await asyncio.to_thread(self.embedded.stop)


def redact_url(url: str) -> str:
    """Hide the password of a redis URL for logs and errors."""
    if "@" not in url or "://" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0] if ":" in creds else ""
    return f"{scheme}://{user}:***@{host}"


def _address(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host.strip("[]"), int(port)


# Shared by every mode: a blocking pool waits (up to 5 s) for a free connection under load where
# the default pool fails at once with "Too many connections" (the API would answer 503). After
# Redis restarted, every pooled connection is dead: its next command fails with "Connection
# closed by server" although Redis is back. One retry on a fresh connection (retry_on_error)
# makes that invisible; a Redis that is still down fails fast.
_CONNECTION: dict[str, Any] = {
    "decode_responses": True,
    "socket_connect_timeout": 5,
    "socket_timeout": 10,
}


def _standalone(url: str, max_connections: int) -> aioredis.Redis:
    pool = aioredis.BlockingConnectionPool.from_url(
        url,
        max_connections=max_connections,
        timeout=5,
        health_check_interval=30,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[RedisConnectionError],
        **_CONNECTION,
    )
    return aioredis.Redis.from_pool(pool)  # the client owns (closes) the pool


def _sentinel(
    url: str | None, sentinels: Sequence[str], master_name: str, max_connections: int
) -> tuple[Sentinel, aioredis.Redis]:
    """The master named ``master_name``; ``url`` (host left out) gives its user, password,
    database and TLS (``rediss://``)."""
    options: dict[str, Any] = {}
    if url:
        parsed = parse_url(url)
        options = {k: parsed[k] for k in ("username", "password", "db") if k in parsed}
        if parsed.get("connection_class") is not None:
            options["ssl"] = True
    sentinel = Sentinel(  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis-py 8.2
        [_address(s) for s in sentinels],
        sentinel_kwargs={"socket_connect_timeout": 5, "socket_timeout": 5},
    )
    client = sentinel.master_for(
        master_name,
        max_connections=max_connections,
        health_check_interval=30,
        retry=Retry(NoBackoff(), 1),
        retry_on_error=[RedisConnectionError],
        **_CONNECTION,
        **options,
    )
    return sentinel, client


def _cluster(url: str, max_connections: int) -> RedisCluster:
    # max_connections is per node; MOVED and ASK are followed by the client.
    return RedisCluster.from_url(url, max_connections=max_connections, **_CONNECTION)


async def _versions(client: RedisClient) -> list[tuple[int, ...]]:
    """The server version of every primary; (0,) where INFO is refused (some managed services
    restrict it): classic pub/sub then."""
    try:
        if isinstance(client, RedisCluster):
            infos = [await client.info("server", target_nodes=n) for n in client.get_primaries()]
        else:
            infos = [await client.info("server")]
    except ResponseError:
        return [(0,)]
    out: list[tuple[int, ...]] = []
    for info in infos:
        parts = str(info.get("redis_version", "0")).split(".")
        out.append(tuple(int(p) for p in parts if p.isdigit()))
    return out


async def _verify_mode(client: RedisClient, mode: RedisMode, where: str) -> None:
    if isinstance(client, RedisCluster):
        return  # the client refused a server that is not a cluster node when it connected
    try:
        info = await client.info("cluster")
    except ResponseError:
        return
    if str(info.get("cluster_enabled", "0")) == "1":
        raise RedisStartupError(
            f"Redis {where} is a Redis Cluster node: set redis.mode: cluster "
            f"(with mode {mode} the keys of other nodes would answer MOVED)"
        )


async def connect_redis(
    url: str | None,
    *,
    data_dir: Path,
    mode: RedisMode = "standalone",
    sentinels: Sequence[str] = (),
    master_name: str | None = None,
    connect_timeout_s: float = 30.0,
    max_connections: int = 256,
) -> RedisHandle:
    """Connect (retrying with backoff for a bounded time) or start the embedded Redis."""
    embedded: EmbeddedRedis | None = None
    sentinel: Sentinel | None = None
    if mode == "standalone" and url is None:
        embedded = EmbeddedRedis(data_dir=data_dir)
        starting = asyncio.get_running_loop().run_in_executor(None, embedded.start)
        try:
            url = await asyncio.shield(starting)
        except asyncio.CancelledError:  # the thread starts the server anyway: stop it
            with contextlib.suppress(Exception):
                await starting
            await asyncio.to_thread(embedded.stop)
            raise
    client: RedisClient
    if mode == "sentinel":
        if not sentinels or not master_name:
            raise RedisStartupError("redis.mode sentinel needs redis.sentinels and masterName")
        sentinel, client = _sentinel(url, sentinels, master_name, max_connections)
        where = f"(master {master_name!r} of sentinels {', '.join(sentinels)})"
        url = f"sentinel://{','.join(sentinels)}/{master_name}"
    elif mode == "cluster":
        if url is None:
            raise RedisStartupError("redis.mode cluster needs redis.url (any node of the cluster)")
        client = _cluster(url, max_connections)
        where = f"at cluster node {redact_url(url)}"
    else:
        assert url is not None
        client = _standalone(url, max_connections)
        where = f"at {redact_url(url)}"
    handle = RedisHandle(client=client, url=url, embedded=embedded, mode=mode, sentinel=sentinel)
    try:
        await _until_reachable(handle, where, connect_timeout_s)
        await _verify_mode(client, mode, where)
        handle.sharded_pubsub = min(await _versions(client)) >= (7,)
        if sentinel is not None and master_name:
            assert isinstance(client, aioredis.Redis)
            pool = client.connection_pool
            assert isinstance(pool, SentinelConnectionPool)
            handle.watch = MasterWatch(
                sentinel, [_address(s) for s in sentinels], master_name, pool
            )
            await handle.watch.start()
    except BaseException:  # refused, timed out or Ctrl-C during start-up: leave nothing running
        await handle.close()
        raise
    return handle


async def _until_reachable(handle: RedisHandle, where: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    delay = 0.1
    last: Exception | None = None
    while True:
        try:
            await handle.client.ping()
            return
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            last = exc
        except RedisClusterException as exc:
            # "Cluster mode is not enabled on this node", or no node reachable: the former is
            # final, the latter may pass.
            if "not enabled" in str(exc):
                raise RedisStartupError(
                    f"Redis {where} is not a Redis Cluster node ({exc}); "
                    "use redis.mode: standalone for a single server"
                ) from exc
            last = exc
        except RedisError as exc:  # auth errors and the like: retrying will not help
            raise RedisStartupError(f"Redis {where} refused us: {exc}") from exc
        if time.monotonic() + delay > deadline:
            raise RedisStartupError(f"could not reach Redis {where} within {timeout_s:g} s: {last}")
        log.warning("redis not reachable, retrying", where=where, delay_s=delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 2.0)
