"""Auto-pipelined script calls: the session state machine's, intake first of all.

Every inbound event costs one EVALSHA before its ack, and every turn about eight more. Sent one
by one through the client, each call pays for a pool checkout, a retry wrapper, its own write and
its own wake-up on the reply - about a third of the daemon's CPU per event under load
(``bench/lark_ingest.py``). Here the calls made while a write is in flight queue up and go out
together: one write on one dedicated connection, replies read back in order (the idea of ioredis'
``enableAutoPipelining``). Each call still gets its own script run and its own reply; one
caller's error reply touches no other caller.

Recovery: a NOSCRIPT reply (Redis restarted or flushed its scripts) loads the script and sends
the affected calls again; a lost connection is re-opened and the calls without a reply are sent
once more, as redis-py's own retry does - the intake script deduplicates, so a call that did land
answers ``dup`` the second time and is never stored twice; a resent claim at worst finds its own
lease and waits for it to expire (a delay, never a double turn). A second failure reaches the
callers (the platforms retry).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.connection import AbstractConnection
from redis.commands.core import AsyncScript
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import DataError, NoScriptError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

log = structlog.get_logger("sessions.autopipe")


@dataclass(slots=True, eq=False)
class _Call:
    script: AsyncScript
    keys: Sequence[str]
    args: Sequence[Any]
    future: asyncio.Future[Any]
    attempts: int = 0


@dataclass(slots=True)
class PipeStats:
    """Counters for tests and the bench: how many calls went out in how many writes."""

    calls: int = 0
    writes: int = 0
    largest_batch: int = 0
    reconnects: int = 0
    script_reloads: int = 0


def _encode(value: Any) -> bytes:
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return repr(value).encode()
    raise DataError(f"cannot send {type(value).__name__} to Redis")


def _pack(call: _Call) -> bytes:
    """One EVALSHA in RESP: the same bytes as redis-py's packer, for the few types we send."""
    args = (call.script.sha, len(call.keys), *call.keys, *call.args)
    out = [b"*%d\r\n$7\r\nEVALSHA\r\n" % (len(args) + 1)]
    for value in args:
        data = value.encode() if value.__class__ is str else _encode(value)
        out.append(b"$%d\r\n%b\r\n" % (len(data), data))
    return b"".join(out)


class ScriptPipe:
    """Queues script calls and sends those made meanwhile in one write on its own connection."""

    def __init__(self, client: aioredis.Redis, *, name: str = "", max_batch: int = 512) -> None:
        self.client = client
        # CLIENT SETNAME of the pipe's connection (no spaces allowed), so CLIENT LIST shows it.
        self.name = "".join(c if c.isprintable() and not c.isspace() else "_" for c in name)
        self.max_batch = max_batch
        self.stats = PipeStats()
        self._queue: deque[_Call] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._idle: asyncio.Future[None] | None = None  # set while the drainer waits for work
        self._conn: AbstractConnection | None = None
        self._closed = False

    async def evalsha(self, script: AsyncScript, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run ``script`` (already loaded, or loaded on NOSCRIPT); returns its reply."""
        if self._closed:
            raise RedisConnectionError("script pipe is closed")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._queue.append(_Call(script, keys, args, future))
        # The drainer runs after this tick, so every call made in the same tick joins one write.
        if self._idle is not None:
            if not self._idle.done():
                self._idle.set_result(None)
        elif self._drainer is None:
            self._drainer = asyncio.get_running_loop().create_task(self._drain())
        return await future

    async def close(self) -> None:
        self._closed = True
        if self._idle is not None and not self._idle.done():
            self._idle.set_result(None)
        if self._drainer is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._drainer), 5)
        for call in self._queue:
            if not call.future.done():
                call.future.set_exception(RedisConnectionError("script pipe is closed"))
        self._queue.clear()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            await conn.disconnect()  # so the pool does not hand out a connection with our name
            conn.client_name = None
            await self.client.connection_pool.release(conn)

    # --- the drain loop ----------------------------------------------------------------------
    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                if not self._queue:
                    if self._closed:
                        return
                    # Waits for work rather than exiting: waking a future is cheaper than a task.
                    self._idle = loop.create_future()
                    try:
                        await self._idle
                    finally:
                        self._idle = None
                    continue
                take = min(len(self._queue), self.max_batch)
                batch = [self._queue.popleft() for _ in range(take)]
                batch = [c for c in batch if not c.future.done()]  # callers that gave up
                if batch:
                    await self._send(batch)
        except BaseException as exc:  # never leave a caller waiting
            for call in self._queue:
                if not call.future.done():
                    call.future.set_exception(exc)
            self._queue.clear()
            raise
        finally:
            self._drainer = None

    async def _connection(self) -> AbstractConnection:
        if self._conn is None:
            pool = self.client.connection_pool
            conn = await pool.get_connection()  # type: ignore[no-untyped-call]
            try:
                await self._name(conn)
            except BaseException:
                await pool.release(conn)
                raise
            self._conn = conn
        return self._conn

    async def _name(self, conn: AbstractConnection) -> None:
        """CLIENT SETNAME now, and on every reconnect from then on. A server that refuses the
        command (some managed services disable CLIENT) leaves the connection unnamed."""
        if not self.name:
            return
        await conn.send_command("CLIENT", "SETNAME", self.name)
        try:
            await conn.read_response()
        except ResponseError as exc:
            log.info("script connection left unnamed", error=str(exc))
            return
        conn.client_name = self.name

    async def _send(self, batch: list[_Call]) -> None:
        stats = self.stats
        stats.calls += len(batch)
        stats.writes += 1
        stats.largest_batch = max(stats.largest_batch, len(batch))
        answered = 0
        noscript: list[_Call] = []
        lost: list[_Call] = []
        packed: list[bytes] = []
        for call in batch:
            try:
                packed.append(_pack(call))
            except DataError as exc:
                call.future.set_exception(exc)
        batch = [c for c in batch if not c.future.done()]
        try:
            conn = await self._connection()
            await conn.send_packed_command(b"".join(packed))
            for call in batch:
                try:
                    reply: Any = await conn.read_response()
                except NoScriptError as exc:
                    reply = exc
                    if call.attempts < 2:
                        noscript.append(call)
                except ResponseError as exc:
                    reply = exc
                answered += 1
                if call.future.done() or call in noscript:
                    continue
                if isinstance(reply, ResponseError):
                    call.future.set_exception(reply)
                else:
                    call.future.set_result(reply)
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            # The connection is gone (read_response closed it); what has no reply may or may
            # not have run - the scripts deduplicate, so sending it once more is safe.
            if self._conn is not None:
                await self._conn.disconnect()
            stats.reconnects += 1
            for call in batch[answered:]:
                if call.attempts >= 1 and not call.future.done():
                    call.future.set_exception(exc)
                else:
                    lost.append(call)
        except Exception as exc:
            # Anything else leaves the connection in an unknown state: it is dropped, and the
            # calls without a reply get the error rather than waiting forever.
            log.warning("script pipeline error", error=str(exc))
            if self._conn is not None:
                await self._conn.disconnect()
            for call in batch[answered:]:
                if not call.future.done():
                    call.future.set_exception(exc)
        if noscript:
            await self._reload(noscript)
        retry = [c for c in batch if c in noscript or c in lost]  # in the order they were made
        for call in retry:
            call.attempts += 1
        self._queue.extendleft(reversed(retry))

    async def _reload(self, calls: list[_Call]) -> None:
        """NOSCRIPT: load each script named (once) before its calls are sent again."""
        for script in {id(c.script): c.script for c in calls}.values():
            try:
                script.sha = await self.client.script_load(script.script)
                self.stats.script_reloads += 1
            except Exception as exc:
                for call in calls:
                    if call.script is script and not call.future.done():
                        call.future.set_exception(exc)
