"""Routines said in plain words, end to end in console chats (real Redis): a confirmation card
with the cron, the time zone and the next three fire times; nothing scheduled before Confirm;
Confirm makes the schedule, which then fires; Cancel does not; a second click changes nothing;
an unrecognised phrase gets the usage; the group permission rule."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from gateway.triggers.schedules import Scheduler
from tests.support.configs import base_config
from tests.support.helpers import ConsoleClient, InProcessGateway
from tests.support.waits import eventually


@pytest.fixture
async def gateway(prefix: str, redis_client: aioredis.Redis) -> AsyncIterator[Callable[..., Any]]:
    started: list[InProcessGateway] = []

    async def start(**integration: Any) -> InProcessGateway:
        gw = InProcessGateway(base_config(prefix, **integration))
        await gw.start()
        started.append(gw)
        return gw

    try:
        yield start
    finally:
        for gw in started:
            await gw.stop()


async def card_titled(client: ConsoleClient, chat: str, title: str) -> dict[str, Any] | None:
    cards = [c for c in await client.cards(chat) if c["card"]["title"] == title]
    return cards[-1] if cards else None


async def texts_with(client: ConsoleClient, chat: str, fragment: str) -> list[str]:
    return [t for t in await client.texts(chat) if fragment in t]


async def test_a_routine_is_scheduled_after_confirm_and_then_fires(
    gateway: Callable[..., Any],
) -> None:
    gw = await gateway(timezone="Asia/Shanghai")
    # The replica's own scheduler is stopped, so a real five-minute boundary during the test
    # cannot fire the routine; a scheduler with its own clock fires it below.
    gw.gateway.scheduler.stop()
    c, book = gw.client, gw.gateway.intake.schedules.book
    await c.send("every 5 minutes check the queue")
    card = await eventually(lambda: card_titled(c, "dm-alice", "Schedule this routine?"))
    assert card["card"]["status"] == "waiting"
    assert [b["actionId"] for b in card["card"]["buttons"]] == [
        "routine_confirm",
        "routine_cancel",
    ]
    body = card["card"]["answer"]
    assert "`*/5 * * * *`" in body and "time zone: Asia/Shanghai" in body
    assert "check the queue" in body and body.count("CST") == 3  # the next three fire times
    assert await book.store.runtime() == {}, "scheduled before Confirm"
    # Two clicks at once: one schedule, and the second changes nothing.
    statuses = await asyncio.gather(
        c.click("dm-alice", card["id"], "routine_confirm"),
        c.click("dm-alice", card["id"], "routine_confirm"),
    )
    assert statuses == [202, 202]
    done = await eventually(lambda: card_titled(c, "dm-alice", "Scheduled"))
    assert done["id"] == card["id"] and done["card"]["buttons"] == []
    assert done["card"]["status"] == "done"
    await c.idle()
    [entry] = await book.entries("console", "dm-alice")
    made = entry.schedule
    assert (made.cron, made.text, made.chat_type) == ("*/5 * * * *", "check the queue", "p2p")
    assert entry.source == "runtime" and made.created_by == "alice"
    assert f"Schedule id: {made.id}" in done["card"]["answer"]
    assert len(await c.cards("dm-alice")) == 1, "the routine started a turn"
    # It fires: a scheduler whose clock stands just past the next fire time.
    assert entry.cron is not None
    fire = entry.cron.next_after(made.created_at)
    clock = [fire + 50]
    scheduler = Scheduler(
        store=book.store,
        settings=gw.gateway.live,
        ingest=gw.gateway.pipeline.ingest,
        adapters=gw.gateway.adapters,
        owner="test",
        clock=lambda: clock[0],
    )
    await scheduler.tick()
    cards = await c.wait_cards("dm-alice", count=2)
    assert cards[-1]["replyTo"] == f"schedule:{made.id}:{fire}"
    assert cards[-1]["card"]["answer"] == "You said:\n> check the queue"


async def test_cancel_schedules_nothing(gateway: Callable[..., Any]) -> None:
    gw = await gateway()
    c = gw.client
    await c.send("每天 9 点总结本群", chat="team", mention=True)
    card = await eventually(lambda: card_titled(c, "team", "Schedule this routine?"))
    assert "`0 9 * * *`" in card["card"]["answer"] and "time zone: UTC" in card["card"]["answer"]
    assert await c.click("team", card["id"], "routine_cancel") == 202
    cancelled = await eventually(lambda: card_titled(c, "team", "Cancelled"))
    assert cancelled["card"]["buttons"] == []
    await c.idle()
    assert await gw.gateway.intake.schedules.book.store.runtime() == {}
    assert len(await c.cards("team")) == 1


async def test_an_unrecognised_routine_gets_the_reason_and_the_usage(
    gateway: Callable[..., Any],
) -> None:
    gw = await gateway()
    c = gw.client
    await c.send("every day at 25:00 do it")
    [reply] = await eventually(lambda: texts_with(c, "dm-alice", "could not read the time"))
    assert "/schedule <cron> <text>" in reply
    await c.send("hello there")  # not a routine: a normal turn
    [card] = await c.wait_cards("dm-alice")
    assert card["card"]["answer"] == "You said:\n> hello there"
    assert await gw.gateway.intake.schedules.book.store.runtime() == {}


async def test_in_a_group_only_schedule_admins_ask_and_the_asker_confirms(
    gateway: Callable[..., Any],
) -> None:
    gw = await gateway(scheduleAdmins=["bob", "carol"])
    c = gw.client
    ask = "every Monday at 10am plan the week"
    await c.send(ask, chat="team", sender="alice", mention=True)
    await eventually(lambda: texts_with(c, "team", "Only this chat's schedule admins"))
    await c.send(ask, chat="team", sender="bob", mention=True)
    card = await eventually(lambda: card_titled(c, "team", "Schedule this routine?"))
    assert await c.click("team", card["id"], "routine_confirm", sender="alice") == 202
    await eventually(lambda: texts_with(c, "team", "Only the person who asked"))
    assert await gw.gateway.intake.schedules.book.store.runtime() == {}
    # Another schedule admin may answer for bob.
    assert await c.click("team", card["id"], "routine_confirm", sender="carol") == 202
    await eventually(lambda: card_titled(c, "team", "Scheduled"))
    [entry] = await gw.gateway.intake.schedules.book.entries("console", "team")
    assert entry.schedule.cron == "0 10 * * 1" and entry.schedule.created_by == "bob"
