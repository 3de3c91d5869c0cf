"""Replay tests: XpertAI run streams with the shapes of the real server (tests/fixtures/xpertai,
each frame traced to its source file there) fed through the ``xpert`` backend, with the events
it yields and the card they render asserted."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from adapters.console.cards import render_card
from gateway.events import (
    Finished,
    Interrupt,
    RunEvent,
    Started,
    StepEvent,
    TextDelta,
    ToolEvent,
    UsageEvent,
    VariablesEvent,
)
from gateway.experts.base import TurnInput
from gateway.experts.xpert import XpertExpert
from gateway.experts.xpert_settings import XpertExpertSettings
from gateway.progress import Progress
from tests.fakes.xpertai import API_KEY
from tests.support.helpers import free_port

FIXTURES = Path(__file__).parent.parent / "fixtures" / "xpertai"


class Replay:
    """Answers ``runs/stream`` with a recorded body, cut into random pieces as a network would."""

    def __init__(self, name: str, state: dict[str, Any] | None = None) -> None:
        self.body = (FIXTURES / name).read_bytes()
        self.state = state or {}
        self.bodies: list[dict[str, Any]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/api/ai/threads", self.thread)
        app.router.add_post("/api/ai/threads/{tid}/runs/stream", self.stream)
        app.router.add_get("/api/ai/threads/{tid}/state", self.read_state)
        return app

    async def thread(self, request: web.Request) -> web.Response:
        return web.json_response({"thread_id": "th-replay", "status": "idle"}, status=201)

    async def stream(self, request: web.Request) -> web.StreamResponse:
        self.bodies.append(await request.json())
        # 201: Nest keeps a POST's status for @Sse (router-response-controller sse())
        response = web.StreamResponse(status=201, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        rng = random.Random(7)
        body, i = self.body, 0
        while i < len(body):
            n = rng.randint(1, 97)
            await response.write(body[i : i + n])
            i += n
        return response

    async def read_state(self, request: web.Request) -> web.Response:
        return web.json_response({"values": self.state, "checkpoint": {}})


async def replay(
    name: str, *, state: dict[str, Any] | None = None, declared: tuple[str, ...] = ()
) -> tuple[list[RunEvent], Progress, Replay]:
    server = Replay(name, state)
    runner = web.AppRunner(server.app())
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    settings = XpertExpertSettings.model_validate(
        {
            "id": "sales",
            "kind": "xpert",
            "baseUrl": f"http://127.0.0.1:{port}/api/ai",
            "apiKey": API_KEY,
        }
    )
    expert = XpertExpert(settings=settings)
    turn = TurnInput(
        turn_id="t1",
        session_id="s1",
        integration_id="console",
        xpert_id="sales",
        text="what is our refund policy?",
        chat_id="dm-alice",
        chat_type="p2p",
        sender_id="alice",
        declared_variables=dict.fromkeys(declared, "replace"),
    )
    events: list[RunEvent] = []
    progress = Progress(turn_id="t1")
    try:
        async for event in expert.run(turn):
            events.append(event)
            progress = progress.apply(event)
    finally:
        await expert.close()
        await runner.cleanup()
    return events, progress, server


async def test_a_good_run_shows_tool_steps_and_the_answer_and_ends_done() -> None:
    events, progress, _ = await replay("good_run.sse")
    assert isinstance(events[0], Started) and events[0].thread_id == "th-replay"
    assert [e for e in events if isinstance(e, ToolEvent)] == [
        ToolEvent("call_abc", "Search the wiki", "running"),
        ToolEvent("call_abc", "Search the wiki", "done"),
    ]
    # middleware and context-usage chat events are not steps; the MCP start is one
    assert [e for e in events if isinstance(e, StepEvent)] == [
        StepEvent("ts-mcp", "Starting MCP server", "running", "wiki"),
        StepEvent("ts-mcp", "Starting MCP server", "done", ""),
    ]
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == (
        "Refunds are accepted within 30 days."
    )
    # no cost: totalPrice is the last model call's, not the run's
    assert [e for e in events if isinstance(e, UsageEvent)] == [UsageEvent(1300, 200)]
    assert events[-1] == Finished("success")  # on_conversation_end status "idle"
    card = render_card(progress)
    assert card["status"] == "done" and card["error"] == ""
    assert card["answer"] == "Refunds are accepted within 30 days."
    assert card["tools"] == [{"title": "Search the wiki", "status": "done", "detail": ""}]
    assert card["steps"] == [{"title": "Starting MCP server", "status": "done"}]
    assert "The user wants" not in str(card)  # reasoning stays hidden
    assert (progress.input_tokens, progress.output_tokens) == (1300, 200)


async def test_an_interrupt_asks_with_the_sensitive_operation_and_keeps_the_resume_target() -> None:
    events, progress, _ = await replay("interrupt.sse")
    [asked] = [e for e in events if isinstance(e, Interrupt)]
    # the tool's name and the call's arguments, not its description written for the model
    assert asked.prompt == "Run send_email? (to: all@example.com)"
    assert asked.data["target"] == {"aiMessageId": "m-ai-2", "executionId": "ex-2"}
    assert asked.data["lastEventId"] == "1764500100008-0"  # a resume reads after this
    assert events[-1] == Finished("interrupted")
    card = render_card(progress)
    assert card["status"] == "waiting" and card["title"] == asked.prompt
    assert [b["actionId"] for b in card["buttons"]] == ["confirm", "reject"]
    assert card["answer"] == "I will email the report."


@pytest.mark.parametrize(
    ("fixture", "error", "answer"),
    [
        ("error_run.sse", "Model quota exceeded", ""),  # the agent failed
        ("invoke_error.sse", "Xpert workspace requires userId", ""),  # the chat itself failed
        # never written by the server (on_error is always {error}); the type allows a string
        ("tolerated_on_error_plain_string.sse", "Aborted!", "Partial answer"),
    ],
)
async def test_a_failed_run_shows_the_servers_error(fixture: str, error: str, answer: str) -> None:
    events, progress, _ = await replay(fixture)
    assert events[-1] == Finished("error", error)
    card = render_card(progress)
    assert card["status"] == "error" and card["error"] == error and card["answer"] == answer
    assert [b["actionId"] for b in card["buttons"]] == ["retry", "new"]
    if fixture == "error_run.sse":
        assert card["tools"] == [
            {"title": "Query the warehouse", "status": "failed", "detail": "connection refused"}
        ]


async def test_a_steered_run_continues_in_one_answer_and_counts_sub_agents_once() -> None:
    events, progress, _ = await replay("steer_and_subagent.sse")
    # the text after the steer is a new AI message and stream: it starts on a new line
    assert progress.answer == "Drafting the plan\nNow with the budget."
    # the knowledge retrieval announced as a Tool ends with a "Computer" update of the same id
    assert render_card(progress)["tools"] == [
        {"title": "Search knowledge", "status": "done", "detail": ""}
    ]
    assert not [e for e in events if isinstance(e, StepEvent)]  # follow_up_consumed is no step
    # the root's totalTokens includes its sub-agent, whose own end is not added again; the
    # output is the root's last call
    assert (progress.input_tokens, progress.output_tokens) == (1100, 200)
    assert events[-1] == Finished("success")


async def test_variables_are_read_back_from_the_thread_state_after_the_run() -> None:
    state = {"topic": "refunds", "notes": ["a", "b"], "undeclared": 1, "sys": {"language": "en"}}
    events, _, server = await replay("good_run.sse", state=state, declared=("topic", "notes"))
    [written] = [e for e in events if isinstance(e, VariablesEvent)]
    assert written == VariablesEvent({"topic": "refunds", "notes": ["a", "b"]}, mode="backend")
    assert isinstance(events[-1], Finished)  # read back before the run is reported finished
    assert server.bodies[0]["input"]["state"] == {}  # nothing changed on our side: nothing sent


async def test_an_error_while_the_run_starts_ends_the_turn_with_that_message() -> None:
    events, progress, _ = await replay("start_error.sse")
    assert events[-1] == Finished("error", "target: Required")
    assert render_card(progress)["error"] == "target: Required"


async def test_a_run_cancelled_elsewhere_ends_stopped_not_waiting() -> None:
    events, progress, _ = await replay("cancelled.sse")
    assert not [e for e in events if isinstance(e, Interrupt)]  # nothing to confirm
    assert events[-1] == Finished("cancelled")
    assert render_card(progress)["status"] == "cancelled"


async def test_text_of_a_new_stream_starts_on_a_new_line_and_interleaved_text_finds_its_own() -> (
    None
):
    """As XpertAI assembles a message (contracts/src/ai/message-content.utils.ts
    appendMessageContent): a new stream id starts on a new line unless either side has white
    space there; a chunk of an earlier stream (parallel sub-agents) goes into its segment."""
    events, progress, _ = await replay("parallel_streams.sse")
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert deltas == [
        TextDelta("Sales are up"),
        TextDelta("\nCosts are flat"),
        TextDelta("Sales are up 10%.\nCosts are flat", replace=True),
        TextDelta(" Overall fine.\n"),
        TextDelta("Done."),
    ]
    assert progress.answer == "Sales are up 10%.\nCosts are flat Overall fine.\nDone."
    assert (progress.input_tokens, progress.output_tokens) == (450, 50)  # the root's total
    assert events[-1] == Finished("success")


def test_every_fixture_frame_is_one_json_payload_with_a_stream_id() -> None:
    for text in (path.read_text() for path in FIXTURES.glob("*.sse")):
        blocks = [b for b in text.split("\n\n") if b.strip()]
        for block in blocks:
            lines = block.strip().splitlines()
            if lines == [": keep-alive"] or lines[0] == "event: error":
                continue
            ids = [line for line in lines if line.startswith("id: ")]
            data = [line for line in lines if line.startswith("data: ")]
            assert len(ids) == 1 and len(data) == 1, block
            payload = json.loads(data[0][6:])
            assert payload["type"] in ("message", "event", "complete")
            # JSON.stringify: no spaces between tokens
            assert data[0][6:] == json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
