"""``redis.mode`` (standalone | sentinel | cluster): what ``check`` accepts and refuses, with one
``key.path: reason`` line per problem and the URL never shown, and what start-up says when the
mode does not match the server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.errors import ConfigError
from gateway.config.file import load_settings
from gateway.config.settings import Settings
from gateway.runtime.cli import main, settings_model
from sessions.connection import RedisStartupError, connect_redis
from tests.support.cluster import LocalCluster
from tests.support.redis_targets import REDIS_URL


def config(**redis: Any) -> dict[str, Any]:
    return {
        "redis": redis,
        "experts": [{"id": "echo", "kind": "echo"}],
        "integrations": [{"id": "console", "platform": "console", "xpertId": "echo"}],
    }


def load(cfg: dict[str, Any]) -> Settings:
    return load_settings(cfg, model=settings_model(), env={})


def problems(cfg: dict[str, Any]) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(cfg)
    return info.value.problems


def test_each_mode_loads_with_its_settings() -> None:
    assert load(config()).redis.embedded
    cluster = load(config(mode="cluster", url="rediss://:pw@10.0.0.1:7000"))
    assert cluster.redis.mode == "cluster" and not cluster.redis.embedded
    sentinel = load(
        config(
            mode="sentinel",
            sentinels=["10.0.0.1:26379", "sentinel-2:26379"],
            masterName="mymaster",
            url="redis://:pw@/2",
        )
    )
    assert sentinel.redis.sentinels == ["10.0.0.1:26379", "sentinel-2:26379"]
    assert not sentinel.redis.embedded  # no URL, yet not the embedded Redis
    assert load(config()).runtime.due_shards == 16


@pytest.mark.parametrize(
    ("redis", "expected"),
    [
        (
            {"mode": "cluster"},
            "redis.url: mode cluster needs the URL of a cluster node (redis:// or rediss://, "
            "any node): the embedded Redis is a single server",
        ),
        (
            {"mode": "cluster", "url": "unix:///run/redis.sock"},
            "redis.url: mode cluster is reached over TCP (redis:// or rediss://), not unix://",
        ),
        (
            {"mode": "cluster", "url": "redis://:secret@10.0.0.1:7000/3"},
            "redis.url: a cluster has only database 0 (the URL names '3')",
        ),
        (
            {"mode": "sentinel", "masterName": "m"},
            "redis.sentinels: mode sentinel needs the sentinels, as host:port",
        ),
        (
            {"mode": "sentinel", "sentinels": ["10.0.0.1:26379"]},
            "redis.masterName: mode sentinel needs the name the sentinels monitor (the <name> "
            "of 'sentinel monitor <name> …')",
        ),
        (
            {"mode": "sentinel", "sentinels": ["10.0.0.1"], "masterName": "m"},
            "redis.sentinels[0]: expected host:port, not '10.0.0.1'",
        ),
        (
            {
                "mode": "sentinel",
                "sentinels": ["s:26379"],
                "masterName": "m",
                "url": "redis://:secret@master-host:6379/0",
            },
            "redis.url: with mode sentinel the sentinels name the master, and the URL only carries "
            "its password, database and TLS, without a host: redis://:PASSWORD@/0 (or rediss://)",
        ),
        (
            {"sentinels": ["s:26379"]},
            "redis.sentinels: only used with mode sentinel (mode is standalone)",
        ),
        (
            {"mode": "cluster", "url": "redis://n:7000", "masterName": "m"},
            "redis.masterName: only used with mode sentinel (mode is cluster)",
        ),
        (
            {"mode": "replicated"},
            "redis.mode: must be one of standalone, sentinel, cluster, not 'replicated'",
        ),
    ],
)
def test_a_combination_that_does_not_fit_is_one_line_naming_the_key(
    redis: dict[str, Any], expected: str
) -> None:
    found = problems(config(**redis))
    assert any(p.startswith(expected) for p in found), found
    assert not any("secret" in p for p in found)


def test_due_shards_is_bounded() -> None:
    cfg = config()
    cfg["runtime"] = {"dueShards": 0}
    assert problems(cfg) == ["runtime.dueShards: must be at least 1, not 0"]


def test_check_names_the_mode_and_hides_the_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config(mode="cluster", url="rediss://:hunter2@10.0.0.1:7000")))
    assert main(["check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert "redis: cluster via rediss://10.0.0.1:7000 (password hidden), key prefix 'xgw', " in out
    assert "16 due shards" in out and "hunter2" not in out
    path.write_text(
        yaml.safe_dump(
            config(
                mode="sentinel",
                sentinels=["s1:26379", "s2:26379"],
                masterName="m",
                url="rediss://:hunter2@/1",
            )
        )
    )
    assert main(["check", "--config", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "redis: sentinel master 'm' via s1:26379, s2:26379 (database 1, TLS, password hidden)"
        in out
    )
    path.write_text(yaml.safe_dump(config(mode="cluster")))
    assert main(["check", "--config", str(path)]) == 1
    assert "  redis.url: mode cluster needs the URL of a cluster node" in capsys.readouterr().err


async def test_standalone_mode_refuses_a_cluster_node(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    with pytest.raises(
        RedisStartupError, match=r"is a Redis Cluster node: set redis\.mode: cluster"
    ):
        await connect_redis(redis_cluster.url, data_dir=tmp_path, connect_timeout_s=2)


async def test_cluster_mode_refuses_a_single_server(tmp_path: Path) -> None:
    if not REDIS_URL.startswith("redis://"):
        pytest.skip("the shared Redis is a unix socket here")
    with pytest.raises(RedisStartupError, match="is not a Redis Cluster node"):
        await connect_redis(REDIS_URL, data_dir=tmp_path, mode="cluster", connect_timeout_s=2)


async def test_cluster_mode_connects_with_sharded_pubsub_on_redis_7(
    redis_cluster: LocalCluster, tmp_path: Path
) -> None:
    handle = await connect_redis(redis_cluster.url, data_dir=tmp_path, mode="cluster")
    try:
        assert handle.mode == "cluster"
        assert handle.sharded_pubsub == (redis_cluster.version() >= (7,))
        assert await handle.client.ping()
    finally:
        await handle.close()
