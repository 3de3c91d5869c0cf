"""The ``langgraph`` and ``a2a`` expert kinds on Lark end to end, against the real servers
(tests/support/agent_servers.py): a human-in-the-loop review confirmed by a card click, a
question answered by the chat's next message, and an A2A file artifact sent back as a Lark
file message after the final card."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from tests.fakes.lark import FakeLark
from tests.support.agent_servers import AgentServer
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


@pytest.fixture
async def lark_with(
    fake: FakeLark, prefix: str, redis_client: Any
) -> AsyncIterator[Callable[..., Any]]:
    started: list[LarkHarness] = []

    async def start(expert: dict[str, Any]) -> LarkHarness:
        config = lark_config(prefix, fake, xpertId=expert["id"])
        config["experts"] = [expert]
        gw = InProcessGateway(config)
        await gw.start()
        started.append(LarkHarness(fake, gw))
        return started[-1]

    yield start
    for harness in started:
        await harness.close()


def buttons(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        e["behaviors"][0]["value"]["action"]: e["behaviors"][0]["value"]
        for e in card["body"]["elements"]
        if e["tag"] == "button"
    }


async def test_a_langgraph_review_is_confirmed_on_the_card_and_a_question_answered_in_chat(
    fake: FakeLark, langgraph_server: AgentServer, lark_with: Callable[..., Any]
) -> None:
    lark = await lark_with(
        {
            "id": "research",
            "kind": "langgraph",
            "baseUrl": langgraph_server.url,
            "assistantId": "agent",
        }
    )
    await lark.post(message_event("please [refund]", message_id="om_lg1"))
    waiting = await eventually(
        final_card(fake, "om_lg1", "Run refund? (order: A-7, amount: 10)"), timeout=15
    )
    card_id = reply_to(fake, "om_lg1")[0]
    status, body = await lark.post(card_click(buttons(waiting)["confirm"], message_id=card_id))
    assert status == 200 and body["toast"]["content"] == "Confirmed"
    done = await eventually(final_card(fake, "om_lg1"), timeout=15)
    assert answer(done) == "Done: refunded 10 on A-7"
    # a question: the chat's next message resumes the run with its text
    await lark.post(message_event("where is it [ask]", message_id="om_lg2"))
    asked = await eventually(final_card(fake, "om_lg2", "A question for you"), timeout=15)
    assert "What is your order number?" in answer(asked)
    await lark.post(message_event("A-9", message_id="om_lg3"))
    resumed = await eventually(final_card(fake, "om_lg3"), timeout=15)
    assert answer(resumed) == "Done: order A-9 found"


async def test_an_a2a_file_artifact_follows_the_final_card_as_a_file_message(
    fake: FakeLark, a2a_agent: AgentServer, lark_with: Callable[..., Any]
) -> None:
    lark = await lark_with({"id": "helpdesk", "kind": "a2a", "url": a2a_agent.url})
    await lark.post(message_event("the report please [file]", message_id="om_a1"))

    def done_card() -> Any:
        cards = [
            m for m in reply_to(fake, "om_a1") if fake.messages[m]["msg_type"] == "interactive"
        ]
        card = fake.card_of(cards[0]) if cards else None
        return card if card and card["header"]["title"]["content"] == "Done" else None

    card = await eventually(done_card, timeout=15)
    assert answer(card) == "Here is your report."

    def file_message() -> Any:
        found = [
            fake.messages[m]
            for m in reply_to(fake, "om_a1")
            if fake.messages[m]["msg_type"] == "file"
        ]
        return found[0] if found else None

    message = await eventually(file_message)
    file_key = json.loads(message["content"])["file_key"]
    assert fake.files[file_key] == (b"id,total\n1,10\n", "stream", "report.csv")
