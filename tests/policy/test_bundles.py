"""Access bundles and budgets end to end: console -> daemon -> the fake OpenAI-compatible backend.
A route picks the model and the variables its sessions start with (what the backend receives); a
running session keeps its bundle across a reload; a chat over its hourly limit gets the polite
answer, nothing else, until the hour has passed; the tokens an expert reports close a chat for the
day; a redelivered refused message is answered once; ``GET /v1.0/usage`` and its errors; what
``check`` says about options an expert kind cannot take."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import aiohttp
import pytest
import redis.asyncio as aioredis
import yaml
from aiohttp import web
from pydantic import Field

from gateway.config.errors import ConfigError
from gateway.config.file import load_settings
from gateway.config.route import Route
from gateway.envelope import Chat, Envelope, Sender
from gateway.experts.registry import ExpertKindError, checked_kind
from gateway.policy.bundles import bundled
from gateway.runtime.cli import main as cli_main
from gateway.runtime.cli import settings_model
from gateway.runtime.hints import budget_warnings
from tests.fakes.experts import OPENAI_KEY, FakeOpenAI
from tests.fakes.throwaway_expert import ShoutExpert, ShoutSettings
from tests.support.configs import base_config
from tests.support.helpers import Gateways, InProcessGateway, free_port
from tests.support.waits import eventually

TOKEN = "admin-test-token"
SHANGHAI = ZoneInfo("Asia/Shanghai")


@pytest.fixture
async def openai() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    runner = web.AppRunner(fake.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield fake, f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


def config(prefix: str, url: str, routes: list[dict[str, Any]], **integration: Any) -> Any:
    cfg = base_config(prefix, xpertId="gpt", timezone="Asia/Shanghai", **integration)
    cfg["integrations"][0]["routes"] = routes
    cfg["admin"] = {"token": TOKEN}
    cfg["experts"] = [
        {
            "id": "gpt",
            "kind": "openai",
            "baseUrl": url,
            "apiKey": OPENAI_KEY,
            "model": "qwen2.5",
            "systemPrompt": "Team {{var.team}}, tier {{var.tier}}.",
        },
        {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0},
    ]
    return cfg


async def usage(gw: InProcessGateway, query: str, token: str | None = TOKEN) -> tuple[int, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    url = f"http://127.0.0.1:{gw.port}/v1.0/usage?{query}"
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
        return resp.status, await resp.json()


TEAM_ROUTE = {
    "chatPattern": "team-*",
    "model": "qwen-max",
    "variables": {"team": "ops", "tier": 2},
}


async def test_a_route_bundle_picks_the_model_and_the_variables(
    openai: tuple[FakeOpenAI, str], gateways: Gateways, prefix: str
) -> None:
    fake, url = openai
    gw = await gateways(config(prefix, url, [TEAM_ROUTE]))
    console = gw.client
    await console.send("hello", chat="team-ops", mention=True)
    await console.wait_cards(chat="team-ops")
    await console.send("hello", chat="teamless", mention=True)
    await console.wait_cards(chat="teamless")
    routed, plain = fake.requests
    assert routed["model"] == "qwen-max"
    assert routed["messages"][0] == {"role": "system", "content": "Team ops, tier 2."}
    assert plain["model"] == "qwen2.5"
    assert plain["messages"][0] == {"role": "system", "content": "Team , tier ."}


async def test_a_running_session_keeps_its_bundle_after_a_reload(
    openai: tuple[FakeOpenAI, str], gateways: Gateways, prefix: str
) -> None:
    fake, url = openai
    gw = await gateways(config(prefix, url, [TEAM_ROUTE]))
    await gw.client.send("before", chat="team-ops", mention=True)
    await gw.client.wait_cards(chat="team-ops")
    changed = {**TEAM_ROUTE, "model": "qwen-turbo", "variables": {"team": "sales"}}
    await gw.gateway.reload(load_settings(config(prefix, url, [changed]), model=settings_model()))
    await gw.client.send("after the reload", chat="team-ops", mention=True)
    await gw.client.wait_cards(chat="team-ops", count=2)
    await gw.client.send("a new session", chat="team-b", mention=True)
    await gw.client.wait_cards(chat="team-b")
    kept, new = fake.requests[1], fake.requests[2]
    assert (kept["model"], kept["messages"][0]["content"]) == ("qwen-max", "Team ops, tier 2.")
    assert (new["model"], new["messages"][0]["content"]) == ("qwen-turbo", "Team sales, tier .")


async def test_over_the_hourly_limit_the_chat_gets_the_polite_answer_and_nothing_else(
    gateways: Gateways, prefix: str, redis_client: aioredis.Redis
) -> None:
    cfg = base_config(prefix, timezone="Asia/Shanghai", limits={"turnsPerHourPerChat": 2})
    cfg["admin"] = {"token": TOKEN}
    gw = await gateways(cfg)
    start_ms = int(datetime(2026, 3, 2, 13, 4, 30, tzinfo=SHANGHAI).timestamp() * 1000)
    now = [start_ms]
    gw.gateway.intake.budgets.clock = lambda: now[0]
    console = gw.client
    for count, text in enumerate(("one", "two"), 1):
        await console.send(text)
        await console.wait_cards(count=count)
    refused = await console.send("three")
    expected = (
        "Sorry, this chat has reached its limit of 2 questions an hour. You can ask again at 14:05."
    )
    await eventually(lambda: _noticed(console, expected))
    assert len(await _turn_cards(console)) == 2  # no turn for it: a notice card only
    conv = "console|p2p:dm-alice"
    assert await redis_client.llen(gw.gateway.store.keys.burst(conv)) == 0  # nothing queued
    # The same event delivered again: answered once, counted once.
    await console.send("three", event_id=refused)
    status, body = await usage(gw, "integrationId=console&chatId=dm-alice")
    assert status == 200
    assert body["result"] == {
        "integrationId": "console",
        "limits": {"turnsPerHourPerChat": 2, "turnsPerHourPerSender": None,
                   "tokensPerDayPerChat": None},
        "chats": [{"chatId": "dm-alice", "turnsLastHour": 2, "tokensToday": 0,
                   "refusedToday": 1}],
    }  # fmt: skip
    assert (await _notices(console)).count(expected) == 1
    metrics = await _get(f"http://127.0.0.1:{gw.port}/metrics")
    assert (
        'xgw_budget_refusals_total{integration="console",limit="turnsPerHourPerChat"} 1.0'
        in metrics
    )
    assert 'outcome="refused",platform="console"} 1.0' in metrics  # xgw_turns_total
    audit = await _get_json(gw, "/v1.0/audit?integrationId=console&outcome=refused")
    [record] = audit["result"]
    assert (record["outcome"], record["chatId"], record["answer"]) == (
        "refused",
        "dm-alice",
        expected,
    )
    assert record["input"]["text"] == "three" and record["sessionId"] == ""
    assert record["error"] == "over turnsPerHourPerChat until 2026-03-02T14:04:30+08:00"
    now[0] = start_ms + 3_600_000  # an hour later
    await console.send("four")
    await console.wait_cards(count=4, status=None)  # two turns, the notice, the next
    await eventually(lambda: _equals(_last_answer(console), "You said:\n> four"))
    assert (await _notices(console)).count(expected) == 1


async def _get_json(gw: InProcessGateway, path: str) -> Any:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = f"http://127.0.0.1:{gw.port}{path}"
    async with aiohttp.ClientSession() as http, http.get(url, headers=headers) as resp:
        return await resp.json()


async def _get(url: str) -> str:
    async with aiohttp.ClientSession() as http, http.get(url) as resp:
        return await resp.text()


async def _equals(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


async def _notices(console: Any) -> list[str]:
    """The refusal cards' texts: final at once ("ended"), titled, no buttons."""
    return [
        c["card"]["answer"]
        for c in await console.cards()
        if c["card"]["title"] == "Limit reached"
        and c["card"]["status"] == "ended"
        and not c["card"]["buttons"]
    ]


async def _last_answer(console: Any) -> str:
    cards = await _turn_cards(console)
    return str(cards[-1]["card"]["answer"]) if cards[-1]["card"]["status"] == "done" else ""


async def _noticed(console: Any, text: str) -> bool:
    return text in await _notices(console)


async def _turn_cards(console: Any) -> list[Any]:
    return [c for c in await console.cards() if c["card"]["title"] != "Limit reached"]


async def test_the_tokens_an_expert_reports_close_the_chat_for_the_day(
    openai: tuple[FakeOpenAI, str], gateways: Gateways, prefix: str
) -> None:
    fake, url = openai  # the fake reports 12 + 7 tokens per answer
    gw = await gateways(config(prefix, url, [], limits={"tokensPerDayPerChat": 30}))
    console = gw.client
    await console.send("first")
    await console.wait_cards()
    await console.send("second")  # 19 < 30: the turn runs, and crosses the budget
    await console.wait_cards(count=2)

    async def tokens_today() -> int:
        _, body = await usage(gw, "integrationId=console")
        return int(body["result"]["chats"][0]["tokensToday"])

    await eventually(lambda: _equals(tokens_today(), 38))  # counted as the turn ends

    async def refused() -> bool:
        return any(
            t.endswith("You can ask again tomorrow at 00:00.") for t in await _notices(console)
        )

    await console.send("third")
    await eventually(refused)
    assert len(fake.requests) == 2
    # The next day (Asia/Shanghai) the chat may ask again.
    tomorrow = datetime.now(SHANGHAI).replace(hour=0, minute=0, second=0, microsecond=0)
    # 02:00 the next day: over an hour after the turns above even when they ran at 23:xx.
    next_day = int(tomorrow.timestamp() * 1000) + 86_400_000 + 2 * 3_600_000
    gw.gateway.intake.budgets.clock = lambda: next_day
    gw.gateway.runner.budgets.clock = lambda: next_day
    await console.send("fourth")
    await console.wait_cards(count=4, status=None)  # two turns, the notice, the next turn
    await eventually(lambda: _equals(_last_answer(console), "Echo: fourth"))
    _, body = await usage(gw, "integrationId=console")
    assert body["result"]["chats"] == [
        {"chatId": "dm-alice", "turnsLastHour": 1, "tokensToday": 19, "refusedToday": 0}
    ]


async def test_the_usage_api_answers_and_refuses(gateways: Gateways, prefix: str) -> None:
    cfg = base_config(prefix, limits={"turnsPerHourPerSender": 5})
    cfg["integrations"][0]["routes"] = [{"chatId": "team", "limits": {"turnsPerHourPerChat": 9}}]
    cfg["admin"] = {"token": TOKEN}
    gw = await gateways(cfg)
    await gw.client.send("hi", chat="team", mention=True)
    await gw.client.send("hi")
    await gw.client.wait_cards(chat="team")
    await gw.client.wait_cards()
    status, body = await usage(gw, "integrationId=console")
    assert status == 200 and body["success"] is True
    assert body["result"]["limits"] == {
        "turnsPerHourPerChat": None,
        "turnsPerHourPerSender": 5,
        "tokensPerDayPerChat": None,
    }
    chats = {c["chatId"]: c for c in body["result"]["chats"]}
    assert chats == {
        "team": {"chatId": "team", "turnsLastHour": 1, "tokensToday": 0, "refusedToday": 0},
        "dm-alice": {"chatId": "dm-alice", "turnsLastHour": 1, "tokensToday": 0, "refusedToday": 0},
    }
    status, body = await usage(gw, "integrationId=console&chatId=team")
    assert body["result"]["limits"]["turnsPerHourPerChat"] == 9  # the chat's route
    assert [c["chatId"] for c in body["result"]["chats"]] == ["team"]
    status, body = await usage(gw, "integrationId=console&chatId=quiet")
    assert body["result"]["chats"] == [
        {"chatId": "quiet", "turnsLastHour": 0, "tokensToday": 0, "refusedToday": 0}
    ]
    assert (await usage(gw, "chatId=team"))[0] == 400
    assert (await usage(gw, "integrationId="))[0] == 400
    assert (await usage(gw, "integrationId=%7Bbad%7D"))[0] == 400
    # Not UTF-8: the query is decoded with U+FFFD replacements, an id like another (no 500).
    status, body = await usage(gw, "integrationId=console&chatId=%FF%FE")
    assert (status, body["result"]["chats"][0]["chatId"]) == (200, "\ufffd\ufffd")
    status, body = await usage(gw, "integrationId=ghost")
    assert (status, body["code"]) == (404, "not_found")
    assert (await usage(gw, "integrationId=console", token=None))[0] == 401
    assert (await usage(gw, "integrationId=console", token="wrong"))[0] == 401


def test_check_warns_about_options_an_expert_kind_cannot_take(
    prefix: str, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = base_config(prefix, xpertId="sales", variables=[{"name": "team"}])
    cfg["experts"].append(
        {"id": "sales", "kind": "xpert", "baseUrl": "http://127.0.0.1:9/api/ai", "apiKey": "k"}
    )
    cfg["integrations"][0]["routes"] = [
        {"chatPattern": "oc_*", "model": "gpt-4o", "tools": ["search"],
         "variables": {"team": "ops", "region": "eu"}},
        {"chatId": "x", "xpertId": "echo", "model": "m"},
    ]  # fmt: skip
    settings = load_settings(cfg, model=settings_model())
    assert budget_warnings(settings) == [
        "integrations.0.routes.0.model: expert 'sales' (kind xpert) cannot pick a model per "
        "chat, so this is not applied; give the chat its own expert instead",
        "integrations.0.routes.0.tools: expert 'sales' (kind xpert) cannot restrict its tools "
        "per chat, so this is not applied; give the chat its own expert instead",
        "integrations.0.routes.0.variables.region: not declared (integration or expert "
        "variables), and kind xpert sends declared variables only",
        "integrations.0.routes.1.model: expert 'echo' (kind echo) cannot pick a model per "
        "chat, so this is not applied; give the chat its own expert instead",
    ]
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(cfg))
    assert cli_main(["check", "--config", str(path)]) == 0
    out = capsys.readouterr()
    shown = "route chatPattern=oc_* -> sales (model gpt-4o; tools search; variables region, team)"
    assert shown in out.out  # (the YAML dump sorted the variables)
    assert "warning: integrations[console].routes[0].model: expert 'sales'" in out.err
    cfg["integrations"][0]["routes"] = [{"chatPattern": "oc_*", "xpertId": "ghost"}]
    with pytest.raises(ConfigError, match=r"routes\[0\]\.xpertId: 'ghost' names no expert"):
        load_settings(cfg, model=settings_model())
    cfg["integrations"][0]["routes"] = [{"model": "m"}]
    with pytest.raises(ConfigError, match="at least one of chatId, chatPattern"):
        load_settings(cfg, model=settings_model())


def test_a_kind_must_have_a_field_for_each_option_it_takes() -> None:
    class Modelless(ShoutExpert):
        bundle_options = frozenset({"model"})

    class Unknown(ShoutExpert):
        bundle_options = frozenset({"temperature"})

    with pytest.raises(ExpertKindError, match="bundle option 'model' has no field"):
        checked_kind("shout", Modelless)
    with pytest.raises(ExpertKindError, match="bundle option 'temperature' is unknown"):
        checked_kind("shout", Unknown)
    assert "model" not in ShoutSettings.model_fields


def test_check_accepts_the_example_and_shows_each_bundle(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GATEWAY_ADMIN_TOKEN", "an-admin-token-0123")
    example = Path(__file__).resolve().parents[2] / "config" / "examples" / "budgets.yaml"
    assert cli_main(["check", "--config", str(example)]) == 0
    out = capsys.readouterr()
    assert (
        "  console (console) -> echo [limits: 3 turns/h per chat, 2 turns/h per sender, "
        "200000 tokens/day per chat]\n"
        "    route chatPattern=oc_team_* -> gpt (model qwen2.5:14b; variables team) [limits: "
        "30 turns/h per chat, 2 turns/h per sender, 1000000 tokens/day per chat]\n"
        "    route chatId=oc_lab -> echo [limits: 200000 tokens/day per chat]\n"
    ) in out.out
    assert "warning" not in out.err


def test_a_kind_that_takes_tools_gets_the_routes_allow_list() -> None:
    class ToolSettings(ShoutSettings):
        tools: list[str] = Field(default_factory=list)

    class Tooled(ShoutExpert):
        settings_model = ToolSettings
        bundle_options = frozenset({"tools"})

    assert checked_kind("shout", Tooled) is Tooled
    route = Route(chat_pattern="oc_*", tools=["search"], model="big", variables={"team": "ops"})
    env = Envelope(
        integration_id="console",
        platform="console",
        event_id="e",
        chat=Chat(id="oc_1", type="group"),
        sender=Sender(id="bob"),
    )
    expert = ToolSettings(id="s", kind="shout")
    applied, part = bundled([route], env, expert, Tooled, own=True)
    assert applied.tools == ["search"] and expert.tools == []
    assert part == {
        "route": 0,
        "match": "chatPattern=oc_*",
        "tools": ["search"],  # the model is not: this kind takes none
        "variables": {"team": "ops"},
    }
    named, part = bundled([route], env, expert, Tooled, own=False)  # a trigger's own expert
    assert named is expert and part == {"route": 0, "match": "chatPattern=oc_*",
                                        "variables": {"team": "ops"}}  # fmt: skip
    other = env.model_copy(update={"chat": Chat(id="dm-x", type="p2p")})
    assert bundled([route], other, expert, Tooled, own=True) == (expert, None)
