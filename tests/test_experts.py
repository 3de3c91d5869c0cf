"""The xpert and openai backends end to end: console -> daemon -> fake backend -> card."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from aiohttp import web

from tests.conftest import base_config, eventually
from tests.fakes.experts import OPENAI_KEY, XPERT_KEY, FakeOpenAI, FakeXpert
from tests.helpers import ConsoleClient, free_port


async def serve(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpert, str]]:
    fake = FakeXpert()
    async for url in serve(fake.app()):
        yield fake, url + "/api/ai"


@pytest.fixture
async def openai() -> AsyncIterator[tuple[FakeOpenAI, str]]:
    fake = FakeOpenAI()
    async for url in serve(fake.app()):
        yield fake, url + "/v1"


def config(prefix: str, expert: dict[str, Any], **integration: Any) -> dict[str, Any]:
    cfg = base_config(prefix, xpertId=expert["id"], **integration)
    cfg["experts"] = [expert, {"id": "echo", "kind": "echo"}]
    return cfg


def xpert_expert(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "sales",
        "kind": "xpert",
        "baseUrl": url,
        "apiKey": XPERT_KEY,
        "organizationId": "org-1",
        "principalUserId": "u-42",
        "connectRetries": 2,
        **extra,
    }


async def test_xpert_run_streams_steps_tools_and_answer_in_one_thread_per_session(
    xpert: tuple[FakeXpert, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console: ConsoleClient = await make_gateway(config(prefix, xpert_expert(url)))
    await console.send("what is our refund policy?")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "Hello from xpert [what is our refund policy?]"
    assert {"title": "Searching the wiki", "status": "done"} in card["card"]["steps"]
    assert card["card"]["tools"] == [{"title": "wiki_search", "status": "done", "detail": ""}]
    assert "hidden thoughts" not in str(card)  # reasoning is not shown by default
    run = fake.runs[0]
    assert run["assistant_id"] == "sales"
    assert run["input"]["action"] == "send"
    assert run["input"]["message"]["input"]["input"] == "what is our refund policy?"
    headers = fake.headers[-1]
    assert headers["x-api-key"] == XPERT_KEY and headers["organization-id"] == "org-1"
    assert headers["x-principal-user-id"] == "u-42"
    await console.send("and for digital goods?")
    await console.wait_cards(count=2)
    assert len(fake.threads) == 1 and fake.runs[1]["thread"] == fake.threads[0]


async def test_xpert_interrupt_waits_and_confirm_resumes_the_thread(
    xpert: tuple[FakeXpert, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, xpert_expert(url)))
    await console.send("email the team [interrupt]")
    [card] = await console.wait_cards(status="waiting")
    assert card["card"]["title"] == "Send the email to the whole team?"
    await console.click("dm-alice", card["id"], "confirm")
    [card] = await console.wait_cards(status="done")
    assert card["card"]["answer"] == "Resumed: confirm"
    assert fake.resumes == [{"thread": fake.threads[0], "decision": "confirm"}]


async def test_xpert_dropped_stream_resumes_from_the_last_event_id(
    xpert: tuple[FakeXpert, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    _fake, url = xpert
    console = await make_gateway(config(prefix, xpert_expert(url)))
    await console.send("long one [drop]")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "Hello from xpert [long one [drop]]"  # nothing doubled


@pytest.mark.parametrize(
    ("expert", "message"),
    [
        ({"apiKey": "sk-x-wrong"}, "the API key was rejected (HTTP 401)"),
        ({"assistantId": "nobody"}, "the agent or model was not found (HTTP 404)"),
    ],
)
async def test_xpert_errors_become_readable_error_cards(
    xpert: tuple[FakeXpert, str],
    make_gateway: Callable[..., Any],
    prefix: str,
    expert: dict[str, Any],
    message: str,
) -> None:
    _fake, url = xpert
    console = await make_gateway(config(prefix, xpert_expert(url, **expert)))
    await console.send("hello")
    [card] = await console.wait_cards(status="error")
    assert message in card["card"]["error"]


async def test_xpert_silent_stream_times_out_with_an_error_card(
    xpert: tuple[FakeXpert, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    _fake, url = xpert
    console = await make_gateway(
        config(prefix, xpert_expert(url, idleTimeoutSeconds=0.5, connectRetries=0))
    )
    await console.send("are you there [silent]")
    [card] = await console.wait_cards(status="error")
    assert "sent nothing for 0.5 s" in card["card"]["error"]


async def test_stop_cancels_the_xpert_run(
    xpert: tuple[FakeXpert, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, xpert_expert(url)))
    await console.send("take your time [slow]")
    [card] = await console.wait_cards(status="running")
    await eventually(lambda: fake.runs)
    await console.click("dm-alice", card["id"], "stop")
    await console.wait_cards(status="cancelled")
    await eventually(lambda: fake.cancels == [fake.runs[0]["run"]])


def openai_expert(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "gpt",
        "kind": "openai",
        "baseUrl": url,
        "apiKey": OPENAI_KEY,
        "model": "qwen2.5",
        "systemPrompt": "Reply in {{sys.language}} ({{sys.timezone}}).",
        **extra,
    }


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


async def test_steer_hands_a_message_to_the_running_xpert_run(
    xpert: tuple[FakeXpert, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, xpert_expert(url), busyPolicy="steer"))
    await console.send("draft the plan [slow]")
    await console.wait_cards(status="running")
    await eventually(lambda: fake.runs)
    await console.send("also cover the budget")
    [card] = await console.wait_cards(status="done", timeout=20)
    assert fake.steers == [(fake.threads[0], "also cover the budget")]
    assert "(steer: also cover the budget)" in card["card"]["answer"]
    assert {"title": "Follow-up: also cover the budget", "status": "done"} in card["card"]["steps"]
    assert len(await console.cards()) == 1 and len(fake.runs) == 1  # no second turn


def test_steer_needs_xpert_experts(prefix: str) -> None:
    from gateway.cli import settings_model
    from gateway.settings import ConfigError, load_settings

    cfg = base_config(prefix, busyPolicy="steer")
    try:
        load_settings(cfg, model=settings_model(), env={})
    except ConfigError as exc:
        assert exc.problems == [
            "integrations.0.busyPolicy: steer needs an expert of kind xpert "
            "(this integration uses echo)"
        ]
    else:
        raise AssertionError("steer accepted with an echo expert")
