"""``REDIS_URL`` with a config that names no ``redis.url``: the README's "Several replicas"
example. The CLI uses it (rather than an embedded Redis per replica), ``check`` and the start
log say which Redis it is, and a ``redis.url`` in the file still wins."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
import yaml

from gateway.runtime.hints import redis_location
from tests.support.cli import cli, processes_mentioning
from tests.support.helpers import ConsoleClient
from tests.support.workers import Supervised

pytestmark = pytest.mark.slow

# The README's prod.yaml, reduced: no redis section at all.
CONFIG: dict[str, Any] = {
    "experts": [{"id": "echo", "kind": "echo"}],
    "integrations": [{"id": "console", "platform": "console", "xpertId": "echo"}],
    "logging": {"level": "info", "format": "json"},
}


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[list[Supervised]]:
    started: list[Supervised] = []
    yield started
    for daemon in started:
        await daemon.stop()


def test_check_says_it_uses_redis_url_when_the_config_names_none(tmp_path: Path) -> None:
    path = tmp_path / "prod.yaml"
    path.write_text(yaml.safe_dump(CONFIG))
    embedded = cli("check", "--config", str(path))
    assert embedded.returncode == 0, embedded.stderr
    assert "redis: embedded (under .gateway)" in embedded.stdout
    shared = cli("check", "--config", str(path), env={"REDIS_URL": "redis://:pw@10.0.0.5:6379/0"})
    assert shared.returncode == 0, shared.stderr
    line = next(x for x in shared.stdout.splitlines() if x.startswith("redis:"))
    assert line.startswith(
        "redis: redis://10.0.0.5:6379/0 (password hidden) (from $REDIS_URL; "
        "the config names no redis.url)"
    ), line
    assert "pw" not in shared.stdout + shared.stderr
    # The file's own redis.url wins over the environment.
    own = {**CONFIG, "redis": {"url": "redis://10.0.0.9:6379/1"}}
    path.write_text(yaml.safe_dump(own))
    result = cli("check", "--config", str(path), env={"REDIS_URL": "redis://10.0.0.5:6379/0"})
    assert "redis: redis://10.0.0.9:6379/1, key prefix" in result.stdout


async def test_two_replicas_with_redis_url_share_one_redis(
    tmp_path: Path, redis_url: str, replicas: list[Supervised]
) -> None:
    prefix = "ru" + uuid.uuid4().hex[:8]
    config = {**CONFIG, "redis": {"keyPrefix": prefix}, "dataDir": str(tmp_path / "data")}
    for name in ("a", "b"):
        daemon = Supervised(config, tmp_path, name)
        daemon.env = {"REDIS_URL": redis_url}
        replicas.append(daemon)
        await daemon.start(workers=1)
    a, b = replicas
    # Each says which Redis it uses, and none started an embedded one.
    for daemon in replicas:
        [line] = daemon.logged("redis")
        assert line["using"].startswith(f"{redis_location(redis_url)} (from $REDIS_URL;")
        assert not daemon.logged("embedded redis started")
    assert processes_mentioning(str(tmp_path / "data")) == []
    # A message posted on one replica is answered, and the other sees the same conversation.
    on_a = ConsoleClient(f"http://127.0.0.1:{a.port}")
    on_b = ConsoleClient(f"http://127.0.0.1:{b.port}")
    try:
        await on_a.send("hello from a")
        cards = await on_b.wait_cards(count=1, status="done", timeout=30)
        assert "hello from a" in cards[0]["card"]["answer"]
    finally:
        await on_a.close()
        await on_b.close()
    client = aioredis.Redis.from_url(redis_url)
    try:
        assert [key async for key in client.scan_iter(match=f"{prefix}:*", count=1000)]
    finally:
        await client.aclose()
