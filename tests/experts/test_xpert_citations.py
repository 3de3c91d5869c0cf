"""What XpertAI writes that a chat cannot show as it is: knowledge-base citation links, i18n tool
titles, a tool's model-facing description in a confirmation. End to end through the fake XpertAI
(tests/fakes/xpertai_agent.py ``retrieve``, ``interrupt``, ``[i18n]``): console and Lark cards."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from gateway.citations import Sources, render
from gateway.events import TextDelta
from gateway.experts.sse import SseEvent
from gateway.experts.xpert_stream import XpertStream, interrupt_prompt
from gateway.progress import Progress
from tests.fakes.lark import FakeLark
from tests.fakes.xpertai import FakeXpertAI
from tests.support.helpers import InProcessGateway
from tests.support.lark import LarkHarness, answer, final_card, lark_integration, message_event
from tests.support.waits import eventually
from tests.support.xpert import CITED, config


async def test_citations_become_footnotes_with_the_sources_the_run_named(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("how long do refunds take? [kb]")
    [card] = await console.wait_cards()
    assert card["card"]["answer"] == CITED
    assert card["card"]["tools"] == [
        {"title": "Knowledge Retrieval", "status": "done", "detail": ""}
    ]
    # the fake did send the raw links, cut into pieces
    [run] = fake.runs.values()
    assert "xpert://knowledgebase" in json.dumps(run.stream.log, ensure_ascii=False)


def test_no_citation_link_shows_while_the_answer_streams() -> None:
    """Every state the card goes through, one character of the answer at a time, and one run
    whose tool output (the names) comes after the text citing it."""
    url = "xpert://knowledgebase/chunk?knowledgebaseId=kb-1&documentId=doc-a&chunkId=c-1"
    text = f"Refunds take 14 days [⟦1⟧]({url}). Done [⟦1⟧]({url})"
    stream = XpertStream()
    progress = Progress(turn_id="t")
    states = []
    for i, char in enumerate(text):
        frame = {"type": "message", "data": {"type": "text", "text": char, "id": "s1"}}
        for event in stream.feed(SseEvent("", json.dumps(frame), str(i))):
            progress = progress.apply(event)
            states.append(progress.answer)
    assert not [s for s in states if "xpert:" in s or "⟦" in s or "](" in s]
    tool = {"id": "call_kb", "type": "component", "data": {"category": "Tool", "title": "KB"}}
    output = {
        "citations": [
            {"documentId": "doc-a", "knowledgebaseId": "kb-1", "documentName": "Refunds.pdf"}
        ]
    }
    done = {
        "id": "call_kb",
        "type": "component",
        "data": {"status": "success", "output": json.dumps(output)},
    }
    end = {"type": "event", "event": "on_conversation_end", "data": {"status": "idle"}}
    for frame in ({"type": "message", "data": tool}, {"type": "message", "data": done}, end):
        for event in stream.feed(SseEvent("", json.dumps(frame), None)):
            progress = progress.apply(event)
    assert (
        progress.answer == "Refunds take 14 days [1]. Done [1]\n\n**Sources**\n\n- [1] Refunds.pdf"
    )
    assert progress.status == "done"


async def test_an_i18n_tool_title_shows_in_the_integrations_language(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    _, url = xpert
    console = await make_gateway(config(prefix, url, language="zh-CN"))
    await console.send("查一下 [i18n]")
    [card] = await console.wait_cards()
    assert card["card"]["tools"] == [{"title": "搜索维基", "status": "done", "detail": ""}]
    english = await make_gateway(config(prefix + "en", url))
    await english.send("look it up [i18n]")
    [card] = await english.wait_cards()
    assert card["card"]["tools"] == [{"title": "Search the wiki", "status": "done", "detail": ""}]


async def test_a_confirmation_names_the_tool_and_its_arguments_not_its_model_description(
    xpert: tuple[FakeXpertAI, str], make_gateway: Callable[..., Any], prefix: str
) -> None:
    fake, url = xpert
    console = await make_gateway(config(prefix, url))
    await console.send("mail the report [interrupt]")
    [card] = await console.wait_cards(status="waiting")
    assert card["card"]["title"] == "Run send_email? (to: team)"
    [thread] = fake.threads.values()
    assert "messageId" not in (thread.operation or {"messageId": 1})  # as the server sends it


async def test_a_lark_card_shows_footnotes_and_sources(
    xpert: tuple[FakeXpertAI, str], prefix: str
) -> None:
    _, url = xpert
    lark = FakeLark()
    await lark.start()
    cfg = config(prefix, url)
    cfg["integrations"] = [lark_integration(lark, xpertId="sales")]
    gw = InProcessGateway(cfg)
    await gw.start()
    harness = LarkHarness(lark, gw)
    try:
        await harness.post(message_event("how long do refunds take? [kb]", message_id="om_kb"))
        card = await eventually(final_card(lark, "om_kb"))
        assert answer(card) == CITED
        # nothing the app wrote to Lark on the way (card creates, streamed updates) held a link
        written = [c.body for c in lark.calls]
        assert written and "xpert://" not in json.dumps(written, ensure_ascii=False)
    finally:
        await harness.close()
        await lark.stop()


def test_other_xpert_links_keep_their_words_and_answers_without_links_are_untouched() -> None:
    sources = Sources()
    assert render("see [the chart](xpert://dashboard/1) [x](https://a.b)", sources) == (
        "see the chart [x](https://a.b)"
    )
    plain = "a [note] and [a link](https://example.com) ["
    assert render(plain, sources) == plain
    assert render(plain, sources, partial=True) == plain[:-1]  # "[" may still become a link


def test_a_confirmation_line_per_task_in_the_language_with_its_arguments_cut() -> None:
    """A sub-agent task's ``info`` has its title (complete-tool-calls.handler.ts l.115-126), an
    agent's own interrupt its ``value`` (l.149: the task as it came); long arguments are cut."""
    agent = {
        "name": "writer",
        "type": "agent",
        "info": {"name": "writer", "title": {"en_US": "Writer", "zh_Hans": "写手"}},
        "call": {"id": "c1", "name": "writer", "args": {"input": "x" * 400}},
    }
    own = {
        "name": "approve",
        "interrupts": [{"value": {"title": "Budget", "message": "Spend 5k?"}}],
    }
    prompt = interrupt_prompt({"tasks": [agent, own]}, "zh-CN")
    first, second = prompt.split("\n")
    assert first.startswith("Run 写手? (input: xxx") and first.endswith("…)")
    assert len(first) < 200
    assert second == "Budget: Spend 5k?"
    assert interrupt_prompt({"tasks": []}) == "Please confirm to continue."


def test_a_long_plain_answer_goes_on_as_written_and_a_late_citation_still_renders() -> None:
    """A plain answer's chunks go on as they are (issue 38: not the whole answer rendered
    again per chunk); a citation 3,000 characters in is still a footnote, never a raw link,
    and what the card shows is always the answer rendered whole."""
    url = "xpert://knowledgebase/chunk?knowledgebaseId=kb-1&documentId=doc-a&chunkId=c-1"
    plain = "plain words. " * 240
    text = plain + f"a claim [⟦1⟧]({url}) " + "more words [x] here. " * 40
    stream = XpertStream()
    progress = Progress(turn_id="t")
    as_sent = 0  # chunks of the plain part that went on exactly as they came
    for i in range(0, len(text), 4):
        chunk = text[i : i + 4]
        frame = {"type": "message", "data": {"type": "text", "text": chunk, "id": "s"}}
        events = stream.feed(SseEvent("", json.dumps(frame), str(i)))
        if i + 4 <= len(plain):
            assert [(e.text, e.replace) for e in events if isinstance(e, TextDelta)] == [
                (chunk, False)
            ]
            as_sent += 1
        for event in events:
            progress = progress.apply(event)
        assert progress.answer == stream.shown
        assert "xpert:" not in progress.answer and "⟦" not in progress.answer
    assert as_sent == len(plain) // 4
    assert progress.answer.startswith(plain + "a claim [1] more words [x]")
