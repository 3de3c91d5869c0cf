"""Pub/sub between replicas (``sessions.pubsub``) on the shared Redis and on a cluster, sharded
and classic: what a listener yields, and what a lost subscriber connection does to it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ConnectionError as RedisConnectionError

from sessions import KeyBuilder, PubSubHub
from tests.support.helpers import kill_named, named
from tests.support.redis_targets import BOTH_REDIS
from tests.support.waits import eventually

pytestmark = BOTH_REDIS


async def _sharded(client: Any) -> bool:
    if isinstance(client, RedisCluster):
        infos = [await client.info("server", target_nodes=n) for n in client.get_primaries()]
    else:
        infos = [await client.info("server")]
    return all(int(str(i["redis_version"]).split(".")[0]) >= 7 for i in infos)


@pytest.mark.parametrize("want_sharded", [True, False], ids=["sharded", "classic"])
async def test_a_listener_yields_the_bytes_published_and_survives_one_lost_connection(
    redis_client: Any, prefix: str, want_sharded: bool
) -> None:
    sharded = want_sharded and await _sharded(redis_client)
    name = f"{prefix}-sub"
    hub = PubSubHub(redis_client, sharded=sharded, name=name)
    channels = KeyBuilder(prefix=prefix).timeline_channels(sharded)
    got: list[bytes] = []

    async def collect() -> None:
        async for data in hub.listen_bytes(channels):
            got.append(data)

    async def subscribed() -> bool:
        return all(n == 1 for n in await hub.subscribers(channels))

    listener = asyncio.ensure_future(collect())
    try:
        await eventually(subscribed)
        # UTF-8 as published (not decoded, not escaped); one message per channel, in order
        payloads = [f'{{"n":{i},"text":"héllo ✓"}}'.encode() for i in range(len(channels))]
        command = "SPUBLISH" if sharded else "PUBLISH"
        for channel, payload in zip(channels, payloads, strict=True):
            await redis_client.execute_command(command, channel, payload)
        await eventually(lambda: len(got) == len(payloads))
        assert sorted(got) == sorted(payloads)
        # A lost connection is subscribed again at once, as redis-py's PubSub did ...
        assert await kill_named(redis_client, name) >= 1
        await eventually(lambda: _delivered(redis_client, command, channels[0], got))
        assert not listener.done()
        # ... but lost again soon after, it ends the listener (its caller subscribes again)
        assert await kill_named(redis_client, name) >= 1
        with pytest.raises(RedisConnectionError):
            async with asyncio.timeout(10):
                await listener
    finally:
        listener.cancel()
        with contextlib.suppress(BaseException):
            await listener
    # ... and a new listener gets what is published from then on, as text from listen()
    texts: list[str] = []

    async def collect_text() -> None:
        async for text in hub.listen(channels):
            texts.append(text)

    listener = asyncio.ensure_future(collect_text())
    try:
        await eventually(subscribed)
        await redis_client.execute_command(command, channels[-1], "again ✓".encode())
        await eventually(lambda: texts == ["again ✓"])
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener

    async def closed() -> bool:
        return not await named(redis_client, name)

    await eventually(closed)  # the cancelled listener left no connection open


async def test_a_subscription_outlives_its_client_s_pool_being_closed(
    redis_client: Any, redis_target: Any, prefix: str
) -> None:
    """A replica closes its Redis client before its web app's event streams end: the listener
    subscribes again (no "subscription lost" at every shutdown) until it is stopped."""
    sharded = await _sharded(redis_client)
    channels = KeyBuilder(prefix=prefix).timeline_channels(sharded)
    client = redis_target.client()
    hub = PubSubHub(client, sharded=sharded)
    got: list[bytes] = []

    async def collect() -> None:
        async for data in hub.listen_bytes(channels):
            got.append(data)

    listener = asyncio.ensure_future(collect())
    try:
        await eventually(lambda: _all_subscribed(hub, channels))  # on the client, still open
        await client.aclose()  # what a replica's shutdown does first
        command = "SPUBLISH" if sharded else "PUBLISH"
        await eventually(lambda: _delivered(redis_client, command, channels[0], got))
        assert not listener.done()
    finally:
        listener.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await listener


async def _all_subscribed(hub: PubSubHub, channels: list[str]) -> bool:
    return all(n == 1 for n in await hub.subscribers(channels))


async def _delivered(client: Any, command: str, channel: str, got: list[bytes]) -> bool:
    """Publish a new message; whether it (or one published before) has arrived."""
    mark = f"mark-{len(got)}".encode()
    await client.execute_command(command, channel, mark)
    await asyncio.sleep(0.05)
    return any(m.startswith(b"mark-") for m in got)
