"""Schedules and routines on Lark, end to end against the fake Lark OpenAPI (real Redis): a fire
has no message to reply to, so its card is created in the chat (receive_id_type=chat_id); a
routine's confirmation card is a reply whose Confirm button makes the schedule."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from adapters.lark.outbound import LarkOutbound
from gateway.clock import now_ms
from tests.fakes.lark import FakeLark
from tests.support.clock import FakeClock, aligned
from tests.support.helpers import InProcessGateway
from tests.support.lark import (
    INTEGRATION,
    LarkHarness,
    answer,
    card_click,
    lark_config,
    message_event,
    reply_to,
)
from tests.support.waits import eventually


@pytest.fixture
async def fake() -> AsyncIterator[FakeLark]:
    server = FakeLark()
    await server.start()
    yield server
    await server.stop()


async def harness(
    fake: FakeLark, prefix: str, clock: Callable[[], int] = now_ms, **config: Any
) -> LarkHarness:
    cfg = lark_config(prefix, fake, timezone="Europe/Berlin")
    cfg.update(config)
    gw = InProcessGateway(cfg, clock=clock)
    await gw.start()
    return LarkHarness(fake, gw)


def buttons(card: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        e["behaviors"][0]["value"]["action"]: e["behaviors"][0]["value"]
        for e in card["body"]["elements"]
        if e["tag"] == "button"
    }


async def test_a_scheduled_turn_posts_its_card_into_the_lark_chat(
    fake: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> None:
    schedule = {
        "id": "report",
        "integrationId": INTEGRATION,
        "chatId": "oc_sched",
        "chatType": "group",
        "cron": "*/2 * * * * *",
        "text": "daily report",
    }
    clock = FakeClock(aligned(2_000))
    lark = await harness(fake, prefix, clock, schedules=[schedule])
    try:
        await lark.gw.idle()  # it has looked once: the schedule fires from now on
        assert not fake.of("create")
        clock.advance(2_000)  # past a fire time
        create = await eventually(lambda: fake.of("create"), timeout=10)
        assert create[0].query == {"receive_id_type": "chat_id"}
        assert create[0].body["receive_id"] == "oc_sched"
        assert create[0].body["msg_type"] == "interactive"

        def done() -> Any:
            for message_id, m in list(fake.messages.items()):
                if m["chat_id"] == "oc_sched" and m.get("msg_type") == "interactive":
                    card = fake.card_of(message_id)
                    if card["header"]["title"]["content"] == "Done":
                        return card
            return None

        card = await eventually(done)
        assert answer(card) == "You said:\n> daily report"
        assert not fake.of("reply") and not fake.of("reaction_add")
    finally:
        await lark.close()


async def test_a_routine_on_lark_is_confirmed_with_its_card_button(
    fake: FakeLark, prefix: str, redis_client: aioredis.Redis
) -> None:
    lark = await harness(fake, prefix)
    try:
        ask = message_event("every weekday at 9:30 summarize this group", message_id="om_r1")
        assert (await lark.post(ask))[0] == 200

        def confirm_card() -> Any:
            replies = reply_to(fake, "om_r1")
            return (replies[0], fake.card_of(replies[0])) if replies else None

        card_id, card = await eventually(confirm_card)
        assert card["header"]["title"]["content"] == "Schedule this routine?"
        assert "`30 9 * * 1-5`" in answer(card) and "Europe/Berlin" in answer(card)
        values = buttons(card)
        assert set(values) == {"routine_confirm", "routine_cancel"}
        # Clicked once the gateway has stored the card it sent, as a person's click always is:
        # it stores the card after Lark answers the send, and a click answered before that gets
        # its toast only (the card still changes by the PATCH below; a suite run hit that window).
        outbound = lark.gw.gateway.adapters[INTEGRATION].outbound
        assert isinstance(outbound, LarkOutbound)
        await eventually(lambda: outbound.records.get(f"{outbound.ns}:card", card_id))
        status, body = await lark.post(card_click(values["routine_confirm"], message_id=card_id))
        assert status == 200 and body["toast"]["content"] == "Scheduling…"
        # Intake schedules the routine before the click is answered, and its PATCH to
        # "Scheduled" runs beside the answer: when it stored its card first, the click no longer
        # changes the card and the answer is the toast alone (the root of a suite-run flake).
        if "card" in body:
            fake.apply_callback(card_id, body)

        def scheduled() -> Any:
            card = fake.card_of(card_id)
            return card if card["header"]["title"]["content"] == "Scheduled" else None

        card = await eventually(scheduled)
        assert buttons(card) == {}
        book = lark.gw.gateway.intake.schedules.book
        [entry] = await book.entries(INTEGRATION)
        assert (entry.schedule.chat_id, entry.schedule.cron) == ("oc_p2p1", "30 9 * * 1-5")
        assert entry.zone == "Europe/Berlin" and entry.schedule.created_by == "ou_alice"
        # A second click is answered, and changes nothing.
        status, body = await lark.post(card_click(values["routine_confirm"], message_id=card_id))
        assert status == 200
        assert len(await book.entries(INTEGRATION)) == 1
    finally:
        await lark.close()
