"""The watches of an integration on the admin API: list (config and runtime, with the cooldown in
a chat), create/replace, toggle, delete; bad input and wrong ids get 4xx, never a 500."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.support.admin import TOKEN
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient
from tests.support.waits import no_new_card

BASE = "/v1.0/integrations/console/watches"
INCIDENTS = {"id": "incidents", "match": {"keywords": ["P0"]}, "text": "Triage this."}


def config(prefix: str) -> dict[str, Any]:
    cfg = base_config(prefix, watches=[INCIDENTS])
    cfg["admin"] = {"token": TOKEN}
    cfg["experts"].append({"id": "triage", "kind": "echo", "replyPrefix": "Triage:"})
    return cfg


async def call(
    console: ConsoleClient,
    method: str,
    path: str,
    body: Any = None,
    *,
    token: str = TOKEN,
    raw: bytes | None = None,
    **params: str,
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    kwargs: dict[str, Any] = {"headers": headers, "params": params}
    if raw is not None:
        kwargs["data"] = raw
        headers["Content-Type"] = "application/json"  # as admin bodies must be (else 415)
    elif body is not None:
        kwargs["json"] = body
    async with console.http.request(method, console.base + path, **kwargs) as resp:
        return resp.status, await resp.json()


async def test_list_create_toggle_and_delete_watches(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console: ConsoleClient = await make_gateway(config(prefix))
    status, body = await call(console, "GET", BASE)
    assert status == 200 and body["success"]
    assert body["result"] == [
        {
            "id": "incidents",
            "match": {"keywords": ["P0"]},
            "text": "Triage this.",
            "cooldownSeconds": 300,
            "enabled": True,
            "source": "config",
        }
    ]
    # A runtime watch with its own expert works at once on this replica.
    deploys = {"match": {"regex": "(?i)deploy(ed)? failed"}, "xpertId": "triage"}
    status, body = await call(console, "PUT", f"{BASE}/deploys", deploys)
    assert status == 200, body
    assert body["result"] == {
        "id": "deploys",
        **deploys,
        "cooldownSeconds": 300,
        "enabled": True,
        "source": "runtime",
    }
    await console.send("Deploy failed on eu-1", chat="team", sender="bob")
    [card] = await console.wait_cards(chat="team")
    assert card["card"]["answer"] == "Triage:\n> Bob: Deploy failed on eu-1"
    assert card["conversation"] == "console|group:team:t:watch:deploys"
    # The cooldown shows per chat.
    status, body = await call(console, "GET", BASE, chatId="team")
    cooldowns = {w["id"]: w["cooldown"] for w in body["result"]}
    assert cooldowns["incidents"] is None
    assert cooldowns["deploys"]["chatId"] == "team"
    assert 0 < cooldowns["deploys"]["remainingMs"] <= 300_000
    # Toggling a config watch off stores an override; its matches are chatter then.
    status, body = await call(console, "PATCH", f"{BASE}/incidents", {"enabled": False})
    assert status == 200 and body["result"]["enabled"] is False
    assert body["result"]["source"] == "config"
    await console.send("P0: checkout is down", chat="team", sender="bob")
    await no_new_card(console, 1)
    status, body = await call(console, "PATCH", f"{BASE}/incidents", {"enabled": True})
    assert body["result"]["enabled"] is True
    await console.send("P0: checkout is still down", chat="team", sender="bob")
    cards = await console.wait_cards(chat="team", count=2)
    assert cards[1]["card"]["answer"].endswith("> Bob: P0: checkout is still down")
    # A runtime watch turned off, then replaced (which drops the override), then deleted.
    status, body = await call(console, "PATCH", f"{BASE}/deploys", {"enabled": False})
    assert (body["result"]["enabled"], body["result"]["source"]) == (False, "runtime")
    status, body = await call(console, "PUT", f"{BASE}/deploys", {"match": {"senders": ["x"]}})
    assert status == 200 and body["result"]["match"] == {"senders": ["x"]}
    _, body = await call(console, "GET", BASE)
    assert [(w["id"], w["enabled"]) for w in body["result"]] == [
        ("incidents", True),
        ("deploys", True),
    ]
    status, body = await call(console, "DELETE", f"{BASE}/deploys")
    assert status == 200 and body["result"] == {"id": "deploys", "deleted": True}
    status, body = await call(console, "GET", BASE)
    assert [w["id"] for w in body["result"]] == ["incidents"]
    status, body = await call(console, "DELETE", f"{BASE}/deploys")
    assert status == 404 and body == {
        "success": False,
        "code": "not_found",
        "msg": "no watch 'deploys'",
    }


async def test_bad_requests_get_clear_4xx_answers(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console: ConsoleClient = await make_gateway(config(prefix))
    ok_watch = {"match": {"keywords": ["x"]}}
    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        ("GET", BASE, {"token": "wrong"}, 401, "a valid bearer token is required"),
        (
            "PUT",
            f"{BASE}/w",
            {"token": "", "body": ok_watch},
            401,
            "a valid bearer token is required",
        ),
        ("GET", "/v1.0/integrations/nope/watches", {}, 404, "no such integration"),
        (
            "PUT",
            "/v1.0/integrations/nope/watches/w",
            {"body": ok_watch},
            404,
            "no such integration",
        ),
        (
            "PUT",
            f"{BASE}/w",
            {"body": {"match": {"regex": "P0("}}},
            400,
            "watch 'w': match.regex: not a valid regular expression: missing ), unterminated "
            "subpattern at position 2",
        ),
        (
            "PUT",
            f"{BASE}/w",
            {"body": {"match": {}}},
            400,
            "watch 'w': match: needs at least one of keywords, regex, senders, messageTypes",
        ),
        (
            "PUT",
            f"{BASE}/w",
            {"body": {**ok_watch, "cooldownSeconds": -5, "colour": "red"}},
            400,
            "watch 'w': cooldownSeconds: Input should be greater than or equal to 0; "
            "colour: unknown key",
        ),
        (
            "PUT",
            f"{BASE}/w",
            {"body": {**ok_watch, "xpertId": "nobody"}},
            400,
            "xpertId: 'nobody' names no expert",
        ),
        (
            "PUT",
            f"{BASE}/w",
            {"body": {**ok_watch, "id": "v"}},
            400,
            "id: differs from the watchId in the path",
        ),
        ("PUT", f"{BASE}/w", {"raw": b"{not json"}, 400, "body: not valid JSON"),
        ("PUT", f"{BASE}/w", {"raw": b"[1]"}, 400, "body: expected a JSON object"),
        (
            "PUT",
            f"{BASE}/bad%20id",
            {"body": ok_watch},
            400,
            "watchId: letters, digits and _.- (at most 64)",
        ),
        (
            "PUT",
            f"{BASE}/incidents",
            {"body": ok_watch},
            409,
            "watch 'incidents' is defined in the config: PATCH its enabled",
        ),
        (
            "DELETE",
            f"{BASE}/incidents",
            {},
            409,
            "watch 'incidents' is defined in the config: PATCH its enabled",
        ),
        ("DELETE", f"{BASE}/ghost", {}, 404, "no watch 'ghost'"),
        ("PATCH", f"{BASE}/ghost", {"body": {"enabled": False}}, 404, "no watch 'ghost'"),
        (
            "PATCH",
            f"{BASE}/incidents",
            {"body": {"enabled": "no"}},
            400,
            "enabled: Input should be a valid boolean",
        ),
        (
            "PATCH",
            f"{BASE}/incidents",
            {"body": {"enabled": True, "text": "x"}},
            400,
            "text: unknown key",
        ),
        ("GET", BASE, {"params": {"chatId": ""}}, 400, "chatId: a chat id (1 to 256 characters)"),
    ]
    for method, path, opts, status, msg in cases:
        got, body = await call(
            console,
            method,
            path,
            opts.get("body"),
            token=opts.get("token", TOKEN),
            raw=opts.get("raw"),
            **opts.get("params", {}),
        )
        assert (got, body.get("msg")) == (status, msg), (method, path, opts)
        assert body["success"] is False
    _, body = await call(console, "GET", BASE)
    assert [(w["id"], w["enabled"]) for w in body["result"]] == [("incidents", True)]


async def test_an_all_messages_integration_takes_no_runtime_watch(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    cfg = base_config(prefix, groupReplyStrategy="all_messages")
    cfg["admin"] = {"token": TOKEN}
    console: ConsoleClient = await make_gateway(cfg)
    status, body = await call(console, "PUT", f"{BASE}/w", {"match": {"keywords": ["x"]}})
    assert status == 400
    assert body["msg"] == (
        "watches apply only with groupReplyStrategy mention_only (with "
        "all_messages every group message starts a turn already)"
    )
