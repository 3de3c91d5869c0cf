"""A flood into one busy conversation (issue 25): while the chat's turn runs after a Confirm
came up, signed Lark messages of 20 KB keep coming. The conversation's buffer holds at most
``maxBufferedMessages`` / ``maxBufferedBytes``; past it every message is refused explicitly in
the intake step (the webhook still answers 200, so Lark does not resend it), the chat is told
once, a redelivery of a refused message is a duplicate (no second notice), and another chat is
answered all along. The wall-clock figures are bench/lark_flood.py's, not asserted here."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis

from gateway.intake.burst import FULL_TEXT
from sessions.keys import KeyBuilder
from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import (
    INTEGRATION,
    LarkHarness,
    final_card,
    lark_config,
    message_event,
    reply_to,
)
from tests.support.waits import eventually

CAP = 8
BIG = "x" * 20_000
# Steps long enough for the flood to arrive while a turn runs; the reply is written at once.
STEADY = {"id": "echo", "kind": "echo", "stepDelayMs": 2000, "charDelayMs": 0, "chunkChars": 10_000}


def texts_in(fake: FakeLark, chat_id: str) -> list[str]:
    """The bot's plain text messages in ``chat_id``."""
    return [
        json.loads(m["content"]).get("text", "")
        for m in fake.messages.values()
        if m["from_bot"] and m["chat_id"] == chat_id and m["msg_type"] == "text"
    ]


async def test_a_flood_into_a_busy_chat_is_capped_told_once_and_others_are_answered(
    fake: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> None:
    config = lark_config(prefix, fake, maxBufferedMessages=CAP)
    config["experts"] = [STEADY]
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    burst = KeyBuilder(prefix=prefix).burst(f"{INTEGRATION}|p2p:oc_flood")
    try:
        # A turn comes to wait on a Confirm; the next message starts a turn that runs a while.
        await lark.post(message_event("[confirm] deploy", chat_id="oc_flood", message_id="om_c"))
        await eventually(final_card(fake, "om_c", "Please confirm: shall I go ahead?"), timeout=20)
        status, _ = await lark.post(message_event("go on", chat_id="oc_flood", message_id="om_go"))
        assert status == 200
        await eventually(lambda: reply_to(fake, "om_go"), timeout=20)  # its turn runs
        flood = [
            message_event(f"{i} {BIG}", chat_id="oc_flood", message_id=f"om_f{i}")
            for i in range(3 * CAP)
        ]
        answers = await asyncio.gather(*(lark.post(p) for p in flood))
        assert [s for s, _ in answers] == [200] * len(flood)  # every one answered, none resent
        # The turn started by "go on" still runs (6 s of steps): the first CAP wait, the rest
        # were refused; what Redis holds for the chat is bounded by the cap.
        held = await redis_client.lrange(burst, 0, -1)  # type: ignore[misc]
        assert len(held) == CAP
        assert sum(len(item) for item in held) < CAP * 21_000
        told = await eventually(lambda: texts_in(fake, "oc_flood") or None)
        assert told == [FULL_TEXT]  # once, for the whole flood
        # Lark redelivers a refused message (same message id): a duplicate, nothing more said.
        status, _ = await lark.post(flood[-1])
        assert status == 200
        assert len(await redis_client.lrange(burst, 0, -1)) == CAP  # type: ignore[misc]
        # Another chat is answered meanwhile.
        await lark.post(message_event("hello", chat_id="oc_other", message_id="om_other"))
        await eventually(final_card(fake, "om_other"), timeout=30)
        assert texts_in(fake, "oc_flood") == [FULL_TEXT]
    finally:
        await lark.close()
