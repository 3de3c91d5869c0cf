"""Configuration: every bad config is a clear error naming the key; secrets stay masked."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config.errors import ConfigError
from gateway.config.file import load_settings
from gateway.runtime.cli import json_schema, settings_model
from tests.support.cli import cli

ROOT = Path(__file__).resolve().parents[2]


def good() -> dict[str, Any]:
    return {
        "redis": {"url": "redis://:hunter2@127.0.0.1:6379/0"},
        "admin": {"token": "${ADMIN_TOKEN}"},
        "experts": [{"id": "echo", "kind": "echo"}],
        "integrations": [
            {
                "id": "console",
                "platform": "console",
                "xpertId": "echo",
                "routes": [{"chatId": "team", "xpertId": "echo"}],
            }
        ],
    }


def problems(config: dict[str, Any], env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load_settings(
            config,
            model=settings_model(),
            env={"ADMIN_TOKEN": "t0k3n-long-enough-1"} if env is None else env,
        )
    return info.value.problems


def test_good_config_loads_and_masks_secrets() -> None:
    settings = load_settings(
        good(), model=settings_model(), env={"ADMIN_TOKEN": "t0k3n-long-enough-1"}
    )
    assert (
        settings.admin.token is not None
        and settings.admin.token.get_secret_value() == "t0k3n-long-enough-1"
    )
    shown = repr(settings) + settings.model_dump_json()
    assert "t0k3n-long-enough-1" not in shown and "hunter2" not in shown


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        (
            lambda c: c["integrations"][0].update(colour="blue"),
            "integrations[console].colour: unknown key",
        ),
        (lambda c: c.update(servr={}), "servr: unknown key"),
        (
            lambda c: c["integrations"][0].update(summaryWindowSeconds="soon"),
            "integrations[console].summaryWindowSeconds",
        ),
        (
            lambda c: c["integrations"][0].update(xpertId="nobody"),
            "integrations[console].xpertId: 'nobody' names no expert",
        ),
        (
            lambda c: c["integrations"][0]["routes"][0].update(xpertId="ghost"),
            "integrations[console].routes[0].xpertId: 'ghost' names no expert",
        ),
        (
            lambda c: c["experts"].append({"id": "echo", "kind": "echo"}),
            "experts[1].id: duplicate id 'echo'",
        ),
        (
            lambda c: c["integrations"].append(dict(c["integrations"][0])),
            "integrations[1].id: duplicate id 'console'",
        ),
        (
            lambda c: c["integrations"][0].update(platform="telegram"),
            "integrations[console].platform: unknown platform 'telegram'",
        ),
        (
            lambda c: c["integrations"][0].update(maxWindowSeconds=1, summaryWindowSeconds=2),
            "maxWindowSeconds must be at least summaryWindowSeconds",
        ),
        (lambda c: c["integrations"][0].update(timezone="Mars/Olympus"), "unknown time zone"),
        (lambda c: c["experts"][0].update(kind="gpt5"), "experts[echo].kind: unknown kind 'gpt5'"),
        (  # XpertAI refuses a JSON body over 50 MB; pictures go inline as base64
            lambda c: c["integrations"][0].update(maxAttachmentBytesPerTurn=36 * 2**20 + 1),
            "integrations[console].maxAttachmentBytesPerTurn",
        ),
    ],
)
def test_bad_configs_name_the_key(mutate: Any, expected: str) -> None:
    config = good()
    mutate(config)
    found = problems(config)
    assert any(expected in p for p in found), found


def test_unset_environment_variable_is_an_error_with_its_path() -> None:
    found = problems(good(), env={})
    assert found == ["admin.token: environment variable ADMIN_TOKEN is not set"]


def test_env_default_syntax() -> None:
    config = good()
    config["redis"]["url"] = "${REDIS_URL:-redis://127.0.0.1:6379/3}"
    settings = load_settings(config, model=settings_model(), env={"ADMIN_TOKEN": "x" * 16})
    assert settings.redis.url is not None
    assert settings.redis.url.get_secret_value().endswith("/3")


def test_committed_schema_matches_the_model() -> None:
    committed = json.loads((ROOT / "config" / "gateway.schema.json").read_text())
    assert committed == json_schema(), "run: xpert-gateway schema > config/gateway.schema.json"


@pytest.mark.parametrize("path", sorted((ROOT / "config").glob("**/*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_validate(path: Path) -> None:
    env = {"GATEWAY_ADMIN_TOKEN": "x" * 24, "REDIS_URL": "redis://127.0.0.1:6379/0"}
    load_settings(path, model=settings_model(), env=env)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gateway", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_check_prints_integrations_routes_and_experts(tmp_path: Path) -> None:
    config = good()
    config["admin"] = {}
    path = tmp_path / "ok.yaml"
    path.write_text(yaml.safe_dump(config))
    result = cli("check", "--config", str(path))
    assert result.returncode == 0, result.stderr
    assert "console (console) -> echo" in result.stdout
    assert "route chatId=team -> echo" in result.stdout
    assert "hunter2" not in result.stdout


def test_check_exits_1_with_key_path_and_reason(tmp_path: Path) -> None:
    config = good()
    config["integrations"][0]["xpertId"] = "nobody"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(config))
    result = cli("check", "--config", str(path))
    assert result.returncode == 1
    assert "integrations[console].xpertId: 'nobody' names no expert" in result.stderr
    assert "environment variable ADMIN_TOKEN is not set" in result.stderr


def test_check_reports_unreadable_and_invalid_yaml(tmp_path: Path) -> None:
    assert cli("check", "--config", str(tmp_path / "missing.yaml")).returncode == 1
    broken = tmp_path / "broken.yaml"
    broken.write_text("experts: [unclosed\n")
    result = cli("check", "--config", str(broken))
    assert result.returncode == 1 and "not valid YAML" in result.stderr


def test_run_fails_clearly_when_redis_is_unreachable(tmp_path: Path) -> None:
    config = good()
    config["admin"] = {}
    config["redis"] = {"url": "redis://127.0.0.1:1/0", "connectTimeoutSeconds": 0.5}
    path = tmp_path / "unreachable.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run_cli("run", "--config", str(path), "--port", "0")
    assert result.returncode == 1
    assert "could not reach Redis at redis://127.0.0.1:1/0 within 0.5 s" in result.stderr
