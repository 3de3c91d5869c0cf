"""Lark end to end: a 60 KB answer arrives whole, the card as part (1/n) and the rest as text
messages (2/n)..(n/n), nothing refused by the fake, and a retried final sends nothing twice."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator

import pytest

from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import LarkHarness, answer, lark_config, message_event, reply_to
from tests.support.waits import eventually

FAST_ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 10_000}
MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


def long_text() -> str:
    lines = [f"line {i}: " + "长答案" * (i % 9) + " | a | b |" * (i % 3) for i in range(2_600)]
    return "\n".join(lines)


def whole(parts: list[str]) -> str:
    n = len(parts)
    for i, part in enumerate(parts, start=1):
        found = MARK.search(part)
        assert found and (int(found[1]), int(found[2])) == (i, n), part[-40:]
    return "".join(MARK.sub("", p) for p in parts)


@pytest.fixture(params=["patch", "cardkit"])
async def lark(
    fake: FakeLark, prefix: str, request: pytest.FixtureRequest
) -> AsyncIterator[LarkHarness]:
    config = lark_config(prefix, fake, cardMode=request.param)
    config["experts"] = [FAST_ECHO]
    gw = InProcessGateway(config)
    await gw.start()
    harness = LarkHarness(fake, gw)
    yield harness
    await harness.close()


async def test_a_60_kb_answer_arrives_whole_in_numbered_parts(
    lark: LarkHarness, fake: FakeLark
) -> None:
    text = long_text()
    assert len(text.encode()) > 60_000
    await lark.post(message_event(text, message_id="om_long"))

    def parts() -> list[str] | None:
        replies = reply_to(fake, "om_long")
        card = fake.card_of(replies[0]) if replies else None
        if not card or card["header"]["title"]["content"] != "Done":
            return None
        texts = [
            json.loads(fake.messages[m]["content"])["text"]
            for m in reply_to(fake, "om_long")
            if fake.messages[m]["msg_type"] == "text"
        ]
        got = [answer(card), *texts]
        return got if MARK.search(got[-1]) and len(got) == int(MARK.search(got[-1])[2]) else None

    got = await eventually(parts, timeout=30)
    assert len(got) >= 2
    expected = "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
    assert whole(got) == expected
    assert [r for r in fake.refusals if "/contact/" not in r[0]] == []
    await lark.idle()
    assert len(reply_to(fake, "om_long")) == len(got), "each part sent once"
