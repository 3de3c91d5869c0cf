"""Safe to expose (issue 25, items 1 and 2), proved from outside: the admin API opens only to a
long enough token sent as ``Bearer``; the console and the admin API take writes only as JSON,
refuse other sites (``Origin``, ``Sec-Fetch-Site``) and answer only to their own host names (DNS
rebinding); ``check`` and ``run`` warn about a console or an admin API on a public address.
HTTP against a real gateway and real Redis, ``check`` in this process, ``run`` as a subprocess."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.cli import cli
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, DaemonProcess, Gateways
from tests.support.waits import eventually

TOKEN = "exposure-admin-token-0123"
MESSAGE = {"integrationId": "console", "chatId": "team", "chatType": "group",
           "senderId": "alice", "text": "hi", "mentionBot": True}  # fmt: skip
SCHEDULE = {"id": "every-second", "integrationId": "console", "chatId": "team",
            "chatType": "group", "cron": "* * * * * *", "text": "tick"}  # fmt: skip


def config(prefix: str, **server: Any) -> dict[str, Any]:
    cfg = base_config(prefix)
    cfg["admin"] = {"token": TOKEN}
    if server:
        cfg["server"] = server
    return cfg


async def request(
    client: ConsoleClient,
    method: str,
    path: str,
    *,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    """Status and JSON answer; ``data`` goes with exactly the given headers (no Content-Type
    of aiohttp's own: a browser's Blob body has none either)."""
    async with client.http.request(
        method,
        client.base + path,
        data=data,
        headers=headers or {},
        skip_auto_headers=["Content-Type"],
    ) as resp:
        return resp.status, await resp.json(content_type=None)


def auth(**more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {TOKEN}", **more}


def json_body(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode()


def check(tmp_path: Path, cfg: dict[str, Any], env: dict[str, str] | None = None) -> Any:
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return cli("check", "--config", str(path), env=env, unset=("ADM",))


def plain(prefix: str, admin_token: str | None, **server: Any) -> dict[str, Any]:
    cfg = base_config(prefix)
    if admin_token is not None:
        cfg["admin"] = {"token": admin_token}
    if server:
        cfg["server"] = server
    return cfg


# --- item 1: the admin token -------------------------------------------------------------------
@pytest.mark.parametrize("token", ["${ADM:-}", "", "short-token"], ids=["unset", "empty", "short"])
def test_check_refuses_an_empty_or_short_admin_token(
    tmp_path: Path, prefix: str, token: str
) -> None:
    result = check(tmp_path, plain(prefix, token))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "admin.token:" in result.stderr and "at least 16 characters" in result.stderr


async def test_the_admin_api_needs_a_bearer_token_in_full(gateways: Gateways, prefix: str) -> None:
    gw = await gateways(config(prefix))
    refused = [
        {},
        {"Authorization": ""},
        {"Authorization": "Bearer"},
        {"Authorization": "Bearer "},
        {"Authorization": TOKEN},  # the token without its scheme
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": f"Bearer {TOKEN[:-1]}"},
        {"Authorization": f"Bearer {TOKEN}x"},
    ]
    for headers in refused:
        status, body = await request(gw.client, "GET", "/v1.0/sessions", headers=headers)
        assert (status, body["code"]) == (401, "unauthorized"), headers
    for scheme in ("Bearer", "bearer"):
        headers = {"Authorization": f"{scheme} {TOKEN}"}
        status, body = await request(gw.client, "GET", "/v1.0/sessions", headers=headers)
        assert status == 200 and body["success"] is True


async def test_admin_writes_must_be_json_from_the_gateways_own_origin(
    gateways: Gateways, prefix: str
) -> None:
    """The review's attack: a page elsewhere POSTs a schedule as text/plain (no preflight)."""
    gw = await gateways(config(prefix))
    body = json_body(SCHEDULE)
    own = f"http://127.0.0.1:{gw.port}"
    for headers, status, code in [
        (auth(**{"Content-Type": "text/plain"}), 415, "unsupported_media_type"),
        (auth(), 415, "unsupported_media_type"),  # no Content-Type (a Blob)
        (auth(**{"Content-Type": "application/x-www-form-urlencoded"}), 415, None),
        (auth(**{"Content-Type": "application/json", "Origin": "https://evil.example"}), 403,
         "cross_site"),
        (auth(**{"Content-Type": "application/json", "Sec-Fetch-Site": "cross-site"}), 403,
         "cross_site"),
        ({"Content-Type": "text/plain"}, 415, None),
    ]:  # fmt: skip
        got, answer = await request(
            gw.client, "POST", "/v1.0/schedules", data=body, headers=headers
        )
        assert got == status and answer["success"] is False, (headers, answer)
        assert code is None or answer["code"] == code
    status, listed = await request(gw.client, "GET", "/v1.0/schedules", headers=auth())
    assert status == 200 and listed["result"] == [], listed  # nothing was made
    headers = auth(**{"Content-Type": "application/json", "Origin": own,
                      "Sec-Fetch-Site": "same-origin"})  # fmt: skip
    status, made = await request(
        gw.client, "POST", "/v1.0/schedules", data=json_body(SCHEDULE), headers=headers
    )
    assert status == 200 and made["result"]["id"] == "every-second", made


# --- item 2: the console -----------------------------------------------------------------------
async def test_console_writes_must_be_json(gateways: Gateways, prefix: str) -> None:
    gw = await gateways(config(prefix))
    for ctype in ("text/plain", None, "application/x-www-form-urlencoded", "multipart/form-data"):
        headers = {} if ctype is None else {"Content-Type": ctype}
        status, answer = await request(
            gw.client, "POST", "/console/api/messages", data=json_body(MESSAGE), headers=headers
        )
        assert (status, answer) == (415, {"error": "Content-Type must be application/json"})
    assert await gw.client.messages("team") == []  # no turn ran, nothing stored
    status, _ = await request(
        gw.client, "POST", "/console/api/messages", data=json_body(MESSAGE),
        headers={"Content-Type": "application/json; charset=utf-8"},
    )  # fmt: skip
    assert status == 202


async def test_console_refuses_other_sites(gateways: Gateways, prefix: str) -> None:
    gw = await gateways(config(prefix))
    json_type = {"Content-Type": "application/json"}
    for extra in (
        {"Origin": "https://evil.example"},
        {"Origin": "null"},
        {"Origin": f"http://127.0.0.1:{gw.port + 1}"},  # another port is another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ):
        status, answer = await request(
            gw.client, "POST", "/console/api/messages", data=json_body(MESSAGE),
            headers={**json_type, **extra},
        )  # fmt: skip
        assert (status, answer) == (403, {"error": "cross-site request refused"}), extra
        path = "/console/api/chats/team/messages?integrationId=console"
        assert (await request(gw.client, "GET", path, headers=extra))[0] == 403
    assert await gw.client.messages("team") == []
    same = {"Origin": f"http://127.0.0.1:{gw.port}", "Sec-Fetch-Site": "same-origin"}
    status, _ = await request(
        gw.client, "POST", "/console/api/messages", data=json_body(MESSAGE),
        headers={**json_type, **same},
    )  # fmt: skip
    assert status == 202
    await eventually(lambda: gw.client.messages("team"))
    # A link from elsewhere may still open the page itself.
    async with gw.client.http.get(
        gw.client.base + "/console/", headers={"Sec-Fetch-Site": "cross-site"}
    ) as resp:
        assert resp.status == 200


async def test_only_the_gateways_own_host_names_reach_the_console_and_admin_api(
    gateways: Gateways, prefix: str
) -> None:
    """DNS rebinding: a page at evil.example whose name now points to 127.0.0.1 sends
    ``Host: evil.example``; webhooks are still answered whatever the Host."""
    allowed = ["gw.internal", ".corp.example"]
    cfg = config(prefix, publicUrl="https://gw.example.com/base", allowedHosts=allowed)
    gw = await gateways(cfg)
    port = gw.port
    reads = [
        ("/console/api/chats/team/messages?integrationId=console", {}),
        ("/console/api/config", {}),
        ("/console/", {}),
        ("/v1.0/sessions", auth()),
    ]
    for host in ("evil.example", f"evil.example:{port}", "gw.example.com.evil.example", "corp"):
        for path, headers in reads:
            status, answer = await request(
                gw.client, "GET", path, headers={**headers, "Host": host}
            )
            assert status == 421, (host, path, status)
            assert "Host not allowed" in str(answer)
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", "app.localhost",
                 "gw.example.com", "GW.internal:8443", "a.corp.example"):  # fmt: skip
        for path, headers in reads:
            async with gw.client.http.get(
                gw.client.base + path, headers={**headers, "Host": host}
            ) as resp:
                assert resp.status == 200, (host, path, resp.status)
    # Webhooks and probes: platforms and proxies may send any Host; signatures authenticate.
    evil = {"Host": "evil.example"}
    assert (await request(gw.client, "GET", "/healthz", headers=evil))[0] == 200
    status, answer = await request(
        gw.client, "POST", "/api/lark/webhook/nobody", data=b"{}",
        headers={**evil, "Content-Type": "application/json"},
    )  # fmt: skip
    assert (status, answer) == (404, {"error": "unknown integration"})


# --- warnings about unsafe combinations --------------------------------------------------------
def test_check_warns_about_a_public_console_and_an_admin_api_without_tls(
    tmp_path: Path, prefix: str
) -> None:
    result = check(tmp_path, plain(prefix, TOKEN, host="0.0.0.0"))
    assert result.returncode == 0, result.stderr
    public = "warning: server.host: the console (integrations[console]) listens on 0.0.0.0"
    assert public in result.stderr
    assert "warning: admin.token: the admin API listens on 0.0.0.0 with no TLS" in result.stderr
    behind_tls = plain(prefix, TOKEN, host="::", publicUrl="https://gw.example.com")
    result = check(tmp_path, behind_tls)
    assert "warning: server.host: the console" in result.stderr
    assert "admin.token" not in result.stderr  # https in front
    for host in ("127.0.0.1", "localhost", "::1"):
        result = check(tmp_path, plain(prefix, TOKEN, host=host))
        assert result.returncode == 0 and "warning" not in result.stderr, (host, result.stderr)


async def test_the_daemon_warns_at_start_when_the_console_listens_on_a_public_address(
    tmp_path: Path, prefix: str
) -> None:
    cfg = plain(prefix, None, host="0.0.0.0")
    cfg["logging"] = {"level": "info", "format": "json"}
    daemon = DaemonProcess(cfg, tmp_path)
    await daemon.start()
    try:
        log = daemon.log_path.read_text()
        assert "the console (integrations[console]) listens on 0.0.0.0" in log, log[-2000:]
    finally:
        await daemon.stop()


@pytest.mark.parametrize("entry", ["https://gw.example.com", "gw.example.com:8443", "", "a b"])
def test_check_refuses_an_allowed_host_that_could_never_match(
    tmp_path: Path, prefix: str, entry: str
) -> None:
    result = check(tmp_path, plain(prefix, None, allowedHosts=["gw.internal", entry]))
    assert result.returncode == 1 and "server.allowedHosts:" in result.stderr, result.stderr
