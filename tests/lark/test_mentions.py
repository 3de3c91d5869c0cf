"""Issue 25: text the gateway did not write cannot mention anyone on Lark.

Lark turns ``<at …>`` tags into real mentions in text messages and card markdown (DOC-AT in
tests/fakes/lark.py); ``<at user_id="all"></at>`` pings the whole group. The echo expert answers
with the user's own words, as an agent may quote a user or read group memory back: whatever it
writes reaches the chat with no mention tag the fake Lark server would act on."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.fakes.lark import FakeLark
from tests.support.lark import (
    LarkHarness,
    answer,
    bot_mention,
    final_card,
    message_event,
    reply_to,
)
from tests.support.waits import eventually

TAGS = [
    '<at user_id="all"></at>',
    "<at id=all></at>",
    '<AT  User_Id = "ou_boss" >Boss</At >',
    "< at email=ceo@example.com></ at>",
    "<at\nids=ou_a,ou_b></at>",
    "&lt;at id=all&gt;&lt;/at&gt;",
    "&#60;at id=all&#62;",
]
HOSTILE = "ping " + " and ".join(TAGS) + " now"


def group_ask(message_id: str) -> dict[str, Any]:
    return message_event(
        f"@_user_1 {HOSTILE}",
        chat_id="oc_g1",
        chat_type="group",
        message_id=message_id,
        mentions=[bot_mention()],
    )


async def test_an_echoed_at_all_reaches_the_card_inert(lark: LarkHarness, fake: FakeLark) -> None:
    assert (await lark.post(group_ask("om_at1")))[0] == 200
    card = await eventually(final_card(fake, "om_at1"))
    shown = answer(card)
    assert fake.mentions() == [], "a mention tag reached the chat"
    # The words are all still there for the reader: only the tags' "<" changed.
    assert shown.startswith("You said:\n> ping ") and shown.count("\uff1c") == 13
    assert "all" in shown and "ceo@example.com" in shown


async def test_an_echoed_at_all_in_a_text_reply_is_inert(lark: LarkHarness, fake: FakeLark) -> None:
    fake.fail("reply", status=400, code=230099, times=1)  # the card is refused: text instead
    await lark.post(group_ask("om_at2"))

    def texts() -> list[str]:
        return [
            json.loads(fake.messages[m]["content"])["text"]
            for m in reply_to(fake, "om_at2")
            if fake.messages[m]["msg_type"] == "text"
        ]

    [text] = await eventually(lambda: [t for t in texts() if t.startswith("You said")])
    assert "ping" in text and "ceo@example.com" in text
    assert fake.mentions() == []


@pytest.mark.parametrize("mode", ["patch", "cardkit"])
async def test_no_streamed_state_carries_a_mention(
    make_lark: Callable[..., Any], fake: FakeLark, mode: str
) -> None:
    """Every write counts, not just the last: a tag streamed for a moment pings as well."""
    lark = await make_lark(slow=True, cardMode=mode)
    await lark.post(group_ask("om_at3"))
    await eventually(final_card(fake, "om_at3"), timeout=30)
    if mode == "cardkit":
        assert fake.of("card_content"), "the answer streamed into its element"
    assert len(fake.of("patch") + fake.of("card_content")) > 2
    assert fake.mentions() == []
