"""An XpertAI agent asks before it goes on (the clarification middleware's
``ask_clarification``, tests/fakes/xpertai_agent.py ``clarify``): the Lark card shows the
question and its options as buttons; a click is the next message of the session, and a typed
answer works as well."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.fakes.lark import FakeLark
from tests.fakes.xpertai import API_KEY, FakeXpertAI
from tests.fakes.xpertai_agent import RESTATED
from tests.support.helpers import InProcessGateway
from tests.support.lark import (
    LarkHarness,
    answer,
    card_click,
    final_card,
    lark_config,
    message_event,
    reply_to,
)
from tests.support.waits import eventually

ASKING = "A question for you"


@pytest.fixture
async def lark(
    fake: FakeLark, prefix: str, xpert: tuple[FakeXpertAI, str], redis_client: Any
) -> AsyncIterator[LarkHarness]:
    config = lark_config(prefix, fake, xpertId="sales")
    config["experts"] = [{"id": "sales", "kind": "xpert", "baseUrl": xpert[1], "apiKey": API_KEY}]
    gw = InProcessGateway(config)
    await gw.start()
    harness = LarkHarness(fake, gw)
    yield harness
    await harness.close()


def buttons(card: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """action -> (label, value) of the card's buttons."""
    return {
        e["behaviors"][0]["value"]["action"]: (
            e["text"]["content"],
            e["behaviors"][0]["value"],
        )
        for e in card["body"]["elements"]
        if e["tag"] == "button"
    }


def inputs(server: FakeXpertAI) -> list[str]:
    return [r["input"]["message"]["input"]["input"] for r in server.requests]


async def test_the_question_shows_with_option_buttons_and_a_click_answers_it(
    lark: LarkHarness, fake: FakeLark, xpert: tuple[FakeXpertAI, str]
) -> None:
    server, _ = xpert
    await lark.post(message_event("[clarify] the sales report", message_id="om_q1"))
    card = await eventually(final_card(fake, "om_q1", ASKING), timeout=15)
    shown = answer(card)
    # XpertAI runs the model again after the question: its text, once; the options as buttons
    assert shown.count(RESTATED) == 1 and "Which region should the report cover?" not in shown
    assert "China" not in shown
    found = buttons(card)
    assert [found[a][0] for a in ("answer_1", "answer_2", "answer_3")] == [
        "China",
        "Europe",
        "Americas",
    ]
    assert set(found) == {"answer_1", "answer_2", "answer_3", "new"}
    assert "ask_clarification" not in str(card)  # not a tool step of its own
    card_id = reply_to(fake, "om_q1")[0]
    status, body = await lark.post(card_click(found["answer_2"][1], message_id=card_id))
    assert status == 200 and body["toast"]["content"] == "Answer sent"
    clicked = body["card"]["data"]
    assert buttons(clicked) == {} and "Answer sent" in str(clicked["body"]["elements"][-1])
    await eventually(lambda: len(server.requests) == 2, timeout=15)
    assert inputs(server) == ["[clarify] the sales report", "Europe"]
    [thread] = {r["thread"] for r in server.requests}  # the same session's thread
    assert thread
    done = await eventually(final_card(fake, card_id), timeout=15)  # a reply to the question
    assert "Hello from xpert [Europe]" in answer(done)
    # The question's card is no longer the current one: its buttons change nothing now.
    status, _ = await lark.post(card_click(found["answer_1"][1], message_id=card_id))
    assert status == 200
    await eventually(lambda: "no longer open" in str(fake.of("reply")[-1].body))
    assert inputs(server) == ["[clarify] the sales report", "Europe"]


async def test_a_typed_answer_to_the_question_works_too(
    lark: LarkHarness, fake: FakeLark, xpert: tuple[FakeXpertAI, str]
) -> None:
    server, _ = xpert
    await lark.post(message_event("[clarify] report", message_id="om_q2"))
    await eventually(final_card(fake, "om_q2", ASKING), timeout=15)
    await lark.post(message_event("Asia, please", message_id="om_q3"))
    done = await eventually(final_card(fake, "om_q3"), timeout=15)
    assert "Hello from xpert [Asia, please]" in answer(done)
    assert inputs(server) == ["[clarify] report", "Asia, please"]
    assert set(buttons(done)) == {"new"}  # an answer that asks nothing: no options
