"""The openai backend end to end: console -> daemon -> fake backend -> card (the xpert backend
is in test_xpert.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakes.experts import FakeOpenAI
from tests.support.configs import base_config, openai_expert
from tests.support.helpers import serve


@pytest.fixture
async def openai() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    async for url in serve(fake.app()):
        yield fake, url + "/v1"


def config(prefix: str, expert: dict[str, Any], **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, xpertId=expert["id"], **integration)
    cfg["experts"] = [expert, {"id": "echo", "kind": "echo"}]
    return cfg


async def test_openai_streams_and_keeps_the_history(
    openai: tuple[FakeOpenAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = openai
    console = await make_gateway(
        config(prefix, openai_expert(url), language="zh-Hans", timezone="Asia/Shanghai")
    )
    await console.send("first question")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "Echo: first question"
    await console.send("second question")
    await console.wait_cards(count=2)
    messages = fake.requests[1]["messages"]
    assert messages[0] == {"role": "system", "content": "Reply in zh-Hans (Asia/Shanghai)."}
    assert messages[1:] == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": "Echo: first question"},
        {"role": "user", "content": "second question"},
    ]
    assert fake.requests[0]["stream"] is True


async def test_openai_history_is_bounded(
    openai: tuple[FakeOpenAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = openai
    console = await make_gateway(config(prefix, openai_expert(url, maxHistoryMessages=2)))
    for i in range(3):
        await console.send(f"q{i}")
        await console.wait_cards(count=i + 1)
    assert [m["content"] for m in fake.requests[2]["messages"][1:]] == ["q1", "Echo: q1", "q2"]


async def test_openai_retries_rate_limits_and_server_errors(
    openai: tuple[FakeOpenAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = openai
    fake.fail_with = [429, 503]
    console = await make_gateway(config(prefix, openai_expert(url, retries=2)))
    await console.send("persist")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "Echo: persist" and len(fake.requests) == 3


@pytest.mark.parametrize(
    ("expert", "message"),
    [
        ({"apiKey": "sk-wrong"}, "the API key was rejected (HTTP 401)"),
        ({"model": "missing"}, "the agent or model was not found (HTTP 404)"),
        ({"baseUrl": "http://127.0.0.1:1/v1", "retries": 0}, "could not be reached"),
    ],
)
async def test_openai_errors_become_readable_error_cards(
    openai: tuple[FakeOpenAI, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    expert: dict[str, Any],
    message: str,
) -> None:
    _fake, url = openai
    console = await make_gateway(config(prefix, openai_expert(url, **expert)))
    await console.send("hello")
    [card] = await console.wait_cards(status="error")
    assert message in card["card"]["error"]


async def test_retry_button_reruns_a_failed_turn_in_the_same_card(
    openai: tuple[FakeOpenAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = openai
    fake.fail_with = [500]
    console = await make_gateway(config(prefix, openai_expert(url, retries=0)))
    await console.send("try me")
    [card] = await console.wait_cards(status="error")
    assert [b["actionId"] for b in card["card"]["buttons"]] == ["retry", "new"]
    assert await console.click("dm-alice", card["id"], "retry") == 202
    [again] = await console.wait_cards(status="done")
    assert again["id"] == card["id"] and again["card"]["answer"] == "Echo: try me"


async def test_recent_group_messages_reach_the_model_as_context(
    openai: tuple[FakeOpenAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = openai
    console = await make_gateway(
        config(prefix, openai_expert(url), historyContextLimit=2, summaryWindowSeconds=0)
    )
    for i, who in enumerate(("bob", "carol", "bob")):
        await console.send(f"chatter {i}", chat="team", sender=who)
    await console.send("summarise please", chat="team", mention=True)
    await console.wait_cards(chat="team")
    notes = [m["content"] for m in fake.requests[0]["messages"] if m["role"] == "system"]
    assert notes[1] == "Recent messages in this group chat:\n- Carol: chatter 1\n- Bob: chatter 2"


def test_steer_needs_xpert_experts(prefix: str) -> None:
    from gateway.config.errors import ConfigError
    from gateway.config.file import load_settings
    from gateway.runtime.cli import settings_model

    cfg = base_config(prefix, busyPolicy="steer")
    try:
        load_settings(cfg, model=settings_model(), env={})
    except ConfigError as exc:
        assert exc.problems == [
            "integrations[console].busyPolicy: steer needs an expert of kind xpert "
            "(this integration uses echo)"
        ]
    else:
        raise AssertionError("steer accepted with an echo expert")
