"""``check`` and the ``mcp`` section: what it says of the endpoint, each problem of the section
by its path, and the warning when the endpoint is served without TLS in front on an address
other machines reach."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import cli
from tests.support.configs import base_config

TOKEN = "mcp-token-0123456789abcdef"


def check(tmp_path: Path, cfg: dict[str, Any]) -> Any:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return cli("check", "--config", str(path))


def with_clients(prefix: str, *clients: dict[str, Any], **server: Any) -> dict[str, Any]:
    cfg = base_config(prefix)
    cfg["mcp"] = {"clients": list(clients)}
    if server:
        cfg["server"] = server
    return cfg


def test_check_names_the_endpoint_and_its_clients(tmp_path: Path, prefix: str) -> None:
    result = check(
        tmp_path, with_clients(prefix, {"id": "xp", "token": TOKEN, "experts": ["echo"]})
    )
    assert result.returncode == 0, result.stderr
    assert "MCP: on at /mcp for xp -> echo; 60 calls/min per client" in result.stdout
    assert TOKEN not in result.stdout + result.stderr
    assert "warning" not in result.stderr  # loopback: no TLS needed


@pytest.mark.parametrize(
    ("client", "problem"),
    [
        ({"id": "xp", "token": "short", "experts": ["echo"]}, "mcp.clients[xp].token: too short"),
        ({"id": "xp", "token": TOKEN, "experts": ["nobody"]}, "'nobody' names no expert"),
        ({"id": "xp", "token": TOKEN, "experts": []}, "mcp.clients[xp].experts: needs at least 1 item"),
        ({"id": "xp", "experts": ["echo"]}, "mcp.clients[xp].token: missing"),
    ],
)
def test_check_refuses_a_bad_client(
    tmp_path: Path, prefix: str, client: dict[str, Any], problem: str
) -> None:
    result = check(tmp_path, with_clients(prefix, client))
    assert result.returncode == 1
    assert problem in result.stderr, result.stderr


def test_check_refuses_two_clients_with_one_token(tmp_path: Path, prefix: str) -> None:
    a = {"id": "a", "token": TOKEN, "experts": ["echo"]}
    result = check(tmp_path, with_clients(prefix, a, {**a, "id": "b"}))
    assert result.returncode == 1 and "two clients share a token" in result.stderr


def test_check_warns_of_the_endpoint_without_tls_on_a_public_address(
    tmp_path: Path, prefix: str
) -> None:
    client = {"id": "xp", "token": TOKEN, "experts": ["echo"]}
    result = check(tmp_path, with_clients(prefix, client, host="0.0.0.0"))
    assert result.returncode == 0
    assert "warning: mcp: the MCP endpoint (/mcp) listens on 0.0.0.0 with no TLS" in result.stderr
    behind = with_clients(prefix, client, host="0.0.0.0", publicUrl="https://gw.example.com")
    assert "warning: mcp:" not in check(tmp_path, behind).stderr
