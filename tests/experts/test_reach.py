"""A backend that cannot be reached is named by the URL tried, on the card and in the log; and
``xpert-gateway check --probe`` tries each expert's URL and key (a subprocess, against the fake
OpenAI-compatible server and the fake XpertAI) without running a turn."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from structlog.testing import capture_logs

from tests.fakes.experts import FakeOpenAI
from tests.fakes.xpertai import FakeXpertAI
from tests.support.cli import run_cli
from tests.support.configs import base_config, openai_expert
from tests.support.helpers import free_port, serve
from tests.support.xpert import config as xpert_config


@pytest.fixture
async def backends() -> AsyncIterator[tuple[FakeOpenAI, str, FakeXpertAI, str]]:
    openai, xpert = FakeOpenAI(), FakeXpertAI()
    async for openai_url in serve(openai.app()):
        async for xpert_url in serve(xpert.app()):
            yield openai, openai_url + "/v1", xpert, xpert_url + "/api/ai"


def nobody() -> str:
    """A local URL where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"


async def test_an_unreachable_openai_backend_is_named_on_the_card_and_in_the_log(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    url = nobody() + "/v1"
    cfg = base_config(prefix, xpertId="gpt")
    cfg["experts"] = [openai_expert(url, retries=0)]
    console = await make_gateway(cfg)
    with capture_logs() as logs:
        await console.send("hello")
        [card] = await console.wait_cards(status="error")
    tried = f"{url}/chat/completions"
    assert (
        f"The model could not be reached at {tried} (ClientConnectorError"
        in (card["card"]["error"])
    )
    [line] = [e for e in logs if e["event"] == "openai expert failed"]
    assert tried in line["error"] and line["url"] == url


async def test_an_unreachable_xpertai_is_named_on_the_card_and_in_the_log(
    make_gateway: Callable[..., Any], prefix: str
) -> None:
    url = nobody() + "/api/ai"
    console = await make_gateway(xpert_config(prefix, url))
    with capture_logs() as logs:
        await console.send("hello")
        [card] = await console.wait_cards(status="error")
    assert f"XpertAI could not be reached at {url}/threads (" in card["card"]["error"]
    [line] = [e for e in logs if e["event"] == "xpert thread not created"]
    assert f"{url}/threads" in line["error"]


@pytest.mark.parametrize(
    ("kind", "key", "backend"),
    [("langgraph", "baseUrl", "The LangGraph agent"), ("a2a", "url", "The A2A agent")],
)
async def test_an_unreachable_agent_server_is_named_on_the_card(
    make_gateway: Callable[..., Any], prefix: str, kind: str, key: str, backend: str
) -> None:
    url = nobody()
    cfg = base_config(prefix, xpertId="agent")
    expert: dict[str, Any] = {"id": "agent", "kind": kind, key: url, "connectRetries": 0}
    if kind == "langgraph":
        expert["assistantId"] = "agent"
    cfg["experts"] = [expert]
    console = await make_gateway(cfg)
    await console.send("hello")
    [card] = await console.wait_cards(status="error")
    assert f"{backend} could not be reached at {url}" in card["card"]["error"]


async def test_check_probe_tries_each_experts_url_and_key(
    backends: tuple[FakeOpenAI, str, FakeXpertAI, str], tmp_path: Path
) -> None:
    openai, openai_url, xpert, xpert_url = backends
    gone = nobody() + "/v1"
    cfg = xpert_config("unused", xpert_url)
    [sales] = cfg["experts"]
    cfg["experts"] = [
        sales,
        {**sales, "id": "ghost", "assistantId": "no-such-agent"},
        openai_expert(openai_url),
        {**openai_expert(openai_url, model="other"), "id": "other"},
        {**openai_expert(openai_url, apiKey="sk-wrong-key"), "id": "wrong-key"},
        {**openai_expert(gone), "id": "gone"},
        {"id": "echo", "kind": "echo"},
    ]
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    # A subprocess, on a thread: the fakes answer on this test's event loop meanwhile.
    result = await asyncio.to_thread(run_cli, "check", "--config", str(path), "--probe")
    assert result.returncode == 1, result.stdout
    probed = result.stdout.split("probe:\n", 1)[1].splitlines()
    assert probed == [
        f"  experts[sales] (xpert): {xpert_url}/assistants/sales: reached, key accepted, "
        "agent sales (Sales)",
        f"  experts[ghost] (xpert): {xpert_url}/assistants/no-such-agent: XpertAI could not "
        "answer: the agent or model was not found (HTTP 404).",
        f"  experts[gpt] (openai): {openai_url}/models: reached, key accepted, model qwen2.5 "
        "listed",
        f"  experts[other] (openai): {openai_url}/models: reached, key accepted, model other "
        "not among the 2 listed",
        f"  experts[wrong-key] (openai): {openai_url}/models: The model's API could not "
        "answer: the API key was rejected (HTTP 401).",
        f"  experts[gone] (openai): The model's API could not be reached at {gone}/models "
        "(ClientConnectorError: " + probed[5].split("(ClientConnectorError: ", 1)[-1],
        "  experts[echo] (echo): not tried (this expert kind has no probe)",
    ]
    assert "error: 3 experts failed the probe" in result.stderr
    assert "sk-wrong-key" not in result.stdout + result.stderr
    assert openai.requests == [] and xpert.requests == []  # no turn ran
