"""Whether Redis has what a replica wrote on disk: the spool (``gateway.intake.spooler``) empties
its file only once the events it replayed into intake are durable in Redis.

``WAITAOF numlocal numreplicas timeout`` (Redis 7.2 and later, https://redis.io/docs/latest/
commands/waitaof/) "blocks the current client until all the previous write commands by that
client are acknowledged as having been fsynced to the AOF of the local Redis". It counts one
connection's writes, and the replay's went through the pool's connections: so one connection
writes a marker key and then waits for it. The AOF is one sequential file, so the marker on disk
means every write Redis answered before it is on disk too. The reply is ``[local, replicas]``;
a local count of 0 (the timeout passed) keeps the spool for the next try.

Without WAITAOF (Redis before 7.2, or ``appendonly no``, where it refuses numlocal), the server's
``appendonly`` and ``appendfsync`` settings say it: ``appendfsync always`` fsyncs every write
before its reply (https://redis.io/docs/latest/operate/oss_and_stack/management/persistence/),
as the embedded Redis is run. Anything else (``everysec``, no AOF, ``CONFIG`` disabled, a
cluster, whose writes went to several nodes) is a weaker guarantee that the caller logs:
``everysec`` loses at most about a second of writes if the Redis host crashes.
"""

from __future__ import annotations

import time
from typing import Literal

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from sessions.connection import RedisClient
from sessions.records import unavailable
from sessions.store import StoreUnavailable

Durability = Literal["waitaof", "appendfsync-always", "unconfirmed"]
MARKER_TTL_MS = 60_000


async def confirm_durable(
    client: RedisClient, marker: str, *, timeout_ms: int = 2000
) -> Durability:
    """How Redis holds what was written before this call: on disk per ``WAITAOF``, on disk
    per ``appendfsync always``, or ``unconfirmed``. Raises ``StoreUnavailable`` when Redis
    cannot be reached or did not fsync within ``timeout_ms``."""
    if isinstance(client, RedisCluster):
        return "unconfirmed"
    with unavailable():
        async with client.pipeline(transaction=False) as pipe:
            pipe.set(marker, str(int(time.time() * 1000)), px=MARKER_TTL_MS)
            pipe.execute_command("WAITAOF", 1, 0, timeout_ms)
            written, waited = await pipe.execute(raise_on_error=False)
    if isinstance(written, Exception):
        raise StoreUnavailable(f"the durability marker was not written: {written}")
    if isinstance(waited, list):
        if int(waited[0]) < 1:
            raise StoreUnavailable(f"Redis did not fsync its AOF within {timeout_ms} ms")
        return "waitaof"
    if not isinstance(waited, ResponseError):
        raise StoreUnavailable(f"WAITAOF: unexpected reply {waited!r}")
    # Unknown command (before 7.2), or numlocal refused because appendonly is off.
    try:
        with unavailable():
            config = await client.config_get("append*")
    except StoreUnavailable as exc:
        if isinstance(exc.__cause__, ResponseError):  # CONFIG renamed or not allowed
            return "unconfirmed"
        raise
    if config.get("appendonly") == "yes" and config.get("appendfsync") == "always":
        return "appendfsync-always"
    return "unconfirmed"
