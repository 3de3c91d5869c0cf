"""The ``a2a`` expert kind end to end against a real A2A server: a2a-sdk's request handler,
task store and routes running tests/agents/a2a_agent.py's executor, started once per worker
(tests/support/agent_servers.py). console -> gateway -> A2A agent -> card."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from gateway.events import ArtifactEvent, Finished, TextDelta
from gateway.experts.a2a import A2AExpert, A2AExpertSettings
from gateway.experts.a2a_protocol import CardError, endpoint_of
from gateway.experts.base import TurnInput
from tests.support.agent_servers import AgentServer
from tests.support.configs import base_config
from tests.support.waits import eventually


def config(prefix: str, url: str, **expert: Any) -> dict[str, Any]:
    cfg = base_config(prefix, xpertId="helpdesk")
    cfg["experts"] = [{"id": "helpdesk", "kind": "a2a", "url": url, **expert}]
    return cfg


async def tasks_asked(server: AgentServer, text: str) -> list[dict[str, Any]]:
    """The server's tasks whose first message says ``text`` (JSON-RPC ``ListTasks``)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {"pageSize": 100}}
    async with (
        aiohttp.ClientSession(headers={"A2A-Version": "1.0"}) as http,
        http.post(server.url + "/a2a", json=body) as resp,
    ):
        data: dict[str, Any] = await resp.json()
    return [
        t
        for t in data["result"].get("tasks", [])
        if t.get("history") and t["history"][0]["parts"][0].get("text") == text
    ]


async def test_a_turn_streams_the_status_as_a_step_and_the_artifact_as_the_answer(
    a2a_agent: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, a2a_agent.url))
    await console.send("hello there")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == "Echo: hello there"
    assert card["card"]["steps"] == [{"title": "Thinking", "status": "done"}]
    await console.send("[message] again")
    _, second = await console.wait_cards(count=2)
    assert second["card"]["answer"] == "Plain reply: [message] again"


async def test_input_required_asks_and_the_next_message_continues_the_same_task(
    a2a_agent: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, a2a_agent.url))
    await console.send("is my account ok [ask]")
    [card] = await console.wait_cards()
    assert "Which account?" in card["card"]["answer"]
    await console.send("ACME-1")
    _, second = await console.wait_cards(count=2)
    assert second["card"]["answer"] == "Account ACME-1 is active."


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[auth]", "Helpdesk needs you to sign in first: Sign in to the CRM first."),
        ("[fail]", "Helpdesk could not do it: The CRM is down."),
    ],
)
async def test_auth_required_and_failures_end_the_turn_with_an_error_card(
    a2a_agent: AgentServer, make_gateway: Callable[..., Any], prefix: str, text: str, error: str
) -> None:
    console = await make_gateway(config(prefix, a2a_agent.url))
    await console.send(text)
    [card] = await console.wait_cards(status="error")
    assert card["card"]["error"] == error


async def test_stop_cancels_the_task_on_the_server(
    a2a_agent: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, a2a_agent.url))
    await console.send(f"take your time [slow] {prefix}")

    async def streaming() -> bool:
        cards = await console.cards()
        return bool(cards and cards[0]["card"]["answer"].startswith("w0 w1"))

    await eventually(streaming, timeout=30)  # a loaded machine is slow
    [card] = await console.cards()
    await console.click("dm-alice", card["id"], "stop")
    [card] = await console.wait_cards(status="cancelled", timeout=30)
    assert "w199" not in card["card"]["answer"]

    async def canceled() -> bool:
        [task] = await tasks_asked(a2a_agent, f"take your time [slow] {prefix}")
        return bool(task["status"]["state"] == "TASK_STATE_CANCELED")

    await eventually(canceled, timeout=30)


def turn(text: str, **extra: Any) -> TurnInput:
    return TurnInput(
        turn_id="t1",
        session_id="s1",
        integration_id="console",
        xpert_id="helpdesk",
        text=text,
        chat_id="dm-alice",
        chat_type="p2p",
        sender_id="alice",
        **extra,
    )


async def test_a_file_artifact_comes_back_as_a_file(a2a_agent: AgentServer) -> None:
    expert = A2AExpert(
        settings=A2AExpertSettings.model_validate(
            {"id": "helpdesk", "kind": "a2a", "url": a2a_agent.url}
        )
    )
    try:
        events = [e async for e in expert.run(turn("[file]"))]
    finally:
        await expert.close()
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Here is your report."
    [artifact] = [e for e in events if isinstance(e, ArtifactEvent)]
    assert artifact.kind == "file" and artifact.name == "report.csv"
    data = base64.b64decode(artifact.url.removeprefix("data:text/csv;base64,"))
    assert data == b"id,total\n1,10\n"
    assert events[-1] == Finished("success")


async def test_the_http_json_binding_when_the_card_offers_only_it(a2a_agent: AgentServer) -> None:
    expert = A2AExpert(
        settings=A2AExpertSettings.model_validate(
            {"id": "helpdesk", "kind": "a2a", "url": a2a_agent.url}
        )
    )
    async with aiohttp.ClientSession() as http:
        async with http.get(a2a_agent.url + "/.well-known/agent-card.json") as resp:
            card = await resp.json()
    card["supportedInterfaces"] = [
        i for i in card["supportedInterfaces"] if i["protocolBinding"] == "HTTP+JSON"
    ]
    endpoint = endpoint_of(card)
    assert endpoint.binding == "HTTP+JSON"
    expert._card = (time.monotonic(), endpoint)  # as if read: this card, not the served one
    try:
        events = [e async for e in expert.run(turn("over rest"))]
    finally:
        await expert.close()
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Echo: over rest"
    assert events[-1] == Finished("success")


def test_a_card_without_a_1_0_interface_is_refused_with_why() -> None:
    old = {"name": "Old", "url": "http://x/", "protocolVersion": "0.3.0"}
    with pytest.raises(CardError, match=r"no A2A 1\.0 interface.*0\.3\.0"):
        endpoint_of(old)
