"""An XpertAI agent's ``ask_clarification`` on DingTalk (tests/fakes/xpertai_agent.py
``clarify``), as robot markdown messages and on the public AI card (the default): the answer
shows the model's text after the question (XpertAI runs it once more), each option a signed
action link (the card's in
``staticMsgContent``); opening one and pressing its page's button (as a person does) is the
clicker's next message in the same session."""

from __future__ import annotations

import re
from typing import Any

from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.xpertai import FakeXpertAI
from tests.fakes.xpertai_agent import RESTATED
from tests.support.dingtalk import robot_message, running, start_harness
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.xpert import xpert_expert


def inputs(server: FakeXpertAI) -> list[str]:
    return [r["input"]["message"]["input"]["input"] for r in server.requests]


async def test_an_option_link_on_a_dingtalk_message_answers_the_question(prefix: str) -> None:
    xpert = FakeXpertAI(keepalive_s=0.2)
    fake = FakeDingTalk()
    await fake.start()
    async for url in serve(xpert.app()):
        _gw, h = await start_harness(
            prefix, fake, experts=[xpert_expert(url + "/api/ai")], xpertId="sales"
        )
        try:
            status, _ = await h.post(robot_message(fake, "[clarify] the report"))
            assert status == 200

            def asked() -> dict[str, Any] | None:
                got = [m for m in fake.sent() if RESTATED in (m.get("text") or "")]
                return got[-1] if got else None

            question = await eventually(asked, timeout=15)
            assert question["text"].count(RESTATED) == 1  # the model's text, once
            assert "Which region should the report cover?" not in question["text"]
            links = dict(zip(question["buttons"], question["urls"], strict=True))
            assert list(links)[:3] == ["China", "Europe", "Americas"]
            status, page = await h.click(links["Americas"])
            assert status == 200, page
            await eventually(lambda: len(xpert.requests) == 2, timeout=15)
            assert inputs(xpert) == ["[clarify] the report", "Americas"]
            assert len({r["thread"] for r in xpert.requests}) == 1  # the same session
            await eventually(
                lambda: any("[Americas]" in (m.get("text") or "") for m in fake.sent()), timeout=15
            )
        finally:
            await h.close()
    await fake.stop()


async def test_an_option_link_on_the_public_ai_card_answers_the_question(prefix: str) -> None:
    xpert = FakeXpertAI(keepalive_s=0.2)
    async for url in serve(xpert.app()):
        experts = [xpert_expert(url + "/api/ai")]
        async with running(prefix, experts=experts, cards=None, xpertId="sales") as (fake, h):
            status, _ = await h.post(robot_message(fake, "[clarify] the report"))
            assert status == 200

            def asked() -> dict[str, str] | None:
                for card in fake.cards.values():
                    if RESTATED in card.params.get("msgContent", ""):
                        return card.params
                return None

            params = await eventually(asked, timeout=15)
            assert params["msgContent"].count(RESTATED) == 1
            assert "Which region should the report cover?" not in params["msgContent"]
            links = dict(re.findall(r"\[([^\]]+)\]\((\S+?)\)", params["staticMsgContent"]))
            assert list(links)[:3] == ["China", "Europe", "Americas"]
            assert fake.sent() == []  # on the card, no message beside it
            status, page = await h.click(links["Americas"])
            assert status == 200, page
            await eventually(lambda: len(xpert.requests) == 2, timeout=15)
            assert inputs(xpert) == ["[clarify] the report", "Americas"]
            assert len({r["thread"] for r in xpert.requests}) == 1  # the same session


async def test_in_a_group_options_are_text_to_type_not_links_that_answer_as_the_asker(
    prefix: str,
) -> None:
    """Issue 36: an option link acts as the person its token names (the asker), so in a group,
    where any member could open it, the question's options are not links: the answer lists them
    numbered, and whoever answers types one, as themself."""
    xpert = FakeXpertAI(keepalive_s=0.2)
    fake = FakeDingTalk()
    await fake.start()
    async for url in serve(xpert.app()):
        _gw, h = await start_harness(
            prefix, fake, experts=[xpert_expert(url + "/api/ai")], xpertId="sales"
        )
        try:
            asking = robot_message(fake, "[clarify] the report", group=True, sender="alice")
            status, _ = await h.post(asking)
            assert status == 200

            def asked() -> dict[str, Any] | None:
                got = [m for m in fake.sent() if RESTATED in (m.get("text") or "")]
                return got[-1] if got else None

            question = await eventually(asked, timeout=15)
            assert "1. China" in question["text"] and "3. Americas" in question["text"]
            assert not {"China", "Europe", "Americas"} & set(question.get("buttons") or [])
            assert all("answer_" not in u for u in question.get("urls") or [])
            status, _ = await h.post(robot_message(fake, "Americas", group=True, sender="bob"))
            assert status == 200
            await eventually(lambda: len(xpert.requests) == 2, timeout=15)
            assert inputs(xpert) == ["[clarify] the report", "Americas"]
        finally:
            await h.close()
    await fake.stop()
