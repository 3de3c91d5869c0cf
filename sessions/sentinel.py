"""Following a Sentinel failover at once (``redis.mode: sentinel``).

redis-py asks the sentinels for the master's address whenever it opens a connection and drops a
connection whose server answers READONLY (a demoted master). A connection that stays open to the
old master after a failover would go on writing there until that server is turned into a replica
- for up to 10 s with Sentinel's defaults (it reconfigures the old master at its next INFO
period) - writes the new master never sees. So the gateway listens for the sentinels'
``+switch-master`` event (the "Sentinel API" pub/sub events, https://redis.io/docs/latest/
operate/oss_and_stack/management/sentinel/#pubsub-messages) and asks them every second as well,
in case an event is missed; when the master changed it closes every connection of the pool (the
script pipeline's and the pub/sub listeners' too), and the next command opens one to the new
master.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence

import redis.asyncio as aioredis
import structlog
from redis.asyncio.sentinel import Sentinel, SentinelConnectionPool
from redis.exceptions import RedisError

log = structlog.get_logger("sessions.sentinel")

POLL_S = 1.0


class MasterWatch:
    def __init__(
        self,
        sentinel: Sentinel,
        addresses: Sequence[tuple[str, int]],
        master_name: str,
        pool: SentinelConnectionPool,
    ) -> None:
        self.sentinel = sentinel
        self.addresses = list(addresses)
        self.master_name = master_name
        self.pool = pool
        self.master: tuple[str, int] | None = None  # the master the pool connects to
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        host, port = await self.sentinel.discover_master(self.master_name)
        self.master = (str(host), int(port))
        self._tasks = [
            asyncio.create_task(self._poll(), name="sentinel-poll"),
            asyncio.create_task(self._events(), name="sentinel-events"),
        ]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=5)

    async def _master_is(self, host: str, port: int) -> None:
        master = (host, port)
        if master == self.master:
            return
        self.master = master
        log.warning("redis master changed; reconnecting", master=f"{host}:{port}")
        self.pool.master_address = master
        await self.pool.disconnect(inuse_connections=True)

    async def _poll(self) -> None:
        while True:
            with contextlib.suppress(RedisError, OSError):
                host, port = await self.sentinel.discover_master(self.master_name)
                await self._master_is(str(host), int(port))
            await asyncio.sleep(POLL_S)

    async def _events(self) -> None:
        """``+switch-master <name> <old ip> <old port> <new ip> <new port>``, from one sentinel
        at a time (each announces every switch); the next one when it is lost."""
        while True:
            for host, port in self.addresses:
                client = aioredis.Redis(
                    host=host, port=port, decode_responses=True, socket_connect_timeout=5
                )
                pubsub = client.pubsub(ignore_subscribe_messages=True)
                try:
                    await pubsub.subscribe("+switch-master")
                    async for message in pubsub.listen():
                        fields = str(message.get("data", "")).split()
                        if len(fields) == 5 and fields[0] == self.master_name:
                            await self._master_is(fields[3], int(fields[4]))
                except (RedisError, OSError, ValueError):
                    pass
                finally:
                    with contextlib.suppress(Exception):
                        await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]  # typed from redis-py 8.2
                    await client.aclose()
                await asyncio.sleep(POLL_S)
