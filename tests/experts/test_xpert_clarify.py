"""Reading an ``ask_clarification`` back (gateway/experts/xpert_clarify.py): the middleware's
readable text (``formatMessage``, mirrored by the fake), its metadata in the thread's state,
the call's arguments in a stream component; and the option buttons a Progress makes of it."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import aiohttp

from gateway.events import Clarification, TextDelta
from gateway.experts.sse import SseEvent
from gateway.experts.xpert_clarify import from_args, from_output, from_state, message_fields
from gateway.experts.xpert_input import OFFLOOP_PARSE_BYTES, read_state
from gateway.experts.xpert_stream import XpertStream
from gateway.progress import Progress, option_of
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_agent import RESTATED, Thread, format_clarification, lc_message
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


# ``GET /threads/{t}/state``'s messages as the server sends them: ``instanceToPlain``
# (class-transformer 0.5.1) of @langchain/core 0.3.72 messages, printed by node with those
# packages (tests/fakes/xpertai_agent.py ``lc_message`` builds the same).
LC = {"lc_serializable": True, "lc_namespace": ["langchain_core", "messages"]}
EMPTY = {"additional_kwargs": {}, "response_metadata": {}}
META = {"clarification": {"question": "Which region?", "options": ["China", "Europe"]}}
CALL = {"name": "ask_clarification", "args": {"question": "Which region?"}, "id": "call_ask"}
REAL_STATE = {
    "messages": [
        {**LC, "lc_kwargs": {"content": "the report", "id": "h1", **EMPTY}, "content": "the report"}
        | EMPTY
        | {"id": "h1"},
        {**LC, "lc_kwargs": {"content": "", "tool_calls": [CALL], "invalid_tool_calls": []}}
        | {"content": "", "tool_calls": [CALL], "invalid_tool_calls": [], **EMPTY},
        {
            **LC,
            "lc_kwargs": {"name": "ask_clarification", "tool_call_id": "call_ask", "content": "…"}
            | {"status": "success", "metadata": META, **EMPTY},
            "content": "…",
            "name": "ask_clarification",
            **EMPTY,
            "lc_direct_tool_output": True,
            "status": "success",
            "tool_call_id": "call_ask",
            "metadata": META,
        },
        {**LC, "lc_kwargs": {"content": "Which region, then?", "tool_calls": [], **EMPTY}}
        | {"content": "Which region, then?", "tool_calls": [], "invalid_tool_calls": [], **EMPTY},
    ]
}


def test_the_state_as_the_server_sends_it_gives_the_question() -> None:
    asked = Clarification("Which region?", ("China", "Europe"), "", True)
    # the model's text after it: restated
    assert from_state(REAL_STATE) == replace(asked, restated=True)
    assert from_state({"messages": REAL_STATE["messages"][:3]}) == asked  # ended at it
    asked = replace(asked, restated=True)
    assert from_state(json.loads(json.dumps(REAL_STATE))) == asked
    # its kind from its fields: no type, no role
    kinds = [message_fields(m)[0] for m in REAL_STATE["messages"]]
    assert kinds == ["human", "ai", "tool", "ai"]
    # the top-level fields first, lc_kwargs when they are missing
    tool = REAL_STATE["messages"][2]
    bare = {"lc_kwargs": tool["lc_kwargs"]}
    assert message_fields(bare) == ("tool", "ask_clarification", "…", META)
    # the fake answers the same shape
    fake = lc_message(
        "ToolMessage",
        name="ask_clarification",
        tool_call_id="call_ask",
        content="…",
        status="success",
        metadata=META,
    )
    assert fake == tool
    # the human message after a question: an older run's question
    human = REAL_STATE["messages"][0]
    assert from_state({"messages": [*REAL_STATE["messages"], human]}) is None


def test_the_constructor_form_and_plain_dicts_are_still_read() -> None:
    meta = {"clarification": {"question": "Which region?", "options": ["China", "Europe"]}}
    tool = {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain_core", "messages", "ToolMessage"],
        "kwargs": {"name": "ask_clarification", "content": "…", "metadata": meta},
    }
    human = {"lc": 1, "type": "constructor", "id": ["x", "HumanMessage"], "kwargs": {}}
    asked = from_state({"messages": [human, tool]})
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
        tool_call_id="c",
        content="Invalid",
        metadata={"clarification": {"invalid": True}},
    )
    assert from_state({"messages": [REAL_STATE["messages"][0], invalid]}) is None
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
    text = {"type": "message", "data": {"type": "text", "text": "Which one?", "id": "s2"}}
    stream.feed(SseEvent("message", json.dumps(text), None))  # the model's step after it
    assert stream.clarification.restated


def test_the_card_asks_with_one_button_per_option() -> None:
    # The model's text after the question (XpertAI runs it once more) asks it: kept as it is,
    # the question not added again, the options as buttons only.
    progress = Progress(turn_id="t").apply(TextDelta("Which region should I cover?"))
    progress = progress.apply(replace(ASKED, restated=True)).finish("success")
    assert progress.title == "A question for you"
    assert progress.answer == "Which region should I cover?"
    labels = [(b.action_id, b.label) for b in progress.buttons]
    assert labels == [("answer_1", "China"), ("answer_2", "Europe"), ("new", "New conversation")]
    assert option_of("answer_2", progress.options) == "Europe"
    assert option_of("answer_3", progress.options) is None
    assert option_of("answer_x", progress.options) is None and option_of("new", ["a"]) is None
    # A run that ended at the question (the tool in the agent's endNodes): the question itself,
    # its options once (the buttons).
    ended = Progress(turn_id="t").apply(ASKED).finish("success")
    assert ended.answer == (
        "Sales are per region.\n\n**Which region?**\n\n_You can also reply in your own words._"
    )
    # Text before the question only (the model wrote it, then called the tool): the question
    # goes under it.
    before = Progress(turn_id="t").apply(TextDelta("Let me ask.")).apply(ASKED)
    assert before.answer.startswith("Let me ask.\n\nSales are per region.\n\n**Which region?**")
    many = Clarification("Pick", tuple(f"option {i} " + "x" * 50 for i in range(9)))
    shown = Progress(turn_id="t").apply(many).finish("success")
    assert len(shown.buttons) == 6 and all(len(b.label) <= 40 for b in shown.buttons)
    assert "6. option 5" in shown.answer and "5. option 4" not in shown.answer  # no button


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
    # the model's second step restates it: its text once, the question not added again
    assert card["card"]["answer"] == RESTATED
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


async def test_an_xpert_that_ends_at_the_question_shows_the_question_itself(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    fake.end_nodes = {"ask_clarification"}  # the agent's endNodes: no second model step
    console = await make_gateway(config(prefix, url))
    await console.send("[clarify] report")
    [card] = await console.wait_cards()
    shown = card["card"]["answer"]
    assert shown.count("**Which region should the report cover?**") == 1
    assert "Sales are kept per region." in shown and RESTATED not in shown
    assert "China" not in shown  # the options are the buttons
    labels = [b["label"] for b in card["card"]["buttons"]]
    assert labels == ["China", "Europe", "Americas", "New conversation"]


async def test_a_large_state_is_read_and_searched(xpert: tuple[FakeXpertAI, str]) -> None:
    fake, url = xpert
    thread = Thread(id="t-long", assistant="sales", checkpointed=True)
    old = [lc_message("AIMessage", content="y" * 2000) for _ in range(200)]  # ~0.5 MB
    thread.values = {"messages": [*old, *REAL_STATE["messages"]]}
    fake.threads[thread.id] = thread
    async with aiohttp.ClientSession(headers={"x-api-key": API_KEY}) as http:
        state_url = f"{url}/threads/{thread.id}/state"
        async with http.get(state_url) as resp:
            assert len(await resp.read()) > OFFLOOP_PARSE_BYTES  # parsed on a thread
        values = await read_state(http, state_url, {})
    asked = Clarification("Which region?", ("China", "Europe"), "", True, restated=True)
    assert from_state(values) == asked
