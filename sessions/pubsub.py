"""Pub/sub between replicas (Stop and steer, the console's live events), on one server or a
cluster: sharded pub/sub where the server has it, classic pub/sub otherwise.

Classic PUBLISH on a cluster is copied to every node over the cluster bus, whoever listens; a
sharded channel (``SPUBLISH``/``SSUBSCRIBE``, Redis >= 7) lives in its slot's shard only, so the
load spreads with the slots. ``sessions.keys`` gives every due shard its own channel (in the
shard's slot, so a script can publish in the slot it writes); a listener subscribes to all of
them: on a cluster one connection per node that owns some (``SSUBSCRIBE`` of several channels
must stay within one slot, so one command per channel).

A subscriber connection is written and read directly - subscribe commands packed by hiredis,
every reply read from its stream, undecoded, by a hiredis reader of our own - rather than through
redis-py's ``PubSub``, whose per-message machinery (retry wrapper, timing hooks, a push handler
that formats every message for a debug log, the message dict) cost more CPU than the console's
fan-out itself (issue 15).

When a slot moves, Redis ends the subscriptions of its shard channels with an ``sunsubscribe``
the client did not ask for (``cluster.c``, removeChannelsInSlot in Redis 7.0): the listener then
reads the slot map again and subscribes on the new owner. A lost connection is subscribed again
at once; anything else that breaks a subscription (a connection lost again within 10 s, an
error reply) ends :meth:`PubSubHub.listen` with the error; its callers subscribe again. A
message published meanwhile is not seen, as with any pub/sub: a Stop is still found by the
lease renewal and a steer stays in the burst (``gateway.turns.control``); a console page shows a
card's state at its next change or when reloaded.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from typing import Any

import hiredis
import redis.asyncio as aioredis
import structlog
from hiredis import pack_command
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.crc import key_slot
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, ResponseError

from sessions.connection import RedisClient

log = structlog.get_logger("sessions.pubsub")

MESSAGES = (b"message", b"smessage")
_MORE = object()  # the reader needs more bytes
RESUBSCRIBE_SECONDS = 10.0


class _Moved:
    """A channel the server unsubscribed us from (its slot moved)."""

    def __init__(self, channel: bytes) -> None:
        self.channel = channel


class _Subscriber:
    """One subscriber connection: ``pool``'s (given back on close) or a cluster node's own.

    After the connection's handshake (redis-py's ``connect``: AUTH, HELLO, SELECT) its stream is
    read with a hiredis reader of our own that decodes nothing: a message is ``[b"message" |
    b"smessage", channel, data]``, a confirmation ``[b"subscribe" | b"ssubscribe", channel,
    count]`` (RESP2 array or RESP3 push alike); an error reply is raised. A read waits as long as
    it takes (a quiet channel is not a failure); a closed connection raises ``ConnectionError``.
    ``name`` (optional) is set with CLIENT SETNAME, so CLIENT LIST shows the connection."""

    def __init__(
        self,
        *,
        pool: aioredis.ConnectionPool | None = None,
        node: ClusterNode | None = None,
        name: str | None = None,
    ) -> None:
        self.pool = pool
        self.node = node
        self.name = name
        self.conn: AbstractConnection | None = None
        self.reader = hiredis.Reader(
            protocolError=InvalidResponse, replyError=ResponseError, notEnoughData=_MORE
        )
        self.stream: asyncio.StreamReader | None = None

    async def open(self) -> None:
        if self.pool is not None:
            self.conn = await self.pool.get_connection()  # type: ignore[no-untyped-call]
        else:
            assert self.node is not None
            self.conn = self.node.connection_class(**self.node.connection_kwargs)
        conn = self.conn
        await conn.connect()  # a pool's is connected already: nothing to do
        if self.name:
            await conn.send_command("CLIENT", "SETNAME", self.name, check_health=False)
            with contextlib.suppress(ResponseError):  # a server that disables CLIENT
                await conn.read_response()
        stream = getattr(conn, "_reader", None)
        self.stream = stream if isinstance(stream, asyncio.StreamReader) else None
        _raise_if_cancelled()

    async def subscribe(self, command: str, channels: Sequence[str]) -> None:
        """One command per channel (a sharded subscription on a cluster stays in one slot);
        the confirmations come back among the messages."""
        assert self.conn is not None
        packed = [pack_command((command, channel)) for channel in channels]  # type: ignore[arg-type]
        await self.conn.send_packed_command(b"".join(packed), check_health=False)

    async def read(self) -> Any:
        reply = self.reader.gets()
        while reply is _MORE:
            if self.stream is None:  # not redis-py's usual stream: its public, slower path
                assert self.conn is not None
                reply = await self.conn.read_response(
                    disable_decoding=True, timeout=math.inf, push_request=True
                )
                break
            data = await self.stream.read(65536)
            if not data:
                raise RedisConnectionError("Connection closed by server.")
            self.reader.feed(data)
            reply = self.reader.gets()
        if isinstance(reply, Exception):
            raise reply
        return reply

    async def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is None:
            return
        with contextlib.suppress(Exception):
            # nowait: a reader task may still hold the transport (redis-py #3941)
            await conn.disconnect(nowait=True)
        if self.pool is not None:
            with contextlib.suppress(Exception):
                await self.pool.release(conn)


class PubSubHub:
    """``name`` (optional): the CLIENT SETNAME of every subscriber connection a listener opens
    from then on, so CLIENT LIST tells them apart."""

    def __init__(self, client: RedisClient, *, sharded: bool, name: str | None = None) -> None:
        self.client = client
        self.sharded = sharded
        self.name = name

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
            # Asked of the node owning the channel's slot directly: the cluster client's own
            # result callback for these commands breaks on redis-py 8.2 (it expects pairs where
            # the node answers a flat list), and a node's reply shape differs between releases.
            node = self.client.get_node_from_key(channel)
            if node is None:  # the slot map has no owner for it (a cluster mid-resharding)
                raise RedisConnectionError(f"no cluster node serves the slot of {channel}")
            counts.append(_numsub_count(await node.execute_command("PUBSUB", command, channel)))
        return counts

    async def listen(self, channels: Sequence[str]) -> AsyncIterator[str]:
        """The data of every message on ``channels`` until the consumer stops iterating; raises
        when the subscription is lost."""
        async for data in self.listen_bytes(channels):
            yield data.decode("utf-8", "replace")

    async def listen_bytes(self, channels: Sequence[str]) -> AsyncIterator[bytes]:
        """:meth:`listen`, each message's data as the bytes published (not decoded).

        A lost connection is subscribed again at once, silently, as redis-py's ``PubSub`` did:
        a Sentinel failover closes every pooled connection, and so does a replica's shutdown
        before its event streams end. A second loss within ``RESUBSCRIBE_SECONDS`` raises."""
        loop = asyncio.get_running_loop()
        again = -math.inf
        while True:
            await self._ready()
            if self.sharded and isinstance(self.client, RedisCluster):
                source = _ClusterShardListener(self.client, list(channels), self.name).messages()
            else:
                source = self._listen_one(list(channels))
            try:
                async for data in source:
                    yield data
            except (RedisConnectionError, OSError) as exc:
                if loop.time() - again < RESUBSCRIBE_SECONDS:
                    raise
                again = loop.time()
                log.debug("pub/sub connection lost; subscribing again", error=str(exc))

    async def _ready(self) -> None:
        """A cluster client that has not read the slot map yet (or was told to read it again
        after a failure) reads it now."""
        if isinstance(self.client, RedisCluster) and self.client._initialize:
            await self.client.initialize()

    async def _listen_one(self, channels: list[str]) -> AsyncIterator[bytes]:
        """One connection: a single server (any pub/sub), or classic pub/sub on a cluster (on
        the node of the first channel's slot; classic messages reach every node)."""
        if isinstance(self.client, RedisCluster):
            node = self.client.nodes_manager.get_node_from_slot(key_slot(channels[0].encode()))
            subscriber = _Subscriber(node=node, name=self.name)
        else:
            subscriber = _Subscriber(pool=self.client.connection_pool, name=self.name)
        try:
            await subscriber.open()
            await subscriber.subscribe("SSUBSCRIBE" if self.sharded else "SUBSCRIBE", channels)
            while True:
                reply = await subscriber.read()
                if reply[0] in MESSAGES:
                    yield reply[2]
        finally:
            await subscriber.close()


def _raise_if_cancelled() -> None:
    """Raise the cancel a connect swallowed: redis-py's connect can catch a CancelledError that
    lands in it (its retry and disconnect handling), and the task then went on to subscribe and
    wait on the new connection forever, though it was asked to stop (a console's event pump at
    shutdown, cancelled while re-subscribing after the replica closed its pool, waited out its
    5 s bound each time). A cancel asked for and not taken is still counted by the task."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class _ClusterShardListener:
    """Sharded channels on a cluster: one subscriber connection per node owning any of them."""

    def __init__(self, cluster: RedisCluster, channels: list[str], name: str | None) -> None:
        self.cluster = cluster
        self.channels = channels
        self.name = name
        self.nodes: dict[str, _Subscriber] = {}
        self.readers: dict[str, asyncio.Task[None]] = {}
        self.queue: asyncio.Queue[bytes | _Moved | BaseException] = asyncio.Queue()

    async def messages(self) -> AsyncIterator[bytes]:
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
                    await self._subscribe(item.channel.decode())
                    continue
                yield item
        finally:
            await self._close()

    async def _subscribe(self, channel: str) -> None:
        node = self.cluster.nodes_manager.get_node_from_slot(key_slot(channel.encode()))
        subscriber = self.nodes.get(node.name)
        if subscriber is None:
            subscriber = self.nodes[node.name] = _Subscriber(node=node, name=self.name)
            await subscriber.open()
        await subscriber.subscribe("SSUBSCRIBE", [channel])
        reader = self.readers.get(node.name)
        if reader is None or reader.done():
            self.readers[node.name] = asyncio.create_task(
                self._read(subscriber), name=f"pubsub-{node.name}"
            )

    async def _read(self, subscriber: _Subscriber) -> None:
        put = self.queue.put_nowait
        try:
            while True:
                reply = await subscriber.read()
                kind = reply[0]
                if kind == b"smessage":
                    put(reply[2])
                elif kind == b"sunsubscribe":
                    # Not asked for (we never unsubscribe): the slot moved.
                    put(_Moved(reply[1]))
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            put(exc)

    async def _close(self) -> None:
        for task in self.readers.values():
            task.cancel()
        if self.readers:
            await asyncio.wait(list(self.readers.values()), timeout=5)
        for subscriber in self.nodes.values():
            await subscriber.close()


def _numsub_count(reply: Any) -> int:
    """One channel's count from ``PUBSUB NUMSUB`` / ``SHARDNUMSUB``: the flat ``[channel, n]`` the
    server sends, or ``[(channel, n)]`` / ``{channel: n}`` where a client callback reshaped it."""
    if isinstance(reply, dict):
        return int(next(iter(reply.values()), 0))
    if reply and isinstance(reply[0], list | tuple):
        return int(reply[0][1])
    return int(reply[1]) if len(reply) > 1 else 0
