"""Pub/sub between replicas (Stop and steer, the console's live events), on one server or a
cluster: sharded pub/sub where the server has it, classic pub/sub otherwise.

Classic PUBLISH on a cluster is copied to every node over the cluster bus, whoever listens; a
sharded channel (``SPUBLISH``/``SSUBSCRIBE``, Redis >= 7) lives in its slot's shard only, so the
load spreads with the slots. ``sessions.keys`` gives every due shard its own channel (in the
shard's slot, so a script can publish in the slot it writes); a listener subscribes to all of
them: on a cluster one connection per node that owns some (``SSUBSCRIBE`` of several channels
must stay within one slot, so one command per channel).

When a slot moves, Redis ends the subscriptions of its shard channels with an ``sunsubscribe``
the client did not ask for (``cluster.c``, removeChannelsInSlot in Redis 7.0): the listener then
reads the slot map again and subscribes on the new owner. Anything else that breaks a
subscription (a lost connection, a failed node) ends :meth:`PubSubHub.listen` with the error;
its callers subscribe again. A message published meanwhile is not seen, as with any pub/sub: a
Stop is still found by the lease renewal and a steer stays in the burst (``gateway.control``); a
console page shows a card's state at its next change or when reloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.client import PubSub
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from sessions.connection import RedisClient

log = structlog.get_logger("sessions.pubsub")


class _Moved:
    """A channel the server unsubscribed us from (its slot moved)."""

    def __init__(self, channel: str) -> None:
        self.channel = channel


class PubSubHub:
    def __init__(self, client: RedisClient, *, sharded: bool) -> None:
        self.client = client
        self.sharded = sharded

    async def publish(self, channel: str, message: str) -> int:
        """Publish; returns how many subscribers got it (on a cluster with classic pub/sub: on
        the node that took the command)."""
        command = "SPUBLISH" if self.sharded else "PUBLISH"
        return int(await self.client.execute_command(command, channel, message))

    async def subscribers(self, channels: Sequence[str]) -> list[int]:
        """How many subscribers each channel has (PUBSUB NUMSUB / SHARDNUMSUB). On a cluster the
        count of the node owning the channel's slot: where a listener subscribes."""
        await self._ready()
        command = "SHARDNUMSUB" if self.sharded else "NUMSUB"
        if not isinstance(self.client, RedisCluster):
            flat = await self.client.execute_command(  # type: ignore[no-untyped-call]
                "PUBSUB", command, *channels
            )
            return [int(n) for n in flat[1::2]]
        counts = []
        for channel in channels:
            node = self.client.get_node_from_key(channel)
            flat = await self.client.execute_command("PUBSUB", command, channel, target_nodes=node)
            counts.append(int(flat[1]))
        return counts

    async def listen(self, channels: Sequence[str]) -> AsyncIterator[str]:
        """The data of every message on ``channels`` until the consumer stops iterating; raises
        when the subscription is lost."""
        await self._ready()
        if self.sharded and isinstance(self.client, RedisCluster):
            source = _ClusterShardListener(self.client, list(channels)).messages()
        else:
            source = self._listen_one(list(channels))
        async for data in source:
            yield data

    async def _ready(self) -> None:
        """A cluster client that has not read the slot map yet (or was told to read it again
        after a failure) reads it now."""
        if isinstance(self.client, RedisCluster) and self.client._initialize:
            await self.client.initialize()

    async def _listen_one(self, channels: list[str]) -> AsyncIterator[str]:
        """One connection: a single server (any pub/sub), or classic pub/sub on a cluster (on
        the node of the first channel's slot; classic messages reach every node)."""
        pubsub = self.client.pubsub(ignore_subscribe_messages=True)
        try:
            if self.sharded:
                await pubsub.ssubscribe(*channels)
            else:
                await pubsub.subscribe(*channels)
            async for message in pubsub.listen():
                if message.get("type") in ("message", "smessage"):
                    yield str(message["data"])
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]


class _ClusterShardListener:
    """Sharded channels on a cluster: one subscriber connection per node owning any of them."""

    def __init__(self, cluster: RedisCluster, channels: list[str]) -> None:
        self.cluster = cluster
        self.channels = channels
        self.nodes: dict[str, PubSub] = {}
        self.readers: dict[str, asyncio.Task[None]] = {}
        self.queue: asyncio.Queue[str | _Moved | BaseException] = asyncio.Queue()

    async def messages(self) -> AsyncIterator[str]:
        try:
            for channel in self.channels:
                await self._subscribe(channel)
            while True:
                item = await self.queue.get()
                if isinstance(item, BaseException):
                    raise item
                if isinstance(item, _Moved):
                    log.info("shard channel moved; subscribing on its new owner")
                    await self.cluster.nodes_manager.initialize()
                    await self._subscribe(item.channel)
                    continue
                yield item
        finally:
            await self._close()

    async def _subscribe(self, channel: str) -> None:
        node = self.cluster.nodes_manager.get_node_from_slot(key_slot(channel.encode()))
        pubsub = self.nodes.get(node.name)
        if pubsub is None:
            pool = aioredis.ConnectionPool(
                connection_class=node.connection_class, max_connections=2, **node.connection_kwargs
            )
            pubsub = PubSub(connection_pool=pool)
            self.nodes[node.name] = pubsub
        await pubsub.ssubscribe(channel)
        reader = self.readers.get(node.name)
        if reader is None or reader.done():
            self.readers[node.name] = asyncio.create_task(
                self._read(pubsub), name=f"pubsub-{node.name}"
            )

    async def _read(self, pubsub: PubSub) -> None:
        try:
            while True:
                message: dict[str, Any] | None = await pubsub.get_message(timeout=None)
                if message is None:
                    continue
                kind = message.get("type")
                if kind == "smessage":
                    self.queue.put_nowait(str(message["data"]))
                elif kind == "sunsubscribe":
                    channel = str(message["channel"])
                    # Not asked for (we never unsubscribe): the slot moved. Forget the channel
                    # here, so a reconnect does not subscribe to it on the old owner again.
                    pubsub.shard_channels.pop(channel, None)
                    self.queue.put_nowait(_Moved(channel))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            self.queue.put_nowait(exc)

    async def _close(self) -> None:
        for task in self.readers.values():
            task.cancel()
        if self.readers:
            await asyncio.wait(list(self.readers.values()), timeout=5)
        for pubsub in self.nodes.values():
            with contextlib.suppress(Exception):
                await pubsub.aclose()  # type: ignore[no-untyped-call]
            with contextlib.suppress(Exception):
                await pubsub.connection_pool.disconnect()
