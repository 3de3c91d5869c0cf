"""Group memory commands and the admin API (sessions, variables, memory, audit)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp

from tests.support.admin import TOKEN, admin
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient
from tests.support.waits import eventually


def config(prefix: str, **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, language="zh-Hans", timezone="Asia/Shanghai", **integration)
    cfg["admin"] = {"token": TOKEN}
    return cfg


async def _texts(console: ConsoleClient, chat: str) -> list[str]:
    return await console.texts(chat)


async def test_group_memory_commands(make_gateway: Callable[..., Any], prefix: str) -> None:
    console = await make_gateway(config(prefix, memoryAdmins=["alice"]))
    chat = "team"
    await console.send("/remember Answer in bullet points", chat=chat, mention=True)
    await console.send("/remember Our fiscal year starts in April", chat=chat, mention=True)
    await eventually(lambda: _count(console, chat, "Remembered", 2))
    await console.send("/remember I am not an admin", chat=chat, sender="bob", mention=True)
    await eventually(lambda: _count(console, chat, "Only this chat's memory admins", 1))
    await console.send("/forget 1", chat=chat, mention=True)
    await eventually(lambda: _count(console, chat, "Forgot: Answer in bullet points", 1))
    await console.send("/memory", chat=chat, sender="bob", mention=True)
    await eventually(lambda: _count(console, chat, "1. Our fiscal year starts in April", 1))
    status, body = await admin(console, "GET", f"/v1.0/chats/console/{chat}/memory")
    assert status == 200 and body["success"]
    assert [(m["index"], m["text"], m["by"]) for m in body["result"]] == [
        (1, "Our fiscal year starts in April", "alice")
    ]


async def _count(console: ConsoleClient, chat: str, fragment: str, n: int) -> bool:
    return sum(fragment in t for t in await console.texts(chat)) >= n


async def test_admin_api_sessions_variables_and_end(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    await console.send("/remember Be brief", chat="team", mention=True)
    await eventually(lambda: _count(console, "team", "Remembered", 1))
    await console.send("hello", chat="team", mention=True)
    await console.wait_cards(chat="team")
    status, body = await admin(
        console, "GET", "/v1.0/sessions", integrationId="console", chatId="team"
    )
    assert status == 200 and body["success"] and isinstance(body["t"], int)
    [session] = body["result"]
    assert session["status"] == "active" and session["turns"] == 1
    assert session["xpertId"] == "echo" and session["chatType"] == "group"
    sid = session["sessionId"]
    status, body = await admin(console, "GET", f"/v1.0/sessions/{sid}/variables", prefix="sys.")
    values = {v["variable_key"]: v["variable_value"] for v in body["result"]}
    assert values["sys.language"] == "zh-Hans" and values["sys.timezone"] == "Asia/Shanghai"
    assert values["sys.workspace_path"] == "/user/alice/" and "sys.date" in values
    status, body = await admin(console, "GET", f"/v1.0/sessions/{sid}/variables")
    assert {"variable_key": "memory.rules", "variable_value": "1. Be brief"} in body["result"]
    status, body = await admin(console, "DELETE", f"/v1.0/sessions/{sid}")
    assert status == 200 and body["result"]["status"] == "ended"
    status, body = await admin(console, "DELETE", f"/v1.0/sessions/{sid}")
    assert status == 409 and body == {
        "success": False,
        "code": "not_active",
        "msg": "the session has already ended",
    }
    status, body = await admin(console, "GET", f"/v1.0/sessions/{sid}")
    assert body["result"]["status"] == "ended"
    await console.send("again", chat="team", mention=True)
    await console.wait_cards(chat="team", count=2)
    status, body = await admin(
        console, "GET", "/v1.0/sessions", integrationId="console", chatId="team"
    )
    assert len(body["result"]) == 2 and body["result"][0]["sessionId"] != sid
    status, body = await admin(console, "GET", "/v1.0/audit/events", event="session.end")
    assert any(r["event"] == "session.end" and r["by"] == "admin" for r in body["result"])


async def test_admin_api_refuses_bad_tokens_and_unknown_sessions(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix))
    status, body = await admin(console, "GET", "/v1.0/sessions/x", token="wrong")
    assert status == 401 and body["code"] == "unauthorized"
    status, body = await admin(console, "GET", "/v1.0/sessions/nope")
    assert status == 404 and body == {
        "success": False,
        "code": "not_found",
        "msg": "no such session",
    }
    status, body = await admin(console, "GET", "/v1.0/sessions", status="dead")
    assert status == 400 and body["code"] == "bad_request"
    plain = await make_gateway(base_config(prefix))
    async with aiohttp.ClientSession() as http, http.get(plain.base + "/v1.0/audit") as resp:
        assert resp.status == 404 and (await resp.json())["code"] == "admin_disabled"


async def test_conversation_variables_defaults_reducers_and_write_back(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    cfg = config(prefix)
    cfg["integrations"][0]["variables"] = [
        {"name": "topic", "type": "string", "default": "none"},
        {"name": "notes", "type": "array", "default": [], "reducer": "append"},
        {"name": "profile", "type": "object", "default": {"tier": "free"}, "reducer": "merge"},
    ]
    console = await make_gateway(cfg)
    await console.send("hi [set topic=refunds] [set notes=first]")
    await console.wait_cards()
    await console.send("again [set notes=second] [set topic=billing]")
    await console.wait_cards(count=2)
    # A third turn reads what the second wrote (regression: the turn's own view of var.* must
    # not overwrite the reducers' values at its end).
    await console.send("third [set notes=third]")
    await console.wait_cards(count=3)
    _status, body = await admin(
        console, "GET", "/v1.0/sessions", integrationId="console", chatId="dm-alice"
    )
    sid = body["result"][0]["sessionId"]
    _, body = await admin(console, "GET", f"/v1.0/sessions/{sid}/variables", prefix="var.")
    values = {v["variable_key"]: v["variable_value"] for v in body["result"]}
    assert values == {
        "var.topic": "billing",
        "var.notes": ["first", "second", "third"],
        "var.profile": {"tier": "free"},
    }


def test_reducers_must_fit_the_type() -> None:
    from gateway.config.errors import ConfigError
    from gateway.config.file import load_settings
    from gateway.runtime.cli import settings_model

    cfg = config("x")
    cfg["integrations"][0]["variables"] = [{"name": "n", "type": "string", "reducer": "append"}]
    try:
        load_settings(cfg, model=settings_model(), env={})
    except ConfigError as exc:
        assert any("reducer append needs type array" in p for p in exc.problems)
    else:
        raise AssertionError("accepted an append reducer on a string")


async def test_workspace_variables_follow_the_project(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(
        config(prefix, projectId="p-7", workspaceBaseUrl="https://files.example.com/ws")
    )
    await console.send("hello")
    await console.wait_cards()
    _, body = await admin(
        console, "GET", "/v1.0/sessions", integrationId="console", chatId="dm-alice"
    )
    sid = body["result"][0]["sessionId"]
    _, body = await admin(console, "GET", f"/v1.0/sessions/{sid}/variables", prefix="sys.work")
    assert {v["variable_key"]: v["variable_value"] for v in body["result"]} == {
        "sys.workspace_path": "/project/p-7/",
        "sys.workspace_url": "https://files.example.com/ws/project/p-7/",
    }
