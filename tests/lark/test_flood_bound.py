"""What a flood into one chat adds to Redis (issue 38, item 5): 300 messages of 20 KB arrive
while the chat's turn waits on a Confirm. The buffer holds them up to its cap, they become one
2 MB turn whose 2 MB answer is filed as answer.md, and Redis holds at most

  the buffer's cap (``maxBufferedBytes``, stored JSON, plus Redis's own bookkeeping of its
  ``maxBufferedMessages`` items)
  + per turn the flood ran: what an ordinary turn stores (measured on one here) plus the
    bounded input and answer of its audit record (``INPUT_BYTES`` + ``ANSWER_BYTES``) and the
    card as last rendered (its answer at most ``CARD_ANSWER_BYTES``)
  + one dedup mark per message (so a redelivery is a duplicate; it expires with
    ``runtime.dedupTtlHours``)

at every point: while the messages wait, while the 2 MB turn runs and once it is over. Sizes are
Redis's own (``MEMORY USAGE``) over the test's key prefix, compared before and after."""

from __future__ import annotations

import asyncio
import json

import redis.asyncio as aioredis

from adapters.lark.cards import CARD_ANSWER_BYTES
from gateway.turns.audit_record import ANSWER_BYTES, INPUT_BYTES
from sessions.keys import KeyBuilder
from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import (
    INTEGRATION,
    LarkHarness,
    final_card,
    lark_config,
    message_event,
)
from tests.support.waits import eventually

FLOOD = 300
BIG = "x" * 20_000
ECHO = {"id": "echo", "kind": "echo", "stepDelayMs": 100, "charDelayMs": 0, "chunkChars": 10_000}
CHAT = "oc_flood"


# One atomic look at every key under the prefix: SCAN from a client runs across many calls, and
# data moved meanwhile from a key already measured to one not yet reached (a burst's buffer
# claimed into its turn) is counted twice.
STORED = """
local out, cursor = {}, "0"
repeat
  local page = redis.call("SCAN", cursor, "MATCH", ARGV[1], "COUNT", 1000)
  cursor = page[1]
  for _, key in ipairs(page[2]) do
    local size = redis.call("MEMORY", "USAGE", key, "SAMPLES", 0)
    if size then
      out[#out + 1] = key
      out[#out + 1] = size
    end
  end
until cursor == "0"
return out
"""


async def stored(redis: aioredis.Redis, prefix: str) -> dict[str, int]:
    """Every key under the prefix and the bytes Redis holds for it, read in one script."""
    flat = await redis.eval(STORED, 0, f"{prefix}*")  # type: ignore[misc]
    return {str(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}


def cards(fake: FakeLark, chat: str) -> int:
    return sum(
        1
        for m in fake.messages.values()
        if m["from_bot"] and m["chat_id"] == chat and m["msg_type"] == "interactive"
    )


def filed(fake: FakeLark) -> bool:
    return any(
        m["from_bot"] and m["chat_id"] == CHAT and m["msg_type"] == "file"
        for m in fake.messages.values()
    )


async def test_a_flood_into_one_chat_adds_at_most_the_buffer_cap_and_the_stored_turn_bound(
    fake: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> None:
    config = lark_config(prefix, fake, maxBufferedBytes=1024 * 1024)  # the bytes cap binds
    config["experts"] = [ECHO]
    gw = InProcessGateway(config)
    await gw.start()
    harness = LarkHarness(fake, gw)
    [integration] = [i for i in gw.settings.integrations if i.id == INTEGRATION]
    cap_bytes, cap_items = integration.max_buffered_bytes, integration.max_buffered_messages
    try:
        # What one ordinary turn stores, in a chat of its own.
        empty = await stored(redis_client, prefix)
        await harness.post(message_event("hello", chat_id="oc_ref", message_id="om_ref"))
        await eventually(final_card(fake, "om_ref"), timeout=20)
        await harness.idle()
        ordinary = sum((await stored(redis_client, prefix)).values()) - sum(empty.values())
        assert ordinary > 0

        await harness.post(message_event("[confirm] deploy", chat_id=CHAT, message_id="om_c"))
        await eventually(final_card(fake, "om_c", "Please confirm: shall I go ahead?"), timeout=20)
        await harness.idle()
        before, cards_before = await stored(redis_client, prefix), cards(fake, CHAT)
        flood = [
            message_event(f"{i} {BIG}", chat_id=CHAT, message_id=f"om_f{i}") for i in range(FLOOD)
        ]
        for at in range(0, FLOOD, 25):
            answers = await asyncio.gather(*(harness.post(p) for p in flood[at : at + 25]))
            assert [s for s, _ in answers] == [200] * len(answers)
        samples = [await stored(redis_client, prefix)]  # the buffer full (or its turn begun)
        while not filed(fake):  # the 2 MB turn runs: its input and answer are where they are
            samples.append(await stored(redis_client, prefix))
            assert len(samples) < 5_000, "the flood's answer never arrived"
            await asyncio.sleep(0)
        await harness.idle()
        samples.append(await stored(redis_client, prefix))

        keys = KeyBuilder(prefix=prefix)
        conv = f"{INTEGRATION}|p2p:{CHAT}"
        mark = await redis_client.memory_usage(keys.dedup(conv, "om_f0"), samples=0)
        assert mark is not None  # a refused or taken message leaves its mark
        turns = cards(fake, CHAT) - cards_before  # the turns the flood ran, one card each
        assert 1 <= turns <= 3
        turn_bound = ordinary + INPUT_BYTES + ANSWER_BYTES + CARD_ANSWER_BYTES
        buffer_bound = cap_bytes + cap_items * mark  # stored JSON and a mark's worth per item
        bound = buffer_bound + turns * turn_bound + FLOOD * mark
        grown = [sum(s.values()) - sum(before.values()) for s in samples]
        assert max(grown) <= bound, (max(grown), bound)
        # The buffer was full: the flood's 6 MB did reach the cap, and no more was kept after.
        assert max(grown) > cap_bytes * 0.9
        assert grown[-1] <= turns * turn_bound + FLOOD * mark, (grown[-1], turn_bound)
        # the whole answer went as the file, the card kept its head
        [message] = [
            m
            for m in fake.messages.values()
            if m["from_bot"] and m["chat_id"] == CHAT and m["msg_type"] == "file"
        ]
        key = json.loads(message["content"])["file_key"]
        assert len(fake.files[key][0]) > cap_bytes * 0.9
    finally:
        await harness.close()
