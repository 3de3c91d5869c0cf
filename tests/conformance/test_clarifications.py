"""An XpertAI agent asks before it goes on (the clarification middleware's ``ask_clarification``,
tests/fakes/xpertai_agent.py ``clarify``), on every platform in every mode. The answer shows the
model's text after the question once (XpertAI runs it again), never the question's raw tool
call. Where the platform declares buttons the options are buttons (or signed action links): a
click is the clicker's next message in the same session, and a click on a question no longer
open changes nothing and says so; where it does not, a typed option answers. (In a DingTalk
group the options are typed, not links: tests/dingtalk/test_clarification.py.)"""

from __future__ import annotations

import pytest

from gateway.edge.capabilities import Capability
from gateway.progress import ASKING_TITLE
from tests.fakes.xpertai import FakeXpertAI
from tests.fakes.xpertai_agent import RESTATED
from tests.support.conformance import Harness
from tests.support.waits import eventually
from tests.support.xpert import xpert_expert

OPTIONS = ["China", "Europe", "Americas"]
QUESTION = "Which region should the report cover?"


def inputs(server: FakeXpertAI) -> list[str]:
    return [r["input"]["message"]["input"]["input"] for r in server.requests]


async def test_a_question_is_answered_by_its_options(
    platform_mode: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    platform, (server, url) = platform_mode, xpert
    await platform.start(experts=[xpert_expert(url)], xpertId="sales")
    asked = await platform.send("[clarify] the sales report")
    question = await platform.answer(asked)
    assert question.text.count(RESTATED) == 1 and QUESTION not in question.text
    assert question.title in ("", ASKING_TITLE)  # where the platform shows a title
    assert "ask_clarification" not in platform.written()  # not a tool step of its own

    if platform.can(Capability.BUTTONS):
        assert question.buttons[:3] == OPTIONS
        then, told = await platform.click(asked, "Americas")
        assert "Answer sent" in told or told.startswith("<")  # a toast, a greyed label, a page
    else:  # typed (how they are listed is the platform's: tests/wecom/test_clarification.py)
        assert not set(OPTIONS) & set(question.buttons)
        then = await platform.send("Americas")
    await eventually(lambda: len(server.requests) == 2, timeout=15)
    assert inputs(server) == ["[clarify] the sales report", "Americas"]
    assert len({r["thread"] for r in server.requests}) == 1  # the same session's thread
    answered = await platform.answer(then)
    assert "Hello from xpert [Americas]" in answered.text
    assert not set(OPTIONS) & set(answered.buttons)  # an answer that asks nothing: no options

    if platform.can(Capability.BUTTONS):
        # The question is no longer the current one: its options change nothing now.
        await platform.click(asked, "China")
        await eventually(lambda: any("no longer open" in t for t in platform.shown()))
        await platform.idle()
        assert inputs(server) == ["[clarify] the sales report", "Americas"]


async def test_a_typed_answer_works_where_buttons_are_offered_too(
    platform: Harness, xpert: tuple[FakeXpertAI, str]
) -> None:
    server, url = xpert
    await platform.start(experts=[xpert_expert(url)], xpertId="sales")
    if not platform.can(Capability.BUTTONS):
        pytest.skip("options are typed here anyway: test_a_question_is_answered_by_its_options")
    await platform.answer(await platform.send("[clarify] report"))
    answered = await platform.answer(await platform.send("Asia, please"))
    assert "Hello from xpert [Asia, please]" in answered.text
    assert inputs(server) == ["[clarify] report", "Asia, please"]
