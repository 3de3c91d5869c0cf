"""The ``langgraph`` expert kind end to end against a real LangGraph Agent Server: ``langgraph dev``
serving tests/agents/langgraph_agent.py (a LangChain agent with the real
``HumanInTheLoopMiddleware``), started once per worker (tests/support/agent_servers.py).
console -> gateway -> Agent Server -> card."""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from gateway.events import Clarification, Finished, TextDelta, UsageEvent
from gateway.experts.base import TurnInput
from gateway.experts.langgraph import LangGraphExpert, LangGraphExpertSettings, _Run
from gateway.experts.langgraph_stream import LangGraphStream
from gateway.experts.sse import SseEvent
from tests.support.agent_servers import AgentServer
from tests.support.configs import base_config
from tests.support.postgres import TcpProxy
from tests.support.waits import eventually


def config(prefix: str, url: str, **expert: Any) -> dict[str, Any]:
    cfg = base_config(prefix, xpertId="research")
    cfg["experts"] = [
        {"id": "research", "kind": "langgraph", "baseUrl": url, "assistantId": "agent", **expert}
    ]
    return cfg


async def threads_with(server: AgentServer, *texts: str) -> list[dict[str, Any]]:
    """The server's threads whose human messages are ``texts``."""
    async with aiohttp.ClientSession() as http:
        body = {"metadata": {"graph_id": "agent"}, "limit": 1000}
        async with http.post(f"{server.url}/threads/search", json=body) as resp:
            assert resp.status == 200
            threads: list[dict[str, Any]] = await resp.json()
    return [
        t
        for t in threads
        if [
            m["content"]
            for m in (t.get("values") or {}).get("messages", [])
            if m["type"] == "human"
        ]
        == list(texts)
    ]


async def runs_of(server: AgentServer, thread_id: str) -> list[dict[str, Any]]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{server.url}/threads/{thread_id}/runs") as resp,
    ):
        assert resp.status == 200
        data: list[dict[str, Any]] = await resp.json()
        return data


async def test_a_turn_streams_the_answer_and_the_session_keeps_its_thread(
    langgraph_server: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, langgraph_server.url))
    await console.send(f"hello {prefix}")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == f"You said: hello {prefix}"
    assert {"title": "model", "status": "done"} in card["card"]["steps"]
    await console.send("and again")
    _, second = await console.wait_cards(count=2)
    assert second["card"]["answer"] == "You said: and again"
    # one thread holds both turns, as the server keeps it
    [thread] = await threads_with(langgraph_server, f"hello {prefix}", "and again")
    assert thread["status"] == "idle"


async def test_the_run_gets_the_turn_context(
    langgraph_server: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, langgraph_server.url))
    await console.send("[whoami]")
    [card] = await console.wait_cards()
    answer = card["card"]["answer"]
    assert "sender_id=alice" in answer and "chat_id=dm-alice" in answer
    assert "language=None" not in answer  # sys.language reached the run


async def test_an_interrupt_question_is_asked_and_the_next_message_resumes_the_run(
    langgraph_server: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, langgraph_server.url))
    await console.send("where is my parcel [ask]")
    [card] = await console.wait_cards()
    assert "What is your order number?" in card["card"]["answer"]
    assert [t["title"] for t in card["card"]["tools"]] == ["ask_order"]
    await console.send("A-42")
    _, second = await console.wait_cards(count=2)
    assert second["card"]["answer"] == "Done: order A-42 found"
    assert {"title": "ask_order", "status": "done", "detail": "order A-42 found"} in second["card"][
        "tools"
    ]


@pytest.mark.parametrize(
    ("assistant", "text", "decision", "status", "answer"),
    [
        ("agent", "[refund]", "confirm", "done", "Done: refunded 10 on A-7"),
        (
            "agent",
            "[refund]",
            "reject",
            "rejected",
            "Done: User rejected the tool call for `refund`",
        ),
        ("agent_per_call", "[void]", "confirm", "done", "Done: voided A-7"),
        (
            "agent_per_call",
            "[void]",
            "reject",
            "rejected",
            "Done: User rejected the tool call for `void`",
        ),
    ],
)
async def test_a_human_in_the_loop_review_waits_and_confirm_or_reject_resumes_it(
    langgraph_server: AgentServer,
    make_gateway: Callable[..., Any],
    prefix: str,
    assistant: str,
    text: str,
    decision: str,
    status: str,
    answer: str,
) -> None:
    console = await make_gateway(config(prefix, langgraph_server.url, assistantId=assistant))
    await console.send(f"please {text}")
    [card] = await console.wait_cards(status="waiting")
    assert card["card"]["title"].startswith(f"Run {text[1:-1]}? (order: A-7")
    await console.click("dm-alice", card["id"], decision)
    [card] = await console.wait_cards(status=status)
    assert card["card"]["answer"].startswith(answer)


async def test_stop_cancels_the_run_on_the_server(
    langgraph_server: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, langgraph_server.url))
    await console.send(f"take your time [slow] {prefix}")
    await eventually(lambda: _has_answer(console), timeout=30)  # a loaded machine is slow
    [card] = await console.cards()
    await console.click("dm-alice", card["id"], "stop")
    [card] = await console.wait_cards(status="cancelled", timeout=30)
    assert not card["card"]["answer"].endswith("w199")
    # the server's run ended, cancelled: langgraph-api marks it "interrupted"
    [thread] = await threads_with(langgraph_server, f"take your time [slow] {prefix}")

    async def cancelled() -> bool:
        runs = await runs_of(langgraph_server, thread["thread_id"])
        return [r["status"] for r in runs] == ["interrupted"]

    await eventually(cancelled, timeout=30)


async def _has_answer(console: Any) -> bool:
    cards = await console.cards()
    return bool(cards and cards[0]["card"]["answer"].startswith("w0 w1"))


async def test_a_failed_run_ends_the_turn_with_an_error_card(
    langgraph_server: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, langgraph_server.url))
    await console.send("[boom]")
    [card] = await console.wait_cards(status="error")
    assert "the scripted model failed" in card["card"]["error"]


async def test_an_unknown_graph_ends_the_turn_with_an_error_card(
    langgraph_server: AgentServer, make_gateway: Callable[..., Any], prefix: str
) -> None:
    console = await make_gateway(config(prefix, langgraph_server.url, assistantId="nope"))
    await console.send("hello")
    [card] = await console.wait_cards(status="error")
    assert "The LangGraph agent could not answer" in card["card"]["error"]


def turn(text: str, **extra: Any) -> TurnInput:
    return TurnInput(
        turn_id="t1",
        session_id="s1",
        integration_id="console",
        xpert_id="research",
        text=text,
        chat_id="dm-alice",
        chat_type="p2p",
        sender_id="alice",
        **extra,
    )


async def test_pictures_reach_the_graph_as_langchain_image_blocks(
    langgraph_server: AgentServer,
) -> None:
    settings = LangGraphExpertSettings.model_validate(
        {
            "id": "research",
            "kind": "langgraph",
            "baseUrl": langgraph_server.url,
            "assistantId": "agent",
            "vision": True,
        }
    )
    expert = LangGraphExpert(settings=settings)
    png = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    picture = {"kind": "image", "url": png, "mime": "image/png", "name": "a.png"}
    try:
        events = [e async for e in expert.run(turn("look", attachments=(picture,)))]
    finally:
        await expert.close()
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == "You said: look (1 images)"
    assert events[-1] == Finished("success")


async def test_an_interrupt_value_that_is_no_review_is_a_question(
    langgraph_server: AgentServer,
) -> None:
    settings = LangGraphExpertSettings.model_validate(
        {
            "id": "research",
            "kind": "langgraph",
            "baseUrl": langgraph_server.url,
            "assistantId": "agent",
        }
    )
    expert = LangGraphExpert(settings=settings)
    try:
        events = [e async for e in expert.run(turn("[ask]"))]
    finally:
        await expert.close()
    assert Clarification(question="What is your order number?") in events
    assert events[-1] == Finished("success")  # the question ends the turn; no buttons


async def test_a_dropped_stream_is_rejoined_without_doubled_text_and_tokens_are_counted(
    langgraph_server: AgentServer,
) -> None:
    proxy = TcpProxy("127.0.0.1", langgraph_server.port)
    await proxy.open()
    settings = LangGraphExpertSettings.model_validate(
        {
            "id": "research",
            "kind": "langgraph",
            "baseUrl": f"http://127.0.0.1:{proxy.port}",
            "assistantId": "agent",
        }
    )
    expert = LangGraphExpert(settings=settings)
    events: list[Any] = []
    try:
        async for event in expert.run(turn("[slow40]")):
            events.append(event)
            text = "".join(e.text for e in events if isinstance(e, TextDelta))
            if proxy.accepted == 1 and text.endswith("w9"):
                await proxy.close()  # the connection is cut mid-run; the port serves again
                await proxy.open()
    finally:
        await expert.close()
        await proxy.close()
    assert proxy.accepted >= 2  # the rejoin
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert text == " ".join(f"w{i}" for i in range(40))
    assert [e for e in events if isinstance(e, UsageEvent)] == [UsageEvent(1, 40)]
    assert events[-1] == Finished("success")


def test_a_rejoined_streams_repeated_event_is_left_out_but_events_sharing_an_id_are_not() -> None:
    # langgraph-api 0.16.7 gave two different chunks one id ("…105-0"), and a rejoin after a
    # cut once handed over an event already read (seen as a doubled word before this check)
    run = _Run("t", LangGraphStream())
    first = SseEvent("messages", '[{"content": "a"}]', "1796426766105-0")
    second = SseEvent("messages", '[{"content": "b"}]', "1796426766105-0")
    assert run.fresh(first) and run.fresh(second)
    assert not run.fresh(second)  # handed over again
    assert not run.fresh(SseEvent("messages", "[]", "1796426766104-3"))  # older
    assert run.fresh(SseEvent("updates", "{}", "1796426766106-0"))
    assert run.fresh(SseEvent("metadata", "{}", None))  # no id: nothing to tell by
