"""DingTalk robot messages: a 60 KB answer arrives whole, in HTTP mode (sessionWebhook, and the
group OpenAPI) and in stream mode, as markdown parts marked (1/n)..(n/n), each at most
MAX_CHARS characters (DingTalk's markdown stops rendering past ~3,500: limits.md, secondary)
and 15000 msgParam bytes, the buttons on the last part; the fake refuses nothing (a msgParam
over 15000 bytes, a webhook body over 20,000)."""

from __future__ import annotations

import re
from typing import Any

import pytest

from adapters.dingtalk.cards import MAX_CHARS
from tests.fakes.dingtalk import FakeDingTalk
from tests.support.dingtalk import robot_message, running
from tests.support.waits import eventually

ROBOT = "/v1.0/im/bot/messages/get"
FAST_ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 0, "charDelayMs": 0, "chunkChars": 10_000}
MARK = re.compile(r"\n\n\((\d+)/(\d+)\)$")


def long_text() -> str:
    return "\n".join(f"line {i}: " + "长答案" * (i % 9) for i in range(2_600))


def final_parts(fake: FakeDingTalk) -> list[dict[str, Any]] | None:
    """The answer's messages once the last part (n/n) arrived (the first message is the
    "working on it" one)."""
    got = fake.sent()[1:]
    last = MARK.search(got[-1]["text"]) if got else None
    return got if last and len(got) == int(last[2]) else None


@pytest.mark.parametrize("mode", ["webhook", "openapi", "stream"])
async def test_a_60_kb_answer_arrives_whole_in_numbered_parts(
    prefix: str, redis_client: Any, mode: str
) -> None:
    options = {"connectionMode": "stream"} if mode == "stream" else {}
    async with running(prefix, experts=[FAST_ECHO], **options) as (fake, h):
        text = long_text()
        assert len(text.encode()) > 60_000
        message = robot_message(fake, text, group=mode == "openapi", webhook=mode != "openapi")
        if mode == "stream":
            await eventually(lambda: fake.stream.connects == 1)
            await fake.push("CALLBACK", ROBOT, message)
        else:
            status, _ = await h.post(message)
            assert status == 200
        parts = await eventually(lambda: final_parts(fake), timeout=60)
        n = len(parts)
        assert n >= 8
        for i, part in enumerate(parts, start=1):
            found = MARK.search(part["text"])
            assert found and found[0] == f"\n\n({i}/{n})"
            assert len(part["text"]) <= MAX_CHARS
            assert bool(part["buttons"]) == (i == n)  # the buttons on the last part only
            assert part["via"] == ("openapi" if mode == "openapi" else "webhook")
        whole = "".join(MARK.sub("", p["text"]) for p in parts)
        assert whole == "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
        refused = [c for c in fake.calls if c.status >= 300 or not c.delivered]
        assert refused == []


@pytest.mark.parametrize("card", ["public", "template"])
async def test_a_60_kb_answer_on_an_ai_card_continues_in_numbered_messages(
    prefix: str, redis_client: Any, card: str
) -> None:
    """The card holds the first part, marked (1/n) (no AI card size limit was found, so it
    holds what one message does); (2/n)..(n/n) follow as markdown messages, in order."""
    options: dict[str, Any] = (
        {"cards": None} if card == "public" else {"cardTemplateId": "tpl.schema"}
    )
    key = "msgContent" if card == "public" else "content"
    async with running(prefix, experts=[FAST_ECHO], **options) as (fake, h):
        text = long_text()
        status, _ = await h.post(robot_message(fake, text))
        assert status == 200

        def done() -> list[dict[str, Any]] | None:
            got = fake.sent()
            last = MARK.search(got[-1]["text"]) if got else None
            return got if last and len(got) == int(last[2]) - 1 else None

        rest = await eventually(done, timeout=60)
        await h.idle()
        [track] = fake.cards
        # The public card's final state is one PUT of the whole msgContent (no last stream).
        where = fake.cards[track].params if card == "public" else fake.cards[track].stream
        shown = where[key]
        n = len(rest) + 1
        assert n >= 8 and shown.endswith(f"\n\n(1/{n})") and len(shown) <= MAX_CHARS
        for i, part in enumerate(rest, start=2):
            found = MARK.search(part["text"])
            assert found and found[0] == f"\n\n({i}/{n})" and len(part["text"]) <= MAX_CHARS
        whole = "".join(MARK.sub("", p) for p in [shown, *(m["text"] for m in rest)])
        assert whole == "You said:\n" + "\n".join(f"> {line}" for line in text.splitlines())
        refused = [c for c in fake.calls if c.status >= 300 or not c.delivered]
        assert refused == []
