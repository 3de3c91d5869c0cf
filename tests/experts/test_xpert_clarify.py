"""Reading an ``ask_clarification`` back (gateway/experts/xpert_clarify.py): the middleware's
readable text (``formatMessage``, mirrored by the fake), its metadata in the thread's state,
the call's arguments in a stream component; and the option buttons a Progress makes of it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from gateway.events import Clarification, TextDelta
from gateway.experts.sse import SseEvent
from gateway.experts.xpert_clarify import from_args, from_output, from_state
from gateway.experts.xpert_stream import XpertStream
from gateway.progress import Progress, option_of
from tests.fakes.xpertai import FakeXpertAI
from tests.fakes.xpertai_agent import format_clarification, lc_message
from tests.support.helpers import serve
from tests.support.xpert import config

ASKED = Clarification("Which region?", ("China", "Europe"), "Sales are per region.", True)


def test_the_readable_text_is_read_back_in_english_and_chinese() -> None:
    text = format_clarification("Which region?", "Sales are per region.", ["China", "Europe"], True)
    assert from_output(text) == ASKED
    bare = format_clarification("Go on?", "", [], False)
    assert from_output(bare) == Clarification("Go on?", (), "", False)
    zh = "需要先确认以下信息：\n\n报告覆盖哪个地区？\n\n可选项：\n1. 华南\n2. 华北"
    zh += "\n\n也可以直接回复你的具体想法。"
    assert from_output(zh) == Clarification("报告覆盖哪个地区？", ("华南", "华北"), "", True)
    assert from_output("Some other tool's output") is None
    assert from_output(None) is None


def test_arguments_are_resolved_as_the_middleware_does() -> None:
    args = {"question": " Which region? ", "options": [" China", "", 3, "Europe "]}
    assert from_args(args) == Clarification("Which region?", ("China", "Europe"), "", True)
    assert from_args(json.dumps({"input": json.dumps(args)})) == from_args(args)
    assert from_args({"question": "  "}) is None  # the middleware refuses it: asked again
    assert from_args({"question": "Sure?", "allowFreeText": False}).free_text is False  # type: ignore[union-attr]


def test_the_state_gives_the_question_of_the_run_that_just_ended() -> None:
    meta = {"clarification": {"question": "Which region?", "options": ["China", "Europe"]}}
    tool = lc_message("ToolMessage", name="ask_clarification", content="…", metadata=meta)
    human = lc_message("HumanMessage", content="the report")
    asked = from_state({"messages": [human, lc_message("AIMessage", content=""), tool]})
    assert asked == Clarification("Which region?", ("China", "Europe"), "", True)
    plain = {
        "type": "tool",
        "name": "ask_clarification",
        "content": format_clarification(
            "Which region?", "Sales are per region.", ["China", "Europe"], True
        ),
    }
    assert from_state({"messages": [plain]}) == ASKED  # no metadata: its text
    assert from_state({"messages": [tool, human]}) is None  # an older run's question
    invalid = lc_message(
        "ToolMessage",
        name="ask_clarification",
        content="Invalid",
        metadata={"clarification": {"invalid": True}},
    )
    assert from_state({"messages": [human, invalid]}) is None
    assert from_state({"messages": "x"}) is None and from_state({}) is None


def test_a_streamed_clarification_component_is_no_tool_step() -> None:
    stream = XpertStream()
    start = {"category": "Tool", "tool": "ask_clarification", "status": "running"}
    start["input"] = {"question": "Which region?", "options": ["China"]}
    frame = {"type": "message", "data": {"id": "c1", "type": "component", "data": start}}
    assert stream.feed(SseEvent("message", json.dumps(frame), None)) == []
    text = format_clarification("Which region?", "", ["China", "Europe"], True)
    end = {"type": "message", "data": {"id": "c1", "type": "component", "data": {"output": text}}}
    assert stream.feed(SseEvent("message", json.dumps(end), None)) == []
    assert stream.clarification == Clarification("Which region?", ("China", "Europe"), "", True)


def test_the_card_asks_with_one_button_per_option() -> None:
    progress = Progress(turn_id="t").apply(TextDelta("Let me ask."))
    progress = progress.apply(ASKED).finish("success")
    assert progress.title == "A question for you"
    assert progress.answer.startswith("Let me ask.\n\nSales are per region.\n\n**Which region?**")
    labels = [(b.action_id, b.label) for b in progress.buttons]
    assert labels == [("answer_1", "China"), ("answer_2", "Europe"), ("new", "New conversation")]
    assert option_of("answer_2", progress.options) == "Europe"
    assert option_of("answer_3", progress.options) is None
    assert option_of("answer_x", progress.options) is None and option_of("new", ["a"]) is None
    many = Clarification("Pick", tuple(f"option {i} " + "x" * 50 for i in range(9)))
    shown = Progress(turn_id="t").apply(many).finish("success")
    assert len(shown.buttons) == 6 and all(len(b.label) <= 40 for b in shown.buttons)


@pytest.fixture
async def xpert() -> AsyncIterator[tuple[FakeXpertAI, str]]:
    fake = FakeXpertAI(keepalive_s=0.2)
    async for url in serve(fake.app()):
        yield fake, url + "/api/ai"


def _inputs(fake: FakeXpertAI) -> list[str]:
    return [r["input"]["message"]["input"]["input"] for r in fake.requests]


async def test_in_the_console_an_option_click_answers_and_clarifications_can_be_off(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("[clarify] report")
    [card] = await console.wait_cards()
    labels = [(b["actionId"], b["label"]) for b in card["card"]["buttons"]]
    assert labels[:3] == [("answer_1", "China"), ("answer_2", "Europe"), ("answer_3", "Americas")]
    assert card["card"]["title"] == "A question for you"
    assert await console.click("dm-alice", card["id"], "answer_3") == 202
    await console.wait_cards(count=2)
    assert _inputs(fake) == ["[clarify] report", "Americas"]
    assert await console.click("dm-alice", card["id"], "answer_9") == 400  # not on the card
    # Off: the run's state is not read for it, and the card just says Done.
    quiet = await make_gateway(config(prefix, url, {"clarifications": False}))
    reads = len(fake.state_reads)
    await quiet.send("[clarify] again", chat="dm-bob", sender="bob")
    [plain] = await quiet.wait_cards(chat="dm-bob")
    assert [b["actionId"] for b in plain["card"]["buttons"]] == ["new"]
    assert len(fake.state_reads) == reads
