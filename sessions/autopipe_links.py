"""The auto-pipeline's connections (``sessions.autopipe``): one dedicated, named connection per
server - the one server, or each cluster node that owns a slot some call is for - and the RESP
bytes of the calls sent on it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog
from hiredis import pack_command
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = structlog.get_logger("sessions.autopipe")

ASKING = b"*1\r\n$6\r\nASKING\r\n"


@dataclass(slots=True, eq=False)
class Call:
    """One script call waiting for its reply."""

    script: AsyncScript
    keys: Sequence[str]
    args: Sequence[Any]
    future: asyncio.Future[Any]
    slot: int = 0  # the cluster slot of its keys (0 on a single server)
    attempts: int = 0  # sent again after a lost connection
    redirects: int = 0  # MOVED / ASK / TRYAGAIN / CLUSTERDOWN followed
    ask: str | None = None  # the node to send it to once, after ASKING
    not_before: float = 0.0  # TRYAGAIN: not before this loop time
    first_sent: float = 0.0
    body: bool = False  # NOSCRIPT came back: sent as EVAL with the script's text


def _encode(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value).encode()
    raise DataError(f"cannot send {type(value).__name__} to Redis")


def pack(call: Call) -> bytes:
    """One EVALSHA in RESP (ASKING first when the call follows an ASK), or an EVAL with the
    script's text once the server said NOSCRIPT: the same bytes as redis-py's packer, for the
    few types we send. hiredis packs in C (a third of the time of the Python loop below, issue
    15); the loop stays for what hiredis refuses, to say why."""
    command, head = ("EVAL", call.script.script) if call.body else ("EVALSHA", call.script.sha)
    args = (head, len(call.keys), *call.keys, *call.args)
    try:
        packed: bytes = pack_command((command, *args))
    except TypeError:
        name = command.encode()
        out = [b"*%d\r\n$%d\r\n%b\r\n" % (len(args) + 1, len(name), name)]
        for value in args:
            data = value.encode() if value.__class__ is str else _encode(value)
            out.append(b"$%d\r\n%b\r\n" % (len(data), data))
        packed = b"".join(out)  # no refusal above: a type hiredis does not know but we do
    return ASKING + packed if call.ask else packed


Write = Callable[[bytes], Awaitable[None]]
Read = Callable[[], Awaitable[Any]]


def _direct(conn: AbstractConnection) -> tuple[Write, Read]:
    """How :meth:`Link.exchange` writes to and reads from ``conn``: its stream and parser where
    redis-py has them (every connection class of redis-py 5 to 8), else its public methods, a
    reply that is an error returned rather than raised either way."""
    writer, parser = getattr(conn, "_writer", None), getattr(conn, "_parser", None)
    if writer is not None and parser is not None:

        async def write(data: bytes) -> None:
            writer.write(data)
            await writer.drain()

        return write, parser.read_response

    async def read() -> Any:
        try:
            return await conn.read_response()
        except ResponseError as exc:
            return exc

    return conn.send_packed_command, read


class Lost:
    """No reply: the connection broke before it came."""

    def __init__(self, error: Exception) -> None:
        self.error = error


class Link:
    """A dedicated connection to one server, named with CLIENT SETNAME (again after every
    reconnect), so CLIENT LIST shows it."""

    def __init__(
        self,
        name: str,
        *,
        pool: aioredis.ConnectionPool | None = None,
        node: ClusterNode | None = None,
    ) -> None:
        self.name = name
        self.pool = pool
        self.node = node
        self.conn: AbstractConnection | None = None

    @property
    def address(self) -> str:
        return self.node.name if self.node is not None else "server"

    async def connection(self) -> AbstractConnection:
        if self.conn is not None and not self.conn.is_connected:
            # Reconnect through connect() rather than letting the next write do it: only
            # connect() asks Sentinel for the master again (a sentinel-managed connection's
            # write would reconnect to the address it had, redis-py 8.1's send_packed_command).
            await self.conn.connect()  # type: ignore[no-untyped-call]
        if self.conn is None:
            conn: AbstractConnection
            if self.pool is not None:
                conn = await self.pool.get_connection()  # type: ignore[no-untyped-call]
            else:
                assert self.node is not None
                conn = self.node.connection_class(**self.node.connection_kwargs)
            try:
                await conn.connect()  # type: ignore[no-untyped-call]
                await self._name(conn)
            except BaseException:
                await self._give_back(conn)
                raise
            self.conn = conn
        return self.conn

    async def _name(self, conn: AbstractConnection) -> None:
        """A server that refuses the command (some managed services disable CLIENT) leaves the
        connection unnamed."""
        if not self.name:
            return
        await conn.send_command("CLIENT", "SETNAME", self.name)
        try:
            await conn.read_response()
        except ResponseError as exc:
            log.info("script connection left unnamed", error=str(exc))
            return
        conn.client_name = self.name

    async def drop(self) -> None:
        """After an error: the connection is closed; the next call opens (and names) it again."""
        if self.conn is not None:
            await self.conn.disconnect()

    async def _give_back(self, conn: AbstractConnection) -> None:
        await conn.disconnect()  # so a pool does not hand out a connection with our name
        conn.client_name = None
        if self.pool is not None:
            await self.pool.release(conn)

    async def close(self) -> None:
        if self.conn is not None:
            conn, self.conn = self.conn, None
            await self._give_back(conn)

    async def exchange(self, calls: list[Call], stats: Any) -> dict[int, Any]:
        """Write ``calls`` and read a reply (or error) for each, by ``id(call)``; a lost
        connection answers the calls without a reply with :class:`Lost`."""
        out: dict[int, Any] = {}
        packed: list[bytes] = []
        sendable: list[Call] = []
        for call in calls:
            try:
                packed.append(pack(call))
                sendable.append(call)
            except DataError as exc:
                out[id(call)] = exc
        answered = 0
        loop_time = asyncio.get_running_loop().time
        try:
            conn = await self.connection()
            if conn.health_check_interval:  # a PING first when the link was idle that long
                await conn.check_health()  # type: ignore[no-untyped-call]
            # The batch straight onto the connection's stream, its replies straight from its
            # parser, under one deadline: redis-py's send_packed_command runs the write as a
            # task (asyncio.wait_for) and read_response arms a timer per reply, ~10 timers and
            # a task per turn (issue 15). A reply that is an error comes back as its
            # ResponseError; a broken or stalled connection raises, and is dropped below.
            write, read = _direct(conn)
            async with asyncio.timeout(conn.socket_timeout):
                await write(b"".join(packed))
                for call in sendable:
                    if call.ask:
                        await read()  # ASKING's +OK (or its error)
                    out[id(call)] = await read()
                    answered += 1
            if conn.health_check_interval:  # as read_response would: the link is alive
                conn.next_health_check = loop_time() + conn.health_check_interval
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            # The connection is gone (read_response closed it); what has no reply may or may
            # not have run - the scripts deduplicate, so sending it once more is safe.
            await self.drop()
            stats.reconnects += 1
            for call in sendable[answered:]:
                out[id(call)] = Lost(exc)
        except Exception as exc:
            # Anything else leaves the connection in an unknown state: it is dropped, and the
            # calls without a reply get the error rather than waiting forever.
            log.warning("script pipeline error", error=str(exc), server=self.address)
            await self.drop()
            for call in sendable[answered:]:
                out[id(call)] = exc
        return out


class Links:
    """Where each call goes: the one server, or the node owning its slot (or named by ASK)."""

    def __init__(self, client: aioredis.Redis | RedisCluster, name: str) -> None:
        self.client = client
        self.name = name
        self.cluster = client if isinstance(client, RedisCluster) else None
        self.links: dict[str, Link] = {}

    def slot(self, keys: Sequence[str]) -> int:
        if self.cluster is None or not keys:
            return 0
        return self.cluster.keyslot(keys[0])

    def route(self, call: Call) -> Link:
        if self.cluster is None:
            link = self.links.get("")
            if link is None:
                assert isinstance(self.client, aioredis.Redis)
                link = self.links[""] = Link(self.name, pool=self.client.connection_pool)
            return link
        manager = self.cluster.nodes_manager
        if call.ask:
            node = manager.get_node(node_name=call.ask)
            if node is None:  # a node the slot map does not know yet
                host, _, port = call.ask.rpartition(":")
                node = ClusterNode(host, int(port), **manager.connection_kwargs)
        else:
            # SlotNotCoveredError (or a KeyError from an empty map): read the map, try again
            node = manager.get_node_from_slot(call.slot)
        link = self.links.get(node.name)  # host:port: the same server whatever the node object
        if link is None:
            link = self.links[node.name] = Link(self.name, node=node)
        return link

    async def ready(self) -> None:
        """A cluster client that has not read the slot map yet (or was told to read it again
        after a failure) reads it now."""
        if self.cluster is not None and self.cluster._initialize:
            await self.cluster.initialize()

    async def moved(self, errors: Sequence[Any]) -> None:
        """MOVED: the slot map learns each new owner (redis-py's own bookkeeping)."""
        if self.cluster is not None:
            for error in errors:
                await self.cluster.nodes_manager.move_slot(error)

    async def refresh(self) -> None:
        """Read the cluster's slot map again (a node failed, a slot is not covered)."""
        if self.cluster is not None:
            try:
                await self.cluster.nodes_manager.initialize()
            except Exception as exc:
                log.warning("cluster slot map refresh failed", error=str(exc))

    async def close(self) -> None:
        for link in self.links.values():
            await link.close()
        self.links.clear()
