"""An XpertAI agent's ``ask_clarification`` in a DingTalk group (tests/fakes/xpertai_agent.py
``clarify``): its options are typed, not signed action links (which act as the asker). The
options as links in direct chats, on messages and on the AI card, are tested with every
platform's: tests/conformance/test_clarifications.py."""

from __future__ import annotations

from typing import Any

from tests.fakes.dingtalk import FakeDingTalk
from tests.fakes.xpertai import FakeXpertAI
from tests.fakes.xpertai_agent import RESTATED
from tests.support.dingtalk import robot_message, start_harness
from tests.support.helpers import serve
from tests.support.waits import eventually
from tests.support.xpert import xpert_expert


def inputs(server: FakeXpertAI) -> list[str]:
    return [r["input"]["message"]["input"]["input"] for r in server.requests]


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
