"""``xpert-gateway check --probe`` for the ``langgraph`` and ``a2a`` kinds, against the real
servers the suite starts (tests/support/agent_servers.py): ``langgraph dev`` finds the
assistant (by graph id or assistant id) without running it, the a2a-sdk server shows its agent
card; a graph it does not serve, a URL without an agent card and a port where nothing listens
each fail the probe with one line, as does a card offering no interface the kind speaks."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from tests.support.agent_servers import AgentServer
from tests.support.cli import cli
from tests.support.configs import base_config
from tests.support.helpers import free_port, serve


def probed(tmp_path: Path, experts: list[dict[str, Any]]) -> tuple[int, list[str], str]:
    """``check --probe`` of a config holding ``experts``: exit code, probe lines, stderr."""
    cfg = base_config("unused", xpertId=experts[0]["id"])
    cfg["experts"] = experts
    path = tmp_path / "gateway.yaml"
    path.write_text(yaml.safe_dump(cfg))
    result = cli("check", "--config", str(path), "--probe")
    return result.returncode, result.stdout.split("probe:\n", 1)[1].splitlines(), result.stderr


def default_assistant(server: AgentServer, graph: str) -> str:
    """The id of the assistant ``langgraph dev`` made for ``graph``."""
    body = json.dumps({"graph_id": graph, "limit": 1}).encode()
    request = urllib.request.Request(
        server.url + "/assistants/search",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        [assistant] = json.loads(resp.read())
    return str(assistant["assistant_id"])


def test_check_probe_finds_the_langgraph_assistant(
    langgraph_server: AgentServer, tmp_path: Path
) -> None:
    url = langgraph_server.url
    uuid = default_assistant(langgraph_server, "agent")
    gone = f"http://127.0.0.1:{free_port()}"
    lg = {"kind": "langgraph", "baseUrl": url, "apiKey": "lsv2-secret-key"}
    code, lines, err = probed(
        tmp_path,
        [
            {**lg, "id": "agent"},
            {**lg, "id": "by-id", "assistantId": uuid},
            {**lg, "id": "ghost", "assistantId": "no-such-graph"},
            {**lg, "id": "gone", "baseUrl": gone},
        ],
    )
    assert code == 1
    assert lines[:3] == [
        f"  experts[agent] (langgraph): {url}/assistants/search: reached, assistant {uuid} "
        "(agent), graph agent",
        f"  experts[by-id] (langgraph): {url}/assistants/{uuid}: reached, assistant {uuid} "
        "(agent), graph agent",
        f"  experts[ghost] (langgraph): {url}/assistants/search: The LangGraph agent could not "
        "answer: the agent or model was not found (HTTP 404).",
    ]
    assert lines[3].startswith(
        f"  experts[gone] (langgraph): The LangGraph agent could not be reached at "
        f"{gone}/assistants/search (ClientConnectorError: "
    )
    assert len(lines) == 4
    assert "error: 2 experts failed the probe" in err
    assert "lsv2-secret-key" not in "".join(lines) + err


def test_check_probe_reads_the_a2a_agent_card(a2a_agent: AgentServer, tmp_path: Path) -> None:
    url = a2a_agent.url
    gone = f"http://127.0.0.1:{free_port()}"
    a2a = {"kind": "a2a", "headers": {"Authorization": "Bearer a2a-secret"}}
    code, lines, err = probed(
        tmp_path,
        [
            {**a2a, "id": "helpdesk", "url": url},
            {**a2a, "id": "no-card", "url": url + "/elsewhere"},
            {**a2a, "id": "gone", "url": gone},
        ],
    )
    assert code == 1
    card = "/.well-known/agent-card.json"
    assert lines[:2] == [
        f"  experts[helpdesk] (a2a): {url}{card}: reached, agent Helpdesk, A2A 1.0 "
        f"over JSONRPC at {url}/a2a (streaming)",
        f"  experts[no-card] (a2a): {url}/elsewhere{card}: The A2A agent could not "
        "answer: the agent or model was not found (HTTP 404).",
    ]
    assert lines[2].startswith(
        f"  experts[gone] (a2a): The A2A agent could not be reached at {gone}{card} "
        "(ClientConnectorError: "
    )
    assert len(lines) == 3
    assert "error: 2 experts failed the probe" in err
    assert "a2a-secret" not in "".join(lines) + err


async def test_check_probe_refuses_an_a2a_card_of_another_version(tmp_path: Path) -> None:
    # An A2A 0.3 card (one url, protocolVersion at the top; no supportedInterfaces): the kind
    # could not talk to it, and the probe says so.
    old = {"name": "Old", "protocolVersion": "0.3.0", "url": "http://127.0.0.1:1/rpc"}

    async def card(_: web.Request) -> web.Response:
        return web.json_response(old)

    app = web.Application()
    app.router.add_get("/.well-known/agent-card.json", card)
    async for url in serve(app):
        # On a thread: the card is served on this test's event loop meanwhile.
        code, lines, _ = await asyncio.to_thread(
            probed, tmp_path, [{"kind": "a2a", "id": "old", "url": url}]
        )
    assert code == 1
    assert lines == [
        f"  experts[old] (a2a): {url}/.well-known/agent-card.json: the agent offers no A2A "
        "1.0 interface over JSON-RPC or HTTP+JSON (it offers: 0.3.0)."
    ]
